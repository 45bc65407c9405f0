"""The executor contract: what the runner hands an executor and what it gets back.

An :class:`Executor` carries out runs somewhere (:mod:`flightplan.run.executors.local`:
processes on this machine; :mod:`flightplan.run.executors.ray_executor`: Ray nodes, one
per flight). It is given :class:`Job` s, each a run directory whose ``trial.json`` the
runner wrote, starts ``python -m flightplan.run.worker <run_dir>/trial.json`` for each
(:func:`worker_argv`), and reports through callbacks in the caller's thread: a start, a
:class:`JobResult` when the worker ended, :class:`RunProgress` while it runs, and an
:class:`Interruption` when an execution ended without its run ending (a lost flight; a run
that left a flight whose package ends). Worker and runner talk only through the trial file
and the measurement rows, so every executor is tested by one conformance suite
(``tests/unit/run/executors/test_conformance.py``): a run that starts and finishes, one
stopped by a rule, one interrupted (its runner killed: no worker outlives it), one that
leaves before its flight's package ends, and GPUs per run honoured (a run holding N GPUs
gets N of its own; one asking for more than any flight has is not started). **A new
executor is done when that suite passes on it**: add it to the suite's parameters.

GPUs: a :class:`Job` holds ``gpus`` GPUs of one flight (its ``[[run]] gpus``), never
shared with another run; its worker sees exactly those in ``CUDA_VISIBLE_DEVICES``. A job
that asks for more than any flight has ends without starting, exit :data:`EXIT_NO_FLIGHT`,
with the reason in its ``log.txt``; where the executor knows the limit before anything
starts (:meth:`Executor.gpu_limit`), the runner refuses the campaign first
(:func:`check_gpus`: exit 2, naming the run, ``[[run]] gpus`` and what the machine has).

Progress is read, not reported: :class:`MeasurementTail` follows a run's
``measurements.jsonl`` and gives its latest step, loss and planned steps.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from flightplan.durable import append_durable, write_json_atomic
from flightplan.errors import SpecError
from flightplan.rows import Measurement
from flightplan.rundir import RunDir, list_checkpoints
from flightplan.run.executors.leave_watch import LeaveBy, LeaveWatch
from flightplan.trial.leave import LEAVE_SIGNAL

if TYPE_CHECKING:
    from flightplan.spec import Run

__all__ = ["Job", "JobResult", "Interruption", "RunProgress", "MeasurementTail", "Executor",
           "GpuLimit", "ClusterJoined", "worker_argv", "lost_execution", "left_execution", "check_gpus",
           "check_processes",
           "WORKER_MODULE", "EXIT_NO_FLIGHT"]

WORKER_MODULE = "flightplan.run.worker"
"""The module a worker process runs (``python -m``)."""

EXIT_NO_FLIGHT = 4
"""Exit code given to a run that no flight of the executor can hold (more GPUs than any
has, or every flight is gone); the reason is appended to its ``log.txt``."""


@dataclass(frozen=True)
class Job:
    """One run to execute: its id, its directory (which holds ``trial.json``), the GPUs
    its ``[[run]]`` declares (one flight's GPUs; an executor never shares one) and the
    worker processes one execution starts (``[[run]] processes``: the ranks of a
    data-parallel run, :mod:`flightplan.run.executors.ranks`)."""

    run_id: str
    run_dir: Path
    gpus: int = 1
    processes: int = 1

    @property
    def trial_json(self) -> Path:
        """``<run_dir>/trial.json``."""
        return RunDir(self.run_dir).trial_json


@dataclass(frozen=True)
class JobResult:
    """How one execution ended: the process's exit code, its unix start/end times and,
    for a remote executor, the node it ran on (None on this machine). ``started_at`` is taken
    before the worker process exists (Ray: when the flight is asked to start it, before the
    checkpoint to resume from is sent there), so the worker's ``process_start`` row falls
    inside the execution (:mod:`flightplan.goodput`: ``waiting``)."""

    run_id: str
    run_dir: Path
    exit_code: int
    started_at: float
    ended_at: float
    node: str | None = None

    @property
    def wall_s(self) -> float:
        """Seconds the process ran."""
        return self.ended_at - self.started_at


@dataclass(frozen=True)
class Interruption:
    """An execution lost with the machine it ran on (a remote executor's flight went away).

    Attributes:
        run_id, node: the run and where it was lost.   reason: one line (the error seen).
        started_at, at: unix seconds the execution started and was found lost.
        steps_done: steps the run had logged home (last step + 1).
        checkpoint: the newest checkpoint home (``step-NNNNNN``) or None.
        steps_lost: steps done after that checkpoint (redone on resume).
        lost_s: seconds of work lost: since the checkpoint's save (or the start).
        resumes: True when the executor starts it again (from ``checkpoint``, or from 0
            when none of its checkpoints came home); False when some came home and have
            all gone from home since.
        cause: ``"flight_lost"`` (the machine went away), ``"package_end"`` (the run left
            its flight before the package's end, :mod:`flightplan.run.executors.leave_watch`) or
            ``"preempted"`` (it left when something else sent SIGUSR1: SLURM, a spot notice).
    """

    run_id: str
    node: str
    reason: str
    started_at: float
    at: float
    steps_done: int
    checkpoint: str | None
    steps_lost: int
    lost_s: float
    resumes: bool
    cause: str = "flight_lost"


@dataclass
class RunProgress:
    """The latest progress of a run: ``step`` (last logged, 0-based), ``total`` (planned
    steps, None until known), ``loss`` (last logged), ``finished`` steps so far."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None

    @property
    def completed(self) -> int:
        """Steps done: last logged step + 1 (0 before the first)."""
        return 0 if self.step is None else self.step + 1


class MeasurementTail:
    """Follows ``measurements.jsonl`` of a run, reading only what was appended.

    A line is taken only once it ends with a newline (a row being written is left for
    the next read). ``total`` comes from ``trial.json``'s ``planned_steps``/``max_steps``
    or from a row that carries ``planned_steps``.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = RunDir(run_dir)
        self.progress = RunProgress()
        self._offset = 0
        trial = self.run_dir.read_json(RunDir.TRIAL) or {}
        self._cap: int | None = trial.get("max_steps")
        self._set_total(trial.get("planned_steps"))

    def _set_total(self, planned: int | None) -> None:
        if planned is None:
            return
        self.progress.total = int(planned) if self._cap is None else min(int(planned), self._cap)

    def read(self) -> RunProgress:
        """Read new complete rows and return the updated progress."""
        rows, self._offset = self.run_dir.read_rows(self._offset)
        for row in rows:
            if not isinstance(row, Measurement):
                continue
            planned = row.number("planned_steps")
            if planned is not None:
                self._set_total(int(planned))
            if row.is_step:
                self.progress.step = row.step
                self.progress.loss = row.values["loss"]
        return self.progress


def lost_execution(job: Job, *, node: str, reason: str, started_at: float,
                   saved_any: bool, now: float | None = None,
                   cause: str = "flight_lost") -> Interruption:
    """What an execution that ended without its run ending cost, from what is home; sets
    ``resume`` in the job's ``trial.json`` for the next execution and notes it in
    ``log.txt``.

    The work lost is everything after the newest checkpoint home: ``steps_lost`` = steps
    logged home − that checkpoint's steps, ``lost_s`` = now − max(its commit time, the
    execution's start). ``resume`` is set when a checkpoint is home, or one came home
    from the run and has gone since (then the run stops by ``no_usable_resume`` rather
    than restarting from scratch: ``resumes`` is False); a run none of whose checkpoints
    came home starts again from step 0: what it saved on the flight went with the flight.

    Args:
        job: the run.   node: where it ran.   reason: one line (the error seen, or why it
        left).   started_at: unix start of the execution.   saved_any: a checkpoint of
        the run was committed home (:func:`flightplan.rows.records_a_save` with
        ``on_flight``).   now: unix time of the end (default: now).
        cause: ``"flight_lost"``, ``"package_end"`` or ``"preempted"`` (:class:`Interruption`).
    """
    now = time.time() if now is None else now
    complete, _ = list_checkpoints(RunDir(job.run_dir).checkpoints)
    newest = complete[0] if complete else None
    progress = MeasurementTail(job.run_dir).read()
    since = max(newest[1].stat().st_mtime, started_at) if newest else started_at
    trial = RunDir(job.run_dir).read_json(RunDir.TRIAL) or {}
    trial["resume"] = newest is not None or saved_any
    write_json_atomic(job.trial_json, trial)
    what = "lost node" if cause == "flight_lost" else "left flight"
    append_durable(RunDir(job.run_dir).log, f"--- flightplan: {what} {node} at "
                   f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(now))}: {reason} "
                   f"---\n".encode())
    return Interruption(job.run_id, node, reason, started_at, now, progress.completed,
                        newest[1].name if newest else None,
                        max(0, progress.completed - (newest[0] if newest else 0)),
                        max(0.0, now - since), newest is not None or not saved_any, cause)


def left_execution(job: Job, *, node: str, started_at: float,
                   watch: LeaveWatch | None) -> Interruption:
    """:func:`lost_execution` of an execution that left its flight with its checkpoint (the
    worker's exit :data:`~flightplan.trial.leave.EXIT_PREEMPTED`): cause
    ``package_end`` with the watch's reason when flightplan asked (``watch``), else
    ``preempted`` (something else sent the signal)."""
    if watch is not None:
        return lost_execution(job, node=node, reason=watch.reason, started_at=started_at,
                              saved_any=True, cause="package_end")
    return lost_execution(job, node=node, started_at=started_at, saved_any=True,
                          cause="preempted",
                          reason=f"the worker was asked to leave ({LEAVE_SIGNAL.name}) by "
                                 f"something other than flightplan")


def worker_argv(trial_json: Path) -> list[str]:
    """The command line of one worker process."""
    return [sys.executable, "-m", WORKER_MODULE, str(trial_json)]


@dataclass(frozen=True)
class GpuLimit:
    """The most GPUs one run can hold on an executor: ``gpus`` on ``where`` (one line, e.g.
    ``this machine (CUDA_VISIBLE_DEVICES=0,1)``)."""

    gpus: int
    where: str


def check_gpus(runs: Sequence[Run], limit: GpuLimit | None, *, source: str | None) -> None:
    """Refuse a campaign one of whose runs asks for more GPUs than ``limit`` allows.

    Args:
        runs: the campaign's ``[[run]]`` entries, in file order.
        limit: :meth:`Executor.gpu_limit` (None: nothing to check before runs start).
        source: the campaign file (named in the error).

    Raises:
        SpecError: the first run whose ``gpus`` exceeds ``limit.gpus``, naming the run,
            ``run[i].gpus``, what the machine has and the fix.
    """
    if limit is None:
        return
    for index, run in enumerate(runs):
        if run.gpus > limit.gpus:
            raise SpecError(
                f"{run.name!r} needs {run.gpus} GPUs ([[run]] gpus) but {limit.where} has "
                f"{limit.gpus}; give gpus = {limit.gpus} or fewer, or run the campaign on "
                f"flights that have {run.gpus} (--executor ray)",
                file=source, field=f"run[{index}].gpus", value=run.gpus)


def check_processes(runs: Sequence[Run], limit: GpuLimit | None, *,
                    source: str | None) -> None:
    """Refuse a campaign one of whose runs asks for ``processes`` the executor cannot give:
    on a machine with GPUs (``limit``), more than the run's ``gpus`` (each rank computes
    on a GPU of its own). On a machine without GPUs any number of ranks runs on the CPU.
    (Both executors start a run's ranks together on one machine: the local one here,
    Ray's on the run's flight.)

    Raises:
        SpecError: the first such run, naming ``run[i].processes`` and the fix.
    """
    for index, run in enumerate(runs):
        if limit is not None and run.processes > run.gpus:
            raise SpecError(f"{run.name!r} asks for {run.processes} processes but holds "
                            f"{run.gpus} GPU{'s' if run.gpus > 1 else ''} ([[run]] gpus); "
                            f"each process computes on a GPU of its own: give gpus = "
                            f"{run.processes} or processes = {run.gpus}",
                            file=source, field=f"run[{index}].processes", value=run.processes)


@dataclass(frozen=True)
class ClusterJoined:
    """The cluster this invocation's runs execute on, as the ledger records it (event
    ``cluster_joined``; ``flightplan status`` shows the latest).

    Attributes:
        address: the head's ``HOST:PORT``.
        loopback: reachable from this machine only.
        token: the head refuses callers without the cluster's token (Ray's token
            authentication).
        trusted_network: the user stated that only their machines can reach it
            (``--trusted-network``).
    """

    address: str
    loopback: bool
    token: bool
    trusted_network: bool

    def to_json(self) -> dict[str, Any]:
        """``{address, loopback, token, trusted_network}``."""
        return {"address": self.address, "loopback": self.loopback, "token": self.token,
                "trusted_network": self.trusted_network}

    def line(self) -> str:
        """One line: where, and who else can call it."""
        who = "token authentication" if self.token else "no token authentication"
        if self.loopback:
            where = "loopback only"
        elif self.trusted_network:
            where = "network stated trusted (--trusted-network)"
        else:
            where = "reachable from the network"
        return f"ray cluster {self.address}: {who}, {where}"


class Executor(ABC):
    """Carries out runs. ``run`` blocks until every job ended; callbacks run in the
    caller's thread, so they may write the ledger.

    ``saves_on_flight``: runs save their checkpoints away from home (on a flight) and
    stream them home; a save then counts for resume only once its checkpoint was
    committed home (:func:`flightplan.rows.records_a_save`)."""

    saves_on_flight: bool = False

    @abstractmethod
    def run(self, jobs: Iterable[Job], *, on_start: Callable[[Job], None] | None = None,
            on_done: Callable[[JobResult], None] | None = None,
            on_progress: Callable[[Job, RunProgress], None] | None = None,
            on_interrupted: Callable[[Job, Interruption], None] | None = None,
            admit: Callable[[Job, str], bool] | None = None,
            leave_by: Callable[[Job, str], LeaveBy | None] | None = None) -> list[JobResult]:
        """Execute ``jobs`` (in the given order as slots free up).

        Args:
            jobs: the runs, each with ``trial.json`` written.
            on_start: called just before a job's process starts (again after a resume).
            on_done: called as soon as a job's process has ended.
            on_progress: called with a job's latest progress while it runs.
            on_interrupted: called when an execution ended without its run ending: lost
                with its machine (a remote executor), or it left a flight whose package
                ends (every executor), before the executor starts it again elsewhere.
            admit: asked just before a job would start on a flight (the local executor:
                :data:`~flightplan.run.executors.local.LOCAL_FLIGHT`; Ray: the node's name); False leaves it unstarted
                there: another flight is tried, or, when none is left, the job is dropped
                without a result (it stays pending; :mod:`flightplan.run.rental`).
            leave_by: asked when a job starts on a flight: by when its last checkpoint must
                be home (:class:`~flightplan.run.executors.leave_watch.LeaveBy`, None: no end). Near
                it the executor asks the run to checkpoint and, unless ``stop`` is False,
                to leave; a run that left is reported through ``on_interrupted`` (cause
                ``package_end``), then started again on another flight or, when none has
                time left, left pending without a result.

        Returns:
            One result per job that ended, in the order they ended.
        """


    def connect(self) -> ClusterJoined | None:
        """Reach where the runs execute, before the runner writes anything (idempotent).

        Returns:
            The cluster joined (the runner records it in the ledger), or None when runs
            execute on this machine.

        Raises:
            InputError: it cannot or must not be reached; one line with the fix.
        """
        return None

    def gpu_limit(self) -> GpuLimit | None:
        """The most GPUs one run can hold, when known before any run starts (None by
        default: unknown until the executor meets its flights, or runs compute on CPUs)."""
        return None

    def close(self) -> None:  # noqa: B027 (a default: an executor holding nothing keeps it)
        """Release what the executor holds (a cluster connection); nothing by default."""


