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

Each comparison also carries the one-sided p-value of H0: gain < ``min_gain`` from the
same resamples, and beside its own verdict an *adjusted* one: with ``[campaign] multiple =
"holm"`` (the default) Holm's step-down procedure over the campaign's comparisons holds the
chance of any false "meets" to 2.5 % (:mod:`flightplan.close.multiple`); with ``"none"``
the adjusted verdict is its own.

The campaign's answer is ``yes`` when some variant meets the threshold (its adjusted
verdict); else ``inconclusive`` when some comparison is inconclusive (the test set could
not tell) or meets only on its own, before Holm's adjustment; else ``no``, the clearly
stated negative: "No variant meets the threshold".

Usage::

    result = compare_runs(ref_predictions, var_predictions, metric="mean:abs_error",
                          goal="min", min_gain=0.05)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.stats import bootstrap

from flightplan.close.multiple import FAMILY_LEVEL, adjust, family_wise_level, p_value
from flightplan.close.seed_notice import notice_text, seed_notice
from flightplan.metrics import CONFIDENCE, N_RESAMPLES, SEED, Metric, Predictions, paired
from flightplan.plan.power import (MAX_COUNT, NO_PRACTICAL_SIZE, examples_to_settle,
                                   rounded_count)

__all__ = ["SEED", "N_RESAMPLES", "CONFIDENCE", "compare", "compare_runs", "conclude",
           "verdict_of", "comparison_result", "unusable_text"]


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
        confidence_level, n_examples, n_resamples, seed, verdict, examples_to_settle,
        p_value}``; ``p_value``: the one-sided p-value of H0: gain < ``min_gain`` from the
        same resamples (:func:`flightplan.close.multiple.p_value`);
        ``difference`` and its interval are ``variant - reference``; ``gain`` is the
        difference signed by ``goal``; values rounded to 6 places; ``examples_to_settle``
        (test examples in all) only for an inconclusive verdict, else None.
    """
    reference = tuple(np.asarray(a) for a in reference)
    variant = tuple(np.asarray(a) for a in variant)
    k = len(reference)

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
        resampled = np.asarray(result.bootstrap_distribution, dtype=np.float64)
    else:  # every resample gives the same difference: the interval is the point
        low = high = point
        resampled = np.full(N_RESAMPLES, point)
    return comparison_result(float(statistic(*reference)), float(statistic(*variant)), point,
                             (low, high), resampled, n_examples=n, goal=goal,
                             min_gain=min_gain, n_resamples=N_RESAMPLES, seed=SEED)


def comparison_result(reference_value: float, variant_value: float, point: float,
                      interval: tuple[float, float], resampled: np.ndarray, *,
                      n_examples: int, goal: str, min_gain: float, n_resamples: int,
                      seed: int) -> dict[str, Any]:
    """The keys of :func:`compare` from a comparison's figures, whichever bootstrap made
    them (over examples, or over replicates and examples:
    :func:`flightplan.close.replicates.compare_replicates`).

    Args:
        reference_value, variant_value: each side's metric. point: variant − reference.
        interval: ``(low, high)`` of variant − reference. resampled: the bootstrap's
            differences (variant − reference), from which the p-value comes.
        n_examples: test examples. goal, min_gain: the decision rule.
        n_resamples, seed: the bootstrap's draws and generator seed, as recorded.
    """
    sign = 1.0 if goal == "max" else -1.0
    low, high = interval
    gain = sign * point
    gain_low, gain_high = sorted((sign * low, sign * high))
    verdict, settle = verdict_of(gain, gain_low, gain_high, n_examples=n_examples,
                                 min_gain=min_gain)
    return {"reference_value": round(reference_value, 6),
            "variant_value": round(variant_value, 6),
            "difference": round(point, 6), "gain": round(gain, 6),
            "ci_low": round(low, 6), "ci_high": round(high, 6),
            "confidence_level": CONFIDENCE, "n_examples": int(n_examples),
            "n_resamples": n_resamples, "seed": seed, "verdict": verdict,
            "examples_to_settle": settle, "p_value": p_value(sign * resampled, min_gain)}


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


def unusable_text(names: list[str]) -> str:
    """``"no usable predictions for variant and control"``: why a comparison of runs
    ``names`` could not be made (the acceptance step's ``reason`` begins with it, the
    verdict gives it)."""
    return f"no usable predictions for {' and '.join(names)}"


def _not_compared_text(comparison: dict[str, Any]) -> str:
    """``"hidden-64 against control (no usable predictions for control)"``: a comparison
    that could not be made, naming the side that lacks predictions (``unusable``, set by
    :func:`flightplan.close.acceptance.comparisons`), else its ``reason``."""
    lacking = comparison.get("unusable")
    why = (unusable_text(lacking) if lacking
           else comparison.get("reason") or "no usable predictions")
    return f"{comparison['variant']} against {comparison['reference']} ({why})"


def conclude(*, question: str, metric: str, goal: str, min_gain: float,
             comparisons: list[dict[str, Any]], multiple: str = "none") -> dict[str, Any]:
    """The campaign's answer from the per-variant comparisons.

    Args:
        comparisons: ``[{variant, reference, verdict, p_value, ...}]`` (from
            :func:`compare`, plus names and run ids; ``verdict`` ``not_available`` with a
            ``reason`` when a side is missing).
        multiple: ``"holm"`` (the answer from the verdicts adjusted by Holm's procedure,
            :mod:`flightplan.close.multiple`) or ``"none"`` (from each comparison's own
            verdict); the campaign's ``[campaign] multiple``.

    A comparison with a ``seed_notice`` (``{seed_sd, seed_sd_source}``: both sides ran
    one seed, :func:`flightplan.close.seed_notice.with_seed_spread`) gets it completed
    with the interval the seed spread would make and that interval's verdict
    (:func:`~flightplan.close.seed_notice.seed_notice`), and the paragraph ends with the
    notice (:func:`~flightplan.close.seed_notice.notice_text`); its own verdict and the
    answer do not change.

    Returns:
        ``{question, metric, goal, min_gain, answer ("yes"/"no"/"inconclusive"), verdict
        (one paragraph), comparisons, multiple, comparisons_made, comparison_level,
        family_wise_level}``; ``comparison_level``: the one-sided level of one
        comparison's *meets* (0.025);
        each made comparison gains ``p_value_adjusted`` and ``verdict_adjusted``
        (:func:`~flightplan.close.multiple.adjust`); ``family_wise_level``: the most the
        chance of a false "yes" can be (:func:`~flightplan.close.multiple.family_wise_level`),
        which the paragraph states when two or more comparisons were made. An
        inconclusive comparison's sentence says how many test examples would likely
        settle it; one that meets on its own but not after Holm says so with both
        p-values. "no" only when every comparison was made and none meets: a variant that
        could not be compared (``not_available``) leaves the answer inconclusive, since
        its result could have met.
    """
    comparisons = [c | ({"seed_notice": seed_notice(c, goal=goal, min_gain=min_gain)}
                        if c.get("seed_notice") is not None else {})
                   for c in adjust(comparisons, multiple=multiple)]
    made = sum(1 for c in comparisons if c["verdict"] != "not_available")
    level = family_wise_level(multiple, made)
    winners = [c for c in comparisons if c.get("verdict_adjusted") == "meets"]
    held = [c for c in comparisons if c["verdict"] == "meets" and c not in winners]
    unsure = [c for c in comparisons if c["verdict"] == "inconclusive"]
    unit = f"{min_gain:+g} {metric}" + ("" if goal == "max" else " (lower is better: a gain is "
                                                                "a lower value)")
    if winners:
        answer = "yes"
        names = ", ".join(f"{c['variant']} ({_gain_text(c, goal)})" for c in winners)
        verdict = f"Yes: {names} meets the threshold of {unit}."
        verdict += "".join(f" {_held_text(c, goal)}." for c in held)
    else:
        missing = [c for c in comparisons if c["verdict"] == "not_available"]
        if unsure:
            answer = "inconclusive"
            names = " and ".join(c["variant"] for c in unsure)
            verdict = (f"Inconclusive: no variant meets the threshold of {unit}, and the test "
                       f"set cannot tell whether {names} "
                       f"{'does' if len(unsure) == 1 else 'do'}.")
            for c in unsure:
                verdict += f" {c['variant']} ({_gain_text(c, goal)}): {_settle_text(c, min_gain)}."
            verdict += "".join(f" {_held_text(c, goal)}." for c in held)
        elif held:
            answer = "inconclusive"
            verdict = (f"Inconclusive: no variant meets the threshold of {unit} at the "
                       f"campaign's family-wise level."
                       + "".join(f" {_held_text(c, goal)}." for c in held))
        elif missing:
            answer = "inconclusive"
            which = ("no variant compared" if len(missing) < len(comparisons)
                     else "no variant could be compared, so none")
            verdict = f"Inconclusive: {which} meets the threshold of {unit}."
        else:
            answer = "no"
            verdict = f"No variant meets the threshold of {unit}." + "".join(
                f" {c['variant']}: {_gain_text(c, goal)}." for c in comparisons
                if c["verdict"] == "does_not_meet")
        if missing:
            verdict += f" Not compared: {'; '.join(_not_compared_text(c) for c in missing)}."
    if made >= 2:
        verdict += f" {_level_text(multiple, made, level)}"
    notice = notice_text(comparisons, goal=goal, metric=metric)
    verdict += f" {notice}" if notice else ""
    return {"question": question, "metric": metric, "goal": goal, "min_gain": min_gain,
            "answer": answer, "verdict": verdict, "comparisons": comparisons,
            "multiple": multiple, "comparisons_made": made, "comparison_level": FAMILY_LEVEL,
            "family_wise_level": level}


def _level_text(multiple: str, made: int, level: float) -> str:
    """The sentence that states the family-wise level of the answer's "yes"."""
    if multiple == "holm":
        return (f"Holm's procedure over the {made} comparisons holds the chance that any of "
                f"them falsely meets its threshold to {level:.1%} (the family-wise level).")
    return (f"Each of the {made} comparisons is taken at its own {FAMILY_LEVEL:.1%} level "
            f"(multiple = \"none\"), so the chance that any of them falsely meets its "
            f"threshold is up to {level:.1%}.")


def _held_text(comparison: dict[str, Any], goal: str) -> str:
    """A comparison that meets on its own but not after Holm's adjustment, with both
    p-values."""
    return (f"{comparison['variant']} ({_gain_text(comparison, goal)}) meets the threshold on "
            f"its own (p = {comparison['p_value']:.4f}) but not after Holm's adjustment "
            f"(adjusted p = {comparison['p_value_adjusted']:.4f}, above {FAMILY_LEVEL:g})")


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
