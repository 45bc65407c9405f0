"""The process that runs one trial: ``python -m flightplan.run.worker <run_dir>/trial.json``.

It builds the :class:`~flightplan.trial.trial.Trial` from the file, sets ``FLIGHTPLAN_TRIAL``
for code that calls ``Trial.from_env()``, loads the task only then
(:func:`flightplan.tasks.loader.load_task`: a built-in name, a file or a module, resolved
against the campaign directory), checks that its code is the code the run id was made
from (``task_source.code_version`` in trial.json), and calls its ``train(trial)``. If
``train`` returns without calling ``trial.finish()``, the worker calls it. When the task's
module imports torch, its intra-op threads are set to ``$FLIGHTPLAN_TORCH_THREADS``
before ``train`` (the executor sets it to the flight's cores divided by the runs it holds
at once, :func:`flightplan.trial.accelerator.flight_threads`; 1 when unset), so every task
computes with the count its run records. A run whose trial.json says ``deterministic:
false`` gets ``$FLIGHTPLAN_DETERMINISTIC=0`` (:func:`flightplan.trial.accelerator.set_deterministic`
then warns where an op has no deterministic kernel instead of raising).
Before it loads anything it writes a ``process_start`` row (:class:`flightplan.rows.ProcessStart`)
stamped with the time the kernel created the process, which :mod:`flightplan.goodput` reads
to tell the executor's start of the execution from the process's own start and load. Of
the ranks of a run with several processes (``WORLD_SIZE`` > 1) rank 0 alone writes it, and
every line each rank prints is prefixed ``[rank R] ``
(:func:`flightplan.trial.distributed.label_output`). A process killed by a fatal signal
(SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL: a crash below Python) first writes the Python
stack of each of its threads to stderr, so to ``log.txt`` (:mod:`faulthandler`).

Exit codes:

====  ==================================================================
0     finished (``done.json`` written)
1     stopped by a rule (``stop.json`` written)
2     bad trial.json, no such task, a task that breaks the protocol, or a task whose
      code changed since the run id was made
3     crashed (traceback on stderr, which the executor keeps in log.txt)
75    left its flight before the package's end with a durable checkpoint
      (SIGUSR1: :mod:`flightplan.run.executors.leave_watch`); it resumes from it
====  ==================================================================
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from flightplan.errors import InputError, TrialPreempted, TrialStopped
from flightplan.rows import ProcessStart, encode_row
from flightplan.rundir import RunDir
from flightplan.trial.accelerator import DETERMINISTIC_ENV, torch_threads
from flightplan.trial.leave import EXIT_PREEMPTED, install_leave_handlers

__all__ = ["main", "run_main", "EXIT_FINISHED", "EXIT_STOPPED", "EXIT_BAD_INPUT", "EXIT_CRASHED",
           "EXIT_PREEMPTED"]

EXIT_FINISHED, EXIT_STOPPED, EXIT_BAD_INPUT, EXIT_CRASHED = 0, 1, 2, 3


def process_started_at() -> float | None:
    """Unix seconds at which the kernel created this process (``/proc/self/stat``'s
    ``starttime``, clock ticks since boot, against ``CLOCK_BOOTTIME`` now: within a tick,
    10 ms); None where there is no ``/proc`` (not Linux)."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        ticks = int(stat.rpartition(")")[2].split()[19])     # field 22, after "(comm)"
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        now = time.time()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return now - (boot_now - ticks / os.sysconf("SC_CLK_TCK"))


def _log_process_start(run_dir: Path) -> None:
    """Append the ``process_start`` row (one ``write(2)``, like the trial's rows)."""
    started = process_started_at()
    if started is None:
        return
    fd = os.open(run_dir / RunDir.MEASUREMENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, encode_row(ProcessStart(0, started)))
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Run the trial named by ``argv[0]`` (a trial.json path); the exit code (see above)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flightplan.run.worker RUN_DIR/trial.json", file=sys.stderr)
        return EXIT_BAD_INPUT
    from flightplan.trial.distributed import label_output
    from flightplan.trial.trial import Trial
    from flightplan.trial.trial_file import TRIAL_ENV

    try:
        trial = Trial.from_file(args[0])
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if trial.world_size > 1:  # the ranks of one run share its log.txt
        label_output(trial.rank)
    if trial.rank == 0:  # one execution, one start (its other ranks start with it)
        _log_process_start(trial.run_dir)
    install_leave_handlers(trial)  # before the task loads: a request may come at any time
    os.environ[TRIAL_ENV] = os.path.abspath(args[0])
    if not trial.config.deterministic:  # [[run]] deterministic = false: set_deterministic warns
        os.environ[DETERMINISTIC_ENV] = "0"
    from flightplan.tasks.loader import load_task

    try:
        task = load_task(trial.task, trial.config.campaign_dir or ".", field="task",
                         source=args[0])
        expected = trial.config.code_version
        if expected is not None and task.source.code_version != expected:
            raise InputError(f"{args[0]}: task {trial.task!r} changed since its run id was "
                             f"made ({task.source.code_version} is not {expected}); run "
                             f"flightplan run again, which gives the new code a new run id")
        if "torch" in sys.modules:  # the task's import loaded it: every task gets the count
            sys.modules["torch"].set_num_threads(torch_threads())
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        task.train(trial)
        if not trial.finished:
            trial.finish()
    except TrialStopped as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except TrialPreempted as exc:
        print(f"left the flight: {exc}", file=sys.stderr)
        return EXIT_PREEMPTED
    except Exception:  # noqa: BLE001 - any crash of the task is exit 3, with its traceback
        traceback.print_exc()
        return EXIT_CRASHED
    return EXIT_FINISHED


def _launched_ranks() -> int:
    """The number of ranks this process was started as one of (``WORLD_SIZE``; 1 when
    unset or unreadable, which :func:`main` reports), read before the task runs: a library
    may delete the variable on its way out (Lightning's ``LightningEnvironment.teardown``
    does)."""
    from flightplan.trial.distributed import Ranks   # with torch: not at this module's import

    try:
        return Ranks.from_env().world_size
    except InputError:
        return 1


def _end_process(code: int, ranks: int) -> NoReturn:
    """End this process with exit code ``code``. A rank of a run of several processes
    (``ranks`` > 1) ends at once (``os._exit`` after flushing its output): every file of
    the run it writes is durable before its trial returns, and the interpreter's
    finalization would destroy the task's process group objects (gloo's worker threads, a
    DDP model's reducer) after Python is gone: a gloo thread that drops the last reference
    to a tensor then needs the GIL of an interpreter that is finalizing, which aborts a
    rank that finished (SIGABRT, "terminate called without an active exception") and turns
    the run's exit code from 0, 1 or 75 into −6."""
    if ranks > 1:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or broken: nothing left to save
                pass
        os._exit(code)
    sys.exit(code)


def run_main(argv: list[str]) -> NoReturn:
    """What ``python -m flightplan.run.worker ARG ...`` does, as a function: :func:`main`
    with ``argv``, then the process ends with its exit code. A warm start calls it in the
    execution forked from its template, which imported this module already
    (:mod:`flightplan.run.executors.warm`), rather than having ``runpy`` execute the module
    a second time as ``__main__``."""
    ranks = _launched_ranks()
    try:  # a fatal signal (a library's abort, a segfault) leaves each thread's stack
        faulthandler.enable(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError, RuntimeError):  # no stderr file to write to
        pass
    _end_process(main(argv), ranks)
    raise AssertionError("unreachable: _end_process ends the process")


if __name__ == "__main__":
    run_main(sys.argv[1:])
