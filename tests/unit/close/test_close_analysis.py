"""Error analysis and the conclusion, on predictions worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from close_fixture import TEXTS, rows
from closefake.textclf import write_csv

from flightplan.close.analysis import error_analysis, error_markdown, excerpt
from flightplan.close.conclusion import compare_runs, conclude
from flightplan.errors import SpecError
from flightplan.metrics import Predictions, metric_value, read_predictions


@pytest.fixture
def shifted(tmp_path):
    """The fake variant: t0, t4, t8, t12, t16 wrong (see closefake.textclf)."""
    path = tmp_path / "p.csv"
    write_csv(path, rows(shift=1, max_length=64))
    return read_predictions(path)


def test_error_analysis_by_hand(shifted):
    report = error_analysis(shifted, metric="macro_f1", goal="max", texts=TEXTS, input_limit=64,
                            top=3)
    assert report["metric"] == {"name": "macro_f1", "goal": "max", "value": round(205 / 273, 6),
                                "problem": None}
    assert report["labels"] == ["neg", "neu", "pos"]
    assert report["confusion_matrix"]["counts"] == [[5, 2, 0], [0, 5, 2], [1, 0, 5]]
    assert report["accuracy"] == 0.75
    # F1 = 2TP / (2TP + FP + FN): neg 10/13, neu 10/14, pos 10/13 → macro 205/273
    assert report["per_class"]["neg"] == {"precision": round(5 / 6, 6), "recall": round(5 / 7, 6),
                                          "f1": round(10 / 13, 6), "support": 7}
    assert report["per_class"]["pos"]["support"] == 6
    assert report["macro_f1"] == round(205 / 273, 6)
    # n_tokens = 10 i > 64 for i >= 7: truncated t7..t19 (errors t8, t12, t16)
    assert report["by_length"] == {
        "input_limit": 64,
        "truncated": {"n": 13, "errors": 3, "error_rate": round(3 / 13, 6), "metric_mean": None},
        "not_truncated": {"n": 7, "errors": 2, "error_rate": round(2 / 7, 6), "metric_mean": None}}
    assert report["worst"] is None          # a classification metric: no per-example column
    wrong = report["confidently_wrong"]
    assert [(w["example_id"], w["gold"], w["predicted"], w["probability"]) for w in wrong] == \
        [("t0", "neg", "neu", 0.7), ("t12", "neg", "neu", 0.7), ("t16", "neu", "pos", 0.7)]
    assert wrong[1]["excerpt"].startswith("review number 12 word word")
    markdown = error_markdown("variant-1", "variant", report)
    assert "| neg | 5 | 2 | 0 |" in markdown and "| truncated | 13 | 3 | 0.231 |" in markdown


def test_excerpt_is_cut_with_an_ellipsis():
    assert excerpt("a  b\n c") == "a b c"
    assert excerpt("word " * 100, limit=12) == "word word w…"  # 11 characters and the ellipsis


def test_macro_f1_matches_by_hand(shifted):
    assert metric_value("macro_f1", shifted) == pytest.approx(205 / 273)
    assert metric_value("accuracy", shifted) == 0.75
    with pytest.raises(SpecError, match="campaign.metric: 'bleu' is not a decision metric"):
        metric_value("bleu", shifted)


def test_paired_bootstrap_sees_a_small_consistent_gain():
    # 400 examples, binary; the reference is right on 200; the variant on the same 200 plus
    # 10 more: accuracy +0.025. Paired, the per-example differences are 10 ones and 390
    # zeros (sd of the mean ≈ 0.0078), so the 95 % interval stays above 0; an unpaired
    # interval would be about ±0.07 wide.
    gold = np.zeros(400, dtype=int)
    reference = np.r_[np.zeros(200, dtype=int), np.ones(200, dtype=int)]
    variant = reference.copy()
    variant[200:210] = 0
    ids = [str(i) for i in range(400)]
    reference = Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=reference, probs=None)
    variant = Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=variant, probs=None)
    result = compare_runs(reference, variant, metric="accuracy", goal="max", min_gain=0.01)
    assert result["difference"] == 0.025 and result["gain"] == 0.025
    assert 0.0 < result["ci_low"] < 0.025 < result["ci_high"] < 0.05
    assert result["verdict"] == "meets"
    again = compare_runs(reference, variant, metric="accuracy", goal="max", min_gain=0.01)
    assert again == result  # fixed seed
    assert compare_runs(reference, variant, metric="accuracy", goal="max",
                        min_gain=0.02)["verdict"] == "inconclusive"
    assert compare_runs(reference, variant, metric="accuracy", goal="max",
                        min_gain=0.05)["verdict"] == "does_not_meet"
    # with goal "min" the same difference is a loss
    assert compare_runs(reference, variant, metric="accuracy", goal="min",
                        min_gain=0.0)["gain"] == -0.025


def test_the_verdict_says_where_the_whole_interval_lies():
    # the pair above: gain +0.025, 95 % interval [+0.0100, +0.0425]
    gold = np.zeros(400, dtype=int)
    reference = np.r_[np.zeros(200, dtype=int), np.ones(200, dtype=int)]
    variant = reference.copy()
    variant[200:210] = 0
    ids = [str(i) for i in range(400)]
    reference = Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=reference, probs=None)
    variant = Predictions(ids=ids, labels=["a", "b"], gold=gold, predicted=variant, probs=None)

    def verdict(min_gain):
        return compare_runs(reference, variant, metric="accuracy", goal="max", min_gain=min_gain)

    past = verdict(0.01)                            # the lower bound reaches the threshold
    assert (past["ci_low"], past["verdict"], past["examples_to_settle"]) == (0.01, "meets", None)
    assert verdict(0.045)["verdict"] == "does_not_meet"          # wholly short of it
    # the point gain falls short of +0.03 but the interval reaches past it: inconclusive
    # (no longer "does not meet"); n (σ (z + z_p) / |gain − t|)², σ = 0.01625 / 1.96:
    # 400 · (0.008291 · 2.801585 / 0.005)² = 8632.4 → 8633 examples
    straddle = verdict(0.03)
    assert (straddle["ci_low"], straddle["ci_high"]) == (0.01, 0.0425)
    assert (straddle["verdict"], straddle["examples_to_settle"]) == ("inconclusive", 8633)
    assert verdict(0.02)["verdict"] == "inconclusive"     # point past it, lower bound short


def test_the_verdict_of_a_lower_is_better_metric_straddling_its_threshold():
    # the abs_error pair of test_metrics: gain +0.08 (lower by 0.08), interval of the gain
    # [+0.071, +0.088]; against +0.085 it straddles: 200 · (0.017 / 3.919928 · 2.801585 /
    # 0.005)² = 1180.6 → 1181 examples would likely settle it
    ids = [f"e{i}" for i in range(200)]
    base = np.linspace(0.5, 2.5, 200)
    change = np.r_[np.full(180, -0.1), np.full(20, 0.1)]
    reference = Predictions(ids=ids, labels=[], gold=None, predicted=None, probs=None,
                            columns={"abs_error": base})
    variant = Predictions(ids=ids, labels=[], gold=None, predicted=None, probs=None,
                          columns={"abs_error": base + change})
    result = compare_runs(reference, variant, metric="mean:abs_error", goal="min",
                          min_gain=0.085)
    assert (result["ci_low"], result["ci_high"]) == (-0.088, -0.071)
    assert (result["verdict"], result["examples_to_settle"]) == ("inconclusive", 1181)
    assert compare_runs(reference, variant, metric="mean:abs_error", goal="min",
                        min_gain=0.09)["verdict"] == "does_not_meet"
    assert compare_runs(reference, variant, metric="mean:abs_error", goal="min",
                        min_gain=0.07)["verdict"] == "meets"


def test_the_answer_is_inconclusive_when_no_variant_meets_and_one_straddles():
    # the main job: both comparisons straddle +0.05
    lora = {"variant": "lora-r8", "reference": "control", "verdict": "inconclusive",
            "gain": 0.0586, "ci_low": 0.0034, "ci_high": 0.1169, "n_examples": 379,
            "examples_to_settle": 33720}
    longer = {"variant": "lora-r8-len256", "reference": "lora-r8", "verdict": "inconclusive",
              "gain": 0.0203, "ci_low": -0.0435, "ci_high": 0.0837, "n_examples": 379,
              "examples_to_settle": 3552}
    short = {"variant": "lora-r4", "reference": "control", "verdict": "does_not_meet",
             "gain": -0.01, "ci_low": -0.04, "ci_high": 0.02}
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=[lora, longer, short])
    assert result["answer"] == "inconclusive"
    assert result["verdict"] == (
        "Inconclusive: no variant meets the threshold of +0.05 macro_f1, and the test set "
        "cannot tell whether lora-r8 and lora-r8-len256 do. lora-r8 (gain +0.0586 over "
        "control, 95% CI of the difference [+0.0034, +0.1169]): its interval straddles the "
        "threshold; about 34,000 test examples (now 379) would likely settle it. "
        "lora-r8-len256 (gain +0.0203 over lora-r8, 95% CI of the difference [-0.0435, "
        "+0.0837]): its interval straddles the threshold; about 3,600 test examples (now 379) "
        "would likely settle it. Each of the 3 comparisons is taken at its own 2.5% level "
        "(multiple = \"none\"), so the chance that any of them falsely meets its threshold is "
        "up to 7.5%.")
    assert result["family_wise_level"] == 0.075 and result["comparisons_made"] == 3
    assert conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                    comparisons=[short])["answer"] == "no"
    won = dict(lora, verdict="meets")
    assert conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                    comparisons=[won, longer])["answer"] == "yes"


def test_identical_predictions_give_a_zero_interval():
    gold = np.array([0, 1, 1, 0])
    same = Predictions(ids=list("abcd"), labels=["x", "y"], gold=gold, predicted=gold, probs=None)
    result = compare_runs(same, same, metric="macro_f1", goal="max", min_gain=0.05)
    assert (result["difference"], result["ci_low"], result["ci_high"]) == (0.0, 0.0, 0.0)
    assert result["verdict"] == "does_not_meet"


def test_no_variant_meets_the_threshold_is_stated():
    comparisons = [{"variant": "lora", "reference": "control", "verdict": "does_not_meet",
                    "gain": 0.01, "ci_low": -0.02, "ci_high": 0.04},
                   {"variant": "len256", "reference": "lora", "verdict": "not_available",
                    "reason": "stopped"}]
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=comparisons)
    # len256 could not be compared: it might have met, so the answer is not "no"
    assert result["answer"] == "inconclusive"
    assert result["verdict"] == ("Inconclusive: no variant compared meets the threshold of "
                                 "+0.05 macro_f1. Not compared: len256 against lora (stopped).")
    alone = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                     comparisons=comparisons[1:])
    assert alone["answer"] == "inconclusive"
    assert alone["verdict"] == ("Inconclusive: no variant could be compared, so none meets the "
                                "threshold of +0.05 macro_f1. Not compared: len256 against lora "
                                "(stopped).")
    # the side that lacks predictions is named, not the variant: here the reference
    rejected = [comparisons[0], comparisons[1] | {
        "unusable": ["lora"], "reason": "no usable predictions for lora (lora: prediction_mismatch)"}]
    assert conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                    comparisons=rejected)["verdict"].endswith(
        "Not compared: len256 against lora (no usable predictions for lora).")
    no = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                  comparisons=comparisons[:1])
    # a "no" gives the figures it stands on, as an inconclusive answer does
    assert (no["answer"], no["verdict"]) == ("no", (
        "No variant meets the threshold of +0.05 macro_f1. lora: gain +0.0100 over control, "
        "95% CI of the difference [-0.0200, +0.0400]."))


def test_a_verdict_reads_one_way_when_lower_is_better_and_gives_an_unsure_gain():
    # variant's nll 0.13 lower than the control's: difference −0.1302, its CI [−0.1704, −0.0878]
    won = {"variant": "hidden-64", "reference": "control", "verdict": "meets", "gain": 0.1302,
           "ci_low": -0.1704, "ci_high": -0.0878}
    result = conclude(question="q?", metric="mean:nll", goal="min", min_gain=0.01,
                      comparisons=[won])
    assert result["verdict"] == (
        "Yes: hidden-64 (gain +0.1302 over control, 95% CI of the gain [+0.0878, +0.1704]) "
        "meets the threshold of +0.01 mean:nll (lower is better: a gain is a lower value).")
    # the main job's lora-r8: 33720 examples would settle it (test_plan_power.py)
    unsure = {"variant": "lora-r8", "reference": "control", "verdict": "inconclusive",
              "gain": 0.0586, "ci_low": 0.0034, "ci_high": 0.1169, "n_examples": 379,
              "examples_to_settle": 33720}
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=[unsure])
    assert result["answer"] == "inconclusive"
    assert result["verdict"] == (
        "Inconclusive: no variant meets the threshold of +0.05 macro_f1, and the test set "
        "cannot tell whether lora-r8 does. lora-r8 (gain +0.0586 over control, 95% CI of the "
        "difference [+0.0034, +0.1169]): its interval straddles the threshold; about 34,000 "
        "test examples (now 379) would likely settle it.")
