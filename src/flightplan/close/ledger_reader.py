"""The narrow read interface through which ``close`` sees the ledger.

``close`` never imports ``run/``: the command line opens the ledger (``run``'s SQLite
store) and hands it over; everything in ``close/`` reads it only through these methods,
whose rows are the typed values of :mod:`flightplan.ledger_rows` (fields described in
docs/internals.md, "Ledger").
"""

from __future__ import annotations

from typing import Callable, Protocol

from flightplan.ledger_rows import (DecisionRow, EventRow, ExpenseRow, NoteRow, PlanVersionRow,
                                    RunRow, StageTimeRow)

__all__ = ["LedgerReader", "LedgerOpener"]


class LedgerReader(Protocol):
    """What ``close`` reads of a campaign's ledger."""

    def original_plan(self) -> PlanVersionRow | None:
        """The frozen version-1 plan entry (None before the first run)."""

    def plan_versions(self) -> list[PlanVersionRow]:
        """Every plan version, the original first."""

    def runs(self) -> list[RunRow]:
        """Every run id ever registered, in order."""

    def events(self, run_id: str | None = None, *, kind: str | None = None
               ) -> list[EventRow]:
        """Events in order, optionally of one run and of one kind."""

    def decisions(self) -> list[DecisionRow]:
        """Decision-point outcomes in order."""

    def expenses(self) -> list[ExpenseRow]:
        """Committed packages and other expenses (amounts as decimal strings)."""

    def notes(self) -> list[NoteRow]:
        """Explanations of deviations, in the order written."""

    def stage_times(self) -> list[StageTimeRow]:
        """One row per execution of a stage or run."""

    def close(self) -> None:
        """Release the store."""


LedgerOpener = Callable[..., LedgerReader]
"""Opens a campaign directory's ledger for reading: ``opener(campaign_dir)``; raises
:class:`~flightplan.errors.ArgumentError` when the campaign never ran."""
