"""One answer for the campaign: Holm's step-down procedure over its comparisons.

Each comparison's *meets* is a one-sided test of H0: gain < min_gain at level
α = (1 − CONFIDENCE) / 2 = 0.025 (the lower tail of its 95 % interval). With m comparisons
each at α, the chance that at least one of them falsely meets, and so that the campaign
falsely answers "yes", is up to m · α. Holm's step-down procedure (Holm, "A Simple
Sequentially Rejective Multiple Test Procedure", Scand. J. Statist. 6, 1979) holds that
chance, the *family-wise level*, at α whatever the dependence between the comparisons:
sort the m p-values p(1) ≤ … ≤ p(m); reject H0 for (1), (2), … as long as
p(i) ≤ α / (m − i + 1); stop at the first that is not. Equivalently, the adjusted p-value
is p̃(i) = max over j ≤ i of min(1, (m − j + 1) · p(j)), and H0 is rejected when p̃ ≤ α
(what ``statsmodels.stats.multitest.multipletests(method="holm")`` returns).

The p-value of a comparison comes from the same paired bootstrap as its interval
(:func:`p_value`). Its *adjusted verdict*:

- ``meets`` when its own interval meets the threshold and Holm rejects its H0 (both, so
  a "meets" never stands on one alone); a comparison alone in its family (m = 1) keeps
  its own verdict, since Holm then tests it at α, which is what its interval does;
- ``does_not_meet`` when its own verdict is that: the campaign's "no" needs *every*
  comparison short of its threshold, an intersection-union test that holds its level
  without any correction (Berger, "Multiparameter Hypothesis Testing and Acceptance
  Sampling", Technometrics 24, 1982);
- ``inconclusive`` otherwise (a comparison that meets on its own but not after Holm says
  so); ``not_available`` stays as it is and is not counted in m.

With ``multiple = "none"`` the adjusted verdict is the unadjusted one, and the chance of a
false "yes" is stated as up to min(1, m · α) (Bonferroni's bound).

Usage::

    p = p_value(gains_of_each_resample, min_gain=0.05)
    rejected, adjusted = holm([0.01, 0.04, 0.03], level=FAMILY_LEVEL)
    comparisons = adjust(comparisons, multiple="holm")
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from flightplan.metrics import CONFIDENCE

__all__ = ["FAMILY_LEVEL", "TIE", "p_value", "holm", "family_wise_level", "adjust"]

FAMILY_LEVEL = round((1 - CONFIDENCE) / 2, 6)
"""α: the one-sided level of one comparison's *meets* (the 95 % interval's lower tail,
0.025), and the family-wise level of the campaign's "yes" under Holm."""


TIE = 1e-9
"""A resampled gain this close to the threshold counts as on it (:func:`p_value`)."""


def p_value(gains: np.ndarray, min_gain: float) -> float:
    """One-sided bootstrap p-value of H0: gain < ``min_gain`` (the gain short of the
    threshold; *meets* is "at or past" it, so a resample exactly on the threshold counts
    for it, as it does for the interval's lower bound).

    The share of the bootstrap's resampled gains below ``min_gain``, with the +1
    correction that keeps it a valid p-value for a finite number B of resamples (Davison &
    Hinkley, *Bootstrap Methods and their Application*, 1997, p. 158)::

        p = (1 + #{b : gain_b < min_gain}) / (B + 1)

    A resample within :data:`TIE` of the threshold counts as on it: a metric with coarse
    steps (accuracy on 400 examples moves by 1/400) puts many resamples exactly there,
    and the difference of two floating-point scores lands a hair either side of it.

    With B = 2000, p ≤ 0.025 exactly when at most 49 resamples fall below the threshold;
    the percentile interval's lower bound (interpolated between the 50th and 51st
    smallest resamples) is then at or past it too, so the test and the interval's *meets*
    agree but when exactly 50 fall below and the 51st lies far past (a metric with coarse
    steps): there the interval meets and p = 51/2001 does not. Hence a comparison alone
    in its family keeps its own verdict (:func:`adjust`).

    Args:
        gains: (B,) the gain of each resample (the difference signed by the goal).
        min_gain: the threshold, in metric units.

    Returns:
        p in [1/(B+1), 1], rounded to 6 places.
    """
    gains = np.asarray(gains, dtype=np.float64)
    below = np.count_nonzero(gains < min_gain - TIE)
    return round((1 + int(below)) / (len(gains) + 1), 6)


def holm(p_values: Sequence[float], level: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure (module docstring).

    Args:
        p_values: the m p-values, any order.
        level: α, the family-wise level.

    Returns:
        ``(rejected, adjusted)``, both in the order of ``p_values``: whether each H0 is
        rejected, and its Holm-adjusted p-value (6 places). ``([], [])`` for m = 0.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])    # (m − i + 1) · p(i), i from 1
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(steps) if m else steps
    return [bool(a <= level) for a in adjusted], [round(float(a), 6) for a in adjusted]


def family_wise_level(multiple: str, comparisons: int) -> float:
    """The chance of a false "yes" the campaign's answer is held to, at most: α under
    Holm, min(1, m · α) with ``multiple = "none"`` (m comparisons made)."""
    if multiple == "holm" or comparisons <= 1:
        return FAMILY_LEVEL
    return round(min(1.0, comparisons * FAMILY_LEVEL), 6)


def adjust(comparisons: list[dict[str, Any]], *, multiple: str,
           level: float = FAMILY_LEVEL) -> list[dict[str, Any]]:
    """The comparisons with their adjusted verdicts (module docstring), new dicts.

    Args:
        comparisons: ``[{verdict, p_value, ...}]`` (:func:`flightplan.close.conclusion.
            compare` entries); a made comparison without a numeric ``p_value`` (written
            before p-values were) counts as p = 1 under Holm: it cannot be confirmed.
        multiple: ``"holm"`` or ``"none"``. level: α.

    Returns:
        Each comparison plus ``p_value_adjusted`` and ``verdict_adjusted`` (both absent
        from a ``not_available`` one; its own p-value and verdict with ``"none"`` or m = 1);
        the unadjusted keys are kept as they are.
    """
    made = [i for i, c in enumerate(comparisons) if c.get("verdict") != "not_available"]
    raw = [comparisons[i].get("p_value") for i in made]
    out = [dict(c) for c in comparisons]
    if multiple != "holm" or len(made) == 1:
        for i, p in zip(made, raw):
            out[i] |= {"p_value_adjusted": p, "verdict_adjusted": out[i]["verdict"]}
        return out
    rejected, adjusted = holm([float(v) if isinstance(v, (int, float)) else 1.0 for v in raw],
                              level)
    for i, reject, p_adjusted in zip(made, rejected, adjusted):
        verdict = out[i]["verdict"]
        out[i] |= {"p_value_adjusted": p_adjusted,
                   "verdict_adjusted": "inconclusive" if verdict == "meets" and not reject
                   else verdict}
    return out
