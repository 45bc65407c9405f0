"""The files docs/tasks.md shows, as a reader copies them.

A code block that follows ``<!-- file: NAME -->`` is the file ``NAME`` of the page's example
folder; one that follows ``<!-- example: PATH -->`` shows the repository's file ``PATH``.

Usage::

    for name, body in docs_files().items():
        (folder / name).write_text(body, encoding="utf-8")
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["REPO", "docs_files", "docs_examples"]

REPO = Path(__file__).resolve().parents[2]


def _blocks(marker: str) -> dict[str, str]:
    text = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    return dict(re.findall(rf"<!-- {marker}: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))


def docs_files() -> dict[str, str]:
    """The files docs/tasks.md shows, by the name in the ``<!-- file: NAME -->`` marker."""
    return _blocks("file")


def docs_examples() -> dict[str, str]:
    """The repository files docs/tasks.md shows, by their path in ``<!-- example: PATH -->``."""
    return _blocks("example")
