"""The flight's side of leaving before a package ends: the signals a worker answers.

The runner asks a run to checkpoint at its next step boundary (and, usually, to stop
after it) by a signal to its worker process; :func:`install_leave_handlers` turns those
signals into :meth:`flightplan.trial.Trial.request_leave`: the next ``maybe_checkpoint``
(or library save) saves, waits until the checkpoint is durable, logs a
``forced_checkpoint`` row and, when asked to stop, raises
:class:`~flightplan.errors.TrialPreempted` (the worker then exits :data:`EXIT_PREEMPTED`).
When to ask is the runner's business (``flightplan.run.executors.leave_watch``).

The same request comes from SLURM's ``--signal=USR1@SECONDS`` and from spot-instance
notices that send SIGUSR1, so a task run elsewhere honours them too.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from flightplan.errors import TrialPreempted

if TYPE_CHECKING:
    from flightplan.trial.trial import Trial

__all__ = ["LEAVE_SIGNAL", "SAVE_SIGNAL", "EXIT_PREEMPTED", "install_leave_handlers"]

LEAVE_SIGNAL = signal.SIGUSR1
"""Checkpoint at the next step boundary, then stop (exit :data:`EXIT_PREEMPTED`)."""

SAVE_SIGNAL = signal.SIGUSR2
"""Checkpoint at the next step boundary and go on (``--past-end``)."""

EXIT_PREEMPTED = TrialPreempted.exit_code
"""The worker's exit code (75) after leaving a flight with its checkpoint saved (``EX_TEMPFAIL``
of ``sysexits.h``: the run is not over, it goes on elsewhere)."""

def install_leave_handlers(trial: "Trial") -> None:
    """In the worker: :data:`LEAVE_SIGNAL` and :data:`SAVE_SIGNAL` ask ``trial`` to leave
    (:meth:`~flightplan.trial.trial.Trial.request_leave`, with ``stop`` True and False)."""
    signal.signal(LEAVE_SIGNAL, lambda *_: trial.request_leave(stop=True))
    signal.signal(SAVE_SIGNAL, lambda *_: trial.request_leave(stop=False))
