"""One figure a plan rests on (:class:`Estimate`): its value, its range, and whether it
was measured, scaled or guessed.

Every estimate has a value and a range [low, high]:

- a guess: [v / :data:`GUESS_FACTOR`, v · :data:`GUESS_FACTOR`] (a disagreement's high end
  capped at 1);
- scaled: the bounds of ℓ, widened by ± ``SCALED_SPREAD`` for what the linear rules
  leave out (per-step overhead, rounding up to whole batches;
  :mod:`flightplan.plan.calibration.matching`);
- measured: a duration is taken as it was measured once, so its range is the value (the
  spread between repeats is not known from one campaign and is not made up); a measured
  disagreement d on n paired test examples has the binomial interval
  d ± 1.96 · √(d(1 − d)/n), a measured sd s of per-example differences
  s · (1 ± 1.96/√(2(n − 1))) (the normal approximation of an sd's sampling spread;
  :mod:`flightplan.plan.calibration.power_models`).
"""

from __future__ import annotations

from dataclasses import dataclass

from flightplan.units import SECONDS_PER_HOUR

__all__ = ["GUESS_FACTOR", "Estimate", "duration_guess", "duration_measured"]

GUESS_FACTOR = 3.0
"""A guess is taken to lie within this factor of the truth either way (a named
assumption: the main job's campaign file guessed its runs within about a factor of 2 of
what they took, its two shortest stages 4 to 8 times too long)."""


@dataclass(frozen=True)
class Estimate:
    """One figure the plan rests on.

    Attributes:
        subject: the stage or run (a duration), or ``"variant − reference"`` (power).
        figure: ``duration`` (hours), ``disagreement`` (share of test examples) or
            ``difference_sd`` (the metric column's units).
        value, low, high: the estimate and its range (module docstring).
        source: ``guess``, ``measured`` or ``scaled``.
        detail: one line: where it came from, or why nothing measured replaced it.
    """

    subject: str
    figure: str
    value: float
    low: float
    high: float
    source: str
    detail: str

    @property
    def unit(self) -> str:
        """``h``, ``share`` or ``metric``."""
        return {"duration": "h", "disagreement": "share"}.get(self.figure, "metric")


def duration_guess(subject: str, seconds: float, where: str, why: str) -> Estimate:
    """A duration the campaign file gives (``where``: its key), with the guess's range and
    ``why`` nothing measured replaced it (empty: no reason to give)."""
    value_h = seconds / SECONDS_PER_HOUR
    return Estimate(subject, "duration", value_h, value_h / GUESS_FACTOR, value_h * GUESS_FACTOR,
                    "guess", f"campaign file ({where})" + (f"; {why}" if why else ""))


def duration_measured(subject: str, seconds: float, detail: str) -> Estimate:
    """A duration measured once (``detail``: where), its range the value itself."""
    value_h = seconds / SECONDS_PER_HOUR
    return Estimate(subject, "duration", value_h, value_h, value_h, "measured", detail)
