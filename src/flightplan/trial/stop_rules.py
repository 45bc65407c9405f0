"""Stop rules written in the campaign file before the trials, one small class per rule.

A rule looks at what the trial sees (a logged row, an evaluation, the truncation measured
before training, the outcome of restore) and returns a :class:`Stop` when the run must end.
The trial turns it into the stop record ``{run_id, rule, step, value, threshold, message,
time}`` (:func:`stop_record`), writes it to ``stop.json`` and raises ``TrialStopped``.

Rule names (the ``rule`` field of ``stop.json``):

===========================  ===================================================  ==========
rule                         fires when                                           threshold
===========================  ===================================================  ==========
``non_finite_loss``          a logged ``loss`` (or ``*_loss``) is NaN or ±inf     null
``min_quality``              at an evaluation at or after ``after_fraction`` of   ``below``
                             planned steps, the metric is below ``below``
``max_truncated_fraction``   more than this fraction of essential inputs would    the fraction
                             be cut at the run's ``max_length`` (before training)
``no_usable_resume``         the run should resume but no checkpoint is valid     null
===========================  ===================================================  ==========

Usage::

    rules = build_rules(stop_rules_from_spec)
    for rule in rules:
        stop = rule.on_log(step, {"loss": 0.3})
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

from flightplan.rows import json_number
from flightplan.spec import StopRules

__all__ = ["Stop", "StopRule", "NonFiniteLoss", "MinQuality", "MaxTruncatedFraction",
           "NoUsableResume", "build_rules", "stop_record"]


@dataclass(frozen=True)
class Stop:
    """A rule's verdict: stop at ``step`` because ``value`` crossed ``threshold``."""

    rule: str
    step: int
    value: Any
    threshold: Any
    message: str


def stop_record(run_id: str, stop: Stop, *, now_s: float | None = None) -> dict[str, Any]:
    """The ``stop.json`` record: ``{run_id, rule, step, value, threshold, message, time}``.

    ``time`` is unix seconds (``now_s`` or the current time); non-finite numbers are strings.
    """
    return {"run_id": run_id, "rule": stop.rule, "step": stop.step,
            "value": json_number(stop.value), "threshold": json_number(stop.threshold),
            "message": stop.message, "time": time.time() if now_s is None else now_s}


class StopRule:
    """Base: every hook returns None (no stop). Subclasses override the hooks they need."""

    name = ""

    def on_log(self, step: int, measurements: Mapping[str, Any]) -> Stop | None:
        """Called for every :meth:`Trial.log` row."""
        return None

    def on_evaluate(self, step: int, metrics: Mapping[str, Any],
                    planned_steps: int | None) -> Stop | None:
        """Called for every :meth:`Trial.evaluate` row."""
        return None

    def on_truncation(self, fraction: float) -> Stop | None:
        """Called once by :meth:`Trial.check_truncation` before training."""
        return None


class NonFiniteLoss(StopRule):
    """Stop at the first NaN/inf in a measurement named ``loss`` or ending in ``_loss``."""

    name = "non_finite_loss"

    def on_log(self, step: int, measurements: Mapping[str, Any]) -> Stop | None:
        for key, value in measurements.items():
            if (key == "loss" or key.endswith("_loss")) and isinstance(value, (int, float)) \
                    and not math.isfinite(value):
                return Stop(self.name, step, value, None,
                            f"{key} is {json_number(float(value))} at step {step}")
        return None


class MinQuality(StopRule):
    """Stop when ``metric`` is below ``below`` at an evaluation at or after ``after_fraction``
    of the planned steps. Evaluations before that point, or while the planned number of
    steps is unknown, never stop the run.

    Args:
        metric: name of the evaluation metric (``"macro_f1"``).
        below: the threshold, in the metric's units.
        after_fraction: fraction (0–1) of planned steps before which the rule is silent.
    """

    name = "min_quality"

    def __init__(self, metric: str, below: float, after_fraction: float) -> None:
        self.metric = metric
        self.below = below
        self.after_fraction = after_fraction

    def on_evaluate(self, step: int, metrics: Mapping[str, Any],
                    planned_steps: int | None) -> Stop | None:
        if self.metric not in metrics or planned_steps is None:
            return None
        if step < self.after_fraction * planned_steps:
            return None
        value = metrics[self.metric]
        if isinstance(value, (int, float)) and (math.isnan(value) or value < self.below):
            return Stop(self.name, step, value, self.below,
                        f"{self.metric} = {value} is below {self.below} at step {step} "
                        f"(after {self.after_fraction:.0%} of {planned_steps} planned steps)")
        return None


class MaxTruncatedFraction(StopRule):
    """Stop before training when more than ``limit`` (0–1) of the essential inputs would be
    cut at the run's ``max_length``; the task measures the fraction and passes it in."""

    name = "max_truncated_fraction"

    def __init__(self, limit: float) -> None:
        self.limit = limit

    def on_truncation(self, fraction: float) -> Stop | None:
        if fraction > self.limit:
            return Stop(self.name, 0, fraction, self.limit,
                        f"{fraction:.1%} of essential inputs would be truncated at max_length, "
                        f"more than the {self.limit:.1%} allowed")
        return None


class NoUsableResume(StopRule):
    """The run should resume (``require_resume``) but no checkpoint is valid.

    Not a hook rule: :meth:`Trial.restore` asks :meth:`verdict` when it finds checkpoint
    directories yet none passes the checks.
    """

    name = "no_usable_resume"

    def verdict(self, reasons: list[str], *, rejected: int, fix: str | None = None) -> Stop:
        """The stop for a restore that found nothing to resume from: ``reasons`` one line each,
        ``rejected`` the number of checkpoints set aside now (the record's value), ``fix``
        what to do (default: fix or remove the checkpoints, or turn the rule off)."""
        return Stop(self.name, 0, rejected, None,
                    f"no usable checkpoint to resume from ({'; '.join(reasons)}); "
                    f"refusing to start over: " + (fix or "fix or remove the checkpoints, or "
                                                   "set [stop] require_resume = false"))


def build_rules(stop: StopRules) -> list[StopRule]:
    """The hook rules the campaign file turns on (``no_usable_resume`` is handled by restore)."""
    rules: list[StopRule] = []
    if stop.non_finite_loss:
        rules.append(NonFiniteLoss())
    if stop.min_quality is not None:
        rules.append(MinQuality(stop.min_quality.metric, stop.min_quality.below,
                                stop.min_quality.after_fraction))
    if stop.max_truncated_fraction is not None:
        rules.append(MaxTruncatedFraction(stop.max_truncated_fraction))
    return rules
