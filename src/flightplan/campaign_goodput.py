"""A campaign's goodput: each run's executions read from the ledger and split by cause
(:mod:`flightplan.goodput`), and what each flight's hours bought.

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

    campaign = campaign_goodput(runs=ledger.runs(), stage_times=ledger.stage_times(),
                                events=ledger.events(), rows_of=lambda run_id: rows,
                                gpus_of={"control": 1}, gpus_per_flight=1)
    campaign.flights[0].uncommitted_s, campaign.to_json()
    ledger_goodput(ledger, spec, gpus_per_flight=1)     # the same, from a campaign's files
    ledger_goodput(ledger, spec, gpus_per_flight=1, count_open=True)   # what status shows

An execution the ledger still holds open (its run ``running``: its runner at work, or one
stopped by Ctrl-C or killed, whose executions the next ``flightplan run`` closes) has no
``stage_times`` row yet; :func:`open_executions` closes it as that next run would record it
(from its latest start to its folder's last write), which ``flightplan status`` counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from flightplan.goodput import OVERHEADS, STAGES, Execution, GoodputSplit, execution_goodput, \
    total_goodput
from flightplan.ledger_rows import EventRow, RunRow, StageTimeRow
from flightplan.rows import Row
from flightplan.rundir import RunDir
from flightplan.spec import CampaignSpec
from flightplan.units import SECONDS_PER_HOUR, hours

__all__ = ["ledger_executions", "open_executions", "FlightGoodput", "CampaignGoodput",
           "campaign_goodput", "LedgerRows", "ledger_goodput"]


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


def open_executions(runs: Sequence[RunRow], events: Sequence[EventRow], *,
                    last_seen: Mapping[str, float], ended: Mapping[str, str] | None = None
                    ) -> tuple[list[RunRow], list[StageTimeRow]]:
    """The executions the ledger holds open, closed as the next ``flightplan run`` records
    them (:meth:`~flightplan.run.ledger.Ledger.reset_interrupted`, or
    :meth:`~flightplan.run.records.RunRecorder.record_ended_on_disk` for a run whose folder
    shows it ended): each run the ledger has ``running`` (its runner at work, or stopped
    by Ctrl-C or killed before it saw the worker end) executes from its latest
    ``started``/``resumed`` event to its last sign of life.

    Args:
        runs, events: the ledger's rows.
        last_seen: run id → unix time of its folder's last write
            (:meth:`~flightplan.rundir.RunDir.last_written`); a run not in it, or last seen
            at or before its latest start, adds no execution (like ``reset_interrupted``,
            which counts it no time).
        ended: run id → ``finished``/``stopped`` where its folder shows that end
            (``done.json``/``stop.json``): that execution then ended the run.

    Returns:
        The runs (a ``running`` one with the status its folder shows, else unchanged) and
        one ``stage_times`` row per open execution, to add to the ledger's.
    """
    ends = dict(ended or {})
    latest: dict[str, float] = {}
    for event in events:
        if event.run_id and event.kind in ("started", "resumed"):
            latest[event.run_id] = max(event.at, latest.get(event.run_id, event.at))
    out_runs: list[RunRow] = []
    rows: list[StageTimeRow] = []
    for run in runs:
        start, seen = latest.get(run.run_id), last_seen.get(run.run_id)
        if run.status != "running" or start is None or seen is None or seen <= start:
            out_runs.append(run)
            continue
        rows.append(StageTimeRow(run.name, "run", start, seen))
        status = ends.get(run.run_id)
        out_runs.append(replace(run, status=status) if status in _ENDED else run)
    return out_runs, rows


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


def ledger_goodput(ledger: LedgerRows, spec: CampaignSpec, *, gpus_per_flight: int,
                   count_open: bool = False) -> CampaignGoodput:
    """:func:`campaign_goodput` of a campaign from its ledger and its run directories
    (``runs/<run_id>/``, with the folders ``--restart`` set aside), each run holding its
    ``[[run]] gpus`` (each replicate of a run of several seeds too).

    Args:
        ledger: the campaign's ledger. spec: the campaign (its folder, its runs' GPUs).
        gpus_per_flight: the rental offer's GPUs per flight (the catalog's).
        count_open: also count each execution the ledger holds open, until its
            folder's last write (:func:`open_executions`; ``flightplan status``): a run
            interrupted by a runner that is gone, or running, then has its split and holds
            its slots.
    """
    runs, stage_times, events = ledger.runs(), ledger.stage_times(), ledger.events()
    if count_open:
        folders = {run.run_id: RunDir.of(spec.campaign_dir, run.run_id) for run in runs
                   if run.status == "running"}
        seen = {run_id: folder.last_written() for run_id, folder in folders.items()}
        ended = {run_id: folder.status() for run_id, folder in folders.items()}
        runs, opened = open_executions(
            runs, events, last_seen={r: t for r, t in seen.items() if t is not None},
            ended={r: s for r, s in ended.items() if s is not None})
        stage_times = [*stage_times, *opened]
    return campaign_goodput(
        runs=runs, stage_times=stage_times, events=events,
        rows_of=lambda run_id: RunDir.of(spec.campaign_dir, run_id).rows_across_restarts(),
        gpus_of={rep.name: rep.run.gpus for rep in spec.executions},   # each replicate
        gpus_per_flight=gpus_per_flight)
