"""The record a finished ``close`` leaves: what it answered, and of which inputs.

``flightplan close`` writes ``.flightplan/closed.json`` in the campaign folder once
``results/`` verified (atomically, :func:`flightplan.durable.write_json_atomic`)::

    {"closed_at": 1796450000.0, "inputs_sha256": "…", "manifest_sha256": "…",
     "summary": {"answer": "yes", "verdict": "…", "verified": true, "results_dir": "…",
                 "accepted": [...], "not_accepted": [...], "budget": {...},
                 "findings": [], "unfinished": []}}

``summary`` is the object ``close --json`` printed; ``inputs_sha256`` the fingerprint of
what close read (:func:`flightplan.close.closed.inputs_fingerprint`), ``manifest_sha256``
the sha256 of the ``MANIFEST.json`` it wrote. A second ``close`` whose inputs and
manifest are the same says so and redoes nothing; ``flightplan status`` shows the answer
from it. The record is not part of ``results/`` (a results directory is checked against
its manifest alone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightplan.durable import hash_file, write_json_atomic
from flightplan.publish.manifest import MANIFEST_NAME
from flightplan.publish.results import RESULTS_DIRNAME

__all__ = ["CloseRecord", "RECORD_NAME", "read_close_record", "write_close_record",
           "manifest_sha256", "report_path", "results_changed_since"]

RECORD_NAME = "closed.json"    # in <campaign>/.flightplan/
REPORT_NAME = "report.html"


@dataclass(frozen=True)
class CloseRecord:
    """What the last ``close`` of a campaign answered (see the module docstring).

    Attributes:
        closed_at: unix seconds when it finished.
        inputs_sha256: the fingerprint of what it read (hex).
        manifest_sha256: sha256 (hex) of the ``MANIFEST.json`` it wrote.
        summary: the object ``close --json`` printed.
    """

    closed_at: float
    inputs_sha256: str
    manifest_sha256: str
    summary: dict[str, Any]

    @property
    def verified(self) -> bool:
        """``results/`` verified at the end of that close."""
        return bool(self.summary.get("verified"))

    def to_json(self) -> dict[str, Any]:
        """The record as written to ``closed.json``."""
        return {"closed_at": self.closed_at, "inputs_sha256": self.inputs_sha256,
                "manifest_sha256": self.manifest_sha256, "summary": self.summary}


def _record_path(campaign_dir: Path) -> Path:
    return Path(campaign_dir) / ".flightplan" / RECORD_NAME


def write_close_record(campaign_dir: Path, record: CloseRecord) -> None:
    """Write ``record`` to ``<campaign_dir>/.flightplan/closed.json``, atomically."""
    write_json_atomic(_record_path(campaign_dir), record.to_json())


def read_close_record(campaign_dir: Path) -> CloseRecord | None:
    """The last close's record; None when the campaign was never closed, or the file is
    unreadable (then it is as if never closed: the next close writes it again)."""
    try:
        data = json.loads(_record_path(campaign_dir).read_text(encoding="utf-8"))
        return CloseRecord(float(data["closed_at"]), str(data["inputs_sha256"]),
                           str(data["manifest_sha256"]), dict(data["summary"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def manifest_sha256(campaign_dir: Path) -> str | None:
    """sha256 (hex) of ``results/MANIFEST.json``; None when there is none."""
    path = Path(campaign_dir) / RESULTS_DIRNAME / MANIFEST_NAME
    return hash_file(path)[1] if path.is_file() else None


def report_path(campaign_dir: Path) -> Path | None:
    """``results/report.html`` of the campaign (absolute) when close has written it."""
    path = (Path(campaign_dir) / RESULTS_DIRNAME).resolve() / REPORT_NAME
    return path if path.is_file() else None


def results_changed_since(campaign_dir: Path, record: CloseRecord) -> bool:
    """Whether ``results/MANIFEST.json`` is no longer the one ``record``'s close wrote: a
    run published since (run again after the close, a new id or the same) rewrites it.
    ``close`` (:func:`flightplan.close.closed.unchanged_close`) and ``status`` both ask."""
    return record.manifest_sha256 != manifest_sha256(campaign_dir)
