"""The pilot: a short run of the control that measures the campaign and proves resume.

Two processes in ``runs/pilot-<control_id>/``, on the first examples of the corpus (the
training examples of :data:`PILOT_STEPS` batches, :data:`PILOT_TEST` test examples: the
pilot measures rates, and the decision point scales them to the whole corpus):

1. the uninterrupted pilot: the control's ``trial.json`` with ``max_steps`` capped at
   :data:`PILOT_STEPS`; the trial runtime saves its first checkpoint right after step 0
   (the early checkpoint: its first save measures C and D). It logs load time, the
   encoder's forward time on length-sorted batches (short and long inputs), step times,
   an evaluation, the checkpoint's stall C and persist time D, and the output writing.
2. the resumed pilot, in ``resume/``: a new process that starts from a copy of the
   earliest checkpoint of (1) (``resume = true``) and runs to the same cap. It measures
   the restore time R, and every loss it logs must equal, bit for bit, the loss (1)
   logged at the same step. If not — or if nothing could be compared — the campaign
   stops with the rule ``no_usable_resume``.

Usage::

    result = run_pilot(control_trial, campaign_dir, data_check, executor=LocalExecutor())
    result.ok, result.figures.to_json(), result.mismatches
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from flightplan.durable import write_json_atomic
from flightplan.run.decision import PilotFigures
from flightplan.run.executor import Executor, Job, JobResult, RunProgress

__all__ = ["PILOT_STEPS", "PILOT_TEST", "PilotResult", "pilot_id", "pilot_limits",
           "read_rows", "compare_losses", "figures_from_rows", "run_pilot"]

PILOT_STEPS = 12
"""Optimizer steps of the pilot (the control's planned steps when fewer)."""

PILOT_TEST = 32
"""Test examples the pilot embeds and evaluates (the whole test set when smaller)."""

DEFAULT_BATCH_SIZE = 16
"""``textclf``'s batch size when a run's params give none."""


def pilot_id(control_id: str) -> str:
    """The pilot's run id (and directory name): ``pilot-<control_id>``."""
    return f"pilot-{control_id}"


@dataclass
class PilotResult:
    """What the pilot found.

    Attributes:
        ok: the resumed losses matched and the figures are complete.
        message: one line: what was compared, or what went wrong.
        figures: the measured figures (None when the pilot failed before measuring).
        compared_steps: steps whose losses were compared.
        mismatches: ``{step, uninterrupted, resumed}`` for each differing loss.
        resumed_from: the checkpoint directory the second process started from.
        started_at, ended_at: unix seconds.
    """

    ok: bool
    message: str
    figures: PilotFigures | None = None
    compared_steps: list[int] = field(default_factory=list)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (figures as their own object)."""
        return {"ok": self.ok, "message": self.message,
                "figures": None if self.figures is None else self.figures.to_json(),
                "compared_steps": self.compared_steps, "mismatches": self.mismatches,
                "resumed_from": self.resumed_from, "started_at": self.started_at,
                "ended_at": self.ended_at, "wall_s": self.ended_at - self.started_at}


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The complete JSON rows of ``<run_dir>/measurements.jsonl`` ([] when missing)."""
    path = Path(run_dir) / "measurements.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _losses(rows: list[dict[str, Any]]) -> dict[int, Any]:
    return {row["step"]: row["loss"] for row in rows
            if "loss" in row and "event" not in row and isinstance(row.get("step"), int)}


def compare_losses(uninterrupted: list[dict[str, Any]], resumed: list[dict[str, Any]]
                   ) -> tuple[list[int], list[dict[str, Any]]]:
    """Compare the losses the resumed process logged with the uninterrupted ones.

    JSON keeps a float's exact value (``repr`` round-trips), so ``==`` on the parsed
    numbers is a bitwise comparison; ``"nan"`` strings compare as equal strings.

    Returns:
        (steps compared, ``{step, uninterrupted, resumed}`` for each difference); a step
        the resumed process logged that the uninterrupted one did not is a difference.
    """
    first, second = _losses(uninterrupted), _losses(resumed)
    steps = sorted(second)
    mismatches = [{"step": s, "uninterrupted": first.get(s), "resumed": second[s]}
                  for s in steps if s not in first or first[s] != second[s]]
    return steps, mismatches


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def pilot_limits(control_trial: dict[str, Any], data_check: dict[str, Any], *,
                 steps: int = PILOT_STEPS) -> tuple[int, int]:
    """``(train, test)`` examples of the pilot: ``steps`` batches of the control's batch
    size and :data:`PILOT_TEST`, each at most what the campaign has (data check rows)."""
    splits = data_check.get("splits", {})
    batch = int(control_trial.get("params", {}).get("batch_size", DEFAULT_BATCH_SIZE))
    n_train = int(splits.get("train", {}).get("rows", 0))
    n_test = int(splits.get("test", {}).get("rows", 0))
    return min(n_train, steps * batch), min(n_test, PILOT_TEST)


def figures_from_rows(rows: list[dict[str, Any]], resumed_rows: list[dict[str, Any]],
                      data_check: dict[str, Any], *, pilot_n_train: int,
                      pilot_n_test: int) -> PilotFigures:
    """The pilot's figures from its measurement rows (see :class:`PilotFigures`).

    Short and long inputs: the ``encode_s`` batches but the first one logged (warm-up),
    sorted by ``tokens``, the shorter half and the longer half (the middle batch of an odd
    count goes to the longer half). Steady step time: the mean ``step_s`` without the
    first step; ``max_length``: the steps' ``seq_len`` (the control pads to it). C and D:
    means over the ``checkpoint`` rows; R: the resumed process's ``restore`` row.
    ``n_train``, ``n_test``, ``mean_len`` and ``setup_s`` (its wall time) come from the
    data check; ``pilot_n_train``/``pilot_n_test`` are the pilot's corpus limits.

    Raises:
        ValueError: a figure the re-estimate needs is missing (names it).
    """
    def needed(name: str, values: list[float]) -> list[float]:
        if not values:
            raise ValueError(f"the pilot logged no {name}; the task must log it "
                             f"(see docs/internals.md)")
        return values

    logged = [(r["tokens"], r["encode_s"]) for r in rows if "encode_s" in r]
    encode = sorted(logged[1:] or logged, key=lambda pair: pair[0])
    half = len(encode) // 2
    short, long = (encode[:half] or encode), encode[half:]
    steps = sorted(((r["step"], r["step_s"]) for r in rows
                    if "step_s" in r and "event" not in r), key=lambda pair: pair[0])
    steady = [s for _, s in steps[1:]] or [s for _, s in steps]
    saves = [r for r in rows if r.get("event") == "checkpoint"]
    restores = [r["restore_s"] for r in resumed_rows
                if r.get("event") == "restore" and r.get("restore_s") is not None]
    splits = data_check.get("splits", {})
    return PilotFigures(
        max_length=int(needed("seq_len", [r["seq_len"] for r in rows
                                          if "step_s" in r and "seq_len" in r])[0]),
        n_train=int(splits.get("train", {}).get("rows", 0)),
        n_test=int(splits.get("test", {}).get("rows", 0)),
        pilot_n_train=pilot_n_train, pilot_n_test=pilot_n_test,
        setup_s=float(data_check.get("wall_s", 0.0)),
        load_s=needed("load_s", [r["load_s"] for r in rows if "load_s" in r])[0],
        encode_total_s=sum(e for _, e in logged),
        short_tokens=_mean([t for t, _ in short]), short_fwd_s=_mean([e for _, e in short]),
        long_tokens=_mean([t for t, _ in long]), long_fwd_s=_mean([e for _, e in long]),
        head_step_s=_mean(needed("step_s", steady)),
        head_eval_s=_mean(needed("eval_s", [r["eval_s"] for r in rows if "eval_s" in r])),
        mean_len=float(data_check.get("lengths", {}).get("mean", 0.0)),
        save_stall_s=_mean(needed("checkpoint stall_s", [r["stall_s"] for r in saves])),
        persist_s=_mean([r["persist_s"] for r in saves]),
        restore_s=needed("restore_s", restores)[0],
        output_s=sum(r["output_s"] for r in rows if "output_s" in r))


def _earliest_checkpoint(run_dir: Path) -> Path | None:
    """The lowest ``step-NNNNNN`` directory that holds its manifest (a finished save)."""
    found = sorted(p for p in (run_dir / "checkpoints").glob("step-*")
                   if p.is_dir() and p.name[5:].isdigit() and (p / "manifest.json").is_file())
    return found[0] if found else None


def run_pilot(control_trial: dict[str, Any], campaign_dir: Path, data_check: dict[str, Any], *,
              executor: Executor,
              on_progress: Callable[[Job, RunProgress], None] | None = None,
              on_start: Callable[[Job], None] | None = None,
              steps: int = PILOT_STEPS) -> PilotResult:
    """Run the pilot of the control (see the module docstring); starts from a clean folder.

    Args:
        control_trial: the control's ``trial.json`` document.
        campaign_dir: the campaign directory (``runs/`` lives there).
        data_check: the data check's report (``splits``, ``lengths``).
        executor: runs the two processes.
        on_progress, on_start: passed to the executor (progress bars).
        steps: the pilot's step cap.

    Returns:
        The result; ``ok`` false names what failed (a crashed or stopped pilot process,
        no early checkpoint, differing losses, a missing figure).
    """
    started = time.time()
    run_id = pilot_id(control_trial["run_id"])
    pilot_dir = Path(campaign_dir) / "runs" / run_id
    if pilot_dir.exists():
        shutil.rmtree(pilot_dir)
    resume_dir = pilot_dir / "resume"
    resume_dir.mkdir(parents=True)
    n_train, n_test = pilot_limits(control_trial, data_check, steps=steps)
    corpus = dict(control_trial.get("corpus") or {}, train_limit=n_train, test_limit=n_test)
    trial = dict(control_trial, run_id=run_id, name="pilot", resume=False, max_steps=steps,
                 corpus=corpus)
    write_json_atomic(pilot_dir / "trial.json", trial)

    def fail(message: str, **extra: Any) -> PilotResult:
        return PilotResult(False, message, started_at=started, ended_at=time.time(), **extra)

    first = _one(executor, Job(run_id, pilot_dir), on_start, on_progress)
    if first.exit_code != 0:
        return fail(f"the pilot process exited with code {first.exit_code}; "
                    f"see {pilot_dir / 'log.txt'}")
    early = _earliest_checkpoint(pilot_dir)
    if early is None:
        return fail(f"the pilot saved no checkpoint in {pilot_dir / 'checkpoints'}; "
                    f"no usable resume")
    shutil.copytree(early, resume_dir / "checkpoints" / early.name)
    write_json_atomic(resume_dir / "trial.json", dict(trial, resume=True))
    second = _one(executor, Job(run_id, resume_dir), on_start, on_progress)
    resumed_from = str(early.relative_to(campaign_dir))
    if second.exit_code != 0:
        return fail(f"the resumed pilot process exited with code {second.exit_code}; "
                    f"see {resume_dir / 'log.txt'}", resumed_from=resumed_from)
    rows, resumed_rows = read_rows(pilot_dir), read_rows(resume_dir)
    compared, mismatches = compare_losses(rows, resumed_rows)
    if not compared:
        return fail(f"the process resumed from {early.name} logged no step to compare; "
                    f"no usable resume", resumed_from=resumed_from)
    if mismatches:
        worst = mismatches[0]
        return fail(f"resumed from {early.name}, {len(mismatches)} of {len(compared)} losses "
                    f"differ (first at step {worst['step']}: {worst['uninterrupted']!r} "
                    f"uninterrupted vs {worst['resumed']!r} resumed); no usable resume",
                    compared_steps=compared, mismatches=mismatches, resumed_from=resumed_from)
    try:
        figures = figures_from_rows(rows, resumed_rows, data_check, pilot_n_train=n_train,
                                    pilot_n_test=n_test)
    except ValueError as exc:
        return fail(str(exc), compared_steps=compared, resumed_from=resumed_from)
    return PilotResult(True, f"resumed from {early.name} in a new process: {len(compared)} "
                             f"losses (steps {compared[0]}–{compared[-1]}) identical bit for bit",
                       figures, compared, [], resumed_from, started, time.time())


def _one(executor: Executor, job: Job, on_start: Callable[[Job], None] | None,
         on_progress: Callable[[Job, RunProgress], None] | None) -> JobResult:
    return executor.run([job], on_start=on_start, on_progress=on_progress)[0]
