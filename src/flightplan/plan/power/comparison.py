"""What one comparison can decide: verdict probabilities, resolution, detectable gain and
the test sizes that would confirm or settle it (:mod:`flightplan.plan.power`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy.stats import norm

from flightplan.metrics import CONFIDENCE
from flightplan.plan.power.model import Moments, PairedModel

__all__ = ["TARGET_POWER", "WARN_BELOW", "Z_INTERVAL", "PRACTICAL_FACTOR", "MIN_GAP_SHARE",
           "MAX_COUNT", "NO_PRACTICAL_SIZE", "DEFAULT_SEED_SD", "DEFAULT_SEED_SD_SOURCE", "SEED_COUNTS", "z_meets",
           "Seeds", "ReplicatePower", "verdict_probabilities", "Scenario",
           "ComparisonPower", "comparison_power", "examples_to_settle", "practical_size",
           "rounded_count"]

TARGET_POWER = 0.8
"""A gain counts as detectable when it is confirmed (meets) with this probability."""
WARN_BELOW = 0.5
"""``plan`` warns when the expected gain would be confirmed with less than this."""
Z_INTERVAL = float(norm.ppf(0.5 + CONFIDENCE / 2))
"""z of the two-sided interval at :data:`flightplan.metrics.CONFIDENCE` (1.96)."""
PRACTICAL_FACTOR = 100
"""A test set more than this many times the one at hand is no practical remedy: a test
size past it is reported as :data:`NO_PRACTICAL_SIZE`, never as a count."""
MIN_GAP_SHARE = 0.1
"""A gain closer to its threshold than this share of the interval's half-width (the
resolution) is as good as on it: no test size is given for it."""
MAX_COUNT = 9_999_999
"""The largest test size any output prints (7 digits); past it, :data:`NO_PRACTICAL_SIZE`."""
NO_PRACTICAL_SIZE = "no test set of practical size settles it"
"""What the outputs say in place of a test size past :data:`PRACTICAL_FACTOR` times the
test split, or for a gap under :data:`MIN_GAP_SHARE` of the resolution."""
DEFAULT_SEED_SD = 0.025
"""Per-replicate standard deviation of a classification metric over training seeds when
no earlier campaign measured one: the main job's lora-r8, unchanged but for its seed,
scored macro-F1 0.4930, 0.4544, 0.4217, 0.4328 and 0.4322 over seeds 0-4 (standard
deviation 0.0254 over the five with ddof 0, 0.0284 with ddof 1; measured on a CPU). A
``mean:<column>`` metric has no default (its units are the column's)."""
DEFAULT_SEED_SD_SOURCE = ("default, measured on another task (the main job's lora-r8 macro-F1 "
                          "over seeds 0-4: 0.4930, 0.4544, 0.4217, 0.4328, 0.4322); run "
                          "seeds >= 2 once and plan --from its results to measure this "
                          "task's own")
"""Where :data:`DEFAULT_SEED_SD` comes from, as ``plan`` and the seed notice quote it: it
is a guess for any other task, and says how to replace it."""
SEED_COUNTS = (1, 3, 5)
"""The replicate counts K whose power ``plan`` shows side by side."""
_Z_TARGET = float(norm.ppf(TARGET_POWER))


def z_meets(comparisons: int) -> float:
    """z of the bound that must clear the threshold for *meets* when ``comparisons``
    comparisons share the campaign's one answer under Holm's procedure: the conservative
    Bonferroni level, one-sided (1 − CONFIDENCE)/2/m (Φ⁻¹(1 − 0.025/m): 1.96 for m = 1,
    2.24 for 2, 2.39 for 3). Holm tests the smallest p-value at exactly this level and the
    others at less strict ones, so the power computed at it is a lower bound of Holm's
    (Holm 1979)."""
    return float(norm.ppf(1 - (1 - CONFIDENCE) / 2 / max(1, comparisons)))


@dataclass(frozen=True)
class Seeds:
    """Training randomness in a comparison's power.

    Attributes:
        sd: per-replicate standard deviation s of the metric over seeds (metric units).
        source: where it came from (reported).
        replicates: K, the replicates each side runs (the campaign's ``seeds``).
        comparisons: m, the comparisons that share the campaign's answer under Holm (1
            with ``multiple = "none"``): *meets* is taken at :func:`z_meets`.
        gpu_hours: GPU·h of one replicate of the variant's run (None: unknown).
    """

    sd: float = 0.0
    source: str = "not included"
    replicates: int = 1
    comparisons: int = 1
    gpu_hours: float | None = None

    def spread(self, sd_examples: np.ndarray | float, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(total, interval)`` standard deviations with K = ``k`` replicates a side.

        The measured gain is the difference of two means over K replicates, each side's
        trained with its own seeds and measured on the same test examples, so its
        variance adds the test sampling's σ_ex² and each side's seed variance over K
        (the variance of a difference of independent means; Bouthillier et al.,
        "Accounting for Variance in Machine Learning Benchmarks", MLSys 2021, decompose
        a benchmark's variance into these sources)::

            σ²(K) = σ_ex² + 2 s² / K

        With K ≥ 2 ``close``'s two-level bootstrap interval has that width; with K = 1
        it resamples test examples only, so its half-width is z·σ_ex while the gain
        still moves by σ(1).
        """
        examples = np.asarray(sd_examples, dtype=np.float64)
        total = np.sqrt(examples ** 2 + 2 * self.sd ** 2 / k)
        return total, (examples if k == 1 else total)


def verdict_probabilities(mean: float | np.ndarray, sd: float | np.ndarray,
                          min_gain: float | np.ndarray, *,
                          interval_sd: float | np.ndarray | None = None,
                          z_meet: float = Z_INTERVAL
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(meets, does_not_meet, inconclusive)`` probabilities (package docstring).

    With the interval ĝ ± z·σ_int and ĝ normal (mean μ, sd σ)::

        P(meets)         = Φ((μ − t − z_meet · σ_int) / σ)
        P(does_not_meet) = Φ((t − μ − z · σ_int) / σ)

    which is the package docstring's formula when σ_int = σ and z_meet = z.

    Args:
        mean, sd: the measured gain's mean and standard deviation (broadcast together).
        min_gain: the threshold t.
        interval_sd: σ_int, the interval's half-width over z (default: ``sd``).
        z_meet: z of the bound that must clear t for *meets* (:func:`z_meets`).
    """
    mean, sd = np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    interval = sd if interval_sd is None else np.asarray(interval_sd, dtype=np.float64)
    up = mean - min_gain - z_meet * interval
    down = min_gain - mean - Z_INTERVAL * interval
    safe = np.where(sd > 0, sd, 1.0)
    meets = np.where(sd > 0, norm.cdf(up / safe), (up >= 0).astype(np.float64))
    short = np.where(sd > 0, norm.cdf(down / safe), (down > 0).astype(np.float64))
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


def practical_size(size: int | None, n: int) -> int | None:
    """``size`` when it is a practical test size: at most :data:`PRACTICAL_FACTOR` times
    the ``n`` examples at hand and at most :data:`MAX_COUNT`; else None."""
    if size is None or size > min(PRACTICAL_FACTOR * n, MAX_COUNT):
        return None
    return size


@dataclass(frozen=True, eq=False)
class ReplicatePower:
    """A comparison's power with K replicates a side (:meth:`Seeds.spread`).

    Attributes:
        seeds: K. resolution: z · σ(K) at the threshold (metric units).
        confirm_probability: P(meets) at the expected gain.
        false_meets: P(meets) at a true gain of exactly the threshold, the rate of a false
            "meets" (its interval's 2.5 %, over m under Holm, when the interval holds the
            whole spread; more with K = 1 and a seed spread, which it leaves out).
        minimum_detectable_gain: the smallest gain confirmed with :data:`TARGET_POWER`
            (None: none the model holds).
        gpu_hours: K × one replicate's GPU·h (None: unknown).
        meets: (P,) P(meets) along the comparison's curve gains.
    """

    seeds: int
    resolution: float
    confirm_probability: float
    false_meets: float
    minimum_detectable_gain: float | None
    gpu_hours: float | None
    meets: np.ndarray

    def to_json(self) -> dict[str, Any]:
        """``{seeds, resolution, confirm_probability, false_meets, minimum_detectable_gain,
        gpu_hours}``."""
        return {"seeds": self.seeds, "resolution": round(self.resolution, 4),
                "confirm_probability": round(self.confirm_probability, 3),
                "false_meets": round(self.false_meets, 4),
                "minimum_detectable_gain": None if self.minimum_detectable_gain is None
                else round(self.minimum_detectable_gain, 4),
                "gpu_hours": None if self.gpu_hours is None else round(self.gpu_hours, 4)}


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
    """What one comparison can decide on the test set (package docstring).

    Attributes:
        variant, reference, metric, goal, n_test: the comparison and its test size.
        min_gain, expected_gain: t and the expected gain; expected_gain_source where the
            latter came from. inputs: the model's inputs and sources.
        resolution: the expected half-width of the interval at true gain t.
        scenarios: verdict probabilities at gain 0, t and the expected gain.
        minimum_detectable_gain: the smallest gain confirmed with :data:`TARGET_POWER`
            (None: none the model holds).
        examples_needed: test size that confirms the expected gain with that probability
            (None: ``examples_needed_reason`` says why).
        examples_needed_reason: why there is no ``examples_needed`` (the expected gain
            does not exceed t, or :data:`NO_PRACTICAL_SIZE`), else None.
        headroom: the most any variant can gain over the reference (None: no bound known).
        past_headroom: the expected gain is more than ``headroom``: no variant can reach
            it, so the campaign file's expected gain is at fault, not the test set; its
            figures are those of the largest gain the model holds, and it is never a
            reason to cut.
        seeds: the seed spread, K and the comparisons under Holm the figures include.
        by_seeds: the power with each K of :data:`SEED_COUNTS` (and the campaign's K).
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
    examples_needed_reason: str | None = None
    headroom: float | None = None
    seeds: Seeds = Seeds()
    by_seeds: tuple[ReplicatePower, ...] = ()

    @property
    def confirmable_with(self) -> ReplicatePower | None:
        """The fewest replicates of :attr:`by_seeds` that confirm the expected gain with
        :data:`TARGET_POWER`, or None when none does. With a seed spread, K = 1 never
        counts: its interval leaves the spread out, so its "meets" is as often false
        (:attr:`ReplicatePower.false_meets` above the interval's level)."""
        return next((r for r in self.by_seeds if r.confirm_probability >= TARGET_POWER
                     and (r.seeds > 1 or self.seeds.sd == 0)), None)

    @property
    def past_headroom(self) -> bool:
        """The expected gain is more than any variant can gain over the reference."""
        return self.headroom is not None and self.expected_gain > self.headroom + 1e-9

    def scenario(self, case: str) -> Scenario:
        """The scenario called ``case``."""
        return next(s for s in self.scenarios if s.case == case)

    @property
    def confirm_probability(self) -> float:
        """P(meets) at the expected gain."""
        return self.scenario("expected gain").meets

    @property
    def warn(self) -> bool:
        """The expected gain is past the headroom, or would be confirmed with less than
        :data:`WARN_BELOW`."""
        return self.past_headroom or self.confirm_probability < WARN_BELOW

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
            "examples_needed_reason": self.examples_needed_reason,
            "headroom": None if self.headroom is None else round(self.headroom, 4),
            "past_headroom": self.past_headroom,
            "seeds": self.seeds.replicates, "seed_sd": self.seeds.sd,
            "seed_sd_source": self.seeds.source,
            "comparisons_controlled": self.seeds.comparisons,
            "z_meets": round(z_meets(self.seeds.comparisons), 4),
            "by_seeds": [r.to_json() for r in self.by_seeds],
            "confirmable_with_seeds": None if self.confirmable_with is None
            else self.confirmable_with.seeds,
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
                     curve_points: int = 41, seeds: Seeds = Seeds()) -> ComparisonPower:
    """What one comparison can decide (package docstring), from ``model``'s ``moments``.

    A gain past the largest the model holds (the disagreement's limit, or the metric's
    headroom over the reference) is evaluated at that largest gain, with a note that
    names which. A test size past :func:`practical_size` is not given
    (``examples_needed_reason``).

    Args:
        model: the paired-outcome model (its ``inputs`` are reported).
        moments: ``model.moments(n_test, upto=…)``.
        min_gain: t. expected_gain: the gain the variant is expected to bring.
        metric, goal: reported. expected_gain_source: reported; one starting with
            ``default`` says the expected gain is twice t, so the threshold that would
            serve (``threshold_for_target``) moves the expected gain with it.
        curve_points: points of the power curve.
        seeds: the seed spread and K (:meth:`Seeds.spread`) and the comparisons under
            Holm (*meets* at :func:`z_meets`); the default leaves seeds out (s = 0, K = 1,
            one comparison), the test sampling alone.
    """
    n = moments.n
    top = moments.max_gain
    notes = list(model.inputs.get("notes", []))
    headroom = model.headroom

    def reachable(gain: float, what: str) -> float:
        if gain <= top:
            return gain
        if headroom is not None and gain > headroom + 1e-9:
            notes.append(f"{what} {gain:+.4g} is past the reference's headroom ({headroom:+.4g}: "
                         f"a variant right on every example gains no more), so no variant "
                         f"reaches it; figures for it are those of {top:+.4g}, and it is no "
                         f"reason to cut")
        else:
            notes.append(f"{what} {gain:+.4g} is beyond the largest gain the disagreement "
                         f"allows ({top:+.4g}); figures for it are those of {top:+.4g}")
        return top

    threshold = reachable(min_gain, "the threshold")
    expected = reachable(expected_gain, "the expected gain")
    z_meet = z_meets(seeds.comparisons)

    def verdicts(gain: float | np.ndarray, t: float | np.ndarray, k: int = seeds.replicates
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mean, sd_examples = moments.at(gain)
        total, interval = seeds.spread(sd_examples, k)
        return verdict_probabilities(mean, total, t, interval_sd=interval, z_meet=z_meet)

    def total_sd(gain: float, k: int = seeds.replicates) -> float:
        return float(seeds.spread(moments.at(gain)[1], k)[0])

    resolution = Z_INTERVAL * total_sd(threshold)
    scenarios = []
    for case, gain in (("no gain", 0.0), ("threshold", threshold), ("expected gain", expected)):
        meets, short, unsure = verdicts(max(gain, float(moments.gains[0])), min_gain)
        scenarios.append(Scenario(case, gain, float(meets), float(short), float(unsure)))

    fine = np.linspace(float(moments.gains[0]), top, 1201)
    detectable = _first_crossing(fine, verdicts(fine, min_gain)[0], TARGET_POWER)

    sd_examples = float(moments.at(expected)[1])
    needed, why_none = None, "the expected gain does not exceed the threshold"
    if expected > min_gain:
        gap = expected - min_gain
        target = gap / (z_meet + _Z_TARGET)
        room = target ** 2 - 2 * seeds.sd ** 2 / seeds.replicates
        gap_too_small = gap < MIN_GAP_SHARE * resolution
        needed = None if gap_too_small or room <= 0 else practical_size(
            max(1, math.ceil(n * sd_examples ** 2 / room)) if sd_examples > 0 else n, n)
        why_none = (f"{NO_PRACTICAL_SIZE} (gap {gap:+.4g} to the threshold, "
                    f"resolution ±{resolution:.4g}"
                    + (", the seed spread alone is wider: more replicates, not examples)"
                       if room <= 0 and not gap_too_small else ")"))

    bound: tuple[str, float] | None
    if expected_gain_source.startswith("default"):      # expected gain = 2 × threshold
        halves = verdicts(fine, fine / 2)[0]
        lowest = _first_crossing(fine, np.where(fine > 0, halves, 0.0), TARGET_POWER)
        bound = None if lowest is None else ("at least", lowest / 2)
    else:
        highest = float(moments.at(expected)[0]) - (z_meet + _Z_TARGET) * total_sd(expected)
        bound = ("at most", highest) if highest > 0 else None

    low = max(float(moments.gains[0]), min(0.0, -resolution))
    high = min(top, max(2 * expected, min_gain + 4 * resolution, min_gain * 1.5))
    gains = np.linspace(low, high, curve_points)
    by_seeds = tuple(ReplicatePower(
        seeds=k, resolution=Z_INTERVAL * total_sd(threshold, k),
        confirm_probability=float(verdicts(expected, min_gain, k)[0]),
        false_meets=float(verdicts(threshold, min_gain, k)[0]),
        minimum_detectable_gain=_first_crossing(fine, verdicts(fine, min_gain, k)[0],
                                                TARGET_POWER),
        gpu_hours=None if seeds.gpu_hours is None else k * seeds.gpu_hours,
        meets=verdicts(gains, min_gain, k)[0])
        for k in sorted(set(SEED_COUNTS) | {seeds.replicates}))
    return ComparisonPower(
        variant=variant, reference=reference, metric=metric, goal=goal, n_test=n,
        min_gain=min_gain, expected_gain=expected_gain,
        expected_gain_source=expected_gain_source, inputs=dict(model.inputs),
        resolution=resolution, scenarios=tuple(scenarios),
        minimum_detectable_gain=detectable, examples_needed=needed,
        threshold_for_target=bound, curve=(gains, *verdicts(gains, min_gain)),
        notes=tuple(dict.fromkeys(notes)),
        examples_needed_reason=None if needed is not None else why_none, headroom=headroom,
        seeds=seeds, by_seeds=by_seeds)


def _first_crossing(x: np.ndarray, y: np.ndarray, level: float) -> float | None:
    """The first x at which y reaches ``level`` (linear between grid points), or None."""
    above = np.flatnonzero(y >= level)
    if not len(above):
        return None
    i = int(above[0])
    if i == 0 or y[i] == y[i - 1]:
        return float(x[i])
    return float(x[i - 1] + (level - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))


def examples_to_settle(*, gain: float, gain_low: float, gain_high: float, n_examples: int,
                       min_gain: float, power: float = TARGET_POWER) -> int | None:
    """The test-set size that would likely settle an inconclusive comparison.

    Taking the measured gain as the true one and the measured interval's half-width as
    z·σ on ``n_examples`` (σ ∝ 1/√n, package docstring), the size at which the verdict on
    the gain's side of the threshold (meets above it, does_not_meet below) comes out
    with probability ``power``.

    Args:
        gain: the measured gain (signed by goal). gain_low, gain_high: its interval.
        n_examples: the test examples it was measured on. min_gain: t.

    Returns:
        examples in all (not more), or None when :data:`NO_PRACTICAL_SIZE`: the gain is
        closer to t than :data:`MIN_GAP_SHARE` of the interval's half-width (on t, too),
        or the size is not :func:`practical_size`.
    """
    half_width = (gain_high - gain_low) / 2
    if abs(gain - min_gain) < MIN_GAP_SHARE * half_width:
        return None
    size = _examples_for(half_width / Z_INTERVAL, gain - min_gain, n_examples, power)
    return practical_size(size, n_examples)


def rounded_count(count: int) -> int:
    """A test-set size to two significant digits, as the outputs say it (``904`` → ``900``,
    ``33733`` → ``34000``; below 100 as it is). The sizes the package returns are at most
    :data:`MAX_COUNT` (:func:`practical_size`), so at most 7 digits."""
    if count < 100:
        return count
    return int(round(count, 2 - len(str(count))))
