"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return.

The pilot is a short run of the control on the first examples of the corpus
(``textclf``: a frozen encoder embeds the pilot's ``n'_train`` training examples in
batches and its ``n'_test`` test examples one at a time, then a linear head trains). It
measures the encoder's forward time on length-sorted batches (``encode_s`` rows: short
and long inputs), the load, the head's step time, an evaluation, checkpoint costs and
output writing. A run on the whole corpus is re-estimated as (seconds)::

    fwd_s(T)   = f1 + (T − t1) · (f2 − f1) / (t2 − t1)    forward time of a batch of T ≥ t1
                 padded tokens: the line through the pilot's short (t1, f1) and long
                 (t2, f2) encoder batches; f1 · T / t1 below t1; T · (f1 + f2) / (t1 + t2)
                 when the line does not rise (t2 = t1, or noise)
    one_s      = (load_s − Σ encode_s − setup_s) / n'_test   one test example embedded alone
    steps      = ceil(n_train / B) · epochs
    saves      = 1 + floor(train_s / interval)      the runtime saves once early to measure
                 C and D, then every ``interval`` = choose_interval(C, D, R, L_tol, M)
                 (run/interval.py: Young 1974, Daly 2006; without M: L_tol − D − R, ≥ D)

    frozen encoder (control):
        load_s  = setup_s + Σ encode_s · n_train / n'_train + n_test · one_s
        train_s = steps · head_step_s
        eval_s  = epochs · head_eval_s · n_test / n'_test
    trained encoder (adapter):
        load_s  = setup_s
        train_s = steps · 3 · fwd_s(B · L)              forward + backward ≈ 3 forwards
                                                      (2N vs 6N FLOPs per token, Kaplan
                                                      et al. 2020)
        eval_s  = epochs · n_test · one_s · min(mean_len, L) / min(mean_len, L0)
    total_s = load_s + train_s + eval_s + saves · C + output_s

``setup_s`` (reading, hashing and tokenising the corpus, loading the tokenizer) is the
data check's wall time: the same work a run does before it builds its model. ``B · L``
assumes batches padded to ``max_length`` (an upper bound; near exact when most batches
hold one input longer than L, as with the drug reviews at 128 and 256). ``L0`` is the
control's max_length; ``mean_len`` the corpus's mean untruncated length (data check).

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
    "TRAIN_FORWARDS",
    "forward_seconds",
    "estimate_run_seconds",
    "cut_steps",
    "choose",
    "replan_from_options",
]

DECISIONS = ("continue", "cut", "stop")


@dataclass(frozen=True)
class PilotFigures:
    """What the pilot of the control measured (seconds, tokens, examples).

    Attributes:
        max_length: the control's max_length ``L0`` (tokens).
        n_train, n_test: examples in the campaign's training and test sets.
        pilot_n_train, pilot_n_test: the pilot's (the first examples of each).
        setup_s: the data check's wall time (corpus and tokenizer work of a run's start).
        load_s: the pilot's load: setup, model, both embedding passes.
        encode_total_s: the training set's embedding pass alone (Σ ``encode_s``).
        short_tokens, short_fwd_s: mean padded tokens and forward time of the shorter
            half of the encoder batches.
        long_tokens, long_fwd_s: the same for the longer half.
        head_step_s: the control's steady step time (first step left out).
        head_eval_s: one evaluation of the control on the pilot's test examples.
        mean_len: mean untruncated input length (tokens) from the data check.
        save_stall_s: ``C``, the loop's stall per checkpoint.
        persist_s: ``D``, until a checkpoint is durable.
        restore_s: ``R``, to restore a checkpoint in a new process.
        output_s: writing predictions, metrics and the artifact.
    """

    max_length: int
    n_train: int
    n_test: int
    pilot_n_train: int
    pilot_n_test: int
    setup_s: float
    load_s: float
    encode_total_s: float
    short_tokens: float
    short_fwd_s: float
    long_tokens: float
    long_fwd_s: float
    head_step_s: float
    head_eval_s: float
    mean_len: float
    save_stall_s: float
    persist_s: float
    restore_s: float
    output_s: float

    @property
    def one_example_s(self) -> float:
        """``one_s``: embedding one test example alone (s), from the pilot's load."""
        rest = self.load_s - self.encode_total_s - self.setup_s
        return max(0.0, rest) / self.pilot_n_test if self.pilot_n_test else 0.0

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (keys as the attribute names)."""
        return asdict(self)


@dataclass(frozen=True)
class RunShape:
    """What a run's duration depends on (from its params); ``trains_encoder`` is true
    for adapter variants, false for the frozen-encoder control."""

    name: str
    tier: str
    max_length: int
    batch_size: int
    epochs: int
    trains_encoder: bool


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


TRAIN_FORWARDS = 3
"""A training step costs about three forward passes (forward + backward ≈ 2N + 4N FLOPs
per token against 2N for the forward alone; Kaplan et al. 2020)."""


def forward_seconds(tokens: float, figures: PilotFigures) -> float:
    """Forward time (s) of a batch of ``tokens`` padded tokens (module docstring): the line
    through the pilot's short and long encoder batches from ``t1`` up, proportional below
    it, and proportional to the pooled seconds per token when the line does not rise."""
    t1, f1, t2, f2 = (figures.short_tokens, figures.short_fwd_s,
                      figures.long_tokens, figures.long_fwd_s)
    if t2 > t1 and f2 > f1:
        if tokens < t1:
            return f1 * tokens / t1
        return f1 + (tokens - t1) * (f2 - f1) / (t2 - t1)
    return tokens * (f1 + f2) / (t1 + t2) if t1 + t2 > 0 else f1


def estimate_run_seconds(shape: RunShape, figures: PilotFigures, *, tolerated_loss_s: float,
                         mtbi_s: float | None = None) -> dict[str, float]:
    """Re-estimate one run from the pilot (formula in the module docstring).

    Returns:
        ``{steps, tokens_per_batch, step_s, train_s, eval_s, interval_s, checkpoints,
        checkpoint_s, load_s, output_s, total_s}`` (seconds, counts, tokens);
        ``eval_s`` is the sum over the run's evaluations.
    """
    steps = math.ceil(figures.n_train / shape.batch_size) * shape.epochs
    one_s = figures.one_example_s
    if shape.trains_encoder:
        tokens = float(shape.batch_size * shape.max_length)
        step_s = TRAIN_FORWARDS * forward_seconds(tokens, figures)
        reference = min(figures.mean_len, figures.max_length)
        length_ratio = min(figures.mean_len, shape.max_length) / reference if reference else 1.0
        load_s = figures.setup_s
        one_eval = figures.n_test * one_s * length_ratio
    else:
        tokens = 0.0
        step_s = figures.head_step_s
        load_s = (figures.setup_s + figures.n_test * one_s + figures.encode_total_s
                  * figures.n_train / max(1, figures.pilot_n_train))
        one_eval = figures.head_eval_s * figures.n_test / max(1, figures.pilot_n_test)
    train_s = steps * step_s
    eval_s = shape.epochs * one_eval
    interval = choose_interval(save_stall_s=figures.save_stall_s, persist_s=figures.persist_s,
                               restore_s=figures.restore_s, tolerated_loss_s=tolerated_loss_s,
                               mtbi_s=mtbi_s).interval_s
    checkpoints = 1 + (math.floor(train_s / interval) if interval > 0 else 0)
    checkpoint_s = checkpoints * figures.save_stall_s
    total = load_s + train_s + eval_s + checkpoint_s + figures.output_s
    return {"steps": steps, "tokens_per_batch": tokens, "step_s": step_s, "train_s": train_s,
            "eval_s": eval_s, "interval_s": interval, "checkpoints": checkpoints,
            "checkpoint_s": checkpoint_s, "load_s": load_s, "output_s": figures.output_s,
            "total_s": total}


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
