"""Fixtures shared by the end-to-end modules.

:func:`closed_tiny`: ``examples/tiny/campaign.toml``, unchanged, run (``flightplan run
--json``) and closed (``flightplan close --json``) once per test session, for every module
that reads a closed tiny campaign. Its folder is shared: a test only reads it (``plan``,
``status`` and ``verify`` write nothing there); a test that writes works on its own copy
(:meth:`ClosedTiny.copy`). At the end of the session the folder must hold the very files,
byte for byte, that it held when the campaign was closed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from cli_run import run_cli

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ClosedTiny:
    """The tiny campaign, run and closed: ``folder`` (campaign.toml, .flightplan/, runs/,
    results/) and the ``close --json`` object ``closed``. Read-only: copy it
    (:meth:`copy`) before writing."""

    folder: Path
    closed: dict[str, Any]

    def copy(self, to: Path) -> Path:
        """A private copy of the whole campaign folder at ``to`` (which must not exist),
        ledger, lock files and results included; returns ``to``. A copy verifies, plans
        ``--from results`` and reports ``status`` as the original does."""
        return Path(shutil.copytree(self.folder, to))


def _digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by path relative to it."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def closed_tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClosedTiny]:
    """The unchanged tiny campaign, run and closed once for the session (:class:`ClosedTiny`);
    fails at the end of the session if a test changed, added or removed a file in it."""
    folder = tmp_path_factory.mktemp("tiny-closed")
    shutil.copy(REPO / "examples" / "tiny" / "campaign.toml", folder / "campaign.toml")
    outputs = []
    for verb in ("run", "close"):
        done = run_cli(verb, "campaign.toml", "--json", cwd=folder, hang_s=1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs.append(json.loads(done.stdout))
    assert outputs[0]["status"] == "completed", outputs[0]
    before = _digests(folder)
    yield ClosedTiny(folder, outputs[1])
    assert _digests(folder) == before, "a test wrote into the shared closed tiny campaign"
