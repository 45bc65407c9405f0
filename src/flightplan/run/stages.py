"""Stages that flightplan does not execute itself, marked started and done by a person.

An install, a transfer, a person's review: the campaign file plans them as ``[[stage]]``
entries, but only the person doing them knows when they start and end. ``flightplan stage
start NAME`` records a ``stage_started`` event; ``flightplan stage done NAME`` closes it
(or, with ``--took DURATION``, records a stage that ended now and took that long) as one
execution in the ledger's ``stage_times``, which plan vs execution compares with the
plan. The runner's own stages (``data-check``, ``pilot``) are recorded by ``flightplan
run`` and refused here.

Usage::

    mark_stage_start(spec, "review")                  # -> {name, started_at}
    mark_stage_done(spec, "review", took=None)        # -> {name, started_at, ended_at, hours}
"""

from __future__ import annotations

import time
from typing import Any

from flightplan.errors import ArgumentError, closest_name
from flightplan.run.ledger import Ledger
from flightplan.spec import CampaignSpec, Stage
from flightplan.units import Duration

__all__ = ["RUNNER_STAGES", "mark_stage_start", "mark_stage_done", "open_stage_start"]

RUNNER_STAGES = ("data-check", "pilot")
"""Stages ``flightplan run`` executes and times itself."""


def _stage(spec: CampaignSpec, name: str) -> Stage:
    """The ``[[stage]]`` called ``name``.

    Raises:
        ArgumentError: not a stage of the campaign, or one the runner times itself.
    """
    if name in RUNNER_STAGES:
        raise ArgumentError(f"stage {name!r} is executed and timed by flightplan run; mark only "
                            f"stages a person or another tool carries out")
    names = [s.name for s in spec.stages if s.name not in RUNNER_STAGES]
    for stage in spec.stages:
        if stage.name == name:
            return stage
    close = closest_name(name, names)
    if close is not None:
        raise ArgumentError(f"{name!r} is not a [[stage]] of {spec.source}; did you mean "
                            f"{close!r}?")
    runner = [s.name for s in spec.stages if s.name in RUNNER_STAGES]
    has = (f"its stages a person marks: {', '.join(names)}" if names else
           "it has no stage a person marks")
    if runner:
        has += (f"; {' and '.join(runner)} {'is' if len(runner) == 1 else 'are'} run and "
                f"timed by flightplan run itself")
    elif not names:
        has = "it has no [[stage]]"
    raise ArgumentError(f"{name!r} is not a [[stage]] of {spec.source}; {has}; add a "
                        f"[[stage]] named {name!r} to plan and mark it")


def open_stage_start(ledger: Ledger, name: str) -> float | None:
    """Unix time of the ``stage_started`` event of ``name`` not yet closed, or None."""
    started = None
    for event in ledger.events(kind=None):
        data = event.data if isinstance(event.data, dict) else {}
        if data.get("name") != name or event.run_id is not None:
            continue
        if event.kind == "stage_started":
            started = float(event.at)
        elif event.kind == "stage_done":
            started = None
    return started


def mark_stage_start(spec: CampaignSpec, name: str, *, at: float | None = None) -> dict[str, Any]:
    """Record that stage ``name`` started now (or at unix time ``at``).

    Raises:
        ArgumentError: not a markable stage, it is already started and not done, or the
            campaign never ran (no ledger: ``flightplan run`` first; none is created).
    """
    _stage(spec, name)
    at = time.time() if at is None else at
    with Ledger.open_existing(spec.campaign_dir) as ledger:
        started = open_stage_start(ledger, name)
        if started is not None:
            raise ArgumentError(f"stage {name!r} was already started at "
                                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}; "
                                f"mark it done with flightplan stage done {name}")
        ledger.add_event("stage_started", data={"name": name}, at=at)
    return {"name": name, "started_at": at}


def mark_stage_done(spec: CampaignSpec, name: str, *, took: Duration | None = None,
                    at: float | None = None) -> dict[str, Any]:
    """Record that stage ``name`` ended now (or at unix time ``at``): it started at its
    open ``stage start`` or, with ``took``, that long before the end.

    A stage marked done again adds to it (a review held twice): plan vs execution counts
    the sum of its marks, which ``marks`` and ``total_hours`` give.

    Returns:
        ``{name, started_at, ended_at, hours, planned_hours, marks (this one included),
        total_hours (of every mark)}``.

    Raises:
        ArgumentError: not a markable stage, neither started nor given ``took``, or the
            campaign never ran (no ledger: ``flightplan run`` first; none is created).
    """
    stage = _stage(spec, name)
    ended = time.time() if at is None else at
    with Ledger.open_existing(spec.campaign_dir) as ledger:
        started = open_stage_start(ledger, name)
        if took is not None:
            started = ended - took.seconds
        if started is None:
            raise ArgumentError(f"stage {name!r} was not started; run flightplan stage start "
                                f"{name} when it begins, or give --took DURATION (e.g. 2h)")
        ledger.record_stage(name, started_at=started, ended_at=ended, event="stage_done",
                            data={"name": name, "marked": True})
        marks = [row for row in ledger.stage_times() if row.name == name]
    return {"name": name, "started_at": started, "ended_at": ended,
            "hours": (ended - started) / 3600, "planned_hours": stage.duration.seconds / 3600,
            "marks": len(marks),
            "total_hours": sum(row.ended_at - row.started_at for row in marks) / 3600}
