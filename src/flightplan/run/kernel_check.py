"""The kernel check: one step of every run on the flight's device before the pilot, so an
op without a deterministic kernel stops the campaign in seconds, not inside a paid run.

On CUDA a run computes under ``torch.use_deterministic_algorithms(True)``
(:func:`flightplan.trial.accelerator.set_deterministic`), and an op that has no
deterministic kernel (adaptive pooling or interpolation backward, ``scatter_add_``, …)
raises ``RuntimeError: <op> does not have a deterministic implementation, but you set
'torch.use_deterministic_algorithms(True)'`` when it first runs: in the forward or the
backward pass of some run, possibly hours in. The kernel check runs every run whose
``[[run]] deterministic`` is true (the default) through its own task's ``train(trial)``,
capped at :data:`KERNEL_STEPS` optimizer step on the first examples (those
:func:`~flightplan.run.pilot.pilot_limits` gives for one step), through the campaign's
executor: the same device, environment, thread count and settings the run will have. Each
check runs in ``.flightplan/kernel_check/<run_id>/`` (never under ``runs/``, so nothing
of it reaches results/).

A check whose process failed with torch's error is a :class:`KernelFinding` naming the op
(read from its log); the campaign stops there (exit 1) with the choice: set
``deterministic = false`` in that ``[[run]]`` (the op then runs and torch warns; the run
no longer resumes bit for bit, and when it is the control the pilot compares its resumed
losses within :data:`~flightplan.spec.RESUME_TOLERANCE`) or change the op. A check that
failed otherwise is reported (``failed``) but stops nothing: the pilot and the run meet
the same fault with their full inputs and say why.

Runs on the CPU need no check (their kernels are deterministic at a fixed thread count and
:func:`~flightplan.trial.accelerator.set_deterministic` leaves them alone), so the runner
calls it when the executor knows its GPUs before the runs start (:func:`kernel_check_due`:
the local executor on a GPU machine; a Ray executor, which meets its flights' GPUs only
when runs start, is not checked yet).

Usage::

    result = run_kernel_check(checks, campaign_dir, data_check, executor=executor)
    result.ok, result.findings[0].op, result.message()
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from flightplan.durable import write_json_atomic
from flightplan.run.data_check import DataCheckReport
from flightplan.run.executors.contract import Executor, Job
from flightplan.run.pilot import pilot_limits
from flightplan.rundir import RunDir
from flightplan.tasks.loader import LoadedTask

__all__ = ["KERNEL_STEPS", "KERNEL_DIR", "NOT_DETERMINISTIC", "KernelCheck", "KernelFinding",
           "KernelCheckResult", "kernel_check_due", "nondeterministic_op", "run_kernel_check"]

KERNEL_STEPS = 1
"""Optimizer steps each check runs: one forward and one backward pass."""
KERNEL_DIR = Path(".flightplan") / "kernel_check"
"""Where the checks run, relative to the campaign folder (one folder per run id)."""
NOT_DETERMINISTIC = "does not have a deterministic implementation"
"""The words of torch's error for an op without a deterministic kernel
(``at::globalContext().alertNotDeterministic``, also raised by
``torch._C._alert_not_deterministic``)."""

_OP = re.compile(r"RuntimeError: (.+?) " + re.escape(NOT_DETERMINISTIC))


@dataclass(frozen=True)
class KernelCheck:
    """One run to check: its ``name``, its ``trial.json`` document, its loaded task and
    the GPUs and processes one execution of it holds (``[[run]] gpus``, ``processes``)."""

    name: str
    trial: dict[str, Any]
    task: LoadedTask
    gpus: int = 1
    processes: int = 1


@dataclass(frozen=True)
class KernelFinding:
    """A run whose step used an op without a deterministic kernel: ``op`` as torch names
    it (e.g. ``adaptive_avg_pool2d_backward_cuda``), ``log`` the check's log file."""

    name: str
    run_id: str
    op: str
    log: str


@dataclass(frozen=True)
class KernelCheckResult:
    """The kernel check's outcome: ``checked`` (run names, in order), ``skipped`` (runs
    with ``deterministic = false``), ``findings``, ``failed`` (``{name: exit code}`` of
    checks that failed for another reason), ``wall_s``."""

    checked: list[str]
    skipped: list[str]
    findings: list[KernelFinding] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No op without a deterministic kernel was met."""
        return not self.findings

    def message(self) -> str:
        """One line: what was checked, or the first op found and the choice."""
        if self.ok:
            skipped = (f"; {', '.join(self.skipped)} not checked (deterministic = false: "
                       f"resume not bitwise)" if self.skipped else "")
            return (f"kernel check ok: one step of {len(self.checked)} run(s) with "
                    f"deterministic kernels only{skipped}")
        first = self.findings[0]
        more = f" (and {len(self.findings) - 1} more run(s))" if len(self.findings) > 1 else ""
        return (f"run {first.name!r}: op {first.op} has no deterministic implementation on "
                f"this device{more}; set `deterministic = false` in its [[run]] (the op runs "
                f"and its resume is no longer bit for bit: the pilot compares a control's "
                f"resumed losses within a relative 1e-3) or change the op (its traceback: "
                f"{first.log})")

    def to_json(self) -> dict[str, Any]:
        """``{ok, checked, skipped, findings [{name, run_id, op, log}], failed, wall_s}``."""
        return {"ok": self.ok, "checked": self.checked, "skipped": self.skipped,
                "findings": [asdict(f) for f in self.findings], "failed": self.failed,
                "wall_s": self.wall_s}


def kernel_check_due(executor: Executor) -> bool:
    """Whether the runs compute on GPUs (the executor names a GPU limit), where an op can
    lack a deterministic kernel; on CPUs the check would find nothing."""
    return executor.gpu_limit() is not None


def nondeterministic_op(log_text: str) -> str | None:
    """The op torch named in its last "does not have a deterministic implementation" error
    in ``log_text`` (None when there is none)."""
    found = _OP.findall(log_text)
    return found[-1].strip() if found else None


def run_kernel_check(checks: Sequence[KernelCheck], campaign_dir: Path,
                     data_check: DataCheckReport, *, executor: Executor) -> KernelCheckResult:
    """Run one step of each check's run (module docstring) and read what failed.

    Args:
        checks: the runs, each with its trial.json document and task; a document whose
            ``deterministic`` is false is skipped.
        campaign_dir: the campaign folder (the checks run under :data:`KERNEL_DIR`).
        data_check: the data check's report (rows per split, for the examples read).
        executor: the campaign's executor (the runs' device and settings).

    Returns:
        the result; ``ok`` false when some run met an op without a deterministic kernel.

    Raises:
        TaskHookFailed: a task's ``pilot_examples`` hook raised.
    """
    started = time.perf_counter()
    jobs: dict[str, tuple[KernelCheck, Job]] = {}
    skipped: list[str] = []
    for check in checks:
        if not check.trial.get("deterministic", True):
            skipped.append(check.name)
            continue
        n_train, n_test = pilot_limits(check.task, check.trial.get("params") or {}, data_check,
                                       steps=KERNEL_STEPS)
        run_id = check.trial["run_id"]
        folder = Path(campaign_dir) / KERNEL_DIR / run_id
        shutil.rmtree(folder, ignore_errors=True)        # a scratch folder: no resume
        folder.mkdir(parents=True)
        corpus = dict(check.trial.get("corpus") or {}, train_limit=n_train, test_limit=n_test)
        write_json_atomic(RunDir(folder).trial_json,
                          dict(check.trial, run_id=f"kernels-{run_id}", resume=False,
                               max_steps=KERNEL_STEPS, corpus=corpus))
        job = Job(f"kernels-{run_id}", folder, gpus=check.gpus, processes=check.processes)
        jobs[job.run_id] = (check, job)
    findings: list[KernelFinding] = []
    failed: dict[str, int] = {}
    for result in executor.run([job for _, job in jobs.values()]):
        check, job = jobs[result.run_id]
        if result.exit_code == 0:
            continue
        log = RunDir(job.run_dir).log
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        op = nondeterministic_op(text)
        if op is None:
            failed[check.name] = result.exit_code
        else:
            findings.append(KernelFinding(check.name, check.trial["run_id"], op,
                                          str(log.relative_to(campaign_dir))))
    order = [c.name for c in checks]
    findings.sort(key=lambda f: order.index(f.name))
    return KernelCheckResult([c.name for c, _ in jobs.values()], skipped, findings, failed,
                             time.perf_counter() - started)
