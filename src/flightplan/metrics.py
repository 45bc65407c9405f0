"""Decision metrics: their names, the predictions they are computed from, their direction.

A campaign's ``metric`` is one of two kinds.

**Classification metrics**, from the ``gold`` and ``predicted`` columns of
``predictions.csv``. Each equals the scikit-learn function given, called on those two
columns as the file holds them (strings; an empty gold is a label like any other) with
its default ``labels`` (every label found in ``gold`` or ``predicted``) and
``zero_division=0``, but is computed here from confusion matrices, so that the paired
bootstrap evaluates 2000 resamples in one vectorised call:

======================================  ==================================================  ====
name                                    scikit-learn                                        goal
======================================  ==================================================  ====
``accuracy``                            ``accuracy_score``                                  max
``balanced_accuracy``                   ``balanced_accuracy_score``                         max
``macro_f1`` (= ``f1_macro``)           ``f1_score(average="macro")``                       max
``f1_micro``, ``f1_weighted``           ``f1_score(average=...)``                           max
``precision_<avg>``, ``recall_<avg>``,  ``precision_score``, ``recall_score``,              max
``jaccard_<avg>``                       ``jaccard_score`` (avg: macro, micro, weighted)
``matthews_corrcoef``                   ``matthews_corrcoef`` (0 when undefined)            max
``cohen_kappa``                         ``cohen_kappa_score`` (0 when undefined, as          max
                                        ``replace_undefined_by=0.0``)
``hamming_loss``, ``zero_one_loss``     ``hamming_loss``, ``zero_one_loss``                 min
======================================  ==================================================  ====

(the ``<metric>_<average>`` names are scikit-learn's own scorer names). The classes are
the ``prob_<label>`` columns in order when the task writes them, then every other label
found in ``gold`` or ``predicted``, sorted: a label of the test split that the task never
learnt counts as a class with its own recall. A class listed by a ``prob_`` column that is
neither gold nor predicted takes no part in a macro average, as in scikit-learn (nor in
any other metric: its row and column of the confusion matrix are zero). In a paired
bootstrap every resample is scored the same way, on the classes it holds.

**Column metrics**, ``mean:<column>``: the mean over test examples of a per-example
numeric column the task writes (``mean:abs_error``, ``mean:loss``, ``mean:exact_match``;
``true``/``false`` count as 1/0). Its direction is the campaign's ``goal``; whether the
column exists is checked once predictions exist (a run without it is not accepted).

A classification metric's ``goal`` must be its direction (``hamming_loss`` with
``goal = "max"`` is refused when the campaign file is loaded).

Usage::

    metric = parse_metric("macro_f1")               # SpecError naming campaign.metric
    predictions = read_predictions(path)             # CheckFailed when unreadable
    metric_value(metric, predictions)                # float
    statistic, reference, variant = paired(metric, ref_predictions, var_predictions)

The paired bootstrap that compares two runs (:mod:`flightplan.close.conclusion`) and the
power analysis that predicts its verdicts (:mod:`flightplan.plan.power`) share its
parameters: :data:`CONFIDENCE`, :data:`N_RESAMPLES` and :data:`SEED`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import numpy as np

from flightplan.errors import CheckFailed, SpecError, closest_name

__all__ = ["Metric", "Predictions", "LABEL_METRICS", "COLUMN_PREFIX", "CONFIDENCE",
           "N_RESAMPLES", "SEED", "parse_metric", "check_goal", "read_predictions",
           "read_predictions_or_none",
           "metric_value", "paired", "aligned", "union_labels", "confusion", "from_confusion"]

CONFIDENCE = 0.95
"""Confidence level of the paired bootstrap interval of a variant's difference."""
N_RESAMPLES = 2000
"""Resamples of the paired bootstrap."""
SEED = 20240601
"""Seed of the paired bootstrap (and of the power simulation), so results repeat."""

COLUMN_PREFIX = "mean:"
_AVERAGED = ("f1", "precision", "recall", "jaccard")
_AVERAGES = ("macro", "micro", "weighted")
LABEL_METRICS: dict[str, str] = {
    "accuracy": "max", "balanced_accuracy": "max", "macro_f1": "max",
    **{f"{m}_{a}": "max" for m in _AVERAGED for a in _AVERAGES},
    "matthews_corrcoef": "max", "cohen_kappa": "max",
    "hamming_loss": "min", "zero_one_loss": "min",
}
"""Classification metric name → its direction (the goal it needs)."""

_FIXED = ("example_id", "gold", "predicted")


@dataclass(frozen=True)
class Metric:
    """A parsed decision metric: ``kind`` ``labels`` (a name of :data:`LABEL_METRICS`,
    ``direction`` its goal) or ``column`` (``column`` the per-example column, no direction)."""

    name: str
    kind: Literal["labels", "column"]
    column: str | None = None
    direction: str | None = None


def parse_metric(name: str) -> Metric:
    """The metric called ``name`` (module docstring).

    Raises:
        SpecError: not a classification metric nor ``mean:<column>`` (field
            ``campaign.metric``; names what is allowed).
    """
    name = str(name).strip()
    if name in LABEL_METRICS:
        return Metric(name, "labels", direction=LABEL_METRICS[name])
    if name.startswith(COLUMN_PREFIX) and name[len(COLUMN_PREFIX):].strip():
        return Metric(name, "column", column=name[len(COLUMN_PREFIX):].strip())
    close = closest_name(name, LABEL_METRICS)
    hint = f"did you mean {close!r}? " if close is not None else ""
    raise SpecError(f"{name!r} is not a decision metric; {hint}use one of "
                    f"{', '.join(LABEL_METRICS)}, or mean:<column> for the mean of a "
                    f"per-example column of predictions.csv (e.g. mean:abs_error)",
                    field="campaign.metric", value=name)


def metric_range(metric: Metric) -> tuple[float, float] | None:
    """The values ``metric`` can take, ``(low, high)``: ``(-1, 1)`` for
    ``matthews_corrcoef`` and ``cohen_kappa`` (scikit-learn's documented ranges), ``(0, 1)``
    for every other classification metric; None for a column's mean (any number)."""
    if metric.kind == "column":
        return None
    return (-1.0, 1.0) if metric.name in ("matthews_corrcoef", "cohen_kappa") else (0.0, 1.0)


def check_goal(metric: Metric, goal: str) -> None:
    """Refuse a goal against a classification metric's direction.

    Raises:
        SpecError: e.g. ``goal = "max"`` for ``hamming_loss`` (field ``campaign.goal``).
    """
    if metric.direction is not None and goal != metric.direction:
        better = "lower" if metric.direction == "min" else "higher"
        raise SpecError(f"{goal!r} but {metric.name} is {better}-is-better; set goal = "
                        f"\"{metric.direction}\"", field="campaign.goal", value=goal)


@dataclass(frozen=True)
class Predictions:
    """One run's ``predictions.csv``, in file order.

    Attributes:
        ids: example ids (N,). labels: the classes (C,) (module docstring); ``[]``
            without ``gold``/``predicted``.
        gold, predicted: (N,) int64 indices into ``labels``, or None.
        probs: (N, P) float64 from the ``prob_<label>`` columns, which are the first P of
            ``labels`` (every predicted label is one of them), or None.
        columns: every other column whose values are all numbers or true/false, (N,)
            float64 (an empty value is NaN).
    """

    ids: list[str]
    labels: list[str]
    gold: np.ndarray | None
    predicted: np.ndarray | None
    probs: np.ndarray | None
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_labels(self) -> bool:
        """Whether gold and predicted labels are present."""
        return self.gold is not None

    def labelled(self, needed_by: str, source: str = "predictions"
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(gold, predicted)``: (N,) int64 indices into ``labels``.

        Raises:
            CheckFailed: the predictions have no gold and predicted columns (names
                ``source`` and what needed them, ``needed_by``).
        """
        if self.gold is None or self.predicted is None:
            raise CheckFailed(f"{source} has no gold and predicted columns for "
                              f"{needed_by}; the task must write them, or use mean:<column>")
        return self.gold, self.predicted

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, str]], columns: Sequence[str], *,
                  source: str = "predictions") -> "Predictions":
        """Parse rows of strings (as :class:`csv.DictReader` gives them).

        Raises:
            CheckFailed: no ``example_id``; ``gold`` without ``predicted`` or the reverse;
                a predicted label without its ``prob_`` column (when there are any).
        """
        columns = list(columns)
        if "example_id" not in columns:
            raise CheckFailed(f"{source}: lacks the column example_id; predictions must be "
                              f"written by the task")
        if ("gold" in columns) != ("predicted" in columns):
            raise CheckFailed(f"{source}: has {'gold' if 'gold' in columns else 'predicted'} "
                              f"without {'predicted' if 'gold' in columns else 'gold'}; a "
                              f"classification task writes both")
        prob_labels = [c[len("prob_"):] for c in columns if c.startswith("prob_")]
        gold = predicted = probs = None
        labels: list[str] = []
        if "gold" in columns:
            found = {r["gold"] for r in rows} | {r["predicted"] for r in rows}
            unlisted = sorted({r["predicted"] for r in rows} - set(prob_labels))
            if prob_labels and unlisted:
                raise CheckFailed(f"{source}: predicted label {unlisted[0]!r} has no column "
                                  f"prob_{unlisted[0]} (the prob_ columns: {prob_labels}); "
                                  f"write one prob_<label> column per class the task predicts")
            labels = prob_labels + sorted(found - set(prob_labels))
            index = {label: i for i, label in enumerate(labels)}
            gold = np.array([index[r["gold"]] for r in rows], dtype=np.int64)
            predicted = np.array([index[r["predicted"]] for r in rows], dtype=np.int64)
        if prob_labels:
            probs = np.array([[_number(r[f"prob_{label}"]) for label in prob_labels]
                              for r in rows], dtype=np.float64).reshape(len(rows), len(prob_labels))
        numeric: dict[str, np.ndarray] = {}
        for column in columns:
            if column in _FIXED or column.startswith("prob_"):
                continue
            try:
                numeric[column] = np.array([_number(r[column]) for r in rows], dtype=np.float64)
            except ValueError:
                continue            # a text column: not a per-example figure
        return cls(ids=[r["example_id"] for r in rows], labels=labels, gold=gold,
                   predicted=predicted, probs=probs, columns=numeric)

    def subset(self, index: np.ndarray, labels: list[str] | None = None) -> "Predictions":
        """The rows ``index`` (int array), classes re-indexed to ``labels`` when given."""
        gold, predicted = self.gold, self.predicted
        if gold is not None and labels is not None and labels != self.labels:
            remap = np.array([labels.index(label) for label in self.labels], dtype=np.int64)
            gold, predicted = remap[gold], remap[predicted]
        return Predictions(
            ids=[self.ids[i] for i in index], labels=labels or self.labels,
            gold=None if gold is None else gold[index],
            predicted=None if predicted is None else predicted[index],
            probs=None if self.probs is None else self.probs[index],
            columns={k: v[index] for k, v in self.columns.items()})


def _number(text: str) -> float:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return 1.0 if lowered == "true" else 0.0
    return math.nan if not lowered else float(lowered)


def read_predictions(path: Path) -> Predictions:
    """Parse a predictions CSV (:meth:`Predictions.from_rows`).

    Raises:
        CheckFailed: the file is unreadable or breaks the contract (names the file).
    """
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = list(reader.fieldnames or [])
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CheckFailed(f"{path}: cannot read predictions ({exc})") from None
    return Predictions.from_rows(rows, columns, source=str(path))


def read_predictions_or_none(path: Path) -> Predictions | None:
    """:func:`read_predictions` of ``path``, or None when it is missing, unreadable or
    breaks the contract (for a caller whose own checks name what is wrong with it)."""
    try:
        return read_predictions(path)
    except CheckFailed:
        return None


def confusion(gold: np.ndarray, predicted: np.ndarray, n_labels: int) -> np.ndarray:
    """Confusion matrices along the last axis: class indices (..., N) → (..., C, C) int64,
    C = ``n_labels``, rows gold, columns predicted."""
    k = n_labels
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    if gold.shape[-1] == 0:                          # no examples: every count is 0
        return np.zeros((*gold.shape[:-1], k, k), dtype=np.int64)
    flat = (gold * k + predicted).reshape(-1, gold.shape[-1])
    offsets = np.arange(flat.shape[0])[:, None] * (k * k)
    counts = np.bincount((flat + offsets).ravel(), minlength=flat.shape[0] * k * k)
    return counts.reshape(*gold.shape[:-1], k, k)


def _divide(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom, 0 where bottom is 0 (scikit-learn's ``zero_division=0``)."""
    top, bottom = np.asarray(top, dtype=np.float64), np.asarray(bottom, dtype=np.float64)
    return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), 0.0)


def from_confusion(name: str, m: np.ndarray) -> np.ndarray:
    """Classification metric ``name`` of confusion matrices (..., C, C) → (...), as
    :func:`confusion` lays them out; counts or any positive multiple of them (a metric of a
    confusion matrix does not change when every cell is scaled).

    A macro average runs over the classes that are gold or predicted at least once
    (scikit-learn's default ``labels``); ``balanced_accuracy`` over the gold classes only,
    as ``balanced_accuracy_score`` leaves out a class that is only predicted.
    """
    tp = np.diagonal(m, axis1=-2, axis2=-1)
    n_pred, n_gold = m.sum(axis=-2), m.sum(axis=-1)
    total = m.sum(axis=(-2, -1))
    accuracy = _divide(tp.sum(-1), total)
    if name == "accuracy":
        return accuracy
    if name in ("hamming_loss", "zero_one_loss"):
        return 1.0 - accuracy
    if name == "balanced_accuracy":
        in_gold = n_gold > 0
        return _divide((_divide(tp, n_gold) * in_gold).sum(-1), in_gold.sum(-1))
    if name in ("matthews_corrcoef", "cohen_kappa"):
        correct = tp.sum(-1)
        if name == "matthews_corrcoef":
            cov_tp = correct * total - (n_gold * n_pred).sum(-1)
            cov_pp = total ** 2 - (n_pred * n_pred).sum(-1)
            cov_tt = total ** 2 - (n_gold * n_gold).sum(-1)
            return _divide(cov_tp, np.sqrt(cov_tt.astype(np.float64) * cov_pp))
        # kappa = 1 - Σ w·observed / Σ w·expected, w = 1 off the diagonal
        observed = total - correct
        expected = _divide(total ** 2 - (n_gold * n_pred).sum(-1), total)
        return np.where(expected > 0, 1.0 - _divide(observed, expected), 0.0)
    base, _, average = ("f1_macro" if name == "macro_f1" else name).rpartition("_")
    top = {"f1": 2 * tp, "precision": tp, "recall": tp, "jaccard": tp}[base]
    bottom = {"f1": n_pred + n_gold, "precision": n_pred, "recall": n_gold,
              "jaccard": n_pred + n_gold - tp}[base]
    if average == "micro":
        return _divide(top.sum(-1), bottom.sum(-1))
    per_class = _divide(top, bottom)
    if average == "weighted":
        return _divide((per_class * n_gold).sum(-1), n_gold.sum(-1))
    present = (n_gold + n_pred) > 0
    return _divide((per_class * present).sum(-1), present.sum(-1))


def _column(metric: Metric, predictions: Predictions, source: str) -> np.ndarray:
    values = predictions.columns.get(metric.column or "")
    if values is None:
        numeric = ", ".join(predictions.columns) or "none besides prob_<label>"
        raise CheckFailed(f"{source} has no numeric column {metric.column!r} for the decision "
                          f"metric {metric.name} (its per-example numeric columns: {numeric}); "
                          f"the task must write it, or fix campaign.metric")
    if not np.all(np.isfinite(values)):
        bad = [predictions.ids[i] for i in np.flatnonzero(~np.isfinite(values))[:5]]
        raise CheckFailed(f"{source}: column {metric.column!r} is empty or not finite for "
                          f"example(s) {', '.join(bad)}; the task must write a number per example")
    return values


def metric_value(metric: Metric | str, predictions: Predictions, *,
                 source: str = "predictions") -> float:
    """The metric of one run's predictions (0.0 for a classification metric of no rows).

    Raises:
        SpecError: an unknown metric name.
        CheckFailed: the predictions lack what the metric needs (names ``source``).
    """
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    if metric.kind == "column":
        values = _column(metric, predictions, source)
        return float(values.mean()) if len(values) else math.nan
    gold, predicted = predictions.labelled(f"the decision metric {metric.name}", source)
    matrix = confusion(gold, predicted, len(predictions.labels))
    return float(from_confusion(metric.name, matrix))


def union_labels(reference: Predictions, variant: Predictions) -> list[str]:
    """The classes two runs are compared on: the reference's, then the variant's others
    (sorted)."""
    return reference.labels + sorted(set(variant.labels) - set(reference.labels))


def aligned(metric: Metric | str, runs: Sequence[Predictions], *, source: str = "predictions"
            ) -> tuple[Callable[..., np.ndarray], list[tuple[np.ndarray, ...]]]:
    """:func:`paired` for several runs (the replicates of two runs, reference first): all
    aligned on the example ids every one of them has (the first run's order) and, for a
    classification metric, on the union of their classes (the first run's, then the
    others' sorted); gold labels come from the first run.

    Returns:
        ``(statistic, arrays)``: ``statistic(*arrays[j], axis=-1)`` maps run j's arrays of
        shape (..., N) to (...), as in :func:`paired`.

    Raises:
        CheckFailed: a run lacks what the metric needs. ValueError: ``runs`` is empty.
    """
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    if not runs:
        raise ValueError("aligned() needs at least one run")
    first = runs[0]
    common = set(first.ids).intersection(*(set(run.ids) for run in runs[1:]))
    indices = []
    for run in runs:
        position = {example_id: i for i, example_id in enumerate(run.ids)}
        indices.append(np.array([position[e] for e in first.ids if e in common],
                                dtype=np.int64))
    if metric.kind == "column":
        def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.asarray(np.mean(values, axis=axis))
        return mean, [(_column(metric, run, f"{source} ({j})")[index],)
                      for j, (run, index) in enumerate(zip(runs, indices))]
    needed_by = f"the decision metric {metric.name}"
    for j, run in enumerate(runs):
        run.labelled(needed_by, f"{source} ({j})")
    others = set().union(*(set(run.labels) for run in runs[1:])) - set(first.labels)
    labels = first.labels + sorted(others)
    gold, _ = first.subset(indices[0], labels).labelled(needed_by, source)
    arrays: list[tuple[np.ndarray, ...]] = [
        (gold, run.subset(index, labels).labelled(needed_by, source)[1])
        for run, index in zip(runs, indices)]
    n_labels = len(labels)

    def statistic(gold: np.ndarray, predicted: np.ndarray, axis: int = -1) -> np.ndarray:
        return from_confusion(metric.name, confusion(gold, predicted, n_labels))
    return statistic, arrays


def paired(metric: Metric | str, reference: Predictions, variant: Predictions, *,
           source: str = "predictions"
           ) -> tuple[Callable[..., np.ndarray], tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The metric as a statistic of aligned per-example arrays, for a paired bootstrap.

    Both runs are aligned on the example ids they share (the reference's order) and, for
    a classification metric, on the union of their classes (the reference's first).

    Returns:
        ``(statistic, reference_arrays, variant_arrays)``: ``statistic(*arrays, axis=-1)``
        maps arrays of shape (..., N) to (...); classification arrays are ``(gold,
        predicted)`` (gold from the reference), column arrays ``(values,)``.

    Raises:
        CheckFailed: either run lacks what the metric needs.
    """
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    position = {example_id: i for i, example_id in enumerate(variant.ids)}
    shared = [(i, position[e]) for i, e in enumerate(reference.ids) if e in position]
    ref_index = np.array([i for i, _ in shared], dtype=np.int64)
    var_index = np.array([j for _, j in shared], dtype=np.int64)
    if metric.kind == "column":
        ref_values = _column(metric, reference, f"{source} (reference)")[ref_index]
        var_values = _column(metric, variant, f"{source} (variant)")[var_index]

        def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.asarray(np.mean(values, axis=axis))
        return mean, (ref_values,), (var_values,)
    needed_by = f"the decision metric {metric.name}"
    reference.labelled(needed_by, f"{source} (reference)")
    variant.labelled(needed_by, f"{source} (variant)")
    labels = union_labels(reference, variant)
    ref_gold, ref_predicted = reference.subset(ref_index, labels).labelled(needed_by, source)
    _, var_predicted = variant.subset(var_index, labels).labelled(needed_by, source)
    n_labels = len(labels)

    def statistic(gold: np.ndarray, predicted: np.ndarray, axis: int = -1) -> np.ndarray:
        return from_confusion(metric.name, confusion(gold, predicted, n_labels))
    return statistic, (ref_gold, ref_predicted), (ref_gold, var_predicted)
