"""The local executor: each run in its own process on this machine.

:class:`LocalExecutor` runs each run in its own process (``python -m flightplan.run.worker
<run_dir>/trial.json``), with its stdout and stderr appended to ``runs/<id>/log.txt``. On a
machine with GPUs each run holds the GPUs its ``[[run]] gpus`` declares, taken from the
runner's own visible GPUs and never shared (``CUDA_VISIBLE_DEVICES`` set to them;
``CUBLAS_WORKSPACE_CONFIG`` set for deterministic cuBLAS); a run waits for its turn in the
given order until enough are free, each worker with ``cores // GPUs`` intra-op threads
(:func:`flightplan.trial.accelerator.flight_threads`); one that asks for more than the
machine has is not started (exit :data:`~flightplan.run.executors.contract.EXIT_NO_FLIGHT`;
``flightplan run`` refuses such a campaign before anything starts, :meth:`LocalExecutor.gpu_limit`). On a
machine without one, runs compute on the CPU whatever ``gpus`` says, as many at once as
the cores allow, each with ``$FLIGHTPLAN_TORCH_THREADS`` threads
(:func:`flightplan.trial.accelerator.cpu_slots`). Each run computes alone in its own process
with its recorded thread count, so running side by side changes no result. A worker dies
with the runner (``PR_SET_PDEATHSIG`` on Linux, set by the worker itself before it starts:
:mod:`flightplan.run.executors.tether`), so a killed runner never leaves a process writing
into a run directory that the next runner resumes, and ignores SIGINT: a Ctrl-C in the
terminal stops the runner, which kills its workers on the way out. A run with
``[[run]] processes = N`` executes as N ranks started and ended together
(:mod:`flightplan.run.executors.ranks`), all appending to its ``log.txt``.

On Linux a run of one process starts warm: its process is forked from a template that
imported torch, the integrations and the campaign's built-in tasks once
(:mod:`flightplan.run.executors.warm`), still its own process, a child of the runner tied to
it like a cold worker; a template that has died starts the run cold, with a line in its
log. Runs of several ranks and ``warm=False`` start cold.

Usage::

    executor = LocalExecutor()
    executor.run([Job(run_id, run_dir, gpus=2)], on_start=..., on_done=..., on_progress=...)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from flightplan.rundir import RunDir
from flightplan.durable import append_durable
from flightplan.run.executors.contract import (EXIT_NO_FLIGHT, Executor, GpuLimit,
                                               Interruption, Job, JobResult, MeasurementTail,
                                               RunProgress, left_execution, worker_argv)
from flightplan.run.executors.leave_watch import LeaveBy, LeaveWatch
from flightplan.run.executors.ranks import RankGroup
from flightplan.run.executors.tether import tethered
from flightplan.run.executors.warm import (TemplateUnavailable, WarmProcess, WarmTemplate,
                                           preload_modules, warm_supported)
from flightplan.trial.accelerator import (CUBLAS_ENV, CUBLAS_WORKSPACE, OMP_ENV, THREADS_ENV,
                                          cpu_slots, flight_threads)
from flightplan.trial.leave import EXIT_PREEMPTED

__all__ = ["LocalExecutor", "LOCAL_FLIGHT", "gpu_count"]

_Handle = subprocess.Popen[bytes] | RankGroup | WarmProcess

LOCAL_FLIGHT = "local"
"""The one flight of the local executor: this machine."""


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without CUDA or without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class LocalExecutor(Executor):
    """Processes on this machine: each run on the GPUs its job holds, or on a machine
    without GPUs ``cores // threads`` worker processes at once; each worker gets
    ``$FLIGHTPLAN_TORCH_THREADS`` = :attr:`threads`, the cores divided by the runs held at
    once (:func:`~flightplan.trial.accelerator.flight_threads`: ``cores // GPUs`` on a
    machine with GPUs, else 1 unless the variable says otherwise). A job with ``processes`` > 1 starts that many
    ranks (:class:`~flightplan.run.executors.ranks.RankGroup`), which count as that many
    of the slots (a job that needs more than all of them runs alone).

    Args:
        slots: processes at once; default: the number of GPUs, or without GPUs
            :func:`~flightplan.trial.accelerator.cpu_slots` of the thread count.
        argv: the command line of a worker for a ``trial.json`` (default
            :func:`worker_argv`; tests substitute a fake worker).
        poll_s: seconds between checks of the processes and their progress.
        env: extra environment variables for every worker (``FLIGHTPLAN_TORCH_THREADS``
            here, else in this process's environment, sets the threads per run).
        gpus: the GPUs this machine offers its runs (default :func:`gpu_count`; tests
            give a count to stand for a machine with that many).
        warm: start each run's process from a template that imported torch and the
            task once (:mod:`flightplan.run.executors.warm`; Linux, a ``python -m``
            worker, one process per run); False: every start is cold.

    Raises:
        ArgumentError: ``FLIGHTPLAN_TORCH_THREADS`` is not a positive integer.
    """

    def __init__(self, *, slots: int | None = None,
                 argv: Callable[[Path], list[str]] = worker_argv, poll_s: float = 0.2,
                 env: dict[str, str] | None = None, gpus: int | None = None,
                 warm: bool = True) -> None:
        self._gpus = gpu_count() if gpus is None else gpus
        self._env = dict(env or {})
        self.threads = flight_threads(self._gpus, environ={**os.environ, **self._env})
        if slots is None:
            slots = self._gpus or cpu_slots(self.threads)
        self.slots = max(1, slots)
        self._argv = argv
        self._poll_s = poll_s
        self._warm = warm
        self._warm_template: WarmTemplate | None = None
        self._closing: weakref.finalize[[], LocalExecutor] | None = None


    def _visible(self) -> list[str]:
        """The names of this machine's GPUs as its workers see them: the runner's own
        ``CUDA_VISIBLE_DEVICES`` entries (device ``i`` is the i-th), else ``0 … n−1``."""
        given = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
        if len(given) >= self._gpus and all(given[:self._gpus]):
            return given[:self._gpus]
        return [str(i) for i in range(self._gpus)]

    def gpu_limit(self) -> GpuLimit | None:
        """The machine's GPUs (None without GPUs: runs compute on the CPU)."""
        if not self._gpus:
            return None
        return GpuLimit(self._gpus, f"this machine (CUDA_VISIBLE_DEVICES="
                                    f"{','.join(self._visible())})")

    def _base_env(self) -> dict[str, str]:
        """The environment every worker of this executor shares (a template's too)."""
        env = dict(os.environ, **self._env, PYTHONUNBUFFERED="1")
        env[THREADS_ENV] = str(self.threads)
        env.setdefault(OMP_ENV, str(self.threads))      # BLAS/OpenMP of any library too
        if self._gpus:
            env.setdefault(CUBLAS_ENV, CUBLAS_WORKSPACE)
        return env

    def _template(self, jobs: list[Job]) -> WarmTemplate | None:
        """The template for ``jobs``, or None where runs start cold: warm starts off, not
        Linux, or a worker that is not ``python -m``. One template serves every
        :meth:`run` of this executor; it is started at the first that needs it, and again
        (with both sets of modules) when a later one names a built-in task it lacks."""
        if not (self._warm and warm_supported() and jobs):
            return None
        argv = self._argv(jobs[0].trial_json)
        if argv[:2] != [sys.executable, "-m"]:
            return None
        modules = preload_modules(_task_refs(jobs))
        if self._warm_template is not None and set(modules) <= set(self._warm_template.modules):
            return self._warm_template
        if self._warm_template is not None:
            modules = list(dict.fromkeys([*self._warm_template.modules, *modules]))
        self.close()
        template = WarmTemplate(self._base_env(), modules)
        self._warm_template = template
        self._closing = weakref.finalize(self, template.close)
        return template

    def close(self) -> None:
        """End this executor's template, if any (also done when the executor is garbage
        collected or the process exits; runs it started go on)."""
        if self._closing is not None:
            self._closing()
        self._warm_template = self._closing = None

    def _start(self, job: Job, devices: list[int],
               template: WarmTemplate | None = None) -> _Handle:
        env = dict(self._base_env(), FLIGHTPLAN_TRIAL=str(job.trial_json))
        if self._gpus:
            visible = self._visible()
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[d] for d in devices)
            where = (f"device{'s' if len(devices) > 1 else ''} {','.join(map(str, devices))}, "
                     f"{self.threads} thread(s)")
        else:
            where = f"device cpu, {self.threads} thread(s)"
        if job.processes > 1:
            where += f", {job.processes} processes"
        log_path = RunDir(job.run_dir).log
        argv = self._argv(job.trial_json)
        if template is not None and job.processes == 1:
            append_durable(log_path, f"--- flightplan worker started "
                                     f"{time.strftime('%Y-%m-%dT%H:%M:%S')} ({where}, "
                                     f"warm) ---\n".encode())
            try:
                return template.start(argv[1:], env, job.run_dir, log_path)
            except TemplateUnavailable as exc:
                append_durable(log_path, f"--- flightplan: warm start failed: {exc}; "
                                         f"starting cold ---\n".encode())
        with open(log_path, "ab") as log:
            log.write(f"--- flightplan worker started {time.strftime('%Y-%m-%dT%H:%M:%S')} "
                      f"({where}) ---\n".encode())

            def launch(extra: dict[str, str]) -> subprocess.Popen[bytes]:
                return subprocess.Popen(tethered(argv), stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env={**env, **extra}, cwd=str(job.run_dir))

            return RankGroup.start(job.processes, launch) if job.processes > 1 else launch({})

    def _needs(self, job: Job) -> int:
        """GPUs ``job`` holds here (0 on a machine without GPUs)."""
        return max(1, job.gpus) if self._gpus else 0

    def _not_placeable(self, job: Job) -> JobResult:
        """A job that asks for more GPUs than this machine has: not started."""
        limit = self.gpu_limit()
        assert limit is not None
        append_durable(RunDir(job.run_dir).log,
                       f"--- flightplan: not started: it needs {job.gpus} GPUs ([[run]] "
                       f"gpus) but {limit.where} has {limit.gpus} ---\n".encode())
        now = time.time()
        return JobResult(job.run_id, job.run_dir, EXIT_NO_FLIGHT, now, now)

    def run(self, jobs: Iterable[Job], *, on_start: Callable[[Job], None] | None = None,
            on_done: Callable[[JobResult], None] | None = None,
            on_progress: Callable[[Job, RunProgress], None] | None = None,
            on_interrupted: Callable[[Job, Interruption], None] | None = None,
            admit: Callable[[Job, str], bool] | None = None,
            leave_by: Callable[[Job, str], LeaveBy | None] | None = None) -> list[JobResult]:
        queue = list(jobs)
        template = self._template(queue)
        free = list(range(self._gpus))          # GPUs no run holds
        running: list[_Process] = []
        results: list[JobResult] = []

        def ended(result: JobResult) -> None:
            results.append(result)
            if on_done:
                on_done(result)

        try:
            while queue or running:
                while queue and (not running or sum(p.job.processes for p in running)
                                 + queue[0].processes <= self.slots):  # what fits, in order
                    job = queue[0]
                    if self._needs(job) > self._gpus:
                        ended(self._not_placeable(queue.pop(0)))
                        continue
                    if self._needs(job) > len(free):
                        break                   # it waits its turn until enough are free
                    queue.pop(0)
                    if admit and not admit(job, LOCAL_FLIGHT):
                        continue
                    devices = sorted(free)[:self._needs(job)]
                    free = [d for d in free if d not in devices]
                    if on_start:
                        on_start(job)
                    deadline = leave_by(job, LOCAL_FLIGHT) if leave_by else None
                    started = time.time()       # before the process exists (goodput: waiting)
                    running.append(_Process(
                        job, self._start(job, devices, template), started,
                        MeasurementTail(job.run_dir), devices,
                        None if deadline is None else LeaveWatch(deadline, job.run_dir,
                                                                 poll_s=self._poll_s)))
                for process in list(running):
                    code = process.check(on_progress)
                    if code is None:
                        continue
                    running.remove(process)
                    free += process.devices
                    if code == EXIT_PREEMPTED:
                        info = left_execution(process.job, node=LOCAL_FLIGHT,
                                              started_at=process.started_at,
                                              watch=process.watch)
                        if on_interrupted:
                            on_interrupted(process.job, info)
                        continue
                    ended(JobResult(process.job.run_id, process.job.run_dir, code,
                                    process.started_at, time.time()))
                if running:
                    time.sleep(self._poll_s)
        finally:
            for process in running:
                process.proc.kill()
                process.proc.wait()
        return results


def _task_refs(jobs: list[Job]) -> list[str]:
    """The ``task`` of each job's ``trial.json`` (those that cannot be read are left out:
    their workers say why)."""
    refs = []
    for job in jobs:
        try:
            task = json.loads(job.trial_json.read_text(encoding="utf-8")).get("task")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(task, str):
            refs.append(task)
    return refs


@dataclass
class _Process:
    """One execution of :meth:`LocalExecutor.run`: its job, the worker process (or the
    :class:`RankGroup` of a run with ``processes`` > 1), its unix start, its measurement
    tail, the GPUs it holds and its leave watch (or None)."""

    job: Job
    proc: _Handle
    started_at: float
    tail: MeasurementTail
    devices: list[int]
    watch: LeaveWatch | None

    def check(self, on_progress: Callable[[Job, RunProgress], None] | None) -> int | None:
        """Report progress, ask the worker to leave when its watch says so; the exit code
        once it ended (read before the rows, so its last rows are read too), else None."""
        code = self.proc.poll()
        if on_progress:
            on_progress(self.job, self.tail.read())
        if code is None and self.watch is not None and self.watch.due(time.time()):
            self.watch.ask(self.proc.send_signal)
        return code
