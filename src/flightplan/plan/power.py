"""Resolution and power of the campaign's comparisons: what the test set can decide.

Before any run, for each comparison ``close`` will make (each variant against its
reference: :mod:`flightplan.close.conclusion`), this module predicts what the paired
bootstrap interval will be able to say, from the number of test examples, the decision
metric, ``goal``, ``min_gain`` and the confidence level ``close`` uses
(:data:`flightplan.metrics.CONFIDENCE`). Gains are signed by ``goal`` (positive is
better); ``t`` is ``min_gain``.

- **verdicts** (as ``close`` gives them): *meets* when the whole interval of the gain lies
  at or past t, *does_not_meet* when it lies wholly short of t, *inconclusive* when it
  straddles t;
- **resolution**: the expected half-width of the interval (metric units) when the true
  gain is t;
- **power curve**: the probability of each verdict against the true gain;
- **minimum detectable gain**: the smallest true gain that is confirmed (meets) with
  probability :data:`TARGET_POWER`;
- **examples needed**: the test-set size at which the expected gain (a run's
  ``expected_gain``, default twice ``min_gain``) is confirmed with that probability.

The model
---------
The measured gain ĝ on n test examples is taken as normal with mean μ(g) and standard
deviation σ(g) for a true gain g, and the bootstrap interval as ĝ ± z·σ(g), with
z = Φ⁻¹(1 − (1 − CONFIDENCE)/2) = 1.96. Then::

    P(meets)          = Φ((μ − t)/σ − z)
    P(does_not_meet)  = Φ((t − μ)/σ − z)
    P(inconclusive)   = 1 − P(meets) − P(does_not_meet)

and, σ shrinking as 1/√n, the test size at which a gain g > t is confirmed with
probability p is ``n · (σ(g) · (z + Φ⁻¹(p)) / (g − t))²``.

μ and σ come from a model of paired per-example outcomes.

**Classification metrics** (every name of :data:`flightplan.metrics.LABEL_METRICS`) are
simulated, as Card et al., "With Little Power Comes Great Responsibility" (EMNLP 2020)
recommend. An example is a triple (gold class, the reference's prediction, the variant's
prediction) drawn from a table of probabilities over such triples; a test set is a
multinomial draw of n triples; each run's metric is computed from the draw's confusion
matrices by :func:`flightplan.metrics.from_confusion`, the code ``close`` uses. At true
gain 0 the table is symmetric (swapping the two runs' predictions leaves it unchanged, so
the runs are equally good on every metric) and the runs disagree on a fraction d of the
examples, the **disagreement**. A true gain is made by tilting the table: each triple's
probability is multiplied by 1 + λ·s, s = +1 where only the variant is right, −1 where
only the reference is, 0 elsewhere; the true gain g(λ) is the metric difference of the
tilted table itself (an infinite test set). λ runs over :data:`LAMBDAS`, up to 1: the
largest gain the disagreement allows (for accuracy, g(1) is the share of examples on
which exactly one run is right). μ and σ are the mean and standard deviation of the
simulated measured gain, with the metric's linearisation (the delta method) as a control
variate (Davison & Hinkley, *Bootstrap Methods and their Application*, 1997, §9.3): the
linear part's mean and variance are exact (the multinomial's covariance), and
test sets simulated (seed :data:`flightplan.metrics.SEED`, so the figures repeat) at the
tilts :data:`SIMULATED_LAMBDAS` add what the linearisation misses
(for macro-F1 on a few hundred examples, under 1 % of σ). Accuracy is linear: its figures
are the closed form (up to the interpolation between tilts, under 0.1 % of σ). With many
classes the linearisation is skipped (:data:`LINEAR_BUDGET`) and σ carries the plain
simulation's noise, about 2 %. Between the computed points, μ and σ are interpolated
linearly in the true gain.

Where the table at gain 0 comes from, best first:

1. paired predictions of the two runs (a previous campaign's, a pilot's):
   :func:`model_from_predictions` symmetrises their triples;
2. one run's predictions (the pilot's control): :func:`model_from_reference` keeps its
   confusion matrix and makes the other run from the disagreement;
3. nothing measured: :func:`default_model` assumes a reference right on
   :data:`DEFAULT_REFERENCE_ACCURACY` of each class's examples, its errors spread evenly
   over the other classes, class shares from the test split's labels (two balanced
   classes when they are unknown), and the disagreement of ``[campaign]
   expected_disagreement``, else :data:`DEFAULT_DISAGREEMENT`.

In 2 and 3 the other run differs from the reference on a fraction d of the examples, each
time with one of the two right: d/2 taken from the examples the reference gets right
(the variant's error then follows the reference's own errors on that class) and d/2 from
those it gets wrong (the variant right); then the table is symmetrised.

**Column metrics** (``mean:<column>``) have a closed form: the gain is the mean of
per-example differences, so σ = sd/√n with sd the standard deviation of the per-example
difference (in the column's units), and μ = g (central limit theorem). sd comes from
paired predictions (:func:`model_from_predictions`) or ``[campaign]
expected_difference_sd``; without either nothing about the column's scale is known and
the power is not computed.

Assumptions worth knowing: the interval's half-width is z·σ at the true gain (a percentile
bootstrap's half-width varies a little from one test set to another); examples are
independent and drawn like the ones the model came from; each comparison is taken alone
(the campaign answers "yes" when any one meets, so more comparisons are more chances of a
lucky one).

Usage::

    model = default_model("macro_f1", goal="max", label_counts={"positive": 248, ...},
                          disagreement=0.25)
    power = comparison_power(model, model.moments(379), variant="lora-r8",
                             reference="control", min_gain=0.05, expected_gain=0.1)
    power.resolution, power.minimum_detectable_gain, power.examples_needed
    campaign_power(spec, TestSplit(379, counts, "corpus …")).to_json()   # plan --json "power"
    examples_to_settle(gain=0.0586, gain_low=0.0034, gain_high=0.1169, n_examples=379,
                       min_gain=0.05)                   # an inconclusive verdict's remedy
    rank_by_value(pending_powers, gpu_hours, concluded={"lora-r8": "inconclusive"})
"""

from __future__ import annotations

import io
import math
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import numpy as np
from scipy.stats import norm

from flightplan.metrics import (CONFIDENCE, SEED, Predictions, from_confusion, paired,
                                parse_metric, union_labels)
from flightplan.spec import CampaignSpec

__all__ = [
    "TARGET_POWER", "WARN_BELOW", "DEFAULT_DISAGREEMENT", "DEFAULT_REFERENCE_ACCURACY",
    "N_SIMULATIONS", "N_CONTROLLED", "LAMBDAS", "SIMULATED_LAMBDAS", "LINEAR_BUDGET",
    "MIN_DECISION_VALUE", "MIN_CONCLUSIVE",
    "Z_INTERVAL", "Moments", "PairedModel", "LabelModel", "ColumnModel",
    "verdict_probabilities", "default_model", "model_from_reference", "model_from_predictions",
    "Scenario", "ComparisonPower", "comparison_power", "TestSplit", "CampaignPower",
    "campaign_power", "examples_to_settle", "rounded_count", "decision_values", "Ranked",
    "rank_by_value", "power_png",
]

TARGET_POWER = 0.8
"""A gain counts as detectable when it is confirmed (meets) with this probability."""
WARN_BELOW = 0.5
"""``plan`` warns when the expected gain would be confirmed with less than this."""
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
into [d/2, 1 − d/2] where the disagreement d needs it)."""
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
MIN_DECISION_VALUE = 0.05
"""A variant whose decision value is below this is proposed for cut."""
MIN_CONCLUSIVE = 0.2
"""Below this probability of a conclusive verdict a variant "cannot reach" one."""
Z_INTERVAL = float(norm.ppf(0.5 + CONFIDENCE / 2))
"""z of the two-sided interval at :data:`flightplan.metrics.CONFIDENCE` (1.96)."""
_Z_TARGET = float(norm.ppf(TARGET_POWER))
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


def verdict_probabilities(mean: float | np.ndarray, sd: float | np.ndarray,
                          min_gain: float | np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(meets, does_not_meet, inconclusive)`` probabilities (module docstring).

    Args:
        mean, sd: the measured gain's mean and standard deviation (broadcast together).
        min_gain: the threshold t.
    """
    mean, sd = np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        distance = np.where(sd > 0, (mean - min_gain) / np.where(sd > 0, sd, 1.0),
                            np.where(mean >= min_gain, np.inf, -np.inf))
    meets = norm.cdf(distance - Z_INTERVAL)
    short = norm.cdf(-distance - Z_INTERVAL)
    return meets, short, np.clip(1.0 - meets - short, 0.0, 1.0)


def _examples_for(sd: float, gap: float, n: int, power: float = TARGET_POWER) -> int | None:
    """Test size at which a gain ``gap`` past the threshold, measured with sd ``sd`` on
    ``n`` examples, reaches its side's verdict with probability ``power``; None when
    ``gap`` is 0 (or so small against ``sd`` that the size is not a finite number)."""
    if gap == 0:
        return None
    if sd == 0:
        return n
    ratio = np.float64(sd * (Z_INTERVAL + float(norm.ppf(power))) / abs(gap))
    with np.errstate(over="ignore"):
        size = float(n * ratio ** 2)
    return max(1, math.ceil(size)) if math.isfinite(size) else None


@dataclass(frozen=True, eq=False)
class LabelModel:
    """Paired outcomes of a classification metric (module docstring).

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
                    inputs: dict[str, Any]) -> LabelModel:
    """A :class:`LabelModel` from the reference's (gold, prediction) probabilities
    ``reference`` (C, C) and the disagreement d: d/2 moved from its right answers to "only
    the reference right", d/2 from its wrong ones to "only the variant right"; d is lowered
    to what the reference allows (noted)."""
    c = reference.shape[1]
    right = float(np.trace(reference))
    wrong = float(reference.sum() - right)
    most = 2 * min(right, wrong)
    if disagreement > most + 1e-12:
        inputs["notes"] = list(inputs.get("notes", [])) + [
            f"disagreement lowered from {disagreement:.3f} to {most:.3f}: a reference right "
            f"on {right:.1%} of the examples allows no more at equal quality"]
        disagreement = most
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


def default_model(metric: str, *, goal: str, label_counts: Mapping[str, int] | None,
                  disagreement: float = DEFAULT_DISAGREEMENT,
                  disagreement_source: str = "default") -> LabelModel:
    """The model without measurements (module docstring, source 3).

    Args:
        metric: a classification metric name. goal: its direction.
        label_counts: test examples per class (None or empty: two balanced classes).
        disagreement: d, in (0, 1]. disagreement_source: where d came from (reported).

    Raises:
        ValueError: ``metric`` is a column metric (use :class:`ColumnModel`).
    """
    name = _label_metric(metric)
    notes: list[str] = []
    counts = {k: v for k, v in (label_counts or {}).items()}
    if sum(counts.values()) == 0:
        counts = {"class 1": 1, "class 2": 1}
        notes.append("class shares of the test split unknown: two balanced classes assumed")
    while len(counts) < 2:
        counts[f"other {len(counts)}"] = 0
    shares = np.array(list(counts.values()), dtype=np.float64)
    shares /= shares.sum()
    c = len(shares)
    accuracy = min(max(DEFAULT_REFERENCE_ACCURACY, disagreement / 2), 1 - disagreement / 2)
    reference = np.repeat(shares[:, None] * (1 - accuracy) / (c - 1), c, axis=1)   # (C, C)
    reference[np.arange(c), np.arange(c)] = shares * accuracy
    inputs = {"kind": "labels", "source": "assumed",
              "disagreement_source": disagreement_source,
              "reference_accuracy": round(accuracy, 4),
              "reference_accuracy_source": "assumed, errors spread evenly over the "
                                           "other classes",
              "class_shares": {k: round(float(s), 4) for k, s in zip(counts, shares)},
              "notes": notes}
    return _with_other_run(name, goal, reference, disagreement, inputs)


def model_from_reference(metric: str, reference: Predictions, *, goal: str,
                         disagreement: float = DEFAULT_DISAGREEMENT,
                         disagreement_source: str = "default", source: str) -> LabelModel:
    """The model from one run's predictions, e.g. the pilot's control (source 2): its
    confusion matrix as the reference, the other run made from ``disagreement``.

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
    return _with_other_run(name, goal, joint, disagreement, inputs)


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


@dataclass(frozen=True)
class Scenario:
    """The verdict probabilities at one true gain: ``case`` is ``no gain``,
    ``threshold`` or ``expected gain``."""

    case: str
    true_gain: float
    meets: float
    does_not_meet: float
    inconclusive: float


@dataclass(frozen=True, eq=False)
class ComparisonPower:
    """What one comparison can decide on the test set (module docstring).

    Attributes:
        variant, reference, metric, goal, n_test: the comparison and its test size.
        min_gain, expected_gain: t and the expected gain; expected_gain_source where the
            latter came from. inputs: the model's inputs and sources.
        resolution: the expected half-width of the interval at true gain t.
        scenarios: verdict probabilities at gain 0, t and the expected gain.
        minimum_detectable_gain: the smallest gain confirmed with :data:`TARGET_POWER`
            (None: none the model holds).
        examples_needed: test size that confirms the expected gain with that probability
            (None: the expected gain does not exceed t).
        threshold_for_target: ``("at least" | "at most", t')``: the threshold at which the
            expected gain (twice t' when it is the default) is confirmed with that
            probability; None when none is.
        curve: ``(true gains, meets, does_not_meet, inconclusive)``, each (P,).
        notes: what the numbers assume beyond the inputs.
    """

    variant: str
    reference: str
    metric: str
    goal: str
    n_test: int
    min_gain: float
    expected_gain: float
    expected_gain_source: str
    inputs: Mapping[str, Any]
    resolution: float
    scenarios: tuple[Scenario, ...]
    minimum_detectable_gain: float | None
    examples_needed: int | None
    threshold_for_target: tuple[str, float] | None
    curve: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    notes: tuple[str, ...] = ()

    def scenario(self, case: str) -> Scenario:
        """The scenario called ``case``."""
        return next(s for s in self.scenarios if s.case == case)

    @property
    def confirm_probability(self) -> float:
        """P(meets) at the expected gain."""
        return self.scenario("expected gain").meets

    @property
    def warn(self) -> bool:
        """The expected gain would be confirmed with less than :data:`WARN_BELOW`."""
        return self.confirm_probability < WARN_BELOW

    def to_json(self) -> dict[str, Any]:
        """The entry of ``plan --json`` ``power.comparisons`` (gains to 4 places,
        probabilities to 3)."""
        gains, meets, short, unsure = self.curve
        bound = self.threshold_for_target
        return {
            "variant": self.variant, "reference": self.reference, "metric": self.metric,
            "goal": self.goal, "test_examples": self.n_test, "min_gain": self.min_gain,
            "expected_gain": self.expected_gain,
            "expected_gain_source": self.expected_gain_source,
            "confidence_level": CONFIDENCE, "target_power": TARGET_POWER,
            "model": dict(self.inputs),
            "resolution": round(self.resolution, 4),
            "verdict_probabilities": [
                {"case": s.case, "true_gain": round(s.true_gain, 4), "meets": round(s.meets, 3),
                 "does_not_meet": round(s.does_not_meet, 3),
                 "inconclusive": round(s.inconclusive, 3)} for s in self.scenarios],
            "confirm_probability": round(self.confirm_probability, 3),
            "minimum_detectable_gain": None if self.minimum_detectable_gain is None
            else round(self.minimum_detectable_gain, 4),
            "examples_needed": self.examples_needed,
            "threshold_for_target": None if bound is None
            else {"bound": bound[0], "min_gain": round(bound[1], 4)},
            "warning": self.warn, "notes": list(self.notes),
            "curve": {"true_gain": [round(float(g), 4) for g in gains],
                      "meets": [round(float(p), 3) for p in meets],
                      "does_not_meet": [round(float(p), 3) for p in short],
                      "inconclusive": [round(float(p), 3) for p in unsure]},
        }


def comparison_power(model: PairedModel, moments: Moments, *, variant: str, reference: str,
                     min_gain: float, expected_gain: float, metric: str = "",
                     goal: str = "max", expected_gain_source: str = "given",
                     curve_points: int = 41) -> ComparisonPower:
    """What one comparison can decide (module docstring), from ``model``'s ``moments``.

    A gain past the largest the model holds (the disagreement's limit) is evaluated at
    that largest gain, with a note.

    Args:
        model: the paired-outcome model (its ``inputs`` are reported).
        moments: ``model.moments(n_test, upto=…)``.
        min_gain: t. expected_gain: the gain the variant is expected to bring.
        metric, goal: reported. expected_gain_source: reported; one starting with
            ``default`` says the expected gain is twice t, so the threshold that would
            serve (``threshold_for_target``) moves the expected gain with it.
        curve_points: points of the power curve.
    """
    n = moments.n
    top = moments.max_gain
    notes = list(model.inputs.get("notes", []))

    def reachable(gain: float, what: str) -> float:
        if gain <= top:
            return gain
        notes.append(f"{what} {gain:+.4g} is beyond the largest gain the disagreement allows "
                     f"({top:+.4g}); figures for it are those of {top:+.4g}")
        return top

    threshold = reachable(min_gain, "the threshold")
    expected = reachable(expected_gain, "the expected gain")
    resolution = Z_INTERVAL * float(moments.at(threshold)[1])
    scenarios = []
    for case, gain in (("no gain", 0.0), ("threshold", threshold), ("expected gain", expected)):
        mean, sd = moments.at(max(gain, float(moments.gains[0])))
        meets, short, unsure = verdict_probabilities(mean, sd, min_gain)
        scenarios.append(Scenario(case, gain, float(meets), float(short), float(unsure)))

    fine = np.linspace(float(moments.gains[0]), top, 1201)
    fine_mean, fine_sd = moments.at(fine)
    fine_meets = verdict_probabilities(fine_mean, fine_sd, min_gain)[0]
    detectable = _first_crossing(fine, fine_meets, TARGET_POWER)

    sd_expected = float(moments.at(expected)[1])
    needed = _examples_for(sd_expected, expected - min_gain, n) if expected > min_gain else None

    bound: tuple[str, float] | None
    if expected_gain_source.startswith("default"):      # expected gain = 2 × threshold
        halves = verdict_probabilities(fine_mean, fine_sd, fine / 2)[0]
        lowest = _first_crossing(fine, np.where(fine > 0, halves, 0.0), TARGET_POWER)
        bound = None if lowest is None else ("at least", lowest / 2)
    else:
        highest = float(moments.at(expected)[0]) - (Z_INTERVAL + _Z_TARGET) * sd_expected
        bound = ("at most", highest) if highest > 0 else None

    low = max(float(moments.gains[0]), min(0.0, -resolution))
    high = min(top, max(2 * expected, min_gain + 4 * resolution, min_gain * 1.5))
    gains = np.linspace(low, high, curve_points)
    mean, sd = moments.at(gains)
    return ComparisonPower(
        variant=variant, reference=reference, metric=metric, goal=goal, n_test=n,
        min_gain=min_gain, expected_gain=expected_gain,
        expected_gain_source=expected_gain_source, inputs=dict(model.inputs),
        resolution=resolution, scenarios=tuple(scenarios),
        minimum_detectable_gain=detectable, examples_needed=needed,
        threshold_for_target=bound, curve=(gains, *verdict_probabilities(mean, sd, min_gain)),
        notes=tuple(dict.fromkeys(notes)))


def _first_crossing(x: np.ndarray, y: np.ndarray, level: float) -> float | None:
    """The first x at which y reaches ``level`` (linear between grid points), or None."""
    above = np.flatnonzero(y >= level)
    if not len(above):
        return None
    i = int(above[0])
    if i == 0 or y[i] == y[i - 1]:
        return float(x[i])
    return float(x[i - 1] + (level - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))


@dataclass(frozen=True)
class TestSplit:
    """The test split as the plan knows it: ``n_examples`` (after ``test_limit``),
    ``label_counts`` (class → examples; None without a label column) and ``source``
    (one line: where the figures were read)."""

    n_examples: int
    label_counts: Mapping[str, int] | None
    source: str


@dataclass(frozen=True)
class CampaignPower:
    """The power of every comparison of a campaign.

    Attributes:
        test: the test split (None: unknown). comparisons: the computed ones, file order.
        not_computed: ``(variant, reference, reason)`` of the others.
    """

    test: TestSplit | None
    comparisons: tuple[ComparisonPower, ...]
    not_computed: tuple[tuple[str, str, str], ...] = ()

    @property
    def warnings(self) -> tuple[ComparisonPower, ...]:
        """The comparisons whose expected gain would be confirmed with less than
        :data:`WARN_BELOW`."""
        return tuple(c for c in self.comparisons if c.warn)

    def to_json(self) -> dict[str, Any]:
        """``plan --json`` key ``power``: ``{test_examples, test_source, confidence_level,
        target_power, warn_below, comparisons, not_computed}``."""
        return {"test_examples": None if self.test is None else self.test.n_examples,
                "test_source": None if self.test is None else self.test.source,
                "confidence_level": CONFIDENCE, "target_power": TARGET_POWER,
                "warn_below": WARN_BELOW,
                "comparisons": [c.to_json() for c in self.comparisons],
                "not_computed": [{"variant": v, "reference": r, "reason": why}
                                 for v, r, why in self.not_computed]}


def campaign_power(spec: CampaignSpec, test: TestSplit | None, *, why_unknown: str = "",
                   models: Mapping[str, PairedModel] | None = None) -> CampaignPower:
    """The power of each comparison of ``spec`` on its test split.

    Args:
        spec: the campaign (metric, goal, min_gain, runs' ``expected_gain``,
            ``expected_disagreement``, ``expected_difference_sd``).
        test: the test split, or None when it is unknown (``why_unknown`` says why).
        models: variant name → a model measured elsewhere (:func:`model_from_predictions`,
            :func:`model_from_reference`), used in place of the campaign file's figures.

    Returns:
        one :class:`ComparisonPower` per run with a reference that has a model, the
        others in ``not_computed`` with the reason.
    """
    section = spec.campaign
    pairs = [(i, run) for i, run in enumerate(spec.runs) if run.reference is not None]
    if test is None or test.n_examples < 2:
        why = why_unknown or "the test split has fewer than 2 examples"
        return CampaignPower(test, (), tuple((r.name, r.reference or "", why) for _, r in pairs))
    metric = parse_metric(section.metric)
    default: PairedModel | None = None
    missing = ""
    if metric.kind == "labels":
        given = section.expected_disagreement
        default = default_model(
            metric.name, goal=section.goal, label_counts=test.label_counts,
            disagreement=DEFAULT_DISAGREEMENT if given is None else given,
            disagreement_source="default; set [campaign] expected_disagreement"
            if given is None
            else "campaign file ([campaign] expected_disagreement)")
    elif section.expected_difference_sd is not None:
        default = ColumnModel(sd=section.expected_difference_sd, inputs={
            "kind": "column", "source": "campaign file",
            "difference_sd": section.expected_difference_sd,
            "difference_sd_source": "campaign file ([campaign] expected_difference_sd)"})
    else:
        missing = (f"the spread of {section.metric}'s per-example differences is unknown "
                   f"before any run; set [campaign] expected_difference_sd (in the column's "
                   f"units) or plan from paired predictions")
    chosen: list[tuple[int, Any, PairedModel]] = []
    skipped = []
    for index, run in pairs:
        model = (models or {}).get(run.name, default)
        if model is None:
            skipped.append((run.name, run.reference or "", missing))
        else:
            chosen.append((index, run, model))
    moments: dict[int, Moments] = {}
    out = []
    for index, run, model in chosen:
        expected = run.expected_gain if run.expected_gain is not None \
            else min(2 * section.min_gain, sys.float_info.max)
        if id(model) not in moments:
            upto = max(max(min(2 * section.min_gain, sys.float_info.max), r.expected_gain or 0.0)
                       for _, r, m in chosen if m is model)
            moments[id(model)] = model.moments(test.n_examples, upto=upto)
        out.append(comparison_power(
            model, moments[id(model)], variant=run.name, reference=run.reference or "",
            metric=section.metric, goal=section.goal, min_gain=section.min_gain,
            expected_gain=expected,
            expected_gain_source=f"campaign file (run[{index}].expected_gain)"
            if run.expected_gain is not None else "default: 2 × min_gain"))
    return CampaignPower(test, tuple(out), tuple(skipped))


def examples_to_settle(*, gain: float, gain_low: float, gain_high: float, n_examples: int,
                       min_gain: float, power: float = TARGET_POWER) -> int | None:
    """The test-set size that would likely settle an inconclusive comparison.

    Taking the measured gain as the true one and the measured interval's half-width as
    z·σ on ``n_examples`` (σ ∝ 1/√n, module docstring), the size at which the verdict on
    the gain's side of the threshold (meets above it, does_not_meet below) comes out
    with probability ``power``.

    Args:
        gain: the measured gain (signed by goal). gain_low, gain_high: its interval.
        n_examples: the test examples it was measured on. min_gain: t.

    Returns:
        examples in all (not more), or None when the gain sits exactly on t.
    """
    sd = (gain_high - gain_low) / (2 * Z_INTERVAL)
    return _examples_for(sd, gain - min_gain, n_examples, power)


def rounded_count(count: int) -> int:
    """A test-set size to two significant digits, as the outputs say it (``904`` → ``900``,
    ``33733`` → ``34000``; below 100 as it is)."""
    if count < 100:
        return count
    return int(round(count, 2 - len(str(count))))


def decision_values(pending: Mapping[str, ComparisonPower],
                    concluded: Mapping[str, str] | None = None) -> dict[str, float]:
    """The decision value of each variant not yet run.

    The campaign's *choice* is to adopt a variant when some comparison meets the
    threshold, and to keep the reference otherwise (an inconclusive or negative answer
    leads to the same choice: nothing is adopted). The decision value of a pending
    variant v is the probability that running it changes that choice::

        DV(v) = P(v meets) · Π over every other comparison j of (1 − P(j meets))

    with P(v meets) its power at its expected gain (:attr:`ComparisonPower.confirm_probability`);
    for a concluded comparison P(j meets) is 1 when its verdict is ``meets``, else 0; for
    another pending one, its own power. Verdicts of different comparisons are taken as
    independent (two variants of one reference share its predictions, so they are not
    quite). A variant that cannot be confirmed, or whose campaign already has a variant
    that meets, has value 0.

    Args:
        pending: variant → its :class:`ComparisonPower`.
        concluded: variant → verdict of the comparisons already made.

    Returns:
        variant → decision value in [0, 1], for every pending variant.
    """
    concluded = dict(concluded or {})
    already = 0.0 if any(v == "meets" for v in concluded.values()) else 1.0
    out = {}
    for name, power in pending.items():
        others = already
        for other, p in pending.items():
            if other != name:
                others *= 1.0 - p.confirm_probability
        out[name] = power.confirm_probability * others
    return out


@dataclass(frozen=True)
class Ranked:
    """One pending variant in :func:`rank_by_value`'s order.

    Attributes:
        variant: its name. decision_value: :func:`decision_values`. gpu_hours: what its
            run would hold (GPU·h). value_per_gpu_hour: the ratio (``inf`` for 0 h).
        cut: proposed for cut. reason: why (None when kept).
    """

    variant: str
    decision_value: float
    gpu_hours: float
    value_per_gpu_hour: float
    cut: bool
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        """JSON values (``value_per_gpu_hour`` null for a run of 0 h)."""
        per = self.value_per_gpu_hour
        return {"variant": self.variant, "decision_value": round(self.decision_value, 4),
                "gpu_hours": self.gpu_hours,
                "value_per_gpu_hour": None if math.isinf(per) else round(per, 6),
                "cut": self.cut, "reason": self.reason}


def rank_by_value(pending: Mapping[str, ComparisonPower], gpu_hours: Mapping[str, float],
                  concluded: Mapping[str, str] | None = None) -> list[Ranked]:
    """Pending variants by decision value per GPU-hour, highest first; those whose result
    could hardly change the choice are proposed for cut, with the reason.

    A variant is proposed for cut when its decision value is below
    :data:`MIN_DECISION_VALUE`; the reason names the first that applies of: the answer
    is already yes (a concluded comparison meets); it cannot reach a conclusive verdict
    (P(meets) + P(does_not_meet) at its expected gain below :data:`MIN_CONCLUSIVE`); every
    outcome leads to the same choice (it would almost surely not meet the threshold); its
    result would likely not change the choice (other variants will likely meet).

    Args:
        pending: variant → :class:`ComparisonPower`. gpu_hours: variant → GPU·h of its
            run. concluded: as :func:`decision_values`.

    Raises:
        KeyError: a pending variant has no entry in ``gpu_hours``.
    """
    concluded = dict(concluded or {})
    values = decision_values(pending, concluded)
    winners = [v for v, verdict in concluded.items() if verdict == "meets"]
    ranked = []
    for name, power in pending.items():
        value, hours = values[name], float(gpu_hours[name])
        expected = power.scenario("expected gain")
        reason = None
        if value < MIN_DECISION_VALUE:
            if winners:
                reason = (f"the answer is already yes ({', '.join(winners)} meets the "
                          f"threshold): no result of {name} changes the choice")
            elif expected.meets + expected.does_not_meet < MIN_CONCLUSIVE:
                reason = (f"cannot reach a conclusive verdict: at its expected gain "
                          f"{power.expected_gain:+.4g} on {power.n_test} test examples it "
                          f"comes out inconclusive with probability {expected.inconclusive:.0%}")
            elif expected.meets < MIN_DECISION_VALUE:
                reason = (f"every outcome leads to the same choice: it would meet the "
                          f"threshold with probability {expected.meets:.0%} (does not meet: "
                          f"{expected.does_not_meet:.0%})")
            else:
                reason = (f"its result would likely not change the choice (decision value "
                          f"{value:.2f}: other variants will likely meet the threshold)")
        ranked.append(Ranked(name, value, hours, value / hours if hours > 0 else math.inf,
                             reason is not None, reason))
    order = {name: i for i, name in enumerate(pending)}
    ranked.sort(key=lambda r: (r.cut, -r.value_per_gpu_hour, order[r.variant]))
    return ranked


def power_png(power: CampaignPower, *, title: str = "") -> bytes:
    """Each comparison's power curve (probability of each verdict against the true gain,
    threshold and expected gain marked), one panel per comparison, as PNG bytes
    (matplotlib, Agg).

    Raises:
        ValueError: no comparison has a computed power.
    """
    if not power.comparisons:
        raise ValueError("no comparison has a computed power")
    from matplotlib.figure import Figure

    count = len(power.comparisons)
    figure = Figure(figsize=(7.5, 3.2 * count), dpi=100)
    for row, comparison in enumerate(power.comparisons):
        axes = figure.add_subplot(count, 1, row + 1)
        gains, meets, short, unsure = comparison.curve
        axes.plot(gains, meets, color="tab:green", label="meets")
        axes.plot(gains, short, color="tab:red", label="does not meet")
        axes.plot(gains, unsure, color="tab:gray", label="inconclusive")
        axes.axvline(comparison.min_gain, color="black", linestyle="--",
                     label=f"threshold {comparison.min_gain:+g}")
        axes.axvline(comparison.expected_gain, color="tab:blue", linestyle=":",
                     label=f"expected gain {comparison.expected_gain:+g}")
        axes.axhline(TARGET_POWER, color="lightgray", linewidth=0.8)
        axes.set_ylim(-0.02, 1.02)
        axes.set_ylabel("probability")
        axes.set_title(f"{comparison.variant} − {comparison.reference}: {comparison.n_test} "
                       f"test examples, resolution ±{comparison.resolution:.3f}", fontsize=10)
        axes.set_xlabel(f"true gain ({comparison.metric}"
                        + (", lower is better" if comparison.goal == "min" else "") + ")")
        axes.legend(fontsize=7, loc="center right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()

