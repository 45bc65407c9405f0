"""Goodput: where a run's wall time went, and what each flight's hours bought.

A rented flight is bought by the hour; what the hours buy is productive training. Following
Google's ML Productivity Goodput (the share of wall time spent on productive steps, the rest
broken down by cause), every second of each execution of a run (one worker process, from
the executor starting it to the executor seeing it end: a ledger ``stage_times`` row) is
given to exactly one cause, so the parts add up to the wall time by construction:

==================  =============================================================================
``waiting``         from the executor starting the execution to the worker process's creation
                    (its ``process_start`` row): on a Ray flight the checkpoint sent there to
                    resume from and the launch; for the local executor the fork
``start_load``      the interpreter, imports, and the task's own loading until its first step
                    began (the corpus, the tokenizer, the model) — less the two causes below
``data``            data preparation the task timed before its first step: ``data_s`` (the
                    built-in task: reading the corpus, the tokenizer, tokenizing) and
                    ``encode_s`` (the built-in task's frozen embedding passes)
``restore``         restoring the checkpoint it resumed from (``restore_s``)
``steps``           productive steps: the time from one step row to the next, each optimizer
                    step's compute, data loading and logging, less checkpoint stalls
``lost``            steps redone after a resume (their index was logged by an earlier
                    execution), evaluations redone (one at the same step was logged by an
                    earlier execution), and the tail of an execution that did not end the
                    run
``checkpoint``      the loop's stalls for checkpoints (``stall_s`` of each ``checkpoint`` row)
``evaluation``      from the step row before an evaluation to its row
``output``          writing predictions, metrics and the artifact, finishing, the process exit,
                    and bringing the outputs home from a flight
``transfer``        at the end of an execution on a flight: waiting for its last checkpoint to be
                    durable at home (``fetch_s + commit_s`` of ``checkpoint_transfer`` rows
                    written after the worker's last row)
==================  =============================================================================

Reloading an artifact (``flightplan close``, ``verify``) happens after the campaign, in
processes of its own, and is no part of any run's wall time.

Rows without a duration of their own (a checkpoint becoming durable in the background, the
interval policy's choice, a truncation fraction) do not cut the timeline. A gap is given to
the row that ends it: a step row's gap to ``steps`` (or ``lost``), an evaluation row's to
``evaluation`` (or ``lost``), the output row's to ``output``, a row before the first step to
``start_load``; a checkpoint's stall is moved out of the gap it happened in (the one after
the step it saved) into ``checkpoint``; durations a row states (``restore_s``, ``output_s``,
``eval_s``) are taken up to the gap they fall in, and ``data_s`` and ``encode_s`` (stated in
rows before the first step) up to the execution's start and load so far. The first step row of an
execution covers ``k`` steps (its index + 1 less the step the execution restored to) and, when
it states ``step_s``, only ``k · step_s`` of its gap are steps: the rest came before the first
step began (warm-up, the loader's first batch) and is ``start_load``. Time stamps are the rows'
``time`` (unix seconds, one clock per machine); an execution's window is clipped to them.

A campaign (:func:`campaign_goodput`) reads each run's executions from the ledger: its
``stage_times`` rows (one per execution, named by the run's name; a window belongs to the run
id of that name that started last before it ended), the flight each ran on (the ``node`` of
the event that closed it, else the campaign's one flight), and whether the run ended by
itself (its status ``finished``, or ``stopped`` by its own stop rule: its last execution then
ended it, and that execution's tail is the process finishing, not lost work). Per flight, of
the hours bought (the package's hours × its slots: the offer's GPUs per flight, or more when
more runs ran there at once, as the local executor does on CPU), slot-hours go to productive
steps, to overheads (every other cause, and the stages — data check, pilot, stages marked by
hand — inside its package window when the campaign has one flight), and the rest stayed
uncommitted: not a fault, the package is not an obligation to fill every hour. A run holds
its ``gpus`` slots while it runs.

Usage::

    split = run_goodput(rows, [Execution(started_at, ended_at, finished), ...])
    split.productive_s, split.wall_s, split.parts["checkpoint"], split.goodput  # s, s, s, 0–1
    campaign = campaign_goodput(runs=ledger.runs(), stage_times=ledger.stage_times(),
                                events=ledger.events(), rows_of=lambda run_id: rows,
                                gpus_of={"control": 1}, gpus_per_flight=1)
    campaign.flights[0].uncommitted_s, campaign.to_json()
    ledger_goodput(ledger, spec, gpus_per_flight=1)     # the same, from a campaign's files
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flightplan.ledger_rows import EventRow, RunRow, StageTimeRow
from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Finished,
                             ForcedCheckpoint, Measurement, ProcessStart, Restore, Row, StopEvent)
from flightplan.rundir import RunDir
from flightplan.spec import CampaignSpec
from flightplan.units import SECONDS_PER_HOUR, hours

__all__ = ["CAUSES", "OVERHEADS", "STAGES", "LABELS", "Execution", "GoodputSplit", "FlightGoodput",
           "CampaignGoodput", "run_goodput", "execution_goodput", "total_goodput",
           "ledger_executions", "campaign_goodput", "LedgerRows", "ledger_goodput"]

CAUSES = ("waiting", "start_load", "data", "restore", "steps", "lost", "checkpoint",
          "evaluation", "output", "transfer")
"""Every cause a second of a run's wall time is given to, in the order a run meets them."""

OVERHEADS = tuple(c for c in CAUSES if c != "steps")
"""The causes other than productive steps."""

STAGES = "stages"
"""A flight's overhead besides its runs' causes: the stages executed on it (data check,
pilot, stages marked by hand)."""

LABELS = {**{cause: cause for cause in CAUSES}, "start_load": "start/load", STAGES: STAGES}
"""How each cause (and :data:`STAGES`) reads in a line or a table heading."""

@dataclass(frozen=True)
class Execution:
    """One worker process of a run: unix ``started_at`` and ``ended_at`` (seconds), and
    whether the run ended by itself in it, ``finished`` or stopped by its own rule (its tail
    is then output, else lost work)."""

    started_at: float
    ended_at: float
    finished: bool = False


@dataclass
class GoodputSplit:
    """A run's wall time by cause (seconds; :data:`CAUSES`); ``parts`` adds up to ``wall_s``."""

    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    @property
    def wall_s(self) -> float:
        """Σ of the parts: the wall time of every execution."""
        return sum(self.parts.values())

    @property
    def productive_s(self) -> float:
        """Seconds of productive steps."""
        return self.parts["steps"]

    @property
    def overhead_s(self) -> float:
        """Seconds of every other cause."""
        return self.wall_s - self.productive_s

    @property
    def goodput(self) -> float | None:
        """Productive share of the wall time (0–1); None for a run with no wall time."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    def add(self, other: "GoodputSplit", *, times: float = 1.0) -> None:
        """Add ``other``'s seconds (× ``times``: slots held) to this split, cause by cause."""
        for cause, seconds in other.parts.items():
            self.parts[cause] += seconds * times

    def to_json(self) -> dict[str, object]:
        """``{wall_hours, productive_hours, overhead_hours, goodput, parts_hours {cause: h}}``
        (hours rounded to 6 places; goodput to 4)."""
        return {"wall_hours": hours(self.wall_s), "productive_hours": hours(self.productive_s),
                "overhead_hours": hours(self.overhead_s),
                "goodput": None if self.goodput is None else round(self.goodput, 4),
                "parts_hours": {c: hours(s) for c, s in self.parts.items()}}


def _is_step(row: Row) -> bool:
    return isinstance(row, Measurement) and row.is_step


def _stated(row: Row, name: str) -> float:
    """The non-negative duration ``name`` a row states (0 when it states none)."""
    value = row.number(name) if isinstance(row, (Measurement, Evaluation)) else None
    return max(0.0, value) if value is not None else 0.0


class _Timeline:
    """Seconds of one execution charged to causes in time order, never more than the window:
    a cursor ``at`` that only moves forward, and the split it fills."""

    def __init__(self, split: GoodputSplit, start: float) -> None:
        self.split, self.at = split, start

    def charge_until(self, cause: str, until: float) -> float:
        """Charge ``[at, until)`` to ``cause`` and move the cursor to ``until``; returns the
        seconds charged (0 when ``until`` is not after the cursor)."""
        seconds = max(0.0, until - self.at)
        self.split.parts[cause] += seconds
        self.at = max(self.at, until)
        return seconds

    def reassign(self, source: str, target: str, seconds: float, limit: float) -> None:
        """Move up to ``seconds`` (at most ``limit``, at most what ``source`` holds) already
        charged to cause ``source`` over to cause ``target`` (a stall a row states inside a
        gap charged to another cause); the cursor does not move."""
        moved = max(0.0, min(seconds, limit, self.split.parts[source]))
        self.split.parts[source] -= moved
        self.split.parts[target] += moved


def _stalls(rows: Iterable[Row]) -> dict[int, float]:
    """Checkpoint stall seconds of one execution by the steps they hold (a save after step
    ``n - 1`` stalls the gap that ends at the next row after that step)."""
    stalls: dict[int, float] = {}
    for row in rows:
        if isinstance(row, CheckpointSaved):
            stalls[row.step] = stalls.get(row.step, 0.0) + max(0.0, row.stall_s)
    return stalls


def _execution(split: GoodputSplit, rows: Sequence[Row], window: Execution,
               done_before: int, evaluated_before: frozenset[int]) -> tuple[int, frozenset[int]]:
    """Give one execution's seconds to their causes; returns the steps logged by the end
    of it (the highest step index + 1, at least ``done_before``) and the steps evaluated
    by then (``evaluated_before`` and this execution's evaluation rows)."""
    stalls = _stalls(rows)
    timeline = _Timeline(split, window.started_at)
    end = max(window.ended_at, window.started_at)
    in_loop = False
    done = done_before
    resumed_at: int | None = None           # the steps its restore row holds
    pending_stall = 0.0
    last_marker = window.started_at
    for row in rows:
        at = min(max(row.time, timeline.at), end)
        if isinstance(row, ProcessStart):
            timeline.charge_until("waiting", at)
            last_marker = at
        elif _is_step(row):
            cause = "lost" if row.step < done_before else "steps"
            stated = _stated(row, "step_s")
            if not in_loop and stated > 0:      # its gap before the first step began
                covered = max(1, row.step + 1 - (row.step if resumed_at is None else resumed_at))
                timeline.charge_until("start_load", at - covered * stated)
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = stalls.get(row.step + 1, 0.0)
            done = max(done, row.step + 1)
            in_loop = True
            last_marker = at
        elif isinstance(row, Evaluation):
            cause = "lost" if row.step in evaluated_before else "evaluation"
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif isinstance(row, Measurement) and "output_s" in row.values:
            gap = timeline.charge_until("output", at)
            timeline.reassign("output", "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif not in_loop and isinstance(row, (Measurement, Restore)):
            gap = timeline.charge_until("start_load", at)
            if isinstance(row, Restore):
                timeline.reassign("start_load", "restore", row.restore_s or 0.0, gap)
                resumed_at = row.step
            else:
                # data_s and encode_s state work done anywhere since the process began (the
                # built-in task tokenizes and embeds before it restores, and a task may log
                # such a figure after the work): up to this execution's start and load so far
                for name in ("encode_s", "data_s"):
                    timeline.reassign("start_load", "data", _stated(row, name), float("inf"))
            last_marker = at
        elif isinstance(row, (Finished, StopEvent, ForcedCheckpoint)):
            cause = "output" if in_loop else "start_load"
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
    tail_transfer = sum(r.fetch_s + r.commit_s for r in rows
                        if isinstance(r, CheckpointTransfer) and r.time > last_marker)
    if window.finished:
        timeline.charge_until("output", end)
        timeline.reassign("output", "transfer", tail_transfer, end - last_marker)
    else:
        timeline.charge_until("lost" if in_loop else "start_load", end)
    return done, evaluated_before | {r.step for r in rows if isinstance(r, Evaluation)}


def execution_goodput(rows: Sequence[Row], executions: Sequence[Execution]
                      ) -> list[GoodputSplit]:
    """One split per execution, in the order given (module docstring).

    Args:
        rows: every measurement row of the run (all executions, in file order).
        executions: its worker processes; each row belongs to the execution whose window
            holds its time stamp (a row between two windows, to the earlier one), and a
            ``process_start`` row to the execution whose start is nearest to it (a process
            created a moment before its executor took the time still belongs to it).

    Returns:
        The splits; each one's ``wall_s`` is its execution's ``ended_at − started_at``.
    """
    order = sorted(range(len(executions)), key=lambda i: executions[i].started_at)
    starts = [executions[i].started_at for i in order]
    splits = [GoodputSplit() for _ in executions]
    done, evaluated = 0, frozenset[int]()
    for position, index in enumerate(order):
        window = executions[index]
        upto = starts[position + 1] if position + 1 < len(order) else float("inf")
        mine = [r for r in rows if not isinstance(r, ProcessStart)
                and window.started_at <= r.time < upto]
        mine += [r for r in rows if isinstance(r, ProcessStart) and min(
            range(len(starts)), key=lambda p: abs(starts[p] - r.time)) == position]
        done, evaluated = _execution(splits[index], sorted(mine, key=lambda r: r.time), window,
                                     done, evaluated)
    return splits


def run_goodput(rows: Sequence[Row], executions: Sequence[Execution]) -> GoodputSplit:
    """Split a run's wall time by cause (module docstring): the sum of
    :func:`execution_goodput`.

    Returns:
        The split; its ``wall_s`` is Σ (ended_at − started_at) of the executions.
    """
    return total_goodput(execution_goodput(rows, executions))


def total_goodput(splits: Iterable[GoodputSplit]) -> GoodputSplit:
    """The sum of several runs' splits (a campaign's, or a flight's)."""
    total = GoodputSplit()
    for split in splits:
        total.add(split)
    return total


# ---------------------------------------------------------------- campaigns and flights
@dataclass(frozen=True)
class _Placed:
    """One execution of a run, with the flight it ran on (None: not known)."""

    execution: Execution
    flight: str | None


_CLOSING = ("finished", "stopped", "failed", "interrupted")
"""Events that close one execution of a run (at its end, with its ``node`` on Ray)."""

_ENDED = ("finished", "stopped")
"""Run statuses of a run that ended by itself in its last execution (finished, or stopped by
its own stop rule): that execution's tail is output, not lost work."""


def ledger_executions(runs: Sequence[RunRow], stage_times: Sequence[StageTimeRow],
                      events: Sequence[EventRow]) -> dict[str, list[tuple[Execution, str | None]]]:
    """Each run id's executions as the ledger recorded them, with the flight each ran on.

    Args:
        runs: the ledger's runs. stage_times: its ``stage_times`` rows (a run's are named by
            the run's name). events: its events (``started``/``resumed``, the closing
            events with their ``node``, ``flight_started``).

    Returns:
        run id → ``[(Execution, flight or None)]`` in time order: a window named ``N``
        belongs to the run id named ``N`` whose latest ``started``/``resumed`` event is the
        latest at or before the window's end; its flight is the ``node`` of that run's
        closing event at the window's end, else the campaign's only flight (None with
        several); the last execution of a ``finished`` or ``stopped`` run ended it
        (``Execution.finished``).
    """
    by_name: dict[str, list[RunRow]] = {}
    for run in runs:
        by_name.setdefault(run.name, []).append(run)
    starts: dict[str, list[float]] = {}
    closing: dict[tuple[str, float], str] = {}
    flights: list[str] = []
    for event in events:
        data = event.data or {}
        if event.run_id and event.kind in ("started", "resumed"):
            starts.setdefault(event.run_id, []).append(event.at)
        elif event.run_id and event.kind in _CLOSING and data.get("node"):
            closing[(event.run_id, event.at)] = str(data["node"])
        elif event.kind == "flight_started" and data.get("flight") not in flights:
            flights.append(str(data.get("flight")))
    only = flights[0] if len(flights) == 1 else None
    placed: dict[str, list[_Placed]] = {run.run_id: [] for run in runs}
    for row in stage_times:
        if row.kind != "run" or row.name not in by_name:
            continue
        owners = by_name[row.name]

        def last_start(run: RunRow, end: float = row.ended_at) -> float:
            return max((at for at in starts.get(run.run_id, []) if at <= end),
                       default=float("-inf"))
        owner = max(owners, key=last_start) if len(owners) > 1 else owners[0]
        flight = closing.get((owner.run_id, row.ended_at), only)
        placed[owner.run_id].append(_Placed(Execution(row.started_at, row.ended_at), flight))
    out: dict[str, list[tuple[Execution, str | None]]] = {}
    status = {run.run_id: run.status for run in runs}
    for run_id, executions in placed.items():
        executions.sort(key=lambda p: p.execution.started_at)
        if executions and status[run_id] in _ENDED:
            last = executions[-1]
            executions[-1] = _Placed(Execution(last.execution.started_at,
                                               last.execution.ended_at, True), last.flight)
        out[run_id] = [(p.execution, p.flight) for p in executions]
    return out


@dataclass(frozen=True)
class FlightGoodput:
    """What one flight's package bought and where it went (slot-seconds: a second of one
    GPU, or of one CPU slot where runs ran on CPUs).

    Attributes:
        flight: its name (``local``, or a Ray node's). slots: GPUs per flight, or more when
            more runs held one at once there. package_hours: the package's hours (days × 24).
        productive_s: slot-seconds of productive steps.
        overheads_s: slot-seconds by cause (:data:`OVERHEADS`, and :data:`STAGES`).
        runs: run ids that executed on it.
    """

    flight: str
    slots: int
    package_hours: float
    productive_s: float
    overheads_s: Mapping[str, float]
    runs: tuple[str, ...] = ()

    @property
    def bought_s(self) -> float:
        """Slot-seconds bought: package hours × slots × 3600."""
        return self.package_hours * SECONDS_PER_HOUR * self.slots

    @property
    def overhead_s(self) -> float:
        """Slot-seconds of every overhead."""
        return sum(self.overheads_s.values())

    @property
    def uncommitted_s(self) -> float:
        """Slot-seconds bought that nothing used (bought − productive − overheads; negative
        only for runs started past the package's end with ``--past-end``)."""
        return self.bought_s - self.productive_s - self.overhead_s

    def to_json(self) -> dict[str, object]:
        """``{flight, slots, package_hours, bought_hours, productive_hours, overhead_hours,
        uncommitted_hours, overheads_hours {cause: h}, runs}`` (slot-hours, 6 places)."""
        return {"flight": self.flight, "slots": self.slots, "package_hours": self.package_hours,
                "bought_hours": hours(self.bought_s),
                "productive_hours": hours(self.productive_s),
                "overhead_hours": hours(self.overhead_s),
                "uncommitted_hours": hours(self.uncommitted_s),
                "overheads_hours": {c: hours(s) for c, s in self.overheads_s.items()},
                "runs": list(self.runs)}


@dataclass(frozen=True)
class CampaignGoodput:
    """A campaign's goodput: per run id its split, the stages' seconds, per flight its
    hours (:class:`FlightGoodput`)."""

    runs: Mapping[str, GoodputSplit]
    stages_s: Mapping[str, float]
    flights: tuple[FlightGoodput, ...]

    @property
    def total(self) -> GoodputSplit:
        """Every run's split, summed (wall seconds, not slot-seconds)."""
        return total_goodput(self.runs.values())

    def to_json(self) -> dict[str, object]:
        """``{runs {run_id: split}, stages_hours {name: h}, flights [...], total}``
        (:meth:`GoodputSplit.to_json`, :meth:`FlightGoodput.to_json`)."""
        return {"runs": {run_id: split.to_json() for run_id, split in self.runs.items()},
                "stages_hours": {name: hours(s) for name, s in self.stages_s.items()},
                "flights": [f.to_json() for f in self.flights],
                "total": self.total.to_json()}


@dataclass(frozen=True)
class _Package:
    started_at: float
    ends_at: float
    hours: float


def _packages(events: Sequence[EventRow]) -> dict[str, _Package]:
    """Each flight's package from its latest ``flight_started`` event, in first-seen order."""
    packages: dict[str, _Package] = {}
    for event in events:
        data = event.data or {}
        if event.kind == "flight_started" and data.get("flight") is not None:
            started, ends = float(data["started_at"]), float(data["ends_at"])
            days = data.get("package_days")
            length_h = float(days) * 24.0 if days is not None else (ends - started) / SECONDS_PER_HOUR
            packages[str(data["flight"])] = _Package(started, ends, length_h)
    return packages


def _peak(spans: Sequence[tuple[float, float, int]]) -> int:
    """The most slots held at once by ``(start, end, slots)`` spans."""
    marks = sorted([(s, n) for s, _, n in spans] + [(e, -n) for _, e, n in spans],
                   key=lambda m: (m[0], m[1]))
    held = peak = 0
    for _, change in marks:
        held += change
        peak = max(peak, held)
    return peak


def campaign_goodput(*, runs: Sequence[RunRow], stage_times: Sequence[StageTimeRow],
                     events: Sequence[EventRow], rows_of: Callable[[str], Sequence[Row]],
                     gpus_of: Mapping[str, int] | None = None, gpus_per_flight: int = 1
                     ) -> CampaignGoodput:
    """A campaign's goodput from its ledger and its runs' rows (module docstring).

    Args:
        runs, stage_times, events: the ledger's rows (:meth:`Ledger.runs` …).
        rows_of: run id → its measurement rows (every execution's).
        gpus_of: run name → GPUs (slots) it holds while it runs (1 when not named).
        gpus_per_flight: the offer's GPUs per flight (a flight has at least these slots).

    Returns:
        The per-run splits (every run id with an execution), the stages' seconds, and one
        :class:`FlightGoodput` per flight of the ledger's ``flight_started`` events.
    """
    gpus = dict(gpus_of or {})
    names = {run.run_id: run.name for run in runs}
    placed = ledger_executions(runs, stage_times, events)
    packages = _packages(events)
    splits: dict[str, GoodputSplit] = {}
    on: dict[str, list[tuple[str, Execution, GoodputSplit]]] = {f: [] for f in packages}
    for run_id, executions in placed.items():
        if not executions:
            continue
        windows = [e for e, _ in executions]
        parts = execution_goodput(rows_of(run_id), windows)
        splits[run_id] = total_goodput(parts)
        for (window, flight), part in zip(executions, parts):
            if flight in on:
                on[flight].append((run_id, window, part))
    stages: dict[str, float] = {}
    stage_spans = [(s.name, s.started_at, s.ended_at) for s in stage_times if s.kind == "stage"]
    for name, start, end in stage_spans:
        stages[name] = stages.get(name, 0.0) + max(0.0, end - start)
    flights = []
    for flight, package in packages.items():
        held = [(w.started_at, w.ended_at, max(1, gpus.get(names[r], 1))) for r, w, _ in on[flight]]
        inside = [(max(s, package.started_at), min(e, package.ends_at))
                  for _, s, e in stage_spans] if len(packages) == 1 else []
        inside = [(s, e) for s, e in inside if e > s]
        held += [(s, e, 1) for s, e in inside]
        overheads = dict.fromkeys(OVERHEADS, 0.0)
        productive = 0.0
        for run_id, _, part in on[flight]:
            times = max(1, gpus.get(names[run_id], 1))
            productive += part.productive_s * times
            for cause in OVERHEADS:
                overheads[cause] += part.parts[cause] * times
        overheads[STAGES] = sum(e - s for s, e in inside)
        flights.append(FlightGoodput(
            flight, max(gpus_per_flight, _peak(held)), package.hours, productive, overheads,
            tuple(dict.fromkeys(r for r, _, _ in on[flight]))))
    return CampaignGoodput(splits, stages, tuple(flights))


class LedgerRows(Protocol):
    """What :func:`ledger_goodput` reads of a ledger (``run``'s :class:`Ledger`, or the
    :class:`~flightplan.close.ledger_reader.LedgerReader` ``close`` sees)."""

    def runs(self) -> list[RunRow]:
        """Every run id ever registered."""

    def stage_times(self) -> list[StageTimeRow]:
        """One row per execution of a stage or run."""

    def events(self, run_id: str | None = None, *, kind: str | None = None
               ) -> list[EventRow]:
        """Events in order."""


def ledger_goodput(ledger: LedgerRows, spec: CampaignSpec, *, gpus_per_flight: int
                   ) -> CampaignGoodput:
    """:func:`campaign_goodput` of a campaign from its ledger and its run directories
    (``runs/<run_id>/``, with the folders ``--restart`` set aside), each run holding its
    ``[[run]] gpus`` (each replicate of a run of several seeds too).

    Args:
        ledger: the campaign's ledger. spec: the campaign (its folder, its runs' GPUs).
        gpus_per_flight: the rental offer's GPUs per flight (the catalog's).
    """
    return campaign_goodput(
        runs=ledger.runs(), stage_times=ledger.stage_times(), events=ledger.events(),
        rows_of=lambda run_id: RunDir.of(spec.campaign_dir, run_id).rows_across_restarts(),
        gpus_of={rep.name: rep.run.gpus for rep in spec.executions},   # each replicate
        gpus_per_flight=gpus_per_flight)
