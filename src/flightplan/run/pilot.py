"""The pilot: a short run of the control that measures the campaign and proves resume.

Two processes in ``runs/pilot-<control_id>/``, on the first examples of the corpus (the
training examples of :data:`PILOT_STEPS` batches, :data:`PILOT_TEST` test examples: the
pilot measures rates, and the decision point scales them to the whole corpus):

1. the uninterrupted pilot: the control's ``trial.json`` with ``max_steps`` capped at
   :data:`PILOT_STEPS`; the trial runtime saves its first checkpoint right after step 0
   (the early checkpoint: its first save measures C and D). From its rows and the process
   times come the generic figures (:class:`~flightplan.tasks.estimate.PilotFigures`): load,
   step and evaluation times, C and D, output writing; a task's ``estimate_run`` hook
   reads the same rows for its own model.
2. the resumed pilot, in ``resume/``: a new process that starts from a copy of the
   earliest checkpoint of (1) (``resume = true``) and runs to the same cap. It measures
   the restore time R, and every loss it logs must equal, bit for bit (within
   :data:`~flightplan.spec.RESUME_TOLERANCE` for a control marked
   ``deterministic = false``), the loss (1) logged at the same step. If not — or if
   nothing could be compared — the campaign stops with the rule ``no_usable_resume``.
   Where runs save at home (the local executor) it starts beside (1) as soon as a slot is
   free, its imports, data and model made while (1) trains, and waits in ``restore()``
   for the copy, placed as soon as (1) committed the checkpoint (``await_checkpoint`` in
   its trial.json); on a flight it starts once (1) ended and its checkpoint came home.

A failure names its real cause (:attr:`PilotResult.cause`): ``crashed`` or ``stopped`` (a
pilot process exited 3 or was stopped by a rule; its log and stop.json say why),
``no_checkpoint``, ``losses_differ`` and ``nothing_compared`` (no usable resume), or
``missing_figure``.

A control with ``[[run]] processes = N`` runs both pilot executions as N ranks each
(:mod:`flightplan.run.executors.ranks`): the resume check restores every rank's state at
the run's own world size, and the step time measured is that of N processes.

Usage::

    result = run_pilot(control_trial, campaign_dir, data_check, task=loaded_task,
                       executor=LocalExecutor())
    result.ok, result.figures.to_json(), result.mismatches
"""

from __future__ import annotations

import math
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from flightplan.durable import write_json_atomic
from flightplan.ids import pilot_id
from flightplan.tasks.estimate import PilotFigures, figures_from_rows
from flightplan.run.data_check import DataCheckReport
from flightplan.run.executors.contract import Executor, Job, JobResult, RunProgress
from flightplan.rows import Measurement, Row
from flightplan.rundir import RunDir
from flightplan.spec import RESUME_TOLERANCE
from flightplan.tasks.loader import LoadedTask

__all__ = ["PILOT_STEPS", "PILOT_TEST", "RESUME_CAUSES", "METRIC_UNAVAILABLE", "PilotResult",
           "pilot_limits", "compare_losses", "run_pilot"]

PILOT_STEPS = 12
"""Optimizer steps of the pilot (the control's planned steps when fewer)."""

PILOT_TEST = 32
"""Test examples the pilot embeds and evaluates (the whole test set when smaller)."""

RESUME_CAUSES = ("no_checkpoint", "losses_differ", "nothing_compared")
"""Failure causes that mean the control has no usable resume."""

METRIC_UNAVAILABLE = "metric_unavailable"
"""The cause the runner records when the pilot passed but its predictions cannot give the
campaign's decision metric (the pilot itself is then whole and kept)."""


@dataclass
class PilotResult:
    """What the pilot found.

    Attributes:
        ok: the resumed losses matched and the figures are complete.
        message: one line: what was compared, or what went wrong.
        cause: None when ok, else why (module docstring).
        figures: the measured figures (None when the pilot failed before measuring).
        compared_steps: steps whose losses were compared.
        mismatches: ``{step, uninterrupted, resumed}`` for each differing loss.
        resumed_from: the checkpoint directory the second process started from.
        started_at, ended_at: unix seconds.
        control_id: the run id of the control it piloted (None until the runner sets it).
    """

    ok: bool
    message: str
    cause: str | None = None
    figures: PilotFigures | None = None
    compared_steps: list[int] = field(default_factory=list)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    control_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (figures as their own object): the ledger's
        ``pilot`` event data and ``flightplan run --json``'s ``pilot``."""
        return {"ok": self.ok, "message": self.message, "cause": self.cause,
                "figures": None if self.figures is None else self.figures.to_json(),
                "compared_steps": self.compared_steps, "mismatches": self.mismatches,
                "resumed_from": self.resumed_from, "started_at": self.started_at,
                "ended_at": self.ended_at, "wall_s": self.ended_at - self.started_at,
                "control_id": self.control_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PilotResult":
        """The result :meth:`to_json` wrote (a ``pilot`` event's data)."""
        figures = data.get("figures")
        return cls(ok=bool(data.get("ok")), message=str(data.get("message") or ""),
                   cause=data.get("cause"),
                   figures=None if figures is None else PilotFigures(**figures),
                   compared_steps=list(data.get("compared_steps") or []),
                   mismatches=list(data.get("mismatches") or []),
                   resumed_from=data.get("resumed_from"),
                   started_at=float(data.get("started_at") or 0.0),
                   ended_at=float(data.get("ended_at") or 0.0),
                   control_id=data.get("control_id"))


def _losses(rows: Sequence[Row]) -> dict[int, Any]:
    return {row.step: row.values["loss"] for row in rows
            if isinstance(row, Measurement) and row.is_step}


def compare_losses(uninterrupted: Sequence[Row], resumed: Sequence[Row], *,
                   tolerance: float = 0.0) -> tuple[list[int], list[dict[str, Any]]]:
    """Compare the losses the resumed process logged with the uninterrupted ones.

    JSON keeps a float's exact value (``repr`` round-trips), so ``==`` on the parsed
    numbers is a bitwise comparison; ``"nan"`` strings compare as equal strings.

    Args:
        tolerance: 0 (the default): bit for bit. Above 0: two finite losses agree when
            they differ by at most ``tolerance`` relative to the larger
            (:func:`math.isclose` with ``rel_tol``), for a control marked
            ``[[run]] deterministic = false`` (:data:`~flightplan.spec.RESUME_TOLERANCE`).

    Returns:
        (steps compared, ``{step, uninterrupted, resumed}`` for each difference); a step
        the resumed process logged that the uninterrupted one did not is a difference.
    """
    first, second = _losses(uninterrupted), _losses(resumed)
    steps = sorted(second)

    def same(a: Any, b: Any) -> bool:
        if a == b:
            return True
        return (tolerance > 0 and isinstance(a, float) and isinstance(b, float)
                and math.isclose(a, b, rel_tol=tolerance))
    mismatches = [{"step": s, "uninterrupted": first.get(s), "resumed": second[s]}
                  for s in steps if s not in first or not same(first[s], second[s])]
    return steps, mismatches


def _nothing_compared(checkpoint: str, resumed: Sequence[Row]) -> str:
    """Why no loss compared: the resumed process logged no step at all, or its rows carry no
    ``loss`` (named: the numbers they carry instead)."""
    names = sorted({name for row in resumed if isinstance(row, Measurement)
                    for name in row.values})
    if not names:
        return (f"the process resumed from {checkpoint} logged no step to compare; "
                f"no usable resume")
    return (f"the process resumed from {checkpoint} logged no loss to compare (its rows hold "
            f"{', '.join(names)}): the resume check compares the loss logged as "
            f"trial.log(step, loss=...) bit for bit; log the training loss under that name; "
            f"no usable resume")


def pilot_limits(task: LoadedTask, params: dict[str, Any], data_check: DataCheckReport, *,
                 steps: int = PILOT_STEPS) -> tuple[int | None, int | None]:
    """``(train, test)`` examples of the pilot: what the task's ``pilot_examples`` hook
    says ``steps`` steps read (None without it: the whole split) and :data:`PILOT_TEST`,
    each at most what the campaign has (data check rows; None when it has no rows).

    Raises:
        TaskHookFailed: the task's ``pilot_examples`` hook raised.
    """
    n_train, n_test = data_check.rows("train"), data_check.rows("test")
    wanted = task.pilot_examples(params, steps)
    train = min(n_train, wanted) if wanted is not None and n_train else None
    return train, (min(n_test, PILOT_TEST) if n_test else None)


def _earliest_checkpoint(run_dir: Path) -> Path | None:
    """The lowest ``step-NNNNNN`` directory that holds its manifest (a finished save)."""
    found = sorted(p for p in (run_dir / "checkpoints").glob("step-*")
                   if p.is_dir() and p.name[5:].isdigit() and (p / "manifest.json").is_file())
    return found[0] if found else None


def run_pilot(control_trial: dict[str, Any], campaign_dir: Path, data_check: DataCheckReport, *,
              task: LoadedTask, executor: Executor,
              on_progress: Callable[[Job, RunProgress], None] | None = None,
              on_start: Callable[[Job], None] | None = None,
              steps: int = PILOT_STEPS, processes: int = 1) -> PilotResult:
    """Run the pilot of the control (see the module docstring); starts from a clean folder
    (an earlier pilot's is moved aside to ``runs/pilot-<id>.restarted-<n>``).

    Args:
        control_trial: the control's ``trial.json`` document.
        campaign_dir: the campaign directory (``runs/`` lives there).
        data_check: the data check's report (rows per split, wall time).
        task: the control's loaded task (its ``pilot_examples`` hook).
        executor: runs the two processes.
        on_progress, on_start: passed to the executor (progress bars).
        steps: the pilot's step cap.
        processes: the control's ``[[run]] processes``: each pilot execution runs as that
            many ranks (one GPU each where there are GPUs), so the resume check and the
            measured step time are those of the run's own world size.

    Returns:
        The result; ``ok`` false names what failed (a crashed or stopped pilot process,
        no early checkpoint, differing losses, a missing figure).
    """
    started = time.time()
    run_id = pilot_id(control_trial["run_id"])
    pilot_dir = Path(campaign_dir) / "runs" / run_id
    # the task's hook first: if it raises, an earlier pilot's folder is left as it was
    n_train, n_test = pilot_limits(task, control_trial.get("params") or {}, data_check,
                                   steps=steps)
    RunDir(pilot_dir).set_aside()           # an earlier pilot's folder is kept, not deleted
    resume_dir = pilot_dir / "resume"
    resume_dir.mkdir(parents=True)
    corpus = dict(control_trial.get("corpus") or {}, train_limit=n_train, test_limit=n_test)
    trial = dict(control_trial, run_id=run_id, name="pilot", resume=False, max_steps=steps,
                 corpus=corpus)
    write_json_atomic(RunDir(pilot_dir).trial_json, trial)

    def fail(cause: str, message: str, **extra: Any) -> PilotResult:
        return PilotResult(False, message, cause, started_at=started, ended_at=time.time(),
                           **extra)

    held = {"gpus": processes, "processes": processes} if processes > 1 else {}
    first_job, resume_job = Job(run_id, pilot_dir, **held), Job(run_id, resume_dir, **held)
    second: JobResult | None = None
    if executor.saves_on_flight:  # a flight's checkpoint is at home only once it came home
        first = _one(executor, first_job, on_start, on_progress)
        early = _earliest_checkpoint(pilot_dir) if first.exit_code == 0 else None
    else:
        write_json_atomic(RunDir(resume_dir).trial_json,
                          dict(trial, resume=True, await_checkpoint=True))
        first, second, early = _side_by_side(executor, first_job, resume_job, on_start,
                                             on_progress)
    if first.exit_code != 0:
        return _process_failed(fail, first, pilot_dir, "pilot")
    if early is None:
        return fail("no_checkpoint", f"the pilot saved no checkpoint in "
                                     f"{pilot_dir / 'checkpoints'}; no usable resume")
    if second is None:
        _place(early, resume_dir)
        write_json_atomic(RunDir(resume_dir).trial_json, dict(trial, resume=True))
        second = _one(executor, resume_job, on_start, on_progress)
    resumed_from = str(early.relative_to(campaign_dir))
    if second.exit_code != 0:
        return _process_failed(fail, second, resume_dir, "resumed pilot",
                               resumed_from=resumed_from)
    rows, resumed_rows = RunDir(pilot_dir).rows(), RunDir(resume_dir).rows()
    tolerance = 0.0 if trial.get("deterministic", True) else RESUME_TOLERANCE
    compared, mismatches = compare_losses(rows, resumed_rows, tolerance=tolerance)
    if not compared:
        return fail("nothing_compared", _nothing_compared(early.name, resumed_rows),
                    resumed_from=resumed_from)
    if mismatches:
        worst = mismatches[0]
        return fail("losses_differ",
                    f"resumed from {early.name}, {len(mismatches)} of {len(compared)} losses "
                    f"differ (first at step {worst['step']}: {worst['uninterrupted']!r} "
                    f"uninterrupted vs {worst['resumed']!r} resumed); no usable resume",
                    compared_steps=compared, mismatches=mismatches, resumed_from=resumed_from)
    try:
        figures = figures_from_rows(rows, resumed_rows, n_train=data_check.rows("train"),
                                    n_test=data_check.rows("test"), setup_s=data_check.wall_s,
                                    pilot_n_train=n_train, pilot_n_test=n_test,
                                    started_at=first.started_at, ended_at=first.ended_at)
    except ValueError as exc:
        return fail("missing_figure", str(exc), compared_steps=compared,
                    resumed_from=resumed_from)
    return PilotResult(True, f"resumed from {early.name} in a new process: {len(compared)} "
                             f"losses (steps {compared[0]}–{compared[-1]}) "
                             + ("identical bit for bit" if tolerance == 0 else
                                f"within a relative {tolerance:g} (deterministic = false)"),
                       None, figures, compared, [], resumed_from, started, time.time())


_TAIL_LINES = 20
"""Lines of a crashed pilot's log searched, from the end, for its last non-blank line."""


def _process_failed(fail: Callable[..., PilotResult], result: JobResult, run_dir: Path,
                    what: str, **extra: Any) -> PilotResult:
    """The failure of a pilot process: ``stopped`` with its stop.json's rule and message,
    else ``crashed`` with its exit code and the whole last line of its log (the error and,
    as Python writes it, the fix the exception names); a process killed by a signal
    (negative exit code) names the signal instead, since its log ends wherever it was cut
    (a warning that names files of this machine, which results/ must not carry)."""
    if RunDir(run_dir).stop_json.is_file():
        stop = RunDir(run_dir).read_json(RunDir.STOP) or {}
        return fail("stopped", f"the {what} was stopped by rule {stop.get('rule')!r}: "
                               f"{stop.get('message')}", **extra)
    if result.exit_code < 0:
        try:
            name = signal.Signals(-result.exit_code).name
        except ValueError:
            name = f"signal {-result.exit_code}"
        return fail("crashed", f"the {what} process was killed by {name} (exit code "
                               f"{result.exit_code}); see {RunDir(run_dir).log}", **extra)
    # flightplan's own errors read by their class name alone (TaskError: …)
    lines = [line.strip().removeprefix("flightplan.errors.")
             for line in RunDir(run_dir).log_tail(_TAIL_LINES).splitlines() if line.strip()]
    return fail("crashed", f"the {what} process crashed (exit code {result.exit_code}"
                           + (f": {lines[-1]}" if lines else "")
                           + f"); see {RunDir(run_dir).log}", **extra)


def _one(executor: Executor, job: Job, on_start: Callable[[Job], None] | None,
         on_progress: Callable[[Job, RunProgress], None] | None) -> JobResult:
    return executor.run([job], on_start=on_start, on_progress=on_progress)[0]


def _place(early: Path, resume_dir: Path) -> None:
    """Copy the committed checkpoint ``early`` into ``resume_dir/checkpoints/`` under its own
    name, whole or not at all (copied beside it, then renamed into place).

    Raises:
        OSError: the copy failed (nothing is left in ``checkpoints/``).
    """
    staged = resume_dir / f"{early.name}.placing"
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(early, staged)
    RunDir(resume_dir).checkpoints.mkdir(exist_ok=True)
    staged.rename(RunDir(resume_dir).checkpoints / early.name)


def _side_by_side(executor: Executor, first_job: Job, resume_job: Job,
                  on_start: Callable[[Job], None] | None,
                  on_progress: Callable[[Job, RunProgress], None] | None
                  ) -> tuple[JobResult, JobResult, Path | None]:
    """Both pilot processes in one ``executor.run`` (where runs save at home): the resumed
    one starts beside the first when a slot is free and waits in ``restore()`` (its
    trial.json says ``await_checkpoint``) while its imports, data and model are already
    done. The first's earliest committed checkpoint is copied to it as soon as a poll sees
    one; when the first ends without one, ``RunDir.NO_CHECKPOINT`` tells the waiting
    process that none will come (it then goes on as a resume without a checkpoint).

    Returns:
        ``(first's result, resumed one's result, the checkpoint placed or None)``.
    """
    pilot_dir, resume_dir = first_job.run_dir, resume_job.run_dir
    placed: list[Path] = []

    def place() -> None:
        early = None if placed else _earliest_checkpoint(pilot_dir)
        if early is None:
            return
        try:
            _place(early, resume_dir)
        except OSError:          # removed by keep_last while copied: the next poll retries
            return
        placed.append(early)

    def progress(job: Job, seen: RunProgress) -> None:
        if job.run_dir == pilot_dir:
            place()
        if on_progress:
            on_progress(job, seen)

    def done(result: JobResult) -> None:
        if result.run_dir == pilot_dir:
            place()
            if not placed:
                RunDir(resume_dir).no_checkpoint.write_bytes(b"")

    ended = {r.run_dir: r for r in executor.run([first_job, resume_job], on_start=on_start,
                                                on_progress=progress, on_done=done)}
    return ended[pilot_dir], ended[resume_dir], (placed[0] if placed else None)
