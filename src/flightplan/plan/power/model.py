"""The paired-outcome models: the measured gain's distribution per true gain.

How a test set's paired outcomes are modelled, where the model's table comes from and
how its moments are computed: :mod:`flightplan.plan.power` (package docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import numpy as np

from flightplan.metrics import SEED, Predictions, from_confusion, paired, parse_metric, union_labels

__all__ = ["DEFAULT_DISAGREEMENT", "DEFAULT_REFERENCE_ACCURACY", "N_SIMULATIONS",
           "N_CONTROLLED", "LAMBDAS", "SIMULATED_LAMBDAS", "LINEAR_BUDGET", "Moments",
           "EXPLAIN_TILT", "PILOT_PRIOR_EXAMPLES", "PairedModel", "LabelModel", "ColumnModel",
           "default_model", "model_from_reference", "model_from_pilot", "model_from_predictions"]

DEFAULT_DISAGREEMENT = 0.25
"""Share of test examples on which two runs' predictions differ, when nothing measured it
and the campaign file does not say (``[campaign] expected_disagreement``). With the
default reference right on 70 % of the examples, a quarter means the two runs share a
little over half of their errors (0.175 of the 0.3 each gets wrong). The main job's two
models, a linear probe and a LoRA adapter on one encoder, measured a half-width of ±0.057
macro-F1 on 379 test reviews, which this model gives between 0.25 and 0.3; more
disagreement is a wider interval, so a guess on the high side is the cautious one."""
DEFAULT_REFERENCE_ACCURACY = 0.7
"""Share of each class's examples the reference gets right in the default model (moved
into [d/2, 1 − d/2] where the disagreement d needs it, and lowered where the gain to
explain needs the room: :func:`default_model`)."""
EXPLAIN_TILT = 0.5
"""An assumed disagreement d explains a gain g when the table tilted by this much reaches
g: the variant right on three of every four examples where the two runs differ (for
accuracy g = d/2, so d ≥ 2g). A smaller d would need a variant right on nearly every
example where they differ, which makes its interval narrow for no measured reason; an
assumed d below what the campaign's largest gain needs is raised to it
(:func:`default_model`, :func:`model_from_reference`, with a note)."""
PILOT_PRIOR_EXAMPLES = 100
"""Weight, in test examples, of the prior on the reference's accuracy
(:data:`DEFAULT_REFERENCE_ACCURACY`) that the pilot's predictions update
(:func:`model_from_pilot`). The pilot's control has trained a few steps and predicts at
most a few dozen examples: 32 predictions give its accuracy a standard error of up to
0.09, and the final control is not the pilot's. With 100, 32 lucky predictions (all
right) move the assumed 0.70 to (32 + 70)/132 = 0.77, not to 1.0; a whole test split of
379 predictions moves it 79 % of the way."""
N_SIMULATIONS = 1000
"""Test sets drawn per simulated tilt of a table too large to linearise (σ then carries
a simulation noise of about 1/√(2 · 1000) = 2 %)."""
N_CONTROLLED = 500
"""Test sets drawn per simulated tilt with the linearisation as control variate (it
estimates only the small part the linearisation misses, so fewer draws do)."""
LAMBDAS = np.linspace(-0.5, 1.0, 31)
"""Tilts λ of the table at which the measured gain's moments are computed (1: the
largest gain the disagreement allows)."""
SIMULATED_LAMBDAS = LAMBDAS[::5]
"""Those of them at which test sets are simulated (−0.5, −0.25, … 1); a table too large
to linearise is simulated at every other one (−0.5, 0, 0.5, 1)."""
LINEAR_BUDGET = 200_000
"""Largest number of confusion-matrix entries evaluated per tilt for the linearisation
(2K + 1 tables of C² entries); beyond it (many classes) the simulation goes without
the control variate."""
_STEP = 1e-6            # finite-difference step of the linearisation (probability units)
_CHUNK = 512            # perturbed tables evaluated at once (bounds memory)


@dataclass(frozen=True, eq=False)
class Moments:
    """The measured gain's distribution on ``n`` test examples, per true gain.

    Attributes:
        n: test examples. gains: (G,) true gains, increasing. means: (G,) the expected
            measured gain. sds: (G,) its standard deviation (metric units).
    """

    n: int
    gains: np.ndarray
    means: np.ndarray
    sds: np.ndarray

    @property
    def max_gain(self) -> float:
        """The largest true gain the model holds."""
        return float(self.gains[-1])

    def at(self, gain: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, sd)`` at ``gain`` (interpolated; clamped to the model's range)."""
        return (np.interp(gain, self.gains, self.means), np.interp(gain, self.gains, self.sds))


class PairedModel(Protocol):
    """What :func:`comparison_power` needs of a model of paired outcomes (read-only, so
    the frozen dataclasses below are ones)."""

    @property
    def kind(self) -> str:
        """``labels`` or ``column``."""
        ...

    @property
    def inputs(self) -> Mapping[str, Any]:
        """What the model was built from, and its sources (JSON values)."""
        ...

    def moments(self, n: int, *, upto: float = 0.0) -> Moments:
        """The measured gain's distribution on ``n`` examples; ``upto`` is the largest
        true gain the caller needs (a model without a natural range uses it)."""
        ...

    @property
    def headroom(self) -> float | None:
        """The largest gain the metric allows over the reference (a variant right on
        every example), or None when the metric has no such bound."""
        ...


@dataclass(frozen=True, eq=False)
class LabelModel:
    """Paired outcomes of a classification metric (package docstring).

    Attributes:
        metric: a name of :data:`flightplan.metrics.LABEL_METRICS`. sign: +1 (goal max)
            or −1 (min). cells: (K, 3) int64 triples (gold, reference's prediction,
            variant's prediction), each a class index in [0, ``n_labels``).
        table: (K,) probabilities at true gain 0, symmetric in the two predictions.
        n_labels: the classes C. inputs: what the model was built from, and its sources
            (JSON values).
    """

    metric: str
    sign: float
    cells: np.ndarray
    table: np.ndarray
    n_labels: int
    inputs: Mapping[str, Any]
    kind: str = "labels"

    @property
    def disagreement(self) -> float:
        """Share of examples on which the two runs' predictions differ."""
        return float(self.table[self.cells[:, 1] != self.cells[:, 2]].sum())

    @property
    def headroom(self) -> float:
        """The gain of a variant right on every example over the reference (signed by
        goal): the most any variant can gain."""
        reference = self._confusions(self.table[None, :], 1)
        perfect = np.diag(reference[0].sum(axis=1))[None]
        return float(self.sign * (from_confusion(self.metric, perfect)
                                  - from_confusion(self.metric, reference))[0])

    def tilted(self, lam: float) -> np.ndarray:
        """The table at tilt ``lam``: (K,) probabilities, ``table · (1 + lam · s)``."""
        gold, ref, var = self.cells.T
        s = (var == gold).astype(np.float64) - (ref == gold)
        return np.asarray(self.table * (1.0 + lam * s), dtype=np.float64)

    def _confusions(self, weights: np.ndarray, column: int) -> np.ndarray:
        """(M, K) cell weights → (M, C, C) confusion matrices of the reference
        (``column`` 1) or the variant (2)."""
        k = self.n_labels
        index = self.cells[:, 0] * k + self.cells[:, column]
        rows = weights.shape[0]
        flat = (np.arange(rows)[:, None] * (k * k) + index[None, :]).ravel()
        return np.bincount(flat, weights=weights.ravel(),
                           minlength=rows * k * k).reshape(rows, k, k)

    def gains(self, weights: np.ndarray) -> np.ndarray:
        """The gain (variant − reference, signed by goal) of (M, K) cell weights → (M,)."""
        weights = np.atleast_2d(weights)
        out = np.empty(weights.shape[0])
        for start in range(0, weights.shape[0], _CHUNK):
            part = weights[start:start + _CHUNK]
            out[start:start + _CHUNK] = self.sign * (
                from_confusion(self.metric, self._confusions(part, 2))
                - from_confusion(self.metric, self._confusions(part, 1)))
        return out

    def moments(self, n: int, *, upto: float = 0.0) -> Moments:
        """The measured gain on ``n`` examples at every tilt of :data:`LAMBDAS` (``upto``
        unused: the disagreement bounds the gains).

        At every tilt: the true gain and the linearisation's exact variance (multinomial
        covariance ``(diag p − p pᵀ)/n``). At the tilts of :data:`SIMULATED_LAMBDAS`,
        :data:`N_CONTROLLED` simulated test sets add what the linearisation misses (the
        mean of, and the variance difference between, the metric and its linearisation on
        the same draws), interpolated in λ to the other tilts. A table too large to
        linearise cheaply (more than :data:`LINEAR_BUDGET` confusion entries to evaluate
        per tilt: many classes) is simulated plainly, :data:`N_SIMULATIONS` draws at every
        other simulated tilt, and its bias and variance interpolated in λ.

        Returns:
            :class:`Moments` over the true gains g(λ) (increasing; a λ whose gain does not
            exceed the previous one's is left out).
        """
        size = len(self.table)
        linearise = (2 * size + 1) * self.n_labels ** 2 <= LINEAR_BUDGET
        simulated = SIMULATED_LAMBDAS if linearise else SIMULATED_LAMBDAS[::2]
        eye = np.eye(size) * _STEP if linearise else None
        true, exact, bias, excess = [], [], [], []
        for lam in LAMBDAS:
            p = self.tilted(float(lam))
            gain = float(self.gains(p)[0])
            true.append(gain)
            slope = None
            if eye is not None:
                slope = (self.gains(p + eye) - self.gains(p - eye)) / (2 * _STEP)   # (K,)
                exact.append((p @ slope ** 2 - (p @ slope) ** 2) / n)          # Var(linear)
            if not np.isclose(simulated, lam).any():
                continue
            if slope is None:
                measured = self._simulate(n, p / p.sum())
                bias.append(float(measured.mean()) - gain)
                excess.append(float(measured.var()))
                continue
            share = _multinomial(n, p / p.sum(), N_CONTROLLED) / n             # (B, K)
            measured = self.gains(share)
            linear = gain + (share - p) @ slope
            bias.append(float((measured - linear).mean()))
            excess.append(float(measured.var() - linear.var()))
        bias_at = np.interp(LAMBDAS, simulated, bias)
        variance_at = np.interp(LAMBDAS, simulated, excess) + (np.array(exact) if exact else 0.0)
        rows = [(g, g + b, math.sqrt(max(0.0, v)))
                for g, b, v in zip(true, bias_at, variance_at)]
        kept = [rows[0]]
        for row in rows[1:]:
            if row[0] > kept[-1][0]:
                kept.append(row)
        gains, means, sds = (np.array(c) for c in zip(*kept))
        return Moments(n=n, gains=gains, means=means, sds=sds)

    def _simulate(self, n: int, p: np.ndarray) -> np.ndarray:
        """Measured gains of :data:`N_SIMULATIONS` test sets of ``n`` examples drawn from
        ``p`` (K,): (B,). Per example (inverse CDF, seed :data:`SEED`) when ``n`` is under
        the table's size, else by cell counts; in chunks, so memory stays bounded."""
        if n >= len(p):
            return self.gains(_multinomial(n, p, N_SIMULATIONS) / n)
        rng = np.random.default_rng(SEED)
        k = self.n_labels
        cumulative = np.cumsum(p)
        index_ref = self.cells[:, 0] * k + self.cells[:, 1]
        index_var = self.cells[:, 0] * k + self.cells[:, 2]
        out = np.empty(N_SIMULATIONS)
        rows = max(1, _CHUNK * 64 // max(1, n))
        for start in range(0, N_SIMULATIONS, rows):
            count = min(rows, N_SIMULATIONS - start)
            drawn = np.minimum(np.searchsorted(cumulative, rng.random((count, n)),
                                               side="right"), len(p) - 1)       # (b, n)
            offset = np.arange(count)[:, None] * (k * k)
            tables = [np.bincount((offset + index[drawn]).ravel(), minlength=count * k * k)
                      .reshape(count, k, k) for index in (index_ref, index_var)]
            out[start:start + count] = self.sign * (from_confusion(self.metric, tables[1])
                                                    - from_confusion(self.metric, tables[0]))
        return out


@dataclass(frozen=True, eq=False)
class ColumnModel:
    """Paired outcomes of a column metric: per-example differences with standard
    deviation ``sd`` (the column's units); ``inputs`` as :class:`LabelModel`'s."""

    sd: float
    inputs: Mapping[str, Any]
    kind: str = "column"

    @property
    def headroom(self) -> None:
        """A column's mean has no bound the model knows."""
        return None

    def moments(self, n: int, *, upto: float = 0.0) -> Moments:
        """Closed form: mean g, sd ``sd/√n``, over gains from −top/2 to top, top the larger
        of ``upto`` and 6 standard deviations (at most 1e300, so the grid stays finite)."""
        sd = self.sd / math.sqrt(n)
        top = min(max(upto, 6 * sd, 1e-12), 1e300)
        gains = np.linspace(-top / 2, top, 61)
        return Moments(n=n, gains=gains, means=gains.copy(), sds=np.full_like(gains, sd))


def _multinomial(n: int, p: np.ndarray, size: int) -> np.ndarray:
    """``size`` multinomial draws of ``n`` over probabilities ``p`` (K,) → (size, K) int64,
    by conditional binomials (one vectorised call per cell; seed :data:`SEED`, so that two
    nearby ``p`` give nearby draws)."""
    rng = np.random.default_rng(SEED)
    counts = np.zeros((size, len(p)), dtype=np.int64)
    left = np.full(size, n, dtype=np.int64)
    rest = 1.0
    for k, share in enumerate(p[:-1]):
        counts[:, k] = rng.binomial(left, min(1.0, share / rest) if rest > 0 else 0.0)
        left -= counts[:, k]
        rest -= share
    counts[:, -1] = left
    return counts


def _symmetric(cells: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The table with each triple's probability shared with its swap (reference ↔
    variant), zero cells dropped: (K', 3), (K',)."""
    swapped = cells[:, [0, 2, 1]]
    unique, inverse = np.unique(np.concatenate([cells, swapped]), axis=0, return_inverse=True)
    merged = np.bincount(inverse.ravel(), weights=np.concatenate([probs, probs]) / 2,
                         minlength=len(unique))
    keep = merged > 0
    return unique[keep].astype(np.int64), merged[keep] / merged[keep].sum()


def _sign(metric: str, goal: str) -> float:
    return 1.0 if goal == "max" else -1.0


def _label_metric(metric: str) -> str:
    parsed = parse_metric(metric)
    if parsed.kind != "labels":
        raise ValueError(f"{metric} is not a classification metric")
    return parsed.name


def _with_other_run(metric: str, goal: str, reference: np.ndarray, disagreement: float,
                    inputs: dict[str, Any], explain: float = 0.0) -> LabelModel:
    """A :class:`LabelModel` from the reference's (gold, prediction) probabilities
    ``reference`` (C, C) and the disagreement d: d/2 moved from its right answers to "only
    the reference right", d/2 from its wrong ones to "only the variant right"; d is lowered
    to what the reference allows, and raised (up to that) until the table tilted by
    :data:`EXPLAIN_TILT` reaches the gain ``explain`` (each change noted)."""
    right = float(np.trace(reference))
    most = 2 * min(right, float(reference.sum()) - right)
    notes = list(inputs.get("notes", []))
    if disagreement > most + 1e-12:
        notes.append(f"disagreement lowered from {disagreement:.3f} to {most:.3f}: a reference "
                     f"right on {right:.1%} of the examples allows no more at equal quality")
        disagreement = most
    model = _table_model(metric, goal, reference, disagreement, inputs | {"notes": notes})

    def reached(candidate: LabelModel) -> float:
        return float(candidate.gains(candidate.tilted(EXPLAIN_TILT))[0])

    if explain > 0 and reached(model) < explain and disagreement < most:
        low, high = disagreement, most
        widest = _table_model(metric, goal, reference, most, inputs)
        if reached(widest) >= explain:
            for _ in range(40):                           # bisection: gain grows with d
                middle = (low + high) / 2
                low, high = ((middle, high) if reached(_table_model(
                    metric, goal, reference, middle, inputs)) < explain else (low, middle))
        notes.append(f"disagreement raised from {disagreement:.3f} to {high:.3f}: the gain "
                     f"{explain:+.4g} must be reachable with the variant right on "
                     f"{(1 + EXPLAIN_TILT) / 2:.0%} of the examples where the two runs differ"
                     + ("" if high < most or reached(widest) >= explain else
                        f" (the most a reference right on {right:.1%} allows; it reaches "
                        f"{reached(widest):+.4g})"))
        model = _table_model(metric, goal, reference, high, inputs | {"notes": notes})
    return model


def _table_model(metric: str, goal: str, reference: np.ndarray, disagreement: float,
                 inputs: dict[str, Any]) -> LabelModel:
    """The symmetric table of :func:`_with_other_run` at disagreement ``disagreement``
    (at most what ``reference`` allows)."""
    c = reference.shape[1]
    right = float(np.trace(reference))
    wrong = float(reference.sum() - right)
    cells: list[tuple[int, int, int]] = []
    probs: list[float] = []
    for gold in range(c):
        row = reference[gold]
        errors = np.where(np.arange(c) == gold, 0.0, row)
        spread = errors / errors.sum() if errors.sum() > 0 else \
            np.where(np.arange(c) == gold, 0.0, 1.0 / max(1, c - 1))
        for pred in range(c):
            mass = float(row[pred])
            if mass <= 0:
                continue
            if pred == gold:
                moved = mass * disagreement / 2 / right if right else 0.0
                cells.append((gold, gold, gold))
                probs.append(mass - moved)
                for other in np.flatnonzero(spread > 0):
                    cells.append((gold, gold, int(other)))
                    probs.append(moved * float(spread[other]))
            else:
                moved = mass * disagreement / 2 / wrong if wrong else 0.0
                cells += [(gold, pred, gold), (gold, pred, pred)]
                probs += [moved, mass - moved]
    table_cells, table = _symmetric(np.array(cells, dtype=np.int64), np.array(probs))
    return LabelModel(metric=metric, sign=_sign(metric, goal), cells=table_cells, table=table,
                      n_labels=c, inputs=inputs | {"disagreement": round(disagreement, 4)})


def _class_shares(label_counts: Mapping[str, int] | None, notes: list[str]
                  ) -> tuple[list[str], np.ndarray]:
    """Class names and shares (C,) of the test split, at least two classes (two balanced
    ones, noted, when the counts are unknown)."""
    counts = {k: v for k, v in (label_counts or {}).items()}
    if sum(counts.values()) == 0:
        counts = {"class 1": 1, "class 2": 1}
        notes.append("class shares of the test split unknown: two balanced classes assumed")
    while len(counts) < 2:
        counts[f"other {len(counts)}"] = 0
    shares = np.array(list(counts.values()), dtype=np.float64)
    return list(counts), shares / shares.sum()


def _evenly_wrong(shares: np.ndarray, accuracy: float) -> np.ndarray:
    """(gold, prediction) probabilities (C, C) of a reference right on ``accuracy`` of
    each class's examples, its errors spread evenly over the other classes."""
    c = len(shares)
    reference = np.repeat(shares[:, None] * (1 - accuracy) / (c - 1), c, axis=1)
    reference[np.arange(c), np.arange(c)] = shares * accuracy
    return reference


def default_model(metric: str, *, goal: str, label_counts: Mapping[str, int] | None,
                  disagreement: float = DEFAULT_DISAGREEMENT,
                  disagreement_source: str = "default", explain: float = 0.0) -> LabelModel:
    """The model without measurements (package docstring, source 3).

    The assumed reference accuracy a is :data:`DEFAULT_REFERENCE_ACCURACY`, lowered to
    1 − ``explain`` where the gain to explain needs the room (a reference right on a of
    the examples leaves a variant at most 1 − a of accuracy to gain), and moved into
    [d/2, 1 − d/2]; d is then raised as :data:`EXPLAIN_TILT` says (noted).

    Args:
        metric: a classification metric name. goal: its direction.
        label_counts: test examples per class (None or empty: two balanced classes).
        disagreement: d, in (0, 1). disagreement_source: where d came from (reported).
        explain: the largest gain the model must explain (the campaign's largest
            expected gain); 0: none.

    Raises:
        ValueError: ``metric`` is a column metric (use :class:`ColumnModel`).
    """
    name = _label_metric(metric)
    notes: list[str] = []
    names, shares = _class_shares(label_counts, notes)
    accuracy = DEFAULT_REFERENCE_ACCURACY
    if explain > 1 - accuracy:
        accuracy = max(1 - explain, 1 / len(shares))
        notes.append(f"reference accuracy assumed {accuracy:.3f}, not "
                     f"{DEFAULT_REFERENCE_ACCURACY:g}, to leave room for the gain "
                     f"{explain:+.4g}")
    accuracy = min(max(accuracy, disagreement / 2), 1 - disagreement / 2)
    inputs = {"kind": "labels", "source": "assumed",
              "disagreement_source": disagreement_source,
              "reference_accuracy": round(accuracy, 4),
              "reference_accuracy_source": "assumed, errors spread evenly over the "
                                           "other classes",
              "class_shares": {k: round(float(s), 4) for k, s in zip(names, shares)},
              "notes": notes}
    return _with_other_run(name, goal, _evenly_wrong(shares, accuracy), disagreement, inputs,
                           explain)


def model_from_reference(metric: str, reference: Predictions, *, goal: str,
                         disagreement: float = DEFAULT_DISAGREEMENT,
                         disagreement_source: str = "default", source: str,
                         explain: float = 0.0) -> LabelModel:
    """The model from one run's predictions taken as the whole truth (source 2): its
    confusion matrix as the reference, the other run made from ``disagreement`` (raised
    to explain the gain ``explain``, :data:`EXPLAIN_TILT`). Right for many predictions,
    e.g. a finished run's on the whole test split; the decision point's pilot, a few
    dozen predictions, goes through :func:`model_from_pilot` instead.

    Args:
        source: where the predictions came from (reported, e.g. ``"pilot of control"``).

    Raises:
        ValueError: a column metric. CheckFailed: the predictions have no labels.
    """
    name = _label_metric(metric)
    _, (gold, predicted), _ = paired(name, reference, reference, source=source)
    c = len(reference.labels)
    joint = np.zeros((c, c))
    np.add.at(joint, (gold, predicted), 1.0)
    joint /= max(1, len(gold))
    inputs = {"kind": "labels", "source": source, "examples": int(len(gold)),
              "disagreement_source": disagreement_source,
              "reference_accuracy": round(float(np.trace(joint)), 4),
              "reference_accuracy_source": source}
    return _with_other_run(name, goal, joint, disagreement, inputs, explain)


def model_from_pilot(metric: str, reference: Predictions, *, goal: str,
                     label_counts: Mapping[str, int] | None,
                     disagreement: float = DEFAULT_DISAGREEMENT,
                     disagreement_source: str = "default", source: str,
                     explain: float = 0.0) -> LabelModel:
    """The model of a comparison not yet run, from the pilot's predictions of the control
    as evidence on the reference's accuracy, not as the whole truth.

    The reference is the default model's (class shares of the test split from
    ``label_counts``, errors spread evenly) with accuracy the posterior mean of a
    prior :data:`DEFAULT_REFERENCE_ACCURACY` worth :data:`PILOT_PRIOR_EXAMPLES` examples
    updated by the pilot's k right of m predictions (a beta-binomial mean)::

        a = (k + PILOT_PRIOR_EXAMPLES · DEFAULT_REFERENCE_ACCURACY) / (m + PILOT_PRIOR_EXAMPLES)

    then lowered where the gain to explain needs the room, and the other run made from
    ``disagreement`` as in :func:`default_model`.

    Args:
        label_counts: the test split's examples per class (the data check's); None: the
            pilot's gold labels' shares.
        source: where the predictions came from (reported, e.g. ``"pilot of control-…"``).
        explain: the largest gain the model must explain.

    Raises:
        ValueError: a column metric. CheckFailed: the predictions have no labels.
    """
    name = _label_metric(metric)
    _, (gold, predicted), _ = paired(name, reference, reference, source=source)
    right, seen = int(np.sum(gold == predicted)), int(len(gold))
    counts = label_counts or {label: int(np.sum(gold == i))
                              for i, label in enumerate(reference.labels)}
    notes: list[str] = []
    names, shares = _class_shares(counts, notes)
    accuracy = (right + PILOT_PRIOR_EXAMPLES * DEFAULT_REFERENCE_ACCURACY) / \
        (seen + PILOT_PRIOR_EXAMPLES)
    if explain > 1 - accuracy:
        notes.append(f"the gain {explain:+.4g} is more than a reference right on "
                     f"{accuracy:.1%} leaves room for")
    accuracy = min(max(accuracy, disagreement / 2), 1 - disagreement / 2)
    inputs = {"kind": "labels", "source": source, "examples": seen,
              "disagreement_source": disagreement_source,
              "reference_accuracy": round(accuracy, 4),
              "reference_accuracy_source": (
                  f"{right} right of {seen} predictions ({source}) updating an assumed "
                  f"{DEFAULT_REFERENCE_ACCURACY:g} worth {PILOT_PRIOR_EXAMPLES} examples"),
              "class_shares": {k: round(float(s), 4) for k, s in zip(names, shares)},
              "notes": notes}
    return _with_other_run(name, goal, _evenly_wrong(shares, accuracy), disagreement, inputs,
                           explain)


def model_from_predictions(metric: str, reference: Predictions, variant: Predictions, *,
                           goal: str, source: str) -> LabelModel | ColumnModel:
    """The model from two runs' paired predictions (source 1), aligned as ``close``
    aligns them (:func:`flightplan.metrics.paired`).

    A classification metric: their (gold, reference, variant) triples, symmetrised (the
    measured disagreement and error structure, at gain 0). A column metric: the standard
    deviation of the per-example differences (the measured gain itself is not kept: the
    true gain is what the power curve varies).

    Args:
        source: where they came from (reported, e.g. ``"results of drug-reviews"``).

    Raises:
        CheckFailed: a run lacks what the metric needs.
    """
    parsed = parse_metric(metric)
    _, ref_arrays, var_arrays = paired(parsed, reference, variant, source=source)
    if parsed.kind == "column":
        difference = var_arrays[0] - ref_arrays[0]
        return ColumnModel(sd=float(np.std(difference)), inputs={
            "kind": "column", "source": source, "examples": int(len(difference)),
            "difference_sd": round(float(np.std(difference)), 6),
            "disagreement": round(float(np.mean(difference != 0)), 4) if len(difference) else 0.0,
            "disagreement_source": source})
    (gold, ref), (_, var) = ref_arrays, var_arrays
    c = len(union_labels(reference, variant))
    triples = np.stack([gold, ref, var], axis=1)
    cells, counts = np.unique(triples, axis=0, return_counts=True)
    cells, table = _symmetric(cells, counts.astype(np.float64))
    return LabelModel(metric=parsed.name, sign=_sign(parsed.name, goal), cells=cells,
                      table=table, n_labels=c, inputs={
                          "kind": "labels", "source": source, "examples": int(len(gold)),
                          "disagreement": round(float(np.mean(ref != var)), 4),
                          "disagreement_source": source})
