"""The narrow read interface through which ``close`` sees the ledger.

``close`` never imports ``run/``: the command line opens the ledger (``run``'s SQLite
store) and hands it over; everything in ``close/`` reads it only through these methods,
whose rows are described in docs/internals.md ("Ledger").
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

__all__ = ["LedgerReader", "LedgerOpener"]


class LedgerReader(Protocol):
    """What ``close`` reads of a campaign's ledger (rows as JSON-ready dicts)."""

    def original_plan(self) -> dict[str, Any]:
        """The frozen version-1 plan entry ``{version, kind, plan_sha256, plan, ...}``."""

    def plan_versions(self) -> list[dict[str, Any]]:
        """Every plan version, the original first."""

    def runs(self) -> list[dict[str, Any]]:
        """Every run id ever registered ``{run_id, name, tier, status, ...}``."""

    def events(self, run_id: str | None = None, *, kind: str | None = None
               ) -> list[dict[str, Any]]:
        """Events ``{id, run_id, kind, at, data}`` in order."""

    def decisions(self) -> list[dict[str, Any]]:
        """Decision-point outcomes ``{at, decision, computed, overridden, figures, dropped}``."""

    def expenses(self) -> list[dict[str, Any]]:
        """Committed packages and other expenses (amounts as decimal strings)."""

    def notes(self) -> list[dict[str, Any]]:
        """Explanations of deviations ``{name, text, at}``."""

    def stage_times(self) -> list[dict[str, Any]]:
        """One ``{name, kind, started_at, ended_at}`` per execution."""

    def close(self) -> None:
        """Release the store."""


LedgerOpener = Callable[..., LedgerReader]
"""Opens a campaign directory's ledger for reading: ``opener(campaign_dir)``; raises
:class:`~flightplan.errors.ArgumentError` when the campaign never ran."""
