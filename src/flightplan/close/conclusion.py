"""The conclusion: each variant against its reference on the decision metric.

For a variant V with reference R, both predicting the same test examples, the difference
is ``d = metric(V) - metric(R)`` and the gain is ``d`` when the goal is ``max`` and ``-d``
when it is ``min``. Its 95 % confidence interval is a paired bootstrap over test
examples (Efron & Tibshirani 1993, ch. 13; ``scipy.stats.bootstrap`` with
``paired=True``: every resample draws the same examples for V and R), percentile method,
2000 resamples, fixed seed, so the same predictions always give the same interval.

Verdict per variant, against ``min_gain``:

- ``meets``: the lower bound of the gain's interval is at least ``min_gain``;
- ``inconclusive``: the point gain reaches ``min_gain`` but the lower bound does not;
- ``does_not_meet``: the point gain is below ``min_gain``;
- ``not_available``: V or R has no usable predictions (stopped, missing, not accepted).

The campaign's answer is "yes" when some variant meets the threshold, otherwise the
clearly stated negative: "No variant meets the threshold".

Usage::

    result = compare(gold, ref_pred, var_pred, metric="macro_f1", goal="max",
                     n_labels=3, min_gain=0.05)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.stats import bootstrap

from flightplan.errors import SpecError

__all__ = ["METRICS", "SEED", "N_RESAMPLES", "CONFIDENCE", "metric_value", "compare",
           "conclude"]

SEED = 20240601
N_RESAMPLES = 2000
CONFIDENCE = 0.95


def _accuracy(gold: np.ndarray, pred: np.ndarray, n_labels: int) -> np.ndarray:
    """Accuracy along the last axis. gold, pred: (..., N) int → (...)."""
    return (gold == pred).mean(axis=-1)


def _macro_f1(gold: np.ndarray, pred: np.ndarray, n_labels: int) -> np.ndarray:
    """Macro-averaged F1 over ``n_labels`` classes along the last axis (…, N) → (…).

    F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c), 0 when the denominator is 0 (as scikit-learn
    with ``zero_division=0``); the macro average weighs every class equally.
    """
    scores = []
    for c in range(n_labels):
        is_gold, is_pred = gold == c, pred == c
        tp = (is_gold & is_pred).sum(axis=-1)
        denominator = is_gold.sum(axis=-1) + is_pred.sum(axis=-1)
        scores.append(np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0))
    return np.mean(scores, axis=0)


METRICS: dict[str, Callable[[np.ndarray, np.ndarray, int], np.ndarray]] = {
    "accuracy": _accuracy,
    "macro_f1": _macro_f1,
}


def _metric(name: str) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    if name not in METRICS:
        raise SpecError(f"{name!r} cannot be computed from predictions; use one of "
                        f"{', '.join(sorted(METRICS))}", field="campaign.metric", value=name)
    return METRICS[name]


def metric_value(name: str, gold: np.ndarray, pred: np.ndarray, n_labels: int) -> float:
    """The metric ``name`` of one run's predictions (gold, pred: (N,) label indices).

    Raises:
        SpecError: ``name`` is not one of :data:`METRICS`.
    """
    return float(_metric(name)(np.asarray(gold), np.asarray(pred), n_labels))


def compare(gold: np.ndarray, reference: np.ndarray, variant: np.ndarray, *, metric: str,
            goal: str, n_labels: int, min_gain: float) -> dict[str, Any]:
    """A variant against its reference on the same examples.

    Args:
        gold, reference, variant: (N,) label indices, aligned by example.
        metric: a name in :data:`METRICS`. goal: ``"max"`` or ``"min"``.
        n_labels: number of classes. min_gain: the threshold, in metric units.

    Returns:
        ``{reference_value, variant_value, difference, gain, ci_low, ci_high,
        confidence_level, n_examples, n_resamples, seed, verdict}``; ``difference`` and
        its interval are ``variant - reference``; ``gain`` is the difference signed by
        ``goal``; values rounded to 6 places.
    """
    function = _metric(metric)
    gold, reference, variant = (np.asarray(a, dtype=np.int64) for a in (gold, reference, variant))
    sign = 1.0 if goal == "max" else -1.0

    def difference(g: np.ndarray, r: np.ndarray, v: np.ndarray, axis: int = -1) -> np.ndarray:
        return function(g, v, n_labels) - function(g, r, n_labels)

    point = float(difference(gold, reference, variant))
    if len(gold) >= 2 and bool(np.any(reference != variant)):
        result = bootstrap((gold, reference, variant), difference, paired=True, vectorized=True,
                           n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                           method="percentile", rng=np.random.default_rng(SEED))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    else:  # every resample gives the same difference: the interval is the point
        low = high = point
    gain = sign * point
    gain_low = min(sign * low, sign * high)
    if gain_low >= min_gain:
        verdict = "meets"
    elif gain >= min_gain:
        verdict = "inconclusive"
    else:
        verdict = "does_not_meet"
    return {"reference_value": round(float(function(gold, reference, n_labels)), 6),
            "variant_value": round(float(function(gold, variant, n_labels)), 6),
            "difference": round(point, 6), "gain": round(gain, 6),
            "ci_low": round(low, 6), "ci_high": round(high, 6),
            "confidence_level": CONFIDENCE, "n_examples": int(len(gold)),
            "n_resamples": N_RESAMPLES, "seed": SEED, "verdict": verdict}


def conclude(*, question: str, metric: str, goal: str, min_gain: float,
             comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """The campaign's answer from the per-variant comparisons.

    Args:
        comparisons: ``[{variant, reference, verdict, ...}]`` (from :func:`compare`, plus
            names and run ids; ``verdict`` ``not_available`` with a ``reason`` when a side
            is missing).

    Returns:
        ``{question, metric, goal, min_gain, answer ("yes"/"no"), verdict (one sentence),
        comparisons}``.
    """
    winners = [c for c in comparisons if c["verdict"] == "meets"]
    unit = f"{min_gain:+g} {metric}" if goal == "max" else f"{-min_gain:+g} {metric} (lower is better)"
    if winners:
        names = ", ".join(f"{c['variant']} (gain {c['gain']:+.4f} over {c['reference']}, "
                          f"95% CI of the difference [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}])"
                          for c in winners)
        verdict = f"Yes: {names} meets the threshold of {unit}."
    else:
        unsure = [c["variant"] for c in comparisons if c["verdict"] == "inconclusive"]
        missing = [c["variant"] for c in comparisons if c["verdict"] == "not_available"]
        verdict = f"No variant meets the threshold of {unit}."
        if unsure:
            verdict += (f" {', '.join(unsure)} reaches it on the point estimate, but its "
                        f"confidence interval does not exclude a smaller gain.")
        if missing:
            verdict += f" Not compared (no usable predictions): {', '.join(missing)}."
    return {"question": question, "metric": metric, "goal": goal, "min_gain": min_gain,
            "answer": "yes" if winners else "no", "verdict": verdict, "comparisons": comparisons}
