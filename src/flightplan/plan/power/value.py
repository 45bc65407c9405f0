"""Decision value: which variant not yet run could change the campaign's choice, ranked
per GPU-hour, with the cuts it proposes and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from flightplan.plan.power.comparison import ComparisonPower

__all__ = ["MIN_DECISION_VALUE", "MIN_CONCLUSIVE", "decision_values", "Ranked",
           "rank_by_value"]

MIN_DECISION_VALUE = 0.05
"""A variant whose decision value is below this is proposed for cut."""
MIN_CONCLUSIVE = 0.2
"""Below this probability of a conclusive verdict a variant "cannot reach" one."""


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
    :data:`MIN_DECISION_VALUE`, unless its expected gain is past the reference's headroom
    (:attr:`ComparisonPower.past_headroom`: the figures are then of a gain the campaign
    file did not state, no evidence about the variant); the reason names the first that applies of: the answer
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
        if value < MIN_DECISION_VALUE and not power.past_headroom:
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
