"""Leaving a flight before its package ends: when to ask a run to checkpoint and stop.

A rented flight is gone when its package ends, with whatever was only on it. So before
that, each run still working on it is asked to checkpoint at its next step boundary; the
checkpoint comes home (a remote flight: :mod:`flightplan.run.executors.transfer`), and the
run stops with :data:`~flightplan.trial.leave.EXIT_PREEMPTED`. It is then ``pending`` with
an ``interrupted`` event (cause ``package_end``) and resumes from that checkpoint on a
flight with time left (or on the next ``flightplan run`` after the package is extended and
``[rental] started`` changed). With ``flightplan run --past-end`` the user has said the
run may go on past the end: it still checkpoints and brings the files home, then goes on.

This is the home side: per execution, a :class:`LeaveWatch` for the flight's
:class:`LeaveBy` decides when to ask: once ``now ≥ at − need``, where ``at`` is the
package's end less ``[rental] checkpoint_before_end`` and ``need`` is twice what this run
was measured to take to reach a step boundary, save, persist and transfer a checkpoint
home, plus two polls (:func:`leave_need_s`). The executor sends
:data:`~flightplan.trial.leave.LEAVE_SIGNAL` (stop after the checkpoint) or
:data:`~flightplan.trial.leave.SAVE_SIGNAL` (go on) to the worker process; the worker's
side is :mod:`flightplan.trial.leave`.

Usage::

    watch = LeaveWatch(LeaveBy(at=ends_at - 900, stop=True, flight="local"), run_dir, poll_s=0.2)
    if watch.due(time.time()):
        process.send_signal(watch.signal)
"""

from __future__ import annotations

import datetime as dt
import signal
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from flightplan.durable import append_durable
from flightplan.rows import CheckpointSaved, CheckpointTransfer, Measurement, Row
from flightplan.rundir import RunDir
from flightplan.transfer_time import trip_s
from flightplan.trial.leave import LEAVE_SIGNAL, SAVE_SIGNAL

__all__ = ["LeaveBy", "LeaveWatch", "leave_need_s"]


_STEP_GAPS = 20
"""Step times kept (the most recent) for the step time's median."""


@dataclass(frozen=True)
class LeaveBy:
    """When a run must have its last checkpoint home: unix ``at`` (seconds: the package's
    end less ``[rental] checkpoint_before_end``), and whether it then stops (``stop``;
    False with ``--past-end``) on ``flight``; ``ends_at`` is the package's end itself."""

    at: float
    ends_at: float
    stop: bool
    flight: str


def leave_need_s(*, step_s: float, save_s: float, transfer_s: float, poll_s: float) -> float:
    """Seconds to allow from the request until the checkpoint is home: twice the measured
    step, save (stall + persist) and transfer times, plus two polls of the executor (the
    request and the checkpoint's trip each wait for one)."""
    return 2.0 * (step_s + save_s + transfer_s) + 2.0 * poll_s


class LeaveWatch:
    """Home's watch over one execution: when to ask it to leave its flight.

    Reads the run's measurement rows (at each :meth:`due` call only what was appended) and
    keeps the step time (median of the last :data:`_STEP_GAPS` ``step_s`` values or gaps
    between step rows), the last save's stall + persist and the last transfer's wait +
    fetch + commit seconds (:mod:`flightplan.transfer_time`). It asks only once this
    execution has logged a row: the worker has then set up its handlers (a signal before
    that would end it unsaved) and reached the training loop, where the checkpoint is made.

    Args:
        leave_by: the flight's deadline.   run_dir: the run's folder at home.
        poll_s: seconds between the executor's polls.
    """

    def __init__(self, leave_by: LeaveBy, run_dir: Path, *, poll_s: float) -> None:
        self.leave_by = leave_by
        self.run_dir = RunDir(run_dir)
        self.poll_s = poll_s
        self.sent = False
        self._steps: list[float] = []
        self._last_step_at: float | None = None
        self._save_s = 0.0
        self._transfer_s = 0.0
        rows, self._offset = self.run_dir.read_rows()   # earlier executions: figures only
        for row in rows:
            self._take(row)
        self._running = False         # set once this execution logged a row

    @property
    def signal(self) -> signal.Signals:
        """The signal to send: :data:`LEAVE_SIGNAL` when the run stops, else :data:`SAVE_SIGNAL`."""
        return LEAVE_SIGNAL if self.leave_by.stop else SAVE_SIGNAL

    def _read(self) -> None:
        rows, self._offset = self.run_dir.read_rows(self._offset)
        self._running = self._running or bool(rows)
        for row in rows:
            self._take(row)
        del self._steps[:-_STEP_GAPS]

    def _take(self, row: Row) -> None:
        if isinstance(row, CheckpointSaved):
            self._save_s = row.stall_s + row.persist_s
        elif isinstance(row, CheckpointTransfer):
            self._transfer_s = trip_s(row)
        elif isinstance(row, Measurement) and row.is_step:
            step_s = row.number("step_s")
            if step_s is not None:
                self._steps.append(step_s)
            elif self._last_step_at is not None:
                self._steps.append(max(0.0, row.time - self._last_step_at))
            self._last_step_at = row.time

    def need_s(self) -> float:
        """:func:`leave_need_s` from what the run measured so far (0 for a figure not yet
        measured)."""
        self._read()
        step_s = statistics.median(self._steps) if self._steps else 0.0
        return leave_need_s(step_s=step_s, save_s=self._save_s, transfer_s=self._transfer_s,
                            poll_s=self.poll_s)

    @property
    def reason(self) -> str:
        """One line: the flight, when its package ends, and what the run was asked."""
        ends = dt.datetime.fromtimestamp(self.leave_by.ends_at, dt.timezone.utc)
        return (f"the package of flight {self.leave_by.flight} ends "
                f"{ends.strftime('%Y-%m-%d %H:%M:%S UTC')}: checkpoint now"
                + (" and leave" if self.leave_by.stop else " and go on (--past-end)"))

    def ask(self, send: Callable[[int], Any]) -> None:
        """Note the request in the run's ``log.txt`` and send :attr:`signal` through
        ``send`` (the worker's ``send_signal``, or a call to its flight)."""
        append_durable(self.run_dir.log, f"--- flightplan: {self.reason} ---\n".encode())
        send(int(self.signal))

    def due(self, now: float) -> bool:
        """True once, when the request should be sent at unix time ``now``."""
        if self.sent or now < self.leave_by.at - self.need_s() or not self._running:
            return False
        self.sent = True
        return True
