"""Error analysis of one run from its stored predictions (``errors/<run_id>.json`` + ``.md``).

Reads ``predictions/<run_id>.csv`` (columns ``example_id, gold, predicted, n_tokens,
truncated, prob_<label>...``) and reports: the confusion matrix (rows: gold, columns:
predicted, in label order), per-class precision/recall/F1 and support, the errors split by
input length (truncated at the run's ``max_length`` or not), and the most confidently wrong
examples with a short excerpt of their text.

Usage::

    predictions = read_predictions(results / "predictions" / f"{run_id}.csv")
    report = error_analysis(predictions, texts=texts, max_length=128)
    markdown = error_markdown(run_id, "lora-r8", report)
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

from flightplan.errors import CheckFailed

__all__ = ["Predictions", "read_predictions", "error_analysis", "error_markdown", "excerpt"]

EXCERPT_CHARS = 160
TOP_WRONG = 10


@dataclass(frozen=True)
class Predictions:
    """One run's predictions, in file order.

    Attributes:
        ids: example ids (N,). labels: label names (C,), from the ``prob_*`` columns.
        gold, predicted: label indices (N,) int; -1 for a gold label not in ``labels``.
        n_tokens: untruncated input lengths in tokens (N,). truncated: (N,) bool.
        probs: (N, C) float64 probabilities.
    """

    ids: list[str]
    labels: list[str]
    gold: np.ndarray
    predicted: np.ndarray
    n_tokens: np.ndarray
    truncated: np.ndarray
    probs: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def read_predictions(path: Path) -> Predictions:
    """Parse a predictions CSV.

    Raises:
        CheckFailed: the file is missing, lacks a column or holds an unknown predicted label.
    """
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = list(reader.fieldnames or [])
            rows = list(reader)
    except OSError as exc:
        raise CheckFailed(f"{path}: cannot read predictions ({exc})") from None
    needed = ("example_id", "gold", "predicted", "n_tokens", "truncated")
    missing = [c for c in needed if c not in columns]
    labels = [c[len("prob_"):] for c in columns if c.startswith("prob_")]
    if missing or not labels:
        raise CheckFailed(f"{path}: lacks the columns {', '.join(missing) or 'prob_<label>'}; "
                          f"predictions must be written by the task")
    index = {label: i for i, label in enumerate(labels)}
    try:
        predicted = np.array([index[r["predicted"]] for r in rows], dtype=np.int64)
    except KeyError as exc:
        raise CheckFailed(f"{path}: predicted label {exc} is not one of {labels}") from None
    return Predictions(
        ids=[r["example_id"] for r in rows], labels=labels,
        gold=np.array([index.get(r["gold"], -1) for r in rows], dtype=np.int64),
        predicted=predicted,
        n_tokens=np.array([int(r["n_tokens"]) for r in rows], dtype=np.int64),
        truncated=np.array([r["truncated"].strip().lower() in ("1", "true") for r in rows]),
        probs=np.array([[float(r[f"prob_{label}"]) for label in labels] for r in rows],
                       dtype=np.float64).reshape(len(rows), len(labels)))


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` with whitespace collapsed, cut to ``limit`` characters (``…`` when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _split_errors(wrong: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    n = int(mask.sum())
    errors = int((wrong & mask).sum())
    return {"n": n, "errors": errors, "error_rate": round(errors / n, 6) if n else None}


def error_analysis(predictions: Predictions, *, texts: dict[str, str], max_length: int | None,
                   top: int = TOP_WRONG) -> dict[str, Any]:
    """The error analysis of one run.

    Args:
        predictions: the run's predictions.
        texts: example id → text (for excerpts; a missing id gets an empty excerpt).
        max_length: the run's ``max_length`` in tokens (None when unknown).
        top: how many confidently wrong examples to list.

    Returns:
        ``{n_test, labels, accuracy, macro_f1, confusion_matrix: {labels, counts (C×C,
        rows gold, columns predicted)}, per_class: {label: {precision, recall, f1,
        support}}, by_length: {max_length, truncated: {n, errors, error_rate},
        not_truncated: {...}}, confidently_wrong: [{example_id, gold, predicted,
        probability, n_tokens, truncated, excerpt}]}``. Scores are rounded to 6 places.
    """
    labels = predictions.labels
    ks = list(range(len(labels)))
    gold, pred = predictions.gold, predictions.predicted
    counts = confusion_matrix(gold, pred, labels=ks) if len(predictions) else np.zeros(
        (len(ks), len(ks)), dtype=np.int64)
    precision, recall, f1, support = precision_recall_fscore_support(
        gold, pred, labels=ks, zero_division=0) if len(predictions) else ([0.0] * len(ks),) * 4
    wrong = gold != pred
    # confidence of the wrong prediction = probability given to the predicted label
    confidence = predictions.probs[np.arange(len(predictions)), pred] if len(predictions) else \
        np.zeros(0)
    order = sorted(np.flatnonzero(wrong).tolist(), key=lambda i: (-confidence[i],
                                                                  predictions.ids[i]))
    return {
        "n_test": len(predictions),
        "labels": labels,
        "accuracy": round(float((~wrong).mean()), 6) if len(predictions) else None,
        "macro_f1": round(float(np.mean(f1)), 6) if len(predictions) else None,
        "confusion_matrix": {"labels": labels, "counts": counts.astype(int).tolist()},
        "per_class": {label: {"precision": round(float(precision[k]), 6),
                              "recall": round(float(recall[k]), 6),
                              "f1": round(float(f1[k]), 6), "support": int(support[k])}
                      for k, label in enumerate(labels)},
        "by_length": {"max_length": max_length,
                      "truncated": _split_errors(wrong, predictions.truncated),
                      "not_truncated": _split_errors(wrong, ~predictions.truncated)},
        "confidently_wrong": [
            {"example_id": predictions.ids[i],
             "gold": labels[gold[i]] if gold[i] >= 0 else None,
             "predicted": labels[pred[i]], "probability": round(float(confidence[i]), 6),
             "n_tokens": int(predictions.n_tokens[i]), "truncated": bool(predictions.truncated[i]),
             "excerpt": excerpt(texts.get(predictions.ids[i], ""))}
            for i in order[:top]],
    }


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def error_markdown(run_id: str, name: str, report: dict[str, Any]) -> str:
    """``errors/<run_id>.md``: the same analysis as tables for a human reader."""
    labels = report["labels"]
    lines = [f"# Error analysis: {name} (`{run_id}`)", "",
             f"{report['n_test']} test examples; accuracy {report['accuracy']}, "
             f"macro-F1 {report['macro_f1']}.", "", "## Confusion matrix (rows: gold, "
             "columns: predicted)", "", "| gold \\ predicted | " + " | ".join(labels) + " |",
             "|---|" + "---|" * len(labels)]
    for label, row in zip(labels, report["confusion_matrix"]["counts"]):
        lines.append(f"| {label} | " + " | ".join(str(c) for c in row) + " |")
    lines += ["", "## Per class", "", "| label | precision | recall | F1 | support |",
              "|---|---|---|---|---|"]
    for label, s in report["per_class"].items():
        lines.append(f"| {label} | {s['precision']:.3f} | {s['recall']:.3f} | {s['f1']:.3f} | "
                     f"{s['support']} |")
    by_length = report["by_length"]
    lines += ["", f"## Errors by input length (max_length {by_length['max_length']} tokens)", "",
              "| inputs | n | errors | error rate |", "|---|---|---|---|"]
    for key in ("truncated", "not_truncated"):
        s = by_length[key]
        rate = "–" if s["error_rate"] is None else f"{s['error_rate']:.3f}"
        lines.append(f"| {key.replace('_', ' ')} | {s['n']} | {s['errors']} | {rate} |")
    lines += ["", "## Most confidently wrong", "",
              "| example | gold | predicted | probability | tokens | excerpt |",
              "|---|---|---|---|---|---|"]
    for w in report["confidently_wrong"]:
        lines.append(f"| {_md_cell(w['example_id'])} | {_md_cell(w['gold'])} | "
                     f"{_md_cell(w['predicted'])} | {w['probability']:.3f} | {w['n_tokens']} | "
                     f"{_md_cell(w['excerpt'])} |")
    if not report["confidently_wrong"]:
        lines.append("| – | – | – | – | – | no errors |")
    return "\n".join(lines) + "\n"
