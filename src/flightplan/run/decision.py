"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return.

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
                 (run/interval.py: Young 1974, Daly 2006; without M: L_tol − D − X − R, ≥ D)
    total_s    = load_s + train_s + eval_s + saves · C + output_s
    transfer_s = saves · X                          reported beside total_s, not in it: a
                 checkpoint travels home while the loop trains on (only the last one, if
                 any is under way when the run ends, holds the run's end back)

with ``evaluations`` = :data:`ASSUMED_EVALUATIONS` (the pilot cannot see how often a run
evaluates). A task with a finer cost model gives it as its ``estimate_run`` hook (the
built-in text classifier models encoder forward time by sequence length).

The decision: re-plan with the re-estimates; ``continue`` when it fits the window; else
``cut`` — drop the exploratory runs, then also the useful ones, re-planning each time —
at the first that fits; else ``stop``, naming the cheapest package option that fits the
full campaign.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from flightplan.run.interval import choose_interval

__all__ = [
    "PilotFigures",
    "PilotRecord",
    "Decision",
    "DECISIONS",
    "ASSUMED_EVALUATIONS",
    "estimate_run_seconds",
    "control_steps",
    "require_figure",
    "cut_steps",
    "choose",
    "replan_from_options",
]

DECISIONS = ("continue", "cut", "stop")


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
    rows: list[dict[str, Any]]
    resumed_rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Decision:
    """The outcome of the decision point.

    Attributes:
        decision: ``continue``, ``cut`` or ``stop``.
        dropped: run names left out (``cut``), or ``[]``.
        reason: one line that gives the numbers behind it.
        fitting_option: for ``stop``, the cheapest option that fits the full campaign
            (an ``options`` entry of the plan JSON), or None when none fits.
    """

    decision: str
    dropped: list[str] = field(default_factory=list)
    reason: str = ""
    fitting_option: dict[str, Any] | None = None


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


def cut_steps(runs: list[tuple[str, str]], *, done: set[str] = frozenset()) -> list[list[str]]:
    """The run sets to try dropping, in order: none, the exploratory, then also the useful.

    Args:
        runs: ``(name, tier)`` of every run of the campaign.
        done: runs already finished or stopped (never dropped: their time is spent).

    Returns:
        Lists of names; a step that would drop nothing new is left out.
    """
    steps: list[list[str]] = [[]]
    dropped: list[str] = []
    for tier in ("exploratory", "useful"):
        more = [name for name, t in runs if t == tier and name not in done]
        if more:
            dropped = dropped + more
            steps.append(list(dropped))
    return steps


def choose(steps: list[list[str]], replan: Callable[[list[str]], dict[str, Any]]) -> Decision:
    """Decide from re-plans: ``replan(dropped)`` returns the plan JSON without ``dropped``.

    Returns:
        ``continue`` when the full plan fits; ``cut`` with the first step that fits;
        ``stop`` otherwise, with the cheapest fitting option of the full plan (its
        ``options`` are sorted cheapest first by the planner; the first that ``fits``
        and drops nothing is taken).
    """
    full = replan(steps[0])
    if full.get("fits"):
        return Decision("continue", [], _hours_line(full, "fits"))
    for dropped in steps[1:]:
        plan = replan(dropped)
        if plan.get("fits"):
            return Decision("cut", list(dropped),
                            f"{_hours_line(full, 'does not fit')}; without {', '.join(dropped)} "
                            f"{_hours_line(plan, 'fits')}")
    option = next((o for o in full.get("options", [])
                   if o.get("fits") and not o.get("dropped")), None)
    if option is None:
        tail = "no package in the catalog fits it; change the question or split the campaign"
    else:
        tail = (f"the cheapest package that fits is {option['offer']} "
                f"{option['package_days']}-day × {option['flights']}: "
                f"{option['total_price']} {option['currency']}")
    return Decision("stop", [], f"{_hours_line(full, 'does not fit')} even with only the "
                                f"essential runs; {tail}", option)


def replan_from_options(plan: dict[str, Any], run_names: set[str]
                        ) -> Callable[[list[str]], dict[str, Any]]:
    """``replan(dropped)`` for :func:`choose`, read off one plan JSON (``plan --json``).

    ``[]`` gives the plan itself. A cut gives the planner's reduced protocol: the option of
    the chosen rental (same offer, package_days, flights) whose dropped runs are exactly
    ``dropped`` (it may also drop stages only they needed). The planner adds reduced
    options only while the full plan does not fit and stops at the first that fits; a
    cut it did not compute counts as not fitting.
    """
    rental = (plan.get("offer"), plan.get("package_days"), plan.get("flights"))

    def replan(dropped: list[str]) -> dict[str, Any]:
        if not dropped:
            return plan
        for option in plan.get("options", []):
            same = (option.get("offer"), option.get("package_days"), option.get("flights"))
            runs_dropped = set(option.get("dropped") or []) & run_names
            if same == rental and option.get("dropped") and runs_dropped == set(dropped):
                return {"fits": bool(option.get("fits")),
                        "reserved_hours": option.get("reserved_hours") or 0.0,
                        "window_hours": plan.get("window_hours", 0.0)}
        return {"fits": False, "reserved_hours": plan.get("reserved_hours", 0.0),
                "window_hours": plan.get("window_hours", 0.0)}

    return replan


def _hours_line(plan: dict[str, Any], verdict: str) -> str:
    return (f"{plan.get('reserved_hours', 0):.2f} h of {plan.get('window_hours', 0):.2f} h "
            f"{verdict}")
