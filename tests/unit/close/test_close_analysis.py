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
    assert result["answer"] == "no"
    assert result["verdict"] == ("No variant meets the threshold of +0.05 macro_f1. Not compared "
                                 "(no usable predictions): len256.")


def test_a_verdict_reads_one_way_when_lower_is_better_and_gives_an_unsure_gain():
    # variant's nll 0.13 lower than the control's: difference −0.1302, its CI [−0.1704, −0.0878]
    won = {"variant": "hidden-64", "reference": "control", "verdict": "meets", "gain": 0.1302,
           "ci_low": -0.1704, "ci_high": -0.0878}
    result = conclude(question="q?", metric="mean:nll", goal="min", min_gain=0.01,
                      comparisons=[won])
    assert result["verdict"] == (
        "Yes: hidden-64 (gain +0.1302 over control, 95% CI of the gain [+0.0878, +0.1704]) "
        "meets the threshold of +0.01 mean:nll (lower is better: a gain is a lower value).")
    unsure = {"variant": "lora-r8", "reference": "control", "verdict": "inconclusive",
              "gain": 0.0586, "ci_low": 0.0034, "ci_high": 0.1169}
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=[unsure])
    assert result["verdict"] == (
        "No variant meets the threshold of +0.05 macro_f1. lora-r8 reaches it on the point "
        "estimate (gain +0.0586 over control, 95% CI of the difference [+0.0034, +0.1169]), "
        "but its confidence interval does not exclude a smaller gain.")
