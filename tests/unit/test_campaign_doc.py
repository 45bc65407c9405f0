"""docs/campaign.md names every key the campaign file accepts, under its own table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from flightplan import spec

DOC = (Path(__file__).resolve().parents[2] / "docs" / "campaign.md").read_text(encoding="utf-8")

TABLES: dict[str, type[BaseModel]] = {
    "[campaign]": spec.CampaignSection, "[rental]": spec.RentalSection,
    "[[stage]]": spec.Stage, "[[run]]": spec.Run, "[[expense]]": spec.Expense,
    "[stop]": spec.StopRules, "[checkpoint]": spec.CheckpointPolicy,
    "[corpus]": spec.CorpusSection, "[base_model]": spec.BaseModelSection,
    "[tracking]": spec.TrackingSection, "[execution]": spec.ExecutionSection,
    "[calibrate]": spec.CalibrateSection,
}


def _section(table: str) -> str:
    """The text from the heading that names ``table`` to the next heading."""
    headings = [m for m in re.finditer(r"^## .*$", DOC, flags=re.M)]
    for here, after in zip(headings, [*headings[1:], None]):
        if f"`{table}`" in here.group(0):
            return DOC[here.start():after.start() if after else len(DOC)]
    raise AssertionError(f"docs/campaign.md has no heading naming `{table}`")


@pytest.mark.parametrize("table", list(TABLES))
def test_every_key_of_the_table_is_in_its_section(table: str) -> None:
    text = _section(table)
    keys = [field.alias or name for name, field in TABLES[table].model_fields.items()
            if not field.exclude]
    missing = [key for key in keys if f"`{key}`" not in text and f"`{table} {key}`" not in text]
    assert not missing, f"docs/campaign.md lacks {missing} under {table}"


def test_every_top_level_table_has_a_section() -> None:
    names = {field.alias or name for name, field in spec.CampaignSpec.model_fields.items()
             if not field.exclude}
    written = {t.strip("[]") for t in TABLES}
    assert names == written
