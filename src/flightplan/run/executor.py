"""Executors: where and how the runs of a campaign are carried out.

:class:`Executor` is the interface the runner codes against (Ray nodes, one per flight:
:mod:`flightplan.run.ray_executor`). :class:`LocalExecutor` runs each run in its own process
(``python -m flightplan.run.worker <run_dir>/trial.json``), with its stdout and stderr
appended to ``runs/<id>/log.txt``, one process per GPU (``CUDA_VISIBLE_DEVICES`` set to
its GPU, one of the runner's own visible GPUs; ``CUBLAS_WORKSPACE_CONFIG`` set for
deterministic cuBLAS) or, on a machine without one, as many at once as the cores allow,
each with ``$FLIGHTPLAN_TORCH_THREADS`` threads (:func:`flightplan.run.device.cpu_slots`).
Each run computes alone in its own process with its recorded thread count, so running side
by side changes no result. A worker dies with the runner (``PR_SET_PDEATHSIG`` on Linux),
so a killed runner never leaves a process writing into a run directory that the next
runner resumes, and ignores SIGINT: a Ctrl-C in the terminal stops the runner, which kills
its workers on the way out.

Progress is read, not reported: :class:`MeasurementTail` follows a run's
``measurements.jsonl`` and gives its latest step, loss and planned steps.

Usage::

    executor = LocalExecutor()
    executor.run([Job(run_id, run_dir)], on_start=..., on_done=..., on_progress=...)
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from flightplan.durable import append_durable, write_json_atomic
from flightplan.rundir import RunDir, list_checkpoints
from flightplan.run.device import (CUBLAS_ENV, CUBLAS_WORKSPACE, OMP_ENV, THREADS_ENV, cpu_slots,
                                   torch_threads)
from flightplan.run.preemption import EXIT_PREEMPTED, LEAVE_SIGNAL, LeaveBy, LeaveWatch

__all__ = ["Job", "JobResult", "Interruption", "RunProgress", "MeasurementTail", "Executor",
           "LocalExecutor", "worker_argv", "gpu_count", "lost_execution", "left_execution",
           "LOCAL_FLIGHT"]

WORKER_MODULE = "flightplan.run.worker"
LOCAL_FLIGHT = "local"
"""The one flight of the local executor: this machine."""
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Job:
    """One run to execute: its id, its directory (which holds ``trial.json``) and the GPUs
    its ``[[run]]`` declares (one flight's GPUs; an executor never shares one)."""

    run_id: str
    run_dir: Path
    gpus: int = 1

    @property
    def trial_json(self) -> Path:
        """``<run_dir>/trial.json``."""
        return RunDir(self.run_dir).trial_json


@dataclass(frozen=True)
class JobResult:
    """How one execution ended: the process's exit code, its unix start/end times and,
    for a remote executor, the node it ran on (None on this machine)."""

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
            when it never saved one); False when it saved some but none came home.
        cause: ``"flight_lost"`` (the machine went away), ``"package_end"`` (the run left
            its flight before the package's end, :mod:`flightplan.run.preemption`) or
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
            if "planned_steps" in row:
                self._set_total(row["planned_steps"])
            if "loss" in row and isinstance(row.get("step"), int):
                self.progress.step = row["step"]
                self.progress.loss = row["loss"]
        return self.progress


def lost_execution(job: Job, *, node: str, reason: str, started_at: float,
                   saved_any: bool, now: float | None = None,
                   cause: str = "flight_lost") -> Interruption:
    """What an execution that ended without its run ending cost, from what is home; sets
    ``resume`` in the job's ``trial.json`` for the next execution and notes it in
    ``log.txt``.

    The work lost is everything after the newest checkpoint home: ``steps_lost`` = steps
    logged home − that checkpoint's steps, ``lost_s`` = now − max(its commit time, the
    execution's start). ``resume`` is set when a checkpoint is home or the execution saved
    one (then the run stops by ``no_usable_resume`` rather than restarting from scratch:
    ``resumes`` is False); a run that never saved starts again from step 0.

    Args:
        job: the run.   node: where it ran.   reason: one line (the error seen, or why it
        left).   started_at: unix start of the execution.   saved_any: a ``checkpoint``
        row came home from it.   now: unix time of the end (default: now).
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
    worker's exit :data:`~flightplan.run.preemption.EXIT_PREEMPTED`): cause
    ``package_end`` with the watch's reason when flightplan asked (``watch``), else
    ``preempted`` (something else sent the signal)."""
    if watch is not None:
        return lost_execution(job, node=node, reason=watch.reason, started_at=started_at,
                              saved_any=True, cause="package_end")
    return lost_execution(job, node=node, started_at=started_at, saved_any=True,
                          cause="preempted",
                          reason=f"the worker was asked to leave ({LEAVE_SIGNAL.name}) by "
                                 f"something other than flightplan")


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without CUDA or without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def worker_argv(trial_json: Path) -> list[str]:
    """The command line of one worker process."""
    return [sys.executable, "-m", WORKER_MODULE, str(trial_json)]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # Ctrl-C reaches the whole foreground process group; the runner alone decides how its
    # workers stop (flightplan.interrupts), so a worker ignores SIGINT (exec keeps that)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return


class Executor(ABC):
    """Carries out runs. ``run`` blocks until every job ended; callbacks run in the
    caller's thread, so they may write the ledger."""

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
            on_interrupted: called when an execution was lost with its machine, before
                the executor starts it again elsewhere (never for local processes).
            admit: asked just before a job would start on a flight (the local executor:
                :data:`LOCAL_FLIGHT`; Ray: the node's name); False leaves it unstarted
                there: another flight is tried, or, when none is left, the job is dropped
                without a result (it stays pending; :mod:`flightplan.run.rental`).
            leave_by: asked when a job starts on a flight: by when its last checkpoint must
                be home (:class:`~flightplan.run.preemption.LeaveBy`, None: no end). Near
                it the executor asks the run to checkpoint and, unless ``stop`` is False,
                to leave; a run that left is reported through ``on_interrupted`` (cause
                ``package_end``), then started again on another flight or, when none has
                time left, left pending without a result.

        Returns:
            One result per job that ended, in the order they ended.
        """


    def close(self) -> None:
        """Release what the executor holds (a cluster connection); nothing by default."""


class LocalExecutor(Executor):
    """Processes on this machine: ``slots`` at once, one per GPU, or on a machine without
    GPUs ``cores // threads`` (each worker gets ``$FLIGHTPLAN_TORCH_THREADS`` = threads).

    Args:
        slots: processes at once; default: the number of GPUs, or without GPUs
            :func:`~flightplan.run.device.cpu_slots` of the thread count.
        argv: the command line of a worker for a ``trial.json`` (default
            :func:`worker_argv`; tests substitute a fake worker).
        poll_s: seconds between checks of the processes and their progress.
        env: extra environment variables for every worker (``FLIGHTPLAN_TORCH_THREADS``
            here, else in this process's environment, sets the threads per run).

    Raises:
        ArgumentError: ``FLIGHTPLAN_TORCH_THREADS`` is not a positive integer.
    """

    def __init__(self, *, slots: int | None = None,
                 argv: Callable[[Path], list[str]] = worker_argv, poll_s: float = 0.2,
                 env: dict[str, str] | None = None) -> None:
        self._gpus = gpu_count()
        self._env = dict(env or {})
        self.threads = torch_threads({**os.environ, **self._env})
        if slots is None:
            slots = self._gpus or cpu_slots(self.threads)
        self.slots = max(1, slots)
        self._argv = argv
        self._poll_s = poll_s

    def _start(self, job: Job, device: int) -> subprocess.Popen:
        env = dict(os.environ, **self._env, FLIGHTPLAN_TRIAL=str(job.trial_json),
                   PYTHONUNBUFFERED="1")
        if self._gpus:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            env["CUDA_VISIBLE_DEVICES"] = (visible[device].strip() if len(visible) > device
                                           and visible[device].strip() else str(device))
            env.setdefault(CUBLAS_ENV, CUBLAS_WORKSPACE)
        else:
            env[THREADS_ENV] = str(self.threads)
            env.setdefault(OMP_ENV, str(self.threads))  # BLAS/OpenMP of any library too
        preexec = _die_with_parent if sys.platform == "linux" else None
        with open(RunDir(job.run_dir).log, "ab") as log:
            where = device if self._gpus else f"cpu, {self.threads} thread(s)"
            log.write(f"--- flightplan worker started {time.strftime('%Y-%m-%dT%H:%M:%S')} "
                      f"(device {where}) ---\n".encode())
            return subprocess.Popen(self._argv(job.trial_json), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=str(job.run_dir),
                                    preexec_fn=preexec)

    def run(self, jobs: Iterable[Job], *, on_start: Callable[[Job], None] | None = None,
            on_done: Callable[[JobResult], None] | None = None,
            on_progress: Callable[[Job, RunProgress], None] | None = None,
            on_interrupted: Callable[[Job, Interruption], None] | None = None,
            admit: Callable[[Job, str], bool] | None = None,
            leave_by: Callable[[Job, str], LeaveBy | None] | None = None) -> list[JobResult]:
        queue = list(jobs)
        free = list(range(self.slots))
        running: dict[int, tuple[Job, subprocess.Popen, float, MeasurementTail]] = {}
        watches: dict[str, LeaveWatch] = {}
        results: list[JobResult] = []
        try:
            while queue or running:
                while queue and free:
                    job = queue.pop(0)
                    if admit and not admit(job, LOCAL_FLIGHT):
                        continue
                    device = free.pop(0)
                    if on_start:
                        on_start(job)
                    started = time.time()
                    running[device] = (job, self._start(job, device), started,
                                       MeasurementTail(job.run_dir))
                    deadline = leave_by(job, LOCAL_FLIGHT) if leave_by else None
                    if deadline is not None:
                        watches[job.run_id] = LeaveWatch(deadline, job.run_dir,
                                                         poll_s=self._poll_s)
                for device, (job, proc, started, tail) in list(running.items()):
                    code = proc.poll()
                    if on_progress:
                        on_progress(job, tail.read())
                    watch = watches.get(job.run_id)
                    if code is None:
                        if watch is not None and watch.due(time.time()):
                            watch.ask(proc.send_signal)
                        continue
                    del running[device]
                    free.append(device)
                    watches.pop(job.run_id, None)
                    if code == EXIT_PREEMPTED:
                        info = left_execution(job, node=LOCAL_FLIGHT, started_at=started,
                                              watch=watch)
                        if on_interrupted:
                            on_interrupted(job, info)
                        continue
                    result = JobResult(job.run_id, job.run_dir, code, started, time.time())
                    results.append(result)
                    if on_done:
                        on_done(result)
                if running:
                    time.sleep(self._poll_s)
        finally:
            for job, proc, _, _ in running.values():
                proc.kill()
                proc.wait()
        return results

