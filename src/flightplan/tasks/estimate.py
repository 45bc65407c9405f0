"""Re-estimating a run from the pilot: the figures every task's pilot yields, read once
from its rows, and the cost formula every re-estimate ends with (the generic model, the
default of the task protocol's ``estimate_run`` hook, and a task's own model).

The pilot is a short run of the control on the first examples of the corpus. Its
figures (:class:`PilotFigures`, read by :func:`figures_from_rows`) are generic: load time,
steady step time, one evaluation, checkpoint stall C, persist time D, restore time R,
transfer time home X (0 when the pilot ran at home), output time, the control's planned
steps as the task reported them, and what its process spent around them, read off the
pilot's goodput split (:mod:`flightplan.goodput`): the executor's start to the process's
(``waiting_s``), the process's start and imports outside the task's own load
(``start_s``), the first step's extra time (``warmup_s``), the loop's time per step outside
the step the task timed (``loop_s``), and finishing and exiting after the outputs
(``exit_s``). Every re-estimate ends with the same formula (:func:`run_seconds`, seconds),
whose parts are named by the causes goodput splits a run's wall time into, so the decision
point's estimate and the run's observed split compare cause by cause::

    train_s      = steps · (step_s + loop_s)
    saves        = 1 + floor(train_s / interval)   the runtime saves once early to measure
                   C and D, then every ``interval`` = choose_interval(C, D, R, L_tol, M, X)
                   (:mod:`flightplan.trial.interval`: Young 1974, Daly 2006; without M:
                   L_tol − D − X − R, ≥ D)
    n            = train_s / M                     interruptions expected (0 without M)
    waiting      = (1 + n) · waiting_s             each process is started again
    start_load   = (1 + n) · (start_s + warmup_s + load_s − data_s)
    data         = (1 + n) · data_s                the part of load_s the model calls data
    restore      = n · R
    steps        = train_s
    lost         = n · interval / 2                half an interval redone per interruption
                                                   (Daly 2006)
    checkpoint   = saves · C
    evaluation   = eval_s
    output       = output_s + exit_s
    transfer     = X                               the last checkpoint home holds the end
    total_s      = Σ of the parts
    transfer_s   = saves · X                       every transfer, reported beside total_s:
                                                   the others travel while the loop trains

The generic model (:func:`estimate_run_seconds`) feeds it with::

    steps      = the run's ``steps`` from the campaign file, else the control's planned
                 steps from the pilot, scaled by n_train / n'_train (the pilot's share)
    step_s, load_s as the pilot measured them (data_s = 0: all of it is start and load)
    eval_s     = evaluations · eval_s · n_test / n'_test

with ``evaluations`` = :data:`ASSUMED_EVALUATIONS` (the pilot cannot see how often a run
evaluates). A task with a finer cost model gives it as its ``estimate_run`` hook
(:mod:`flightplan.tasks.protocol`) and computes only its own steps, step, load, data and
evaluation times from the same figures (the built-in text classifier's is
:mod:`flightplan.tasks.textclf.cost_model`, which models encoder forward time by
sequence length).

Pure functions (no I/O, no torch).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from flightplan.goodput import Execution, GoodputSplit, run_goodput
from flightplan.rows import (CheckpointSaved, Evaluation, Measurement, ProcessStart, Restore,
                             Row)
from flightplan.transfer_time import TransferTally
from flightplan.trial import choose_interval

__all__ = ["PilotFigures", "PilotRecord", "ASSUMED_EVALUATIONS", "StepTimes", "step_times",
           "figures_from_rows",
           "run_seconds", "estimate_run_seconds", "require_figure", "control_steps",
           "mean_or_zero"]


@dataclass(frozen=True)
class PilotFigures:
    """What the pilot of the control measured, for any task (seconds, examples, steps).

    Attributes:
        n_train, n_test: examples in the campaign's training and test sets (data check;
            0 when the task loads its own data).
        pilot_n_train, pilot_n_test: the pilot's (0: the whole split).
        setup_s: the data check's wall time.
        load_s: from the process start to the first step (the task's ``load_s`` when
            it logs one).
        step_s: the steady step time (:func:`step_times`: each step row's logged
            ``step_s``, else its gap since the row before, the first step left out).
        eval_s: one evaluation on the pilot's test examples (``eval_s``, else the gap
            before the evaluation row; 0 without an evaluation).
        save_stall_s: ``C``, the loop's stall per checkpoint.
        persist_s: ``D``, until a checkpoint is durable.
        restore_s: ``R``, to restore a checkpoint in a new process.
        output_s: writing predictions, metrics and the artifact (``output_s``, else from
            the last row to the process end).
        pilot_steps: steps the pilot ran.
        planned_steps: the control's planned steps on the whole corpus (None: the task
            never set ``trial.planned_steps``).
        transfer_s: ``X``, seconds from a checkpoint durable on the flight to durable at
            home: the mean of ``wait_s + fetch_s + commit_s`` over the pilot's
            ``checkpoint_transfer`` rows (:mod:`flightplan.transfer_time`); 0.0 when
            the pilot ran at home.
        transfer_bytes_per_s: Σ bytes / Σ (fetch_s + commit_s) of those rows (bytes per
            second); None without a transfer.
        waiting_s: from the executor starting the uninterrupted process to the process's
            creation (goodput's ``waiting``).
        start_s: from the process's creation to its first step, less ``load_s`` (the
            interpreter and imports before the task's own loading; 0 when ``load_s`` was
            read off the time stamps and so holds them).
        warmup_s: the first step's logged ``step_s`` beyond a steady one (0 without).
        loop_s: per step, the wall time between step rows (less checkpoint stalls) beyond
            the logged ``step_s``: data loading, logging, bookkeeping (0 when ``step_s`` was
            read off the time stamps).
        exit_s: goodput's ``output`` less ``output_s``: finishing and the process exit.

    The last five are 0 in figures recorded before they were measured.
    """

    n_train: int
    n_test: int
    pilot_n_train: int
    pilot_n_test: int
    setup_s: float
    load_s: float
    step_s: float
    eval_s: float
    save_stall_s: float
    persist_s: float
    restore_s: float
    output_s: float
    pilot_steps: int
    planned_steps: int | None
    transfer_s: float = 0.0
    transfer_bytes_per_s: float | None = None
    waiting_s: float = 0.0
    start_s: float = 0.0
    warmup_s: float = 0.0
    loop_s: float = 0.0
    exit_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (keys as the attribute names)."""
        return asdict(self)


@dataclass(frozen=True)
class PilotRecord:
    """The pilot as a task's ``estimate_run`` hook sees it: the generic ``figures`` and the
    measurement rows of the uninterrupted (``rows``) and resumed (``resumed_rows``)
    processes."""

    figures: PilotFigures
    rows: list[Row]
    resumed_rows: list[Row]


ASSUMED_EVALUATIONS = 1
"""Evaluations per run the generic re-estimate assumes (a named assumption: the pilot
evaluates once, at its step cap, and cannot see a run's evaluation schedule)."""


def mean_or_zero(values: Sequence[float]) -> float:
    """The mean of ``values``, 0.0 when there are none."""
    return sum(values) / len(values) if values else 0.0


def _gaps(rows: Sequence[Row], start: float) -> list[tuple[Row, float]]:
    """Each row with the seconds since the row before it (the first: since ``start``)."""
    out, last = [], start
    for row in rows:
        out.append((row, row.time - last))
        last = row.time
    return out


@dataclass(frozen=True)
class StepTimes:
    """The step rows of a run read once (:func:`step_times`; seconds).

    Attributes:
        rows: the step rows (each carries ``loss``), in time order.
        seconds: each one's time: its logged ``step_s``, else its gap (the seconds since
            the row before it, of any kind; the first row's: since the start).
        warmup: whether each is the first step row of its process (warm-up).
        step_s: the steady step time: the mean of ``seconds`` over the rows that are not
            warm-up (over all of them when every one is); 0.0 without step rows.
    """

    rows: list[Measurement]
    seconds: list[float]
    warmup: list[bool]
    step_s: float

    @property
    def train_s(self) -> float:
        """Σ the step rows' times, warm-up included (seconds)."""
        return float(sum(self.seconds))


def step_times(rows: Sequence[Row], start: float) -> StepTimes:
    """Step times read from measurement rows: the one reading shared by the pilot's
    re-estimate (:func:`figures_from_rows`) and ``plan --from`` (:func:`flightplan.plan.
    calibration.measure.run_figures`), so both give the same ``step_s`` for the same rows.

    A step row's time is the ``step_s`` it logged, else the seconds since the row before it
    of any kind (a checkpoint's stall, an evaluation, a restart have rows of their own and
    are not counted as step time; the first row's: since ``start``).

    Warm-up rule: the first step row of each process (the first of all, and the first after
    each ``process_start`` or ``restore`` row) holds one-time costs (lazy initialisation,
    compilation, caches, the allocator) and is left out of the steady step time; it counts
    only when no other step row exists.

    Args:
        rows: one run's rows, of one process or several (sorted here by time, stably).
        start: unix seconds the first process started (the first row's gap is read from it).

    Returns:
        :class:`StepTimes`.
    """
    steps: list[Measurement] = []
    seconds: list[float] = []
    warmup: list[bool] = []
    fresh, last = True, start
    for row in sorted(rows, key=lambda r: r.time):
        gap, last = row.time - last, row.time
        if isinstance(row, (ProcessStart, Restore)):
            fresh = True
        elif isinstance(row, Measurement) and row.is_step:
            logged = row.number("step_s")
            steps.append(row)
            seconds.append(gap if logged is None else logged)
            warmup.append(fresh)
            fresh = False
    steady = [t for t, first in zip(seconds, warmup) if not first] or seconds
    return StepTimes(steps, seconds, warmup, mean_or_zero(steady))


def figures_from_rows(rows: Sequence[Row], resumed_rows: Sequence[Row], *, n_train: int,
                      n_test: int, setup_s: float, pilot_n_train: int | None,
                      pilot_n_test: int | None, started_at: float, ended_at: float
                      ) -> PilotFigures:
    """The pilot's generic figures (:class:`PilotFigures`), the one reading of its rows.

    A figure the task logged (``load_s``, ``step_s``, ``eval_s``, ``output_s``) is taken
    as logged; otherwise it is read off the rows' ``time`` stamps: load = first step row −
    process start, evaluation = the gap before each evaluation row, output = process end −
    last row. The step time is :func:`step_times`' steady one (its warm-up rule leaves the
    first step out). C and D are the means of the ``checkpoint``
    rows, R the resumed process's ``restore`` row; the transfer figures come from the
    ``checkpoint_transfer`` rows of both processes (none: the pilot ran at home, X = 0).

    Args:
        rows, resumed_rows: the uninterrupted and the resumed process's rows.
        n_train, n_test: examples of the campaign's splits (0: unknown). setup_s: the data
            check's wall time. pilot_n_train, pilot_n_test: the pilot's (None: the whole
            split). started_at, ended_at: the uninterrupted process's times (unix s).

    Raises:
        ValueError: a figure the re-estimate needs is missing (names it).
    """
    timed = step_times(rows, started_at)
    steps = timed.rows
    require_figure("loss", timed.seconds)
    logged_steps = [v for r in steps if (v := r.number("step_s")) is not None]
    split = run_goodput(rows, [Execution(started_at, ended_at, finished=True)]) \
        if ended_at > started_at else GoodputSplit()
    step_s = timed.step_s
    measured = [r for r in rows if isinstance(r, Measurement)]
    loads = [v for r in measured if (v := r.number("load_s")) is not None]
    load_s = loads[0] if loads else steps[0].time - started_at
    evals = [(r, gap) for r, gap in _gaps(rows, started_at) if isinstance(r, Evaluation)]
    eval_s = mean_or_zero([gap if (v := r.number("eval_s")) is None else v for r, gap in evals])
    outputs = [v for r in measured if (v := r.number("output_s")) is not None]
    last = rows[-1].time if rows else ended_at
    saves = [r for r in rows if isinstance(r, CheckpointSaved)]
    restores = [r.restore_s for r in resumed_rows
                if isinstance(r, Restore) and r.restore_s is not None]
    planned = [int(v) for r in measured if (v := r.number("planned_steps")) is not None]
    transfers = TransferTally.from_rows([*rows, *resumed_rows])
    output_s = float(sum(outputs)) if outputs else max(0.0, ended_at - last)
    stated = sum(v * _covered(steps, i) for i, r in enumerate(steps)
                 if (v := r.number("step_s")) is not None)
    before = split.parts["start_load"] + split.parts["data"] + split.parts["restore"]
    return PilotFigures(
        n_train=n_train, n_test=n_test, pilot_n_train=pilot_n_train or 0,
        pilot_n_test=pilot_n_test or 0, setup_s=float(setup_s), load_s=float(load_s),
        step_s=float(step_s), eval_s=float(eval_s),
        save_stall_s=mean_or_zero(require_figure("checkpoint stall_s",
                                                 [r.stall_s for r in saves])),
        persist_s=mean_or_zero([r.persist_s for r in saves]),
        restore_s=require_figure("restore_s", restores)[0],
        output_s=output_s,
        pilot_steps=len(steps), planned_steps=planned[-1] if planned else None,
        transfer_s=transfers.transfer_s, transfer_bytes_per_s=transfers.bytes_per_s,
        waiting_s=split.parts["waiting"], start_s=max(0.0, before - float(load_s)),
        warmup_s=max(0.0, logged_steps[0] - step_s) if logged_steps else 0.0,
        loop_s=max(0.0, split.parts["steps"] - stated) / max(1, len(steps) - 1)
        if logged_steps and split.wall_s > 0 else 0.0,
        exit_s=max(0.0, split.parts["output"] - output_s))


def _covered(steps: Sequence[Row], index: int) -> int:
    """Optimizer steps the ``index``-th step row covers: since the step row before it (a
    library logs every few steps), 1 for the first."""
    if index == 0:
        return 1
    return max(1, steps[index].step - steps[index - 1].step)


def run_seconds(figures: PilotFigures, *, steps: int, step_s: float, load_s: float,
                eval_s: float, tolerated_loss_s: float, mtbi_s: float | None = None,
                data_s: float = 0.0) -> dict[str, Any]:
    """The cost formula every re-estimate ends with (module docstring): a run of ``steps``
    steps of ``step_s`` s, loading ``load_s`` s (``data_s`` of it data preparation) and
    evaluating ``eval_s`` s in all, with the pilot's checkpoint costs C, D, R, X, output
    time and process overheads.

    Returns:
        ``{steps, step_s, train_s, eval_s, interval_s, checkpoints, checkpoint_s, load_s,
        output_s, interruptions, parts, total_s, transfer_s}`` (seconds, counts): ``parts``
        by goodput's causes (:data:`flightplan.goodput.CAUSES`), ``total_s`` their sum;
        ``transfer_s`` is the run's total transfer time home, beside ``total_s`` (only the
        last transfer, in ``parts["transfer"]``, holds the run's end).
    """
    train_s = steps * (step_s + figures.loop_s)
    interval = choose_interval(save_stall_s=figures.save_stall_s, persist_s=figures.persist_s,
                               restore_s=figures.restore_s, tolerated_loss_s=tolerated_loss_s,
                               mtbi_s=mtbi_s, transfer_s=figures.transfer_s).interval_s
    checkpoints = 1 + (math.floor(train_s / interval) if interval > 0 else 0)
    checkpoint_s = checkpoints * figures.save_stall_s
    interruptions = train_s / mtbi_s if mtbi_s else 0.0
    processes = 1.0 + interruptions
    parts = {"waiting": processes * figures.waiting_s,
             "start_load": processes * (figures.start_s + figures.warmup_s + load_s - data_s),
             "data": processes * data_s,
             "restore": interruptions * figures.restore_s,
             "steps": train_s,
             "lost": interruptions * interval / 2,
             "checkpoint": checkpoint_s,
             "evaluation": eval_s,
             "output": figures.output_s + figures.exit_s,
             "transfer": figures.transfer_s}
    return {"steps": steps, "step_s": step_s, "train_s": train_s, "eval_s": eval_s,
            "interval_s": interval, "checkpoints": checkpoints, "checkpoint_s": checkpoint_s,
            "load_s": load_s, "output_s": figures.output_s, "interruptions": interruptions,
            "parts": parts, "total_s": sum(parts.values()),
            "transfer_s": checkpoints * figures.transfer_s}


def estimate_run_seconds(figures: PilotFigures, *, steps: int, tolerated_loss_s: float,
                         mtbi_s: float | None = None,
                         evaluations: int = ASSUMED_EVALUATIONS) -> dict[str, Any]:
    """Re-estimate one run of ``steps`` steps from the pilot by the generic model
    (module docstring): :func:`run_seconds` with the pilot's step and load times and
    ``evaluations`` of the pilot's evaluation scaled to the whole test split.

    Returns:
        :func:`run_seconds`' keys and ``evaluations``.
    """
    scale = figures.n_test / figures.pilot_n_test if figures.pilot_n_test else 1.0
    return run_seconds(figures, steps=steps, step_s=figures.step_s, load_s=figures.load_s,
                       eval_s=evaluations * figures.eval_s * scale,
                       tolerated_loss_s=tolerated_loss_s, mtbi_s=mtbi_s) | {
        "evaluations": evaluations}


def require_figure(name: str, values: list[float]) -> list[float]:
    """``values``, the pilot's measurements of figure ``name``, when there are any.

    Raises:
        ValueError: none was logged (names the figure and where tasks log it).
    """
    if not values:
        raise ValueError(f"the pilot logged no {name}; the task must log it through "
                         f"trial.log (docs/tasks.md)")
    return values


def control_steps(figures: PilotFigures) -> int | None:
    """The control's planned steps on the whole corpus: the pilot's figure scaled by
    ``n_train / pilot_n_train`` when the pilot saw a share of the training set."""
    if figures.planned_steps is None:
        return None
    if figures.pilot_n_train and figures.n_train > figures.pilot_n_train:
        return math.ceil(figures.planned_steps * figures.n_train / figures.pilot_n_train)
    return figures.planned_steps
