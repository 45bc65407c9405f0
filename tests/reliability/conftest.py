"""Fixtures of the reliability suite: a copy of the tiny campaign, CLI runners."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .cli_harness import TINY


@pytest.fixture
def tiny_campaign(tmp_path: Path) -> Path:
    """A private copy of ``examples/tiny/campaign.toml``; returns the file's path."""
    target = tmp_path / "tiny" / "campaign.toml"
    target.parent.mkdir()
    shutil.copy(TINY, target)
    return target
