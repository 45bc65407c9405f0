"""The conclusion: each variant against its reference on the decision metric.

For a variant V with reference R, both predicting the same test examples, the difference
is ``d = metric(V) - metric(R)`` and the gain is ``d`` when the goal is ``max`` and ``-d``
when it is ``min``. Its 95 % confidence interval is a paired bootstrap over test
examples (Efron & Tibshirani 1993, ch. 13; ``scipy.stats.bootstrap`` with
``paired=True``: every resample draws the same examples for V and R), percentile method,
2000 resamples, fixed seed, so the same predictions always give the same interval. Any
decision metric works (:mod:`flightplan.metrics`): a classification metric of gold and
predicted labels, or the mean of a per-example column.

Verdict per variant, against ``min_gain`` (the gain's interval is the difference's,
signed by ``goal``):

- ``meets``: the whole interval lies at or past ``min_gain`` (its lower bound is at
  least ``min_gain``);
- ``does_not_meet``: the whole interval lies short of ``min_gain`` (its upper bound is
  below it);
- ``inconclusive``: the interval straddles ``min_gain``; ``examples_to_settle`` then says
  how many test examples would likely settle it
  (:func:`flightplan.plan.power.examples_to_settle`);
- ``not_available``: V or R has no usable predictions (stopped, missing, not accepted).

The campaign's answer is ``yes`` when some variant meets the threshold; else
``inconclusive`` when some comparison is inconclusive (the test set could not tell);
else ``no``, the clearly stated negative: "No variant meets the threshold".

Usage::

    result = compare_runs(ref_predictions, var_predictions, metric="mean:abs_error",
                          goal="min", min_gain=0.05)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.stats import bootstrap

from flightplan.metrics import CONFIDENCE, N_RESAMPLES, SEED, Metric, Predictions, paired
from flightplan.plan.power import (MAX_COUNT, NO_PRACTICAL_SIZE, examples_to_settle,
                                   rounded_count)

__all__ = ["SEED", "N_RESAMPLES", "CONFIDENCE", "compare", "compare_runs", "conclude",
           "verdict_of"]


def compare(statistic: Callable[..., np.ndarray], reference: tuple[np.ndarray, ...],
            variant: tuple[np.ndarray, ...], *, goal: str, min_gain: float) -> dict[str, Any]:
    """A variant against its reference on the same examples.

    Args:
        statistic: the metric of per-example arrays, ``statistic(*arrays, axis=-1)``:
            (..., N) → (...) (:func:`flightplan.metrics.paired`).
        reference, variant: each run's arrays (N,), aligned by example.
        goal: ``"max"`` or ``"min"``. min_gain: the threshold, in metric units.

    Returns:
        ``{reference_value, variant_value, difference, gain, ci_low, ci_high,
        confidence_level, n_examples, n_resamples, seed, verdict, examples_to_settle}``;
        ``difference`` and its interval are ``variant - reference``; ``gain`` is the
        difference signed by ``goal``; values rounded to 6 places; ``examples_to_settle``
        (test examples in all) only for an inconclusive verdict, else None.
    """
    reference = tuple(np.asarray(a) for a in reference)
    variant = tuple(np.asarray(a) for a in variant)
    k = len(reference)
    sign = 1.0 if goal == "max" else -1.0

    def difference(*arrays: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(statistic(*arrays[k:], axis=axis) - statistic(*arrays[:k], axis=axis))

    point = float(difference(*reference, *variant))
    n = len(reference[0])
    same = all(np.array_equal(r, v) for r, v in zip(reference, variant))
    if n >= 2 and not same:
        result = bootstrap((*reference, *variant), difference, paired=True, vectorized=True,
                           n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                           method="percentile", rng=np.random.default_rng(SEED))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    else:  # every resample gives the same difference: the interval is the point
        low = high = point
    gain = sign * point
    gain_low, gain_high = sorted((sign * low, sign * high))
    verdict, settle = verdict_of(gain, gain_low, gain_high, n_examples=n, min_gain=min_gain)
    return {"reference_value": round(float(statistic(*reference)), 6),
            "variant_value": round(float(statistic(*variant)), 6),
            "difference": round(point, 6), "gain": round(gain, 6),
            "ci_low": round(low, 6), "ci_high": round(high, 6),
            "confidence_level": CONFIDENCE, "n_examples": int(n),
            "n_resamples": N_RESAMPLES, "seed": SEED, "verdict": verdict,
            "examples_to_settle": settle}


def verdict_of(gain: float, gain_low: float, gain_high: float, *, n_examples: int,
               min_gain: float) -> tuple[str, int | None]:
    """The verdict of a gain whose interval is ``[gain_low, gain_high]`` against
    ``min_gain`` (module docstring), and for ``inconclusive`` the test examples that
    would likely settle it (:func:`flightplan.plan.power.examples_to_settle`), else None."""
    if gain_low >= min_gain:
        return "meets", None
    if gain_high < min_gain:
        return "does_not_meet", None
    return "inconclusive", examples_to_settle(gain=gain, gain_low=gain_low,
                                              gain_high=gain_high, n_examples=n_examples,
                                              min_gain=min_gain)


def compare_runs(reference: Predictions, variant: Predictions, *, metric: Metric | str,
                 goal: str, min_gain: float) -> dict[str, Any]:
    """:func:`compare` on two runs' predictions, aligned on their shared example ids.

    Raises:
        CheckFailed: a run lacks what the metric needs (:func:`flightplan.metrics.paired`).
    """
    statistic, ref_arrays, var_arrays = paired(metric, reference, variant)
    return compare(statistic, ref_arrays, var_arrays, goal=goal, min_gain=min_gain)


def conclude(*, question: str, metric: str, goal: str, min_gain: float,
             comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """The campaign's answer from the per-variant comparisons.

    Args:
        comparisons: ``[{variant, reference, verdict, ...}]`` (from :func:`compare`, plus
            names and run ids; ``verdict`` ``not_available`` with a ``reason`` when a side
            is missing).

    Returns:
        ``{question, metric, goal, min_gain, answer ("yes"/"no"/"inconclusive"), verdict
        (one paragraph), comparisons}``; an inconclusive comparison's sentence says how
        many test examples would likely settle it. "no" only when every comparison was
        made and none meets: a variant that could not be compared (``not_available``)
        leaves the answer inconclusive, since its result could have met.
    """
    winners = [c for c in comparisons if c["verdict"] == "meets"]
    unsure = [c for c in comparisons if c["verdict"] == "inconclusive"]
    unit = f"{min_gain:+g} {metric}" + ("" if goal == "max" else " (lower is better: a gain is "
                                                                "a lower value)")
    if winners:
        answer = "yes"
        names = ", ".join(f"{c['variant']} ({_gain_text(c, goal)})" for c in winners)
        verdict = f"Yes: {names} meets the threshold of {unit}."
    else:
        missing = [c["variant"] for c in comparisons if c["verdict"] == "not_available"]
        if unsure:
            answer = "inconclusive"
            names = " and ".join(c["variant"] for c in unsure)
            verdict = (f"Inconclusive: no variant meets the threshold of {unit}, and the test "
                       f"set cannot tell whether {names} "
                       f"{'does' if len(unsure) == 1 else 'do'}.")
            for c in unsure:
                verdict += f" {c['variant']} ({_gain_text(c, goal)}): {_settle_text(c, min_gain)}."
        elif missing:
            answer = "inconclusive"
            which = ("no variant compared" if len(missing) < len(comparisons)
                     else "no variant could be compared, so none")
            verdict = f"Inconclusive: {which} meets the threshold of {unit}."
        else:
            answer = "no"
            verdict = f"No variant meets the threshold of {unit}."
        if missing:
            verdict += f" Not compared (no usable predictions): {', '.join(missing)}."
    return {"question": question, "metric": metric, "goal": goal, "min_gain": min_gain,
            "answer": answer, "verdict": verdict, "comparisons": comparisons}


def _settle_text(comparison: dict[str, Any], min_gain: float) -> str:
    """What would settle an inconclusive comparison, in words: a test size (at most 7
    digits, :func:`flightplan.plan.power.practical_size`), or that none of practical size
    does, with the gap between the gain and the threshold."""
    count = comparison.get("examples_to_settle")
    if count is None or count > MAX_COUNT:
        gap = float(comparison["gain"]) - min_gain
        return (f"its interval straddles the threshold and {NO_PRACTICAL_SIZE} (its gain is "
                f"{gap:+.4f} from the threshold)")
    now = comparison.get("n_examples")
    return (f"its interval straddles the threshold; about {rounded_count(count):,} test "
            f"examples" + (f" (now {now})" if now else "") + " would likely settle it")


def _gain_text(comparison: dict[str, Any], goal: str) -> str:
    """``gain +0.0586 over control, 95% CI of the difference [+0.0034, +0.1169]`` (goal
    ``max``: the gain is the difference), or for goal ``min`` the interval of the gain
    itself (the difference with its sign turned), so every figure reads the same way."""
    if goal == "max":
        interval = f"95% CI of the difference [{comparison['ci_low']:+.4f}, " \
                   f"{comparison['ci_high']:+.4f}]"
    else:
        interval = f"95% CI of the gain [{-comparison['ci_high']:+.4f}, " \
                   f"{-comparison['ci_low']:+.4f}]"
    return f"gain {comparison['gain']:+.4f} over {comparison['reference']}, {interval}"
