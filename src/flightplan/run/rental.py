"""The rental's end: when each flight's package started and ends, and whether a run can
still finish on a flight before its package ends.

A flight is where runs execute: this machine for the local executor (flight
:data:`~flightplan.run.executors.local.LOCAL_FLIGHT`), each Ray node for the Ray executor (named
``<node id[:12]> (<ip>)``). Its package started at ``[rental] started`` (one time for every
flight) or, when that is not given, when the runner first asked to start a run on it; it
ends ``package_days`` × 24 h later. Both live in the ledger as events:

- ``flight_started`` (no run id) ``{flight, started_at, ends_at, package_days, source}``:
  unix seconds; ``source`` is ``"spec"`` or ``"first_run"``; the latest per flight counts
  (a changed ``[rental] started`` adds a new one).
- ``flight_lost`` (no run id) ``{flight, at, reason}``: the flight went away while a run
  was on it (its node died, or the run's host on it); it counts as lost until a run ends
  on it (a ``finished``/``stopped``/``failed`` event naming it as ``node``). A loss also
  writes ``results/flights.json`` (:func:`flightplan.publish.results.publish_flights`):
  every flight's window, a lost one with ``lost_at`` and ``lost_reason``.
- ``not_started`` (run id) ``{flight, needs_hours, hours_left, message}``: the run's
  estimate is longer than what is left of that flight's package, so it was not started
  there and stays ``pending``; ``past_end`` (same data): it was started anyway because the
  user said so (``flightplan run --past-end``).

A run needs its re-estimated duration from the decision point (the last decision's
``figures.estimates[name].total_s``), else its planned ``duration``: the whole estimate,
also for a run that resumes (a cautious figure). It must fit before the flight's runs
leave it: ``[rental] checkpoint_before_end`` before the end. From then on a run still on
the flight is asked to checkpoint, bring its files home and leave
(:meth:`RentalClock.leave_by`, :mod:`flightplan.run.executors.leave_watch`); it is then recorded as
``interrupted`` with cause ``package_end`` and waits, like a run not started, for a
flight with time left.

Usage::

    clock = RentalClock(ledger, package_days=3, started=None, past_end=False,
                        leave_before_s=900.0)
    clock.admit("control-1a2b3c4d5e", needs_s=5400.0, flight="local")   # False: not_started
    flight_windows(ledger.events(kind="flight_started"))   # {flight: FlightWindow}
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from flightplan.ledger_rows import DecisionRow, EventRow
from flightplan.publish.results import publish_flights
from flightplan.run.ledger import Ledger
from flightplan.run.executors.leave_watch import LeaveBy
from flightplan.spec import Run

__all__ = ["FlightWindow", "RentalClock", "flight_windows", "run_needs_s", "waiting_reasons",
           "left_flight", "HOUR_S"]

HOUR_S = 3600.0
"""Seconds per hour (package days are 24 h each)."""


@dataclass(frozen=True)
class FlightWindow:
    """One flight's package: unix ``started_at`` and ``ends_at`` (seconds) and where the
    start came from (``"spec"``: ``[rental] started``; ``"first_run"``: the runner's first
    start on it); ``lost_at`` (unix seconds) and ``lost_reason`` once it went away."""

    flight: str
    started_at: float
    ends_at: float
    source: str
    lost_at: float | None = None
    lost_reason: str | None = None

    def hours_left(self, now: float) -> float:
        """Hours until the package ends (0 once it has ended, or the flight is lost)."""
        return 0.0 if self.lost_at is not None else max(0.0, (self.ends_at - now) / HOUR_S)

    def to_json(self, *, now: float) -> dict[str, Any]:
        """``{flight, started_at, ends_at, source, hours_left, lost_at, lost_reason}``
        (hours rounded to 0.01; the last two null for a flight that is there)."""
        return {"flight": self.flight, "started_at": self.started_at, "ends_at": self.ends_at,
                "source": self.source, "hours_left": round(self.hours_left(now), 2),
                "lost_at": self.lost_at, "lost_reason": self.lost_reason}


def flight_windows(events: list[EventRow]) -> dict[str, FlightWindow]:
    """Each flight's current window from the ledger's ``flight_started`` events (the latest
    per flight), in the order the flights first appeared, with ``flight_lost`` (a run that
    ended on the flight afterwards shows it is there again)."""
    windows: dict[str, FlightWindow] = {}
    for event in events:
        data = event.data or {}
        if event.kind == "flight_started":
            old = windows.get(data["flight"])
            windows[data["flight"]] = FlightWindow(
                data["flight"], float(data["started_at"]), float(data["ends_at"]),
                data["source"], old.lost_at if old else None, old.lost_reason if old else None)
        elif event.kind == "flight_lost" and data.get("flight") in windows:
            windows[data["flight"]] = replace(windows[data["flight"]], lost_at=float(data["at"]),
                                              lost_reason=data.get("reason"))
        elif event.kind in ("finished", "stopped", "failed") \
                and data.get("node") in windows:
            windows[data["node"]] = replace(windows[data["node"]], lost_at=None,
                                            lost_reason=None)
    return windows


def run_needs_s(run: Run, decisions: list[DecisionRow]) -> float:
    """Seconds ``run`` needs: the last decision's ``estimates[run.name].total_s``, else the
    run's planned ``duration``."""
    estimates = ((decisions[-1].figures or {}).get("estimates") or {}) if decisions else {}
    total = (estimates.get(run.name) or {}).get("total_s")
    return float(total) if total is not None else float(run.duration.seconds)


def _latest_by_run(events: list[EventRow]) -> dict[str, EventRow]:
    """Each run's latest event (``events`` in ledger order)."""
    return {event.run_id: event for event in events if event.run_id}


def _left_flight(event: EventRow) -> bool:
    return event.kind == "interrupted" and (event.data or {}).get("cause") == "package_end"


def waiting_reasons(events: list[EventRow]) -> dict[str, str]:
    """``{run_id: message}`` for every run whose latest event is ``not_started``, or an
    ``interrupted`` one with cause ``package_end`` (it left a flight whose package ends)."""
    reasons = {}
    for run_id, event in _latest_by_run(events).items():
        data = event.data or {}
        if event.kind == "not_started":
            reasons[run_id] = data.get("message", "not started")
        elif _left_flight(event):
            reasons[run_id] = (f"left flight {data.get('node')} after {data.get('steps_done')} "
                               f"steps, {data.get('checkpoint')} home: {data.get('reason')}; "
                               f"resumes on a flight with time left")
    return reasons


def left_flight(events: list[EventRow]) -> set[str]:
    """The runs whose latest event is leaving a flight whose package ends (waiting, with a
    checkpoint home, for a flight with time left)."""
    return {run_id for run_id, event in _latest_by_run(events).items() if _left_flight(event)}


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class RentalClock:
    """Decides whether a run may start on a flight before its package ends, and records
    each flight's window and each refusal in the ledger (see the module docstring).

    Args:
        ledger: the campaign's ledger (an open connection; written as runs are admitted).
        package_days: ``[rental] package_days``.
        started: ``[rental] started`` (timezone-aware) or None (each flight's first run).
        past_end: start a run even when it cannot finish before its flight's package ends
            (``flightplan run --past-end``); it is recorded as ``past_end``, and near the end
            it checkpoints and goes on instead of leaving.
        leave_before_s: ``[rental] checkpoint_before_end`` (seconds): runs leave a flight
            this long before its package ends, so a run must fit before that.
        now: the clock (unix seconds; tests pass a fixed one).
    """

    def __init__(self, ledger: Ledger, *, package_days: int, started: dt.datetime | None,
                 past_end: bool, leave_before_s: float = 0.0,
                 now: Callable[[], float] = time.time) -> None:
        self.ledger, self.package_s = ledger, package_days * 24 * HOUR_S
        self.package_days, self.past_end, self.now = package_days, past_end, now
        self.leave_before_s = leave_before_s
        self.started = None if started is None else started.timestamp()

    def window(self, flight: str) -> FlightWindow:
        """``flight``'s window; recorded (``flight_started``) when it is new or when
        ``[rental] started`` changed since it was recorded."""
        current = flight_windows(self.ledger.events(kind="flight_started")).get(flight)
        if self.started is not None and (current is None or current.source != "spec"
                                         or current.started_at != self.started):
            current = self._record(flight, self.started, "spec")
        elif current is None:
            current = self._record(flight, self.now(), "first_run")
        return current

    def _record(self, flight: str, started_at: float, source: str) -> FlightWindow:
        window = FlightWindow(flight, started_at, started_at + self.package_s, source)
        self.ledger.add_event("flight_started", data={
            "flight": flight, "started_at": started_at, "ends_at": window.ends_at,
            "package_days": self.package_days, "source": source})
        return window

    def least_left_s(self) -> float:
        """Seconds the flight with the least time left has before its runs must leave it
        (``leave_before_s`` before its package ends), over the flights recorded and one not
        started yet (a whole package from now, or from ``[rental] started``); lost flights
        are left out. Nothing is recorded. Infinite with ``past_end`` (runs start anyway)."""
        if self.past_end:
            return float("inf")
        now = self.now()
        fresh = (now if self.started is None else self.started) + self.package_s
        ends = [w.ends_at for w in flight_windows(self.ledger.events()).values()
                if w.lost_at is None] + [fresh]
        return min(ends) - now - self.leave_before_s

    def admit(self, run_id: str, *, needs_s: float, flight: str) -> bool:
        """Whether run ``run_id`` (needing ``needs_s`` seconds) may start on ``flight`` now.

        Returns:
            True when it can finish before its runs must leave the flight (``leave_before_s``
            before the package ends), or ``past_end`` is set (then a ``past_end`` event is
            recorded); False otherwise, with a ``not_started`` event whose message says how
            much time is left and how to start it anyway.
        """
        window = self.window(flight)
        now = self.now()
        left_s = window.ends_at - now
        if needs_s + self.leave_before_s <= left_s:
            return True
        left_h, needs_h = max(0.0, left_s) / HOUR_S, needs_s / HOUR_S
        ended = "ended" if left_s <= 0 else "ends"
        data = {"flight": flight, "needs_hours": round(needs_h, 4),
                "hours_left": round(left_h, 4)}
        leave = (f" + {self.leave_before_s / HOUR_S:.2f} h to leave before the end"
                 if self.leave_before_s and left_s > 0 else "")
        what = (f"needs {needs_h:.2f} h{leave} but flight {flight} has {left_h:.2f} h left "
                f"(its package {ended} {_iso(window.ends_at)})")
        if self.past_end:
            self.ledger.add_event("past_end", run_id=run_id,
                                  data=dict(data, message=f"started with --past-end: {what}"))
            return True
        self.ledger.add_event("not_started", run_id=run_id, data=dict(data, message=(
            f"not started: {what}; --past-end starts it anyway")))
        return False

    def lost(self, flight: str, *, at: float, reason: str) -> None:
        """Record that ``flight`` went away at unix ``at`` (``reason``: the error seen) and
        write ``results/flights.json`` with every flight's window."""
        self.ledger.add_event("flight_lost", data={"flight": flight, "at": at,
                                                   "reason": reason})
        windows = flight_windows(self.ledger.events())
        publish_flights(Path(self.ledger.path).parents[1],
                        [w.to_json(now=at) for w in windows.values()])

    def leave_by(self, flight: str) -> LeaveBy:
        """When runs on ``flight`` must have their last checkpoint home: ``leave_before_s``
        before its package ends; they then leave it, or go on with ``past_end``."""
        window = self.window(flight)
        return LeaveBy(at=window.ends_at - self.leave_before_s, ends_at=window.ends_at,
                       stop=not self.past_end, flight=flight)
