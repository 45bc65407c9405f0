"""Fixtures for the plan tests: the illustration campaign and small campaigns built in code."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable

import pytest

from flightplan.spec import CampaignSpec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[3]
ILLUSTRATION = ROOT / "examples" / "illustration" / "campaign.toml"


@pytest.fixture
def illustration() -> CampaignSpec:
    """examples/illustration: 1 RTX 4090 GPU, 1 person, 3 days; 48 h by hand."""
    return load_spec(ILLUSTRATION)


@pytest.fixture
def illustration_doc() -> dict[str, Any]:
    """The illustration campaign as a plain dict, to edit in a test."""
    return tomllib.loads(ILLUSTRATION.read_text(encoding="utf-8"))


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., CampaignSpec]:
    """Build a spec from stages/runs dicts; ``catalog`` (TOML text) is written beside it."""

    def build(*, runs: list[dict[str, Any]], stages: list[dict[str, Any]] | None = None,
              offer: str = "RTX 4090", package_days: int = 3, flights: int = 1, people: int = 1,
              catalog: str | None = None) -> CampaignSpec:
        rental: dict[str, Any] = {"offer": offer, "package_days": package_days,
                                  "flights": flights, "people": people}
        if catalog is not None:
            (tmp_path / "offers.toml").write_text(catalog, encoding="utf-8")
            rental["catalog"] = "offers.toml"
        doc = {"campaign": {"name": "t", "question": "q?", "min_gain": 0.05},
               "rental": rental, "stage": stages or [], "run": runs}
        return parse_spec(doc, source=str(tmp_path / "campaign.toml"), campaign_dir=tmp_path)

    return build
