"""The ledger's rows as typed values: what ``run`` records and ``close`` reads.

:class:`flightplan.run.ledger.Ledger` returns these from its read side, and ``close`` sees
the ledger only through :class:`flightplan.close.ledger_reader.LedgerReader`, whose methods
return the same types, so that neither stage reads the other's rows by string keys. Each row
has ``to_json()``, the object ``flightplan status --json`` prints (keys as documented in
docs/internals.md, "Ledger"). Times are unix seconds; money is a decimal string.

The JSON payloads the ledger stores whole stay JSON values: a plan (``plan --json``), a stop
record (``stop.json``), an event's ``data`` and a decision's ``figures``.

Usage::

    for run in ledger.runs():
        run.run_id, run.status, run.wall_s       # RunRow
    ledger.original_plan().plan["reserved_hours"]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CampaignRow", "PlanVersionRow", "RunRow", "EventRow", "DecisionRow", "ExpenseRow",
           "NoteRow", "StageTimeRow"]


class _Row:
    """``to_json()`` for the row dataclasses below."""

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object (field names as keys)."""
        row: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # subclasses are dataclasses
        return row


@dataclass(frozen=True)
class CampaignRow(_Row):
    """The campaign: its name, the campaign file's name and sha256, when it was first run."""

    name: str
    spec_path: str
    spec_sha256: str
    created_at: float


@dataclass(frozen=True)
class PlanVersionRow(_Row):
    """One plan version: 1 is the ``original`` (frozen before the first run, never
    rewritten), later ones ``re-estimate``; ``plan`` is the ``plan --json`` object."""

    version: int
    kind: str
    plan_sha256: str
    plan: dict[str, Any]
    created_at: float
    reason: str | None


@dataclass(frozen=True)
class RunRow(_Row):
    """One run id ever registered. ``status`` ∈ pending, running, finished, stopped, cut,
    failed, superseded; ``started_at`` is the first start, ``wall_s`` the seconds of every
    execution, each counted once; ``stop`` the stop record; ``metric`` the campaign metric
    computed from its predictions (None when they cannot give it)."""

    run_id: str
    name: str
    tier: str
    status: str
    started_at: float | None
    ended_at: float | None
    wall_s: float
    stop: dict[str, Any] | None
    superseded_by: str | None
    metric: float | None
    config_hash: str | None


@dataclass(frozen=True)
class EventRow(_Row):
    """One event (kinds in docs/internals.md); ``run_id`` None for a campaign event."""

    id: int
    run_id: str | None
    kind: str
    at: float
    data: dict[str, Any] | None


@dataclass(frozen=True)
class DecisionRow(_Row):
    """One decision point: ``decision`` taken (continue, cut, stop), ``computed`` by the
    rule, ``overridden`` when they differ, the ``figures`` it rested on, runs ``dropped``."""

    at: float
    decision: str
    computed: str
    overridden: bool
    figures: dict[str, Any]
    dropped: list[str]


@dataclass(frozen=True)
class ExpenseRow(_Row):
    """A committed ``package`` (``amount`` = flights × the package price) or an
    ``external`` expense; ``amount`` a decimal string in ``currency``."""

    kind: str
    label: str
    offer: str | None
    package_days: int | None
    flights: int | None
    amount: str
    currency: str


@dataclass(frozen=True)
class NoteRow(_Row):
    """Why the stage or run ``name`` deviated from the plan."""

    name: str
    text: str
    at: float


@dataclass(frozen=True)
class StageTimeRow(_Row):
    """One execution of a stage (``kind`` ``stage``) or of a run (``run``, by its name)."""

    name: str
    kind: str
    started_at: float
    ended_at: float
