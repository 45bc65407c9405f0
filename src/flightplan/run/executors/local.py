"""The local executor: each run in its own process on this machine.

:class:`LocalExecutor` runs each run in its own process (``python -m flightplan.run.worker
<run_dir>/trial.json``), with its stdout and stderr appended to ``runs/<id>/log.txt``, one
process per GPU (``CUDA_VISIBLE_DEVICES`` set to its GPU, one of the runner's own visible
GPUs; ``CUBLAS_WORKSPACE_CONFIG`` set for deterministic cuBLAS) or, on a machine without
one, as many at once as the cores allow, each with ``$FLIGHTPLAN_TORCH_THREADS`` threads
(:func:`flightplan.trial.accelerator.cpu_slots`). Each run computes alone in its own process
with its recorded thread count, so running side by side changes no result. A worker dies
with the runner (``PR_SET_PDEATHSIG`` on Linux), so a killed runner never leaves a process
writing into a run directory that the next runner resumes, and ignores SIGINT: a Ctrl-C in
the terminal stops the runner, which kills its workers on the way out.

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
from pathlib import Path
from typing import Callable, Iterable

from flightplan.rundir import RunDir
from flightplan.run.executors.contract import (Executor, Interruption, Job, JobResult,
                                               MeasurementTail, RunProgress, left_execution,
                                               worker_argv)
from flightplan.run.executors.leave_watch import LeaveBy, LeaveWatch
from flightplan.trial.accelerator import (CUBLAS_ENV, CUBLAS_WORKSPACE, OMP_ENV, THREADS_ENV,
                                     cpu_slots, torch_threads)
from flightplan.trial.leave import EXIT_PREEMPTED

__all__ = ["LocalExecutor", "LOCAL_FLIGHT", "gpu_count", "die_with_parent"]

LOCAL_FLIGHT = "local"
"""The one flight of the local executor: this machine."""
_PR_SET_PDEATHSIG = 1


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without CUDA or without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def die_with_parent() -> None:
    """In a worker, between fork and exec: ignore SIGINT and die with the parent (Linux)."""
    # Ctrl-C reaches the whole foreground process group; the runner alone decides how its
    # workers stop (flightplan.interrupts), so a worker ignores SIGINT (exec keeps that)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return




class LocalExecutor(Executor):
    """Processes on this machine: ``slots`` at once, one per GPU, or on a machine without
    GPUs ``cores // threads`` (each worker gets ``$FLIGHTPLAN_TORCH_THREADS`` = threads).

    Args:
        slots: processes at once; default: the number of GPUs, or without GPUs
            :func:`~flightplan.trial.accelerator.cpu_slots` of the thread count.
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
        preexec = die_with_parent if sys.platform == "linux" else None
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
            for _, proc, _, _ in running.values():
                proc.kill()
                proc.wait()
        return results

