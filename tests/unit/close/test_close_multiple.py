"""Holm's step-down procedure over a campaign's comparisons, and the bootstrap p-value.

References: statsmodels' ``multipletests(method="holm")`` (the library reference, a test
dependency), a table of adjusted p-values worked out by hand, Holm's procedure written
again here in its sequential form
(reject p(i) ≤ α/(m − i + 1) until the first that is not), and the exact binomial
distribution of a bootstrap whose per-example differences are 0 or 1.
"""

from __future__ import annotations

import gc
import numpy as np
import pytest
from scipy.stats import binom
from statsmodels.stats.multitest import multipletests

from flightplan.close.conclusion import compare_runs, conclude
from flightplan.close.multiple import FAMILY_LEVEL, adjust, family_wise_level, holm, p_value
from flightplan.metrics import N_RESAMPLES, Predictions

# Worked by hand. p = (0.01, 0.04, 0.03, 0.005), m = 4: sorted 0.005, 0.01, 0.03, 0.04;
# (m − i + 1) · p(i) = 0.02, 0.03, 0.06, 0.04; running maximum 0.02, 0.03, 0.06, 0.06.
# At α = 0.025 only 0.005 is rejected (0.03 > 0.025 stops the procedure); at α = 0.05 also
# 0.01 (0.03 ≤ 0.05), and 0.03 stops it (0.06 > 0.05), so 0.04 is not tested.
# p = (0.5, 0.5, 0.001), m = 3: 0.003, then 2 · 0.5 = 1.0, then 0.5 → running max 1.0.
HAND = [
    ((0.01, 0.04, 0.03, 0.005), 0.025, (0.03, 0.06, 0.06, 0.02), (False, False, False, True)),
    ((0.01, 0.04, 0.03, 0.005), 0.05, (0.03, 0.06, 0.06, 0.02), (True, False, False, True)),
    ((0.5, 0.5, 0.001), 0.025, (1.0, 1.0, 0.003), (False, False, True)),
    ((0.02,), 0.025, (0.02,), (True,)),
    ((0.012, 0.012), 0.025, (0.024, 0.024), (True, True)),
]


@pytest.mark.parametrize("p, level, adjusted, rejected", HAND)
def test_holm_matches_the_hand_worked_table(p, level, adjusted, rejected):
    got_rejected, got_adjusted = holm(p, level)
    assert got_adjusted == pytest.approx(adjusted, abs=1e-12)
    assert tuple(got_rejected) == rejected


def _sequential_holm(p: np.ndarray, level: float) -> np.ndarray:
    """Holm (1979) as he states it: test the sorted p-values in turn at α/(m − i + 1)."""
    m = len(p)
    rejected = np.zeros(m, dtype=bool)
    for i, index in enumerate(np.argsort(p, kind="stable")):
        if p[index] > level / (m - i):
            break
        rejected[index] = True
    return rejected


def test_holm_rejects_what_the_sequential_procedure_rejects():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        m = int(rng.integers(1, 8))
        # small p-values, some tied, so the steps near α are exercised
        p = np.round(rng.uniform(0, 0.06, m) ** rng.uniform(0.5, 2), 3)
        rejected, _ = holm(p, FAMILY_LEVEL)
        assert rejected == _sequential_holm(p, FAMILY_LEVEL).tolist(), p


def test_holm_matches_statsmodels_multipletests():
    rng = np.random.default_rng(11)
    # multipletests(method="holm") calls gc.collect(): over a test worker's whole heap that
    # took 0.7 s a call in the suite. Frozen, the heap so far is not walked again.
    gc.freeze()
    try:
        for _ in range(100):
            m = int(rng.integers(1, 9))
            p = np.round(rng.uniform(0, 0.08, m) ** rng.uniform(0.5, 2), 4)
            rejected, adjusted = holm(p, FAMILY_LEVEL)
            want_rejected, want_adjusted, _, _ = multipletests(p, alpha=FAMILY_LEVEL,
                                                               method="holm")
            assert rejected == want_rejected.tolist(), p
            assert adjusted == [round(float(a), 6) for a in want_adjusted], p
    finally:
        gc.unfreeze()


def test_the_p_value_is_the_share_of_resamples_short_of_the_threshold_plus_one():
    # 2 of 4 resampled gains fall below +0.05 (one lies on it and counts for meets)
    assert p_value(np.array([0.1, 0.04, 0.05, -0.2]), 0.05) == (1 + 2) / (4 + 1)
    assert p_value(np.array([0.1, 0.2]), 0.05) == round(1 / 3, 6)


def _pair(extra: int, n: int = 400) -> tuple[Predictions, Predictions]:
    """The reference right on 200 of ``n``; the variant on the same plus ``extra`` more."""
    gold = np.zeros(n, dtype=int)
    reference = np.r_[np.zeros(200, dtype=int), np.ones(n - 200, dtype=int)]
    variant = reference.copy()
    variant[200:200 + extra] = 0
    ids = [str(i) for i in range(n)]
    return (Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=reference, probs=None),
            Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=variant, probs=None))


@pytest.mark.parametrize("min_gain", [0.01, 0.02, 0.025, 0.03])
def test_the_p_value_of_compare_follows_the_exact_bootstrap_distribution(min_gain):
    # accuracy gain = (ones drawn among the 10 examples only the variant gets right) / 400:
    # a resample's gain is X / 400 with X ~ Binomial(400, 10/400), so the share of
    # resamples below t is P(X < 400 t) = binom.cdf(ceil(400 t) − 1, 400, 0.025)
    reference, variant = _pair(10)
    result = compare_runs(reference, variant, metric="accuracy", goal="max", min_gain=min_gain)
    share = binom.cdf(np.ceil(400 * min_gain - 1e-9) - 1, 400, 10 / 400)
    expected = (1 + N_RESAMPLES * share) / (N_RESAMPLES + 1)
    # 4 binomial standard errors of the 2000-resample share
    assert abs(result["p_value"] - expected) <= 4 * np.sqrt(share * (1 - share) / N_RESAMPLES) \
        + 1 / N_RESAMPLES
    # meets exactly when the p-value is at the interval's one-sided level
    assert (result["verdict"] == "meets") == (result["p_value"] <= FAMILY_LEVEL)


def test_identical_runs_have_the_largest_p_value():
    reference, _ = _pair(0)
    assert compare_runs(reference, reference, metric="accuracy", goal="max",
                        min_gain=0.01)["p_value"] == 1.0
    # on the threshold itself every resample is "at or past" it, as the interval says
    assert compare_runs(reference, reference, metric="accuracy", goal="max",
                        min_gain=0.0)["p_value"] == round(1 / (N_RESAMPLES + 1), 6)


def _made(variant: str, p: float, verdict: str = "meets") -> dict:
    return {"variant": variant, "reference": "control", "verdict": verdict, "p_value": p,
            "gain": 0.09, "ci_low": 0.06, "ci_high": 0.12, "n_examples": 379,
            "examples_to_settle": None}


def test_holm_turns_a_lone_meets_into_inconclusive_and_says_so():
    # m = 3: sorted 0.01 · 3 = 0.03 > 0.025, so Holm rejects none (adjusted: 0.03, then
    # max(0.03, 0.02 · 2) = 0.04, then max(0.04, 0.6) = 0.6)
    comparisons = [_made("a", 0.01), _made("b", 0.02),
                   _made("c", 0.6, "does_not_meet") | {"ci_low": -0.1, "ci_high": 0.04}]
    holm_result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                           comparisons=comparisons, multiple="holm")
    none_result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                           comparisons=comparisons, multiple="none")
    assert none_result["answer"] == "yes"
    assert holm_result["answer"] == "inconclusive"
    assert [c["verdict"] for c in holm_result["comparisons"]] == \
        ["meets", "meets", "does_not_meet"]              # the unadjusted verdicts stay
    assert [c["verdict_adjusted"] for c in holm_result["comparisons"]] == \
        ["inconclusive", "inconclusive", "does_not_meet"]
    assert [c["p_value_adjusted"] for c in holm_result["comparisons"]] == [0.03, 0.04, 0.6]
    assert holm_result["family_wise_level"] == 0.025
    assert none_result["family_wise_level"] == 0.075
    assert holm_result["verdict"] == (
        "Inconclusive: no variant meets the threshold of +0.05 macro_f1 at the campaign's "
        "family-wise level. a (gain +0.0900 over control, 95% CI of the difference [+0.0600, "
        "+0.1200]) meets the threshold on its own (p = 0.0100) but not after Holm's "
        "adjustment (adjusted p = 0.0300, above 0.025). b (gain +0.0900 over control, 95% CI "
        "of the difference [+0.0600, +0.1200]) meets the threshold on its own (p = 0.0200) "
        "but not after Holm's adjustment (adjusted p = 0.0400, above 0.025). Holm's "
        "procedure over the 3 comparisons holds the chance that any of them falsely meets "
        "its threshold to 2.5% (the family-wise level).")


def test_holm_keeps_the_meets_it_confirms():
    # m = 3: 0.005 · 3 = 0.015 ≤ 0.025 rejected; 0.02 · 2 = 0.04 > 0.025 stops
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=[_made("a", 0.005), _made("b", 0.02),
                                   _made("c", 0.4, "inconclusive")], multiple="holm")
    assert result["answer"] == "yes"
    assert [c["verdict_adjusted"] for c in result["comparisons"]] == \
        ["meets", "inconclusive", "inconclusive"]
    assert result["verdict"].startswith("Yes: a (gain +0.0900 over control")
    assert "b (gain +0.0900 over control, 95% CI of the difference [+0.0600, +0.1200]) meets " \
           "the threshold on its own (p = 0.0200) but not after Holm's adjustment (adjusted " \
           "p = 0.0400, above 0.025)." in result["verdict"]


def test_a_comparison_alone_or_not_made_is_not_adjusted():
    missing = {"variant": "b", "reference": "control", "verdict": "not_available",
               "reason": "stopped"}
    alone = adjust([_made("a", 0.026), missing], multiple="holm")
    assert alone[0]["verdict_adjusted"] == "meets" and alone[0]["p_value_adjusted"] == 0.026
    assert "verdict_adjusted" not in alone[1]
    assert family_wise_level("holm", 1) == family_wise_level("none", 1) == 0.025
    assert family_wise_level("none", 50) == 1.0
