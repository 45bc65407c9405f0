"""``flightplan.trial.__all__`` is the task API docs/tasks.md documents, name for name, and
every name in it imports."""

from __future__ import annotations

import re
from pathlib import Path

import flightplan.trial

DOCS = Path(__file__).resolve().parents[3] / "docs" / "tasks.md"


def _documented() -> set[str]:
    """The names in the first column of the table under "What a task may import"."""
    section = DOCS.read_text(encoding="utf-8").split("## What a task may import", 1)[1]
    section = section.split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z_]\w*)", first))
    return names


def test_the_public_names_are_the_documented_ones_and_each_imports() -> None:
    assert _documented() == set(flightplan.trial.__all__)
    for name in flightplan.trial.__all__:
        assert getattr(flightplan.trial, name) is not None, name
