"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return.

Re-estimate of one run (seconds), from the pilot of the control at max_length ``L0`` and
batch size ``B0``::

    tokens(L, B) = T0 · (B / B0) · (L / L0)             padded tokens in one batch
    step_s(T)    = s1 + (T − t1) · (s2 − s1) / (t2 − t1)  the line through the pilot's
                                                      short (t1, s1) and long (t2, s2)
                                                      batches; s1 · T / t1 when t1 = t2
    steps        = ceil(n_train / B) · epochs
    evals        = epochs                             one evaluation per epoch
    interval     = choose_interval(C, D, R, L_tol, M)   the trial runtime's checkpoint
                                                      interval (run/interval.py: Young 1974,
                                                      Daly 2006; without M: L_tol − D − R, ≥ D)
    train_s      = steps · step_s(tokens(L, B))
    saves        = 1 + floor(train_s / interval)      the runtime saves once early to measure C, D
    total_s      = load_s + train_s + evals · eval_s · (L / L0) + saves · C + output_s

``T0`` is the pilot's mean padded tokens per batch. Scaling tokens by ``L / L0`` assumes
batches are padded to ``max_length`` (true when most batches hold one input longer than
it, as with the drug reviews at 128 and 256; an upper bound otherwise). ``C`` is the
save stall, ``D`` the persist time and ``R`` the restore time measured in the pilot.

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
    "RunShape",
    "Decision",
    "DECISIONS",
    "step_seconds",
    "estimate_run_seconds",
    "cut_steps",
    "choose",
]

DECISIONS = ("continue", "cut", "stop")


@dataclass(frozen=True)
class PilotFigures:
    """What the pilot measured (seconds, tokens), for the control's ``max_length``/``batch_size``.

    Attributes:
        max_length: the control's max_length ``L0`` (tokens).
        batch_size: the control's batch size ``B0``.
        n_train: training examples (from the control's planned steps).
        load_s: model and data load time before the first step.
        mean_tokens: ``T0``, mean padded tokens per training batch.
        short_tokens, short_step_s: mean tokens and steady step time of the shorter batches.
        long_tokens, long_step_s: the same for the longer batches.
        eval_s: one evaluation over the test set.
        save_stall_s: ``C``, the training loop's stall per checkpoint.
        persist_s: ``D``, until the checkpoint is durable.
        restore_s: ``R``, to restore a checkpoint in a new process.
        output_s: writing predictions, metrics and the artifact.
    """

    max_length: int
    batch_size: int
    n_train: int
    load_s: float
    mean_tokens: float
    short_tokens: float
    short_step_s: float
    long_tokens: float
    long_step_s: float
    eval_s: float
    save_stall_s: float
    persist_s: float
    restore_s: float
    output_s: float

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (keys as the attribute names)."""
        return asdict(self)


@dataclass(frozen=True)
class RunShape:
    """What a run's duration depends on (from its params)."""

    name: str
    tier: str
    max_length: int
    batch_size: int
    epochs: int


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


def step_seconds(tokens: float, figures: PilotFigures) -> float:
    """Step time (s) of a batch of ``tokens`` padded tokens: the line through the pilot's
    short and long batches (slope clamped at ≥ 0), or proportional when they coincide."""
    t1, s1, t2, s2 = (figures.short_tokens, figures.short_step_s,
                      figures.long_tokens, figures.long_step_s)
    if t2 <= t1:
        return s1 * tokens / t1 if t1 > 0 else s1
    slope = max(0.0, (s2 - s1) / (t2 - t1))
    return max(0.0, s1 + (tokens - t1) * slope)


def estimate_run_seconds(shape: RunShape, figures: PilotFigures, *, tolerated_loss_s: float,
                         mtbi_s: float | None = None) -> dict[str, float]:
    """Re-estimate one run from the pilot (formula in the module docstring).

    Returns:
        ``{steps, tokens_per_batch, step_s, train_s, eval_s, interval_s, checkpoints,
        checkpoint_s, load_s, output_s, total_s}`` (seconds, counts, tokens).
    """
    length_ratio = shape.max_length / figures.max_length
    tokens = figures.mean_tokens * (shape.batch_size / figures.batch_size) * length_ratio
    steps = math.ceil(figures.n_train / shape.batch_size) * shape.epochs
    step_s = step_seconds(tokens, figures)
    train_s = steps * step_s
    eval_s = shape.epochs * figures.eval_s * length_ratio
    interval = choose_interval(save_stall_s=figures.save_stall_s, persist_s=figures.persist_s,
                               restore_s=figures.restore_s, tolerated_loss_s=tolerated_loss_s,
                               mtbi_s=mtbi_s).interval_s
    checkpoints = 1 + (math.floor(train_s / interval) if interval > 0 else 0)
    checkpoint_s = checkpoints * figures.save_stall_s
    total = figures.load_s + train_s + eval_s + checkpoint_s + figures.output_s
    return {"steps": steps, "tokens_per_batch": tokens, "step_s": step_s, "train_s": train_s,
            "eval_s": eval_s, "interval_s": interval, "checkpoints": checkpoints, "checkpoint_s": checkpoint_s,
            "load_s": figures.load_s, "output_s": figures.output_s, "total_s": total}


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


def _hours_line(plan: dict[str, Any], verdict: str) -> str:
    return (f"{plan.get('reserved_hours', 0):.2f} h of {plan.get('window_hours', 0):.2f} h "
            f"{verdict}")
