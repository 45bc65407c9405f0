"""Error analysis of one run from its stored predictions (``errors/<run_id>.json`` + ``.md``).

Reads ``predictions/<run_id>.csv`` (:mod:`flightplan.metrics`: ``example_id``, then
``gold``/``predicted`` and ``prob_<label>`` for classification, and per-example numeric
columns) and reports what the columns allow:

- always: the number of test examples and the decision metric's value;
- with gold and predicted labels: the confusion matrix (rows: gold, columns: predicted, in
  class order: every class of :class:`~flightplan.metrics.Predictions`, so every test
  example is in it), per-class precision/recall/F1 and support (scikit-learn's
  ``precision_recall_fscore_support`` with ``zero_division=0``), accuracy and macro-F1
  (the decision metrics of those names), and the most confidently wrong examples (by the
  probability of the predicted label when the task writes ``prob_*`` columns, else in file
  order) with a short excerpt of their text;
- with a column metric (``mean:<column>``): the worst examples by that column (lowest
  first when the goal is ``max``, highest first when it is ``min``);
- with a ``truncated`` column (true/false): errors and the metric column's mean for
  truncated and untruncated inputs; ``input_limit`` is the length the task cut at, as its
  artifact records it (``input_limit`` in ``artifact.json``), or null.

Usage::

    predictions = read_predictions(results / "predictions" / f"{run_id}.csv")
    report = error_analysis(predictions, metric="macro_f1", goal="max", texts=texts)
    markdown = error_markdown(run_id, "lora-r8", report)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flightplan.errors import CheckFailed
from flightplan.metrics import Metric, Predictions, confusion, metric_value, parse_metric

__all__ = ["error_analysis", "error_markdown", "excerpt"]

EXCERPT_CHARS = 160
TOP_WRONG = 10


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` with whitespace collapsed, cut to ``limit`` characters (``…`` when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _group(mask: np.ndarray, wrong: np.ndarray | None, values: np.ndarray | None
           ) -> dict[str, Any]:
    n = int(mask.sum())
    errors = None if wrong is None else int((wrong & mask).sum())
    return {"n": n, "errors": errors,
            "error_rate": round(errors / n, 6) if errors is not None and n else None,
            "metric_mean": round(float(values[mask].mean()), 6)
            if values is not None and n else None}


def _classification(predictions: Predictions, texts: dict[str, str], top: int
                    ) -> dict[str, Any]:
    labels, c = predictions.labels, len(predictions.labels)
    gold, pred = predictions.labelled("the error analysis")
    counts = confusion(gold, pred, c)                          # (C, C)
    tp = np.diagonal(counts)
    n_pred, support = counts.sum(axis=0), counts.sum(axis=1)
    precision = np.where(n_pred > 0, tp / np.maximum(n_pred, 1), 0.0)
    recall = np.where(support > 0, tp / np.maximum(support, 1), 0.0)
    f1 = np.where(n_pred + support > 0, 2 * tp / np.maximum(n_pred + support, 1), 0.0)
    wrong = gold != pred
    confidence = predictions.probs[np.arange(len(predictions)), pred] \
        if predictions.probs is not None else None
    order = sorted(np.flatnonzero(wrong).tolist(), key=lambda i: (
        -confidence[i] if confidence is not None else 0.0, predictions.ids[i]))
    n_tokens = predictions.columns.get("n_tokens")
    truncated = predictions.columns.get("truncated")
    n = len(predictions)
    return {
        "labels": labels,
        "accuracy": round(metric_value("accuracy", predictions), 6) if n else None,
        "macro_f1": round(metric_value("macro_f1", predictions), 6) if n else None,
        "confusion_matrix": {"labels": labels, "counts": counts.astype(int).tolist()},
        "per_class": {label: {"precision": round(float(precision[k]), 6),
                              "recall": round(float(recall[k]), 6),
                              "f1": round(float(f1[k]), 6), "support": int(support[k])}
                      for k, label in enumerate(labels)},
        "confidently_wrong": [
            {"example_id": predictions.ids[i], "gold": labels[gold[i]],
             "predicted": labels[pred[i]],
             "probability": None if confidence is None else round(float(confidence[i]), 6),
             "n_tokens": None if n_tokens is None else int(n_tokens[i]),
             "truncated": None if truncated is None else bool(truncated[i]),
             "excerpt": excerpt(texts.get(predictions.ids[i], ""))}
            for i in order[:top]],
    }


def _worst(predictions: Predictions, metric: Metric, goal: str, texts: dict[str, str],
           top: int) -> dict[str, Any] | None:
    values = predictions.columns.get(metric.column or "")
    if values is None or not len(values):
        return None
    sign = 1.0 if goal == "max" else -1.0           # worst first: lowest for max
    order = sorted(range(len(values)), key=lambda i: (sign * values[i], predictions.ids[i]))
    pairs = predictions.labelled("the error analysis") if predictions.has_labels else None
    return {"column": metric.column, "goal": goal, "mean": round(float(values.mean()), 6),
            "examples": [{"example_id": predictions.ids[i], "value": round(float(values[i]), 6),
                          "gold": predictions.labels[pairs[0][i]] if pairs else None,
                          "predicted": predictions.labels[pairs[1][i]] if pairs else None,
                          "excerpt": excerpt(texts.get(predictions.ids[i], ""))}
                         for i in order[:top]]}


def error_analysis(predictions: Predictions, *, metric: Metric | str, goal: str,
                   texts: dict[str, str], input_limit: int | None = None,
                   top: int = TOP_WRONG) -> dict[str, Any]:
    """The error analysis of one run (what its columns allow; module docstring).

    Args:
        predictions: the run's predictions.
        metric: the decision metric. goal: ``"max"`` or ``"min"``.
        texts: example id → text (for excerpts; a missing id gets an empty excerpt).
        input_limit: the input length the task cut at (``artifact.json``), or None.
        top: how many wrong or worst examples to list.

    Returns:
        ``{n_test, metric: {name, goal, value, problem}, labels, accuracy, macro_f1,
        confusion_matrix: {labels, counts (C×C, rows gold, columns predicted)}, per_class:
        {label: {precision, recall, f1, support}}, confidently_wrong: [{example_id, gold,
        predicted, probability, n_tokens, truncated, excerpt}], worst: {column, goal, mean,
        examples: [{example_id, value, gold, predicted, excerpt}]}, by_length:
        {input_limit, truncated: {n, errors, error_rate, metric_mean}, not_truncated:
        {...}}}``; the classification keys are null without labels, ``worst`` without a
        column metric, ``by_length`` without a ``truncated`` column. ``value`` is null
        (``problem`` says why) when the predictions lack what the metric needs. Scores
        are rounded to 6 places.
    """
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    try:
        value, problem = round(metric_value(metric, predictions), 6), None
    except CheckFailed as exc:
        value, problem = None, str(exc)
    report: dict[str, Any] = {
        "n_test": len(predictions),
        "metric": {"name": metric.name, "goal": goal, "value": value, "problem": problem},
        "labels": None, "accuracy": None, "macro_f1": None, "confusion_matrix": None,
        "per_class": None, "confidently_wrong": None, "worst": None, "by_length": None}
    if predictions.has_labels:
        report.update(_classification(predictions, texts, top))
    if metric.kind == "column":
        report["worst"] = _worst(predictions, metric, goal, texts, top)
    truncated = predictions.columns.get("truncated")
    if truncated is not None:
        mask = truncated > 0.5
        pairs = predictions.labelled("the error analysis") if predictions.has_labels else None
        wrong = pairs[0] != pairs[1] if pairs else None
        values = predictions.columns.get(metric.column or "") if metric.kind == "column" \
            else None
        report["by_length"] = {"input_limit": input_limit,
                               "truncated": _group(mask, wrong, values),
                               "not_truncated": _group(~mask, wrong, values)}
    return report


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def error_markdown(run_id: str, name: str, report: dict[str, Any]) -> str:
    """``errors/<run_id>.md``: the same analysis as tables for a human reader."""
    metric = report["metric"]
    lines = [f"# Error analysis: {name} (`{run_id}`)", "",
             f"{report['n_test']} test examples; {metric['name']} "
             f"{_fmt(metric['value'], '')} (goal {metric['goal']})."
             + (f" {metric['problem']}" if metric["problem"] else "")]
    labels = report["labels"]
    if labels is not None:
        lines += ["", f"Accuracy {report['accuracy']}, macro-F1 {report['macro_f1']}.", "",
                  "## Confusion matrix (rows: gold, columns: predicted)", "",
                  "| gold \\ predicted | " + " | ".join(labels) + " |",
                  "|---|" + "---|" * len(labels)]
        for label, row in zip(labels, report["confusion_matrix"]["counts"]):
            lines.append(f"| {label} | " + " | ".join(str(c) for c in row) + " |")
        lines += ["", "## Per class", "", "| label | precision | recall | F1 | support |",
                  "|---|---|---|---|---|"]
        for label, s in report["per_class"].items():
            lines.append(f"| {label} | {s['precision']:.3f} | {s['recall']:.3f} | "
                         f"{s['f1']:.3f} | {s['support']} |")
    by_length = report["by_length"]
    if by_length is not None:
        limit = by_length["input_limit"]
        lines += ["", "## By input length" + (f" (cut at {limit})" if limit else ""), "",
                  "| inputs | n | errors | error rate | metric mean |", "|---|---|---|---|---|"]
        for key in ("truncated", "not_truncated"):
            s = by_length[key]
            lines.append(f"| {key.replace('_', ' ')} | {s['n']} | {_fmt(s['errors'], 'd')} | "
                         f"{_fmt(s['error_rate'])} | {_fmt(s['metric_mean'])} |")
    if report["confidently_wrong"] is not None:
        lines += ["", "## Most confidently wrong", "",
                  "| example | gold | predicted | probability | tokens | excerpt |",
                  "|---|---|---|---|---|---|"]
        for w in report["confidently_wrong"]:
            lines.append(f"| {_md_cell(w['example_id'])} | {_md_cell(w['gold'])} | "
                         f"{_md_cell(w['predicted'])} | {_fmt(w['probability'])} | "
                         f"{_fmt(w['n_tokens'], 'd')} | {_md_cell(w['excerpt'])} |")
        if not report["confidently_wrong"]:
            lines.append("| – | – | – | – | – | no errors |")
    worst = report["worst"]
    if worst is not None:
        order = "lowest" if worst["goal"] == "max" else "highest"
        lines += ["", f"## Worst examples by {worst['column']} ({order} first; mean "
                  f"{worst['mean']})", "", "| example | value | gold | predicted | excerpt |",
                  "|---|---|---|---|---|"]
        for w in worst["examples"]:
            lines.append(f"| {_md_cell(w['example_id'])} | {w['value']} | "
                         f"{_md_cell(w['gold'] or '–')} | {_md_cell(w['predicted'] or '–')} | "
                         f"{_md_cell(w['excerpt'])} |")
    return "\n".join(lines) + "\n"
