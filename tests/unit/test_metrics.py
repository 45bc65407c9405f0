"""Decision metrics: names, goals, predictions.csv parsing, values worked out by hand and
against scikit-learn, the paired bootstrap on a lower-is-better metric."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as sk

from flightplan.close.analysis import error_analysis, error_markdown
from flightplan.close.conclusion import compare_runs
from flightplan.errors import CheckFailed, SpecError
from flightplan.metrics import (LABEL_METRICS, Predictions, check_goal, metric_value,
                                paired, parse_metric, read_predictions)

SKLEARN = {
    "accuracy": sk.accuracy_score, "balanced_accuracy": sk.balanced_accuracy_score,
    "macro_f1": lambda g, p: sk.f1_score(g, p, average="macro", zero_division=0),
    "matthews_corrcoef": sk.matthews_corrcoef,
    "cohen_kappa": lambda g, p: sk.cohen_kappa_score(g, p, replace_undefined_by=0.0),
    "hamming_loss": sk.hamming_loss, "zero_one_loss": sk.zero_one_loss,
}
SKLEARN["mean:correct"] = sk.accuracy_score          # the mean of a 0/1 correctness column
"""Each metric name → scikit-learn on the gold and predicted strings, default labels."""
for _base in ("f1", "precision", "recall", "jaccard"):
    for _average in ("macro", "micro", "weighted"):
        SKLEARN[f"{_base}_{_average}"] = (
            lambda g, p, f=getattr(sk, f"{_base}_score"), a=_average:  # noqa: B008 (binds the loop's scorer)
            f(g, p, average=a, zero_division=0))

# (classes the task learnt, gold labels drawn from, predicted labels drawn from)
CASES = {
    "label only in test": (["a", "b"], ["a", "b", "c"], ["a", "b"]),
    "label never predicted": (["a", "b", "c"], ["a", "b", "c"], ["a", "b"]),
    "label only predicted": (["a", "b", "c"], ["a", "b"], ["a", "b", "c"]),
    "label in no row": (["a", "b", "c", "d"], ["a", "b", "c"], ["a", "b", "c"]),
}


def _predictions(gold, predicted, labels):
    return Predictions(ids=[str(i) for i in range(len(gold))], labels=labels,
                       gold=np.array(gold), predicted=np.array(predicted), probs=None)


def _case_file(tmp_path, case: str, probs: bool, *, seed: int = 3, name: str = "p.csv"):
    """``(path, gold, predicted)``: 40 test examples of the case (the same gold labels for
    every ``seed``, predictions drawn by it), a per-example ``correct`` column (true/false),
    and with ``probs`` a ``prob_<label>`` column per learnt class (the predicted one
    highest)."""
    learnt, gold_from, predicted_from = CASES[case]
    gold = list(np.random.default_rng(3).choice(gold_from, size=40))
    rng = np.random.default_rng(seed)
    guess = list(rng.choice(predicted_from, size=40))
    predicted = [g if g in predicted_from and rng.random() < 0.6 else q
                 for g, q in zip(gold, guess)]
    lines = [",".join(["example_id", "gold", "predicted", "correct"]
                      + ([f"prob_{c}" for c in learnt] if probs else []))]
    for i, (g, p) in enumerate(zip(gold, predicted)):
        cells = [f"e{i}", g, p, str(g == p).lower()]
        if probs:
            cells += ["0.7" if c == p else repr(0.3 / (len(learnt) - 1)) for c in learnt]
        lines.append(",".join(cells))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path, gold, predicted


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
@pytest.mark.parametrize("probs", [True, False], ids=["prob columns", "no prob columns"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(SKLEARN))
def test_every_decision_metric_equals_scikit_learn(tmp_path, name, case, probs):
    assert set(SKLEARN) == {*LABEL_METRICS, "mean:correct"}       # every name parse_metric takes
    path, gold, predicted = _case_file(tmp_path, case, probs)
    learnt, gold_from, predicted_from = CASES[case]
    assert set(gold) == set(gold_from) and set(predicted) == set(predicted_from)
    expected = SKLEARN[name](gold, predicted)
    predictions = read_predictions(path)
    assert metric_value(name, predictions) == pytest.approx(expected, abs=1e-12)
    # the statistic the bootstrap resamples: on the whole set, for the reference and a
    # variant (other predictions, scored against the reference's gold), and on resamples,
    # where classes go missing
    variant_path, var_gold, var_predicted = _case_file(tmp_path, case, probs, seed=4,
                                                       name="v.csv")
    assert var_gold == gold
    assert var_predicted != predicted
    statistic, ref_arrays, var_arrays = paired(name, predictions, read_predictions(variant_path))
    assert statistic(*ref_arrays) == pytest.approx(expected, abs=1e-12)
    assert statistic(*var_arrays) == pytest.approx(SKLEARN[name](gold, var_predicted), abs=1e-12)
    rows = np.random.default_rng(5).integers(0, len(gold), size=(6, len(gold)))
    rows[0] = np.flatnonzero(np.array(gold) != "c")[rows[0] % 10]      # c absent altogether
    by_sklearn = [SKLEARN[name]([gold[i] for i in r], [predicted[i] for i in r]) for r in rows]
    resampled = statistic(*(a[rows] for a in ref_arrays))             # (6,) in one call
    assert resampled == pytest.approx(by_sklearn, abs=1e-12)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
@pytest.mark.parametrize("probs", [True, False], ids=["prob columns", "no prob columns"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_error_analysis_counts_every_example_as_scikit_learn_does(tmp_path, case, probs):
    path, gold, predicted = _case_file(tmp_path, case, probs)
    report = error_analysis(read_predictions(path), metric="balanced_accuracy", goal="max",
                            texts={}, top=3)
    labels = report["labels"]
    assert set(labels) == set(gold) | set(predicted) | (set(CASES[case][0]) if probs else set())
    counts = sk.confusion_matrix(gold, predicted, labels=labels)
    assert report["confusion_matrix"]["counts"] == counts.tolist()
    assert int(counts.sum()) == report["n_test"] == 40
    precision, recall, f1, support = sk.precision_recall_fscore_support(
        gold, predicted, labels=labels, zero_division=0)
    for k, label in enumerate(labels):
        assert report["per_class"][label] == {
            "precision": round(precision[k], 6), "recall": round(recall[k], 6),
            "f1": round(f1[k], 6), "support": int(support[k])}
    assert report["accuracy"] == round(sk.accuracy_score(gold, predicted), 6)
    assert report["macro_f1"] == round(SKLEARN["macro_f1"](gold, predicted), 6)
    assert report["metric"]["value"] == round(sk.balanced_accuracy_score(gold, predicted), 6)


def test_a_label_only_in_test_counts_with_prob_columns(tmp_path):
    # gold a a b c, predicted a a b b, prob_a and prob_b only: the task never learnt c.
    # recalls a 2/2, b 1/1, c 0/1 → balanced accuracy 2/3; F1 a 1, b 2/3 (TP 1, FP 1),
    # c 0 → macro-F1 5/9
    path = tmp_path / "p.csv"
    path.write_text("example_id,gold,predicted,prob_a,prob_b\n"
                    "1,a,a,0.9,0.1\n2,a,a,0.8,0.2\n3,b,b,0.1,0.9\n4,c,b,0.2,0.8\n")
    predictions = read_predictions(path)
    assert predictions.labels == ["a", "b", "c"] and predictions.probs.shape == (4, 2)
    assert metric_value("balanced_accuracy", predictions) == pytest.approx(2 / 3)
    assert metric_value("macro_f1", predictions) == pytest.approx(5 / 9)
    report = error_analysis(predictions, metric="macro_f1", goal="max", texts={})
    assert report["confusion_matrix"]["counts"] == [[2, 0, 0], [0, 1, 0], [0, 1, 0]]
    assert report["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                        "support": 1}
    assert report["confidently_wrong"][0]["gold"] == "c"
    assert report["confidently_wrong"][0]["probability"] == 0.8


def test_a_predicted_label_without_its_prob_column_is_refused(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("example_id,gold,predicted,prob_a,prob_b\n1,a,c,0.9,0.1\n")
    with pytest.raises(CheckFailed, match="predicted label 'c' has no column prob_c \\(the "
                                          "prob_ columns: \\['a', 'b'\\]\\); write one "
                                          "prob_<label> column per class the task predicts"):
        read_predictions(path)


def test_macro_f1_and_balanced_accuracy_by_hand():
    # gold   a a a b b c ; predicted a a b b c c
    # a: TP 2 FP 0 FN 1 → F1 4/5; b: TP 1 FP 1 FN 1 → 1/2; c: TP 1 FP 1 FN 0 → 2/3
    predictions = _predictions([0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 2, 2], ["a", "b", "c"])
    assert metric_value("macro_f1", predictions) == pytest.approx((4 / 5 + 1 / 2 + 2 / 3) / 3)
    # recalls 2/3, 1/2, 1/1
    assert metric_value("balanced_accuracy", predictions) == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)
    assert metric_value("hamming_loss", predictions) == pytest.approx(2 / 6)


def test_names_and_goals_are_checked():
    assert parse_metric("mean:abs_error").column == "abs_error"
    assert parse_metric("f1_weighted").direction == "max"
    with pytest.raises(SpecError, match="'f1-macro' is not a decision metric; did you mean "
                                        "'f1_macro'\\?"):
        parse_metric("f1-macro")
    with pytest.raises(SpecError, match="or mean:<column>"):
        parse_metric("mean:")
    with pytest.raises(SpecError, match="campaign.goal: 'max' but zero_one_loss is "
                                        "lower-is-better; set goal = \"min\""):
        check_goal(parse_metric("zero_one_loss"), "max")
    check_goal(parse_metric("mean:loss"), "max")        # a column metric takes either goal


REGRESSION = ("example_id,abs_error,truncated,note\n"
              "e1,0.5,false,x\ne2,2.0,true,y\ne3,1.0,true,z\ne4,0.25,false,w\n")


def test_a_regression_file_without_labels(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(REGRESSION)
    predictions = read_predictions(path)
    assert not predictions.has_labels and predictions.labels == []
    assert sorted(predictions.columns) == ["abs_error", "truncated"]   # "note" is text
    # (0.5 + 2.0 + 1.0 + 0.25) / 4
    assert metric_value("mean:abs_error", predictions) == 0.9375
    with pytest.raises(CheckFailed, match="has no numeric column 'loss' for the decision metric "
                                          "mean:loss \\(its per-example numeric columns: "
                                          "abs_error, truncated\\)"):
        metric_value("mean:loss", predictions)
    with pytest.raises(CheckFailed, match="no gold and predicted columns for the decision "
                                          "metric macro_f1"):
        metric_value("macro_f1", predictions)


def test_an_empty_value_in_the_metric_column_is_named(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("example_id,abs_error\ne1,0.5\ne2,\n")
    with pytest.raises(CheckFailed, match="column 'abs_error' is empty or not finite for "
                                          "example\\(s\\) e2"):
        metric_value("mean:abs_error", read_predictions(path))


def test_paired_bootstrap_on_a_lower_is_better_metric():
    # 200 examples; the variant's abs_error is the reference's minus 0.1 on every example
    # but the last 20, where it is 0.1 higher: mean difference (180 · −0.1 + 20 · 0.1) / 200
    # = −0.08, a gain of +0.08 with goal "min"; per-example differences have a small spread
    # (sd 0.06), so the interval of the gain stays well above 0.05.
    ids = [f"e{i}" for i in range(200)]
    base = np.linspace(0.5, 2.5, 200)
    change = np.r_[np.full(180, -0.1), np.full(20, 0.1)]
    reference = Predictions(ids=ids, labels=[], gold=None, predicted=None, probs=None,
                            columns={"abs_error": base})
    variant = Predictions(ids=ids[::-1], labels=[], gold=None, predicted=None, probs=None,
                          columns={"abs_error": (base + change)[::-1]})   # other row order
    result = compare_runs(reference, variant, metric="mean:abs_error", goal="min",
                          min_gain=0.05)
    assert result["reference_value"] == pytest.approx(1.5)
    assert result["variant_value"] == pytest.approx(1.42)
    assert result["difference"] == pytest.approx(-0.08) and result["gain"] == pytest.approx(0.08)
    assert -0.1 < result["ci_low"] < -0.08 < result["ci_high"] < -0.06
    assert result["verdict"] == "meets"
    assert compare_runs(reference, variant, metric="mean:abs_error", goal="min",
                        min_gain=0.09)["verdict"] == "does_not_meet"
    assert compare_runs(reference, variant, metric="mean:abs_error", goal="max",
                        min_gain=0.0)["verdict"] == "does_not_meet"


def test_runs_with_different_classes_are_compared_on_their_union():
    # the reference never predicts "c", so its own classes are a, b; the variant's a, b, c
    reference = _predictions([0, 1, 0, 1], [0, 1, 1, 1], ["a", "b"])
    variant = Predictions(ids=["0", "1", "2", "3"], labels=["a", "b", "c"],
                          gold=np.array([0, 1, 0, 1]), predicted=np.array([0, 1, 0, 2]),
                          probs=None)
    result = compare_runs(reference, variant, metric="accuracy", goal="max", min_gain=0.0)
    assert (result["reference_value"], result["variant_value"]) == (0.75, 0.75)


def test_error_analysis_without_labels_lists_the_worst_examples(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(REGRESSION)
    texts = {"e2": "a long   input", "e3": "another"}
    report = error_analysis(read_predictions(path), metric="mean:abs_error", goal="min",
                            texts=texts, input_limit=None, top=2)
    assert report["metric"]["value"] == 0.9375
    assert report["labels"] is None and report["confusion_matrix"] is None
    assert report["worst"] == {"column": "abs_error", "goal": "min", "mean": 0.9375, "examples": [
        {"example_id": "e2", "value": 2.0, "gold": None, "predicted": None,
         "excerpt": "a long input"},
        {"example_id": "e3", "value": 1.0, "gold": None, "predicted": None,
         "excerpt": "another"}]}
    # truncated e2, e3: mean (2 + 1) / 2; not truncated e1, e4: (0.5 + 0.25) / 2
    assert report["by_length"] == {
        "input_limit": None,
        "truncated": {"n": 2, "errors": None, "error_rate": None, "metric_mean": 1.5},
        "not_truncated": {"n": 2, "errors": None, "error_rate": None, "metric_mean": 0.375}}
    markdown = error_markdown("r-1", "ridge", report)
    assert "## Worst examples by abs_error (highest first; mean 0.9375)" in markdown
    assert "| e2 | 2.0 | – | – | a long input |" in markdown
    assert "| truncated | 2 | – | – | 1.500 |" in markdown
    # with goal "max", the lowest values are the worst
    best_first = error_analysis(read_predictions(path), metric="mean:abs_error", goal="max",
                                texts={}, top=1)
    assert best_first["worst"]["examples"][0]["example_id"] == "e4"


def test_a_classification_metric_of_no_rows_is_zero(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("example_id,gold,predicted\n")
    for name in ("accuracy", "macro_f1", "balanced_accuracy", "cohen_kappa"):
        assert metric_value(name, read_predictions(path)) == 0.0
