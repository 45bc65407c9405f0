"""How far each run's resumes can be trusted, read back from what ``results/`` holds.

A run resumes when an execution restores a checkpoint (a ``restore`` row whose ``source``
names one). Such a run's products are bitwise those of an uninterrupted run when its
kernels were deterministic (``[[run]] deterministic``, true by default: the pilot checked
the resume bit for bit) and every checkpoint it resumed from was saved by as many
processes as restored it. Two things break that, and the results say so per run:

- ``deterministic = false``: an op without a deterministic kernel ran, so neither a resume
  nor a rerun repeats the last bits (the pilot compared the control's resumed losses within
  a relative :data:`flightplan.spec.RESUME_TOLERANCE`);
- ``[[run]] reshard = true`` let an execution restore a checkpoint saved by another number
  of processes (the ``restore`` row's ``resharded_from``): not bitwise from there.

Sources: the run's published ``params/<run_id>.json`` (trial.json: ``deterministic``) and
``measurements/<run_id>.jsonl`` (its ``restore`` rows, every execution's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flightplan.rows import Restore, Row
from flightplan.spec import RESUME_TOLERANCE
from flightplan.units import counted

__all__ = ["Reshard", "RunResumes", "run_resumes"]


@dataclass(frozen=True)
class Reshard:
    """An execution restored checkpoint ``checkpoint`` (``step-NNNNNN``), which ``saved_by``
    processes had saved, with another number of processes."""

    checkpoint: str
    saved_by: int


@dataclass(frozen=True)
class RunResumes:
    """One run's resumes: ``resumed`` executions restored a checkpoint; ``deterministic``
    as its trial.json says; ``reshards`` those restores made with another number of
    processes than saved the checkpoint, in the order they happened."""

    run_id: str
    resumed: int
    deterministic: bool
    reshards: tuple[Reshard, ...] = ()

    @property
    def bitwise(self) -> bool:
        """Its products are those of an uninterrupted run, bit for bit (on the same machine
        and thread count): deterministic kernels and no restore at another world size."""
        return self.deterministic and not self.reshards

    def summary(self) -> str:
        """One line for README.md and report.html, e.g. ``"2, bitwise"``, ``"none"``,
        ``"1, resharded from 2 processes at step-000012: not bitwise from there"``."""
        if self.reshards:
            first = self.reshards[0]
            return (f"{self.resumed}, resharded from "
                    f"{counted(first.saved_by, 'process', 'processes')} at {first.checkpoint}: "
                    f"not bitwise from there")
        if not self.deterministic:
            return (f"{self.resumed or 'none'}, not bitwise (deterministic = false: the pilot "
                    f"compares resumed losses within a relative {RESUME_TOLERANCE:g})")
        return f"{self.resumed}, bitwise" if self.resumed else "none"

    def to_json(self) -> dict[str, Any]:
        """``{resumed, deterministic, bitwise, reshards: [{checkpoint, saved_by}]}``."""
        return {"resumed": self.resumed, "deterministic": self.deterministic,
                "bitwise": self.bitwise,
                "reshards": [{"checkpoint": r.checkpoint, "saved_by": r.saved_by}
                             for r in self.reshards]}


def run_resumes(trials: Mapping[str, Mapping[str, Any]],
                rows: Mapping[str, Sequence[Row]]) -> dict[str, RunResumes]:
    """Each published run's :class:`RunResumes`, keyed by run id.

    Args:
        trials: run id → its published trial.json (``params/<run_id>.json``); a run
            without one is left out (it never started).
        rows: run id → its measurement rows (every execution's); a run without rows never
            restored anything.
    """
    record = {}
    for run_id, trial in trials.items():
        resumed, reshards = 0, []
        for row in rows.get(run_id, ()):
            if isinstance(row, Restore) and row.source is not None:
                resumed += 1
                if row.resharded_from is not None:
                    reshards.append(Reshard(row.source, row.resharded_from))
        record[run_id] = RunResumes(run_id=run_id, resumed=resumed, reshards=tuple(reshards),
                                    deterministic=trial.get("deterministic", True) is not False)
    return record
