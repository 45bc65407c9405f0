"""Re-estimating a run from the pilot: the figures every task's pilot yields, and the
generic cost model (the default of the task protocol's ``estimate_run`` hook).

The pilot is a short run of the control on the first examples of the corpus. Its
figures (:class:`PilotFigures`) are generic: load time, steady step time, one evaluation,
checkpoint stall C, persist time D, restore time R, transfer time home X (0 when the pilot
ran at home), output time, and the control's planned steps as the task reported them. A run
of the whole campaign is re-estimated as (seconds)::

    steps      = the run's ``steps`` from the campaign file, else the control's planned
                 steps from the pilot, scaled by n_train / n'_train (the pilot's share)
    train_s    = steps · step_s
    eval_s     = evaluations · eval_s · n_test / n'_test
    saves      = 1 + floor(train_s / interval)      the runtime saves once early to measure
                 C and D, then every ``interval`` = choose_interval(C, D, R, L_tol, M, X)
                 (:mod:`flightplan.trial.interval`: Young 1974, Daly 2006; without M: L_tol − D − X − R, ≥ D)
    total_s    = load_s + train_s + eval_s + saves · C + output_s
    transfer_s = saves · X                          reported beside total_s, not in it: a
                 checkpoint travels home while the loop trains on (only the last one, if
                 any is under way when the run ends, holds the run's end back)

with ``evaluations`` = :data:`ASSUMED_EVALUATIONS` (the pilot cannot see how often a run
evaluates). A task with a finer cost model gives it as its ``estimate_run`` hook (the
built-in text classifier models encoder forward time by sequence length).

Pure functions (no I/O, no torch). A task with a finer cost model gives its own
``estimate_run`` (:mod:`flightplan.tasks.protocol`); the built-in text classifier's is
:mod:`flightplan.tasks.textclf.cost_model`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from flightplan.rows import Row
from flightplan.trial import choose_interval

__all__ = ["PilotFigures", "PilotRecord", "ASSUMED_EVALUATIONS", "estimate_run_seconds",
           "require_figure", "control_steps"]


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
        step_s: the steady step time (mean ``step_s`` without the first step, else the
            mean gap between step rows).
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


def estimate_run_seconds(figures: PilotFigures, *, steps: int, tolerated_loss_s: float,
                         mtbi_s: float | None = None,
                         evaluations: int = ASSUMED_EVALUATIONS) -> dict[str, float]:
    """Re-estimate one run of ``steps`` steps from the pilot (module docstring).

    Returns:
        ``{steps, step_s, train_s, eval_s, evaluations, interval_s, checkpoints,
        checkpoint_s, load_s, output_s, total_s, transfer_s}`` (seconds, counts);
        ``transfer_s`` is the run's total transfer time home, not part of ``total_s``.
    """
    train_s = steps * figures.step_s
    scale = figures.n_test / figures.pilot_n_test if figures.pilot_n_test else 1.0
    eval_s = evaluations * figures.eval_s * scale
    interval = choose_interval(save_stall_s=figures.save_stall_s, persist_s=figures.persist_s,
                               restore_s=figures.restore_s, tolerated_loss_s=tolerated_loss_s,
                               mtbi_s=mtbi_s, transfer_s=figures.transfer_s).interval_s
    checkpoints = 1 + (math.floor(train_s / interval) if interval > 0 else 0)
    checkpoint_s = checkpoints * figures.save_stall_s
    total = figures.load_s + train_s + eval_s + checkpoint_s + figures.output_s
    return {"steps": steps, "step_s": figures.step_s, "train_s": train_s, "eval_s": eval_s,
            "evaluations": evaluations, "interval_s": interval, "checkpoints": checkpoints,
            "checkpoint_s": checkpoint_s, "load_s": figures.load_s,
            "output_s": figures.output_s, "total_s": total,
            "transfer_s": checkpoints * figures.transfer_s}


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
