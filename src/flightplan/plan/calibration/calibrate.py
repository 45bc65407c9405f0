"""Every estimate of a new campaign from an earlier campaign's record: each stage's and
run's duration and each comparison's model, measured, scaled or guessed (:class:`Calibrated`,
what the plan and the decision point take).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from flightplan.metrics import Predictions
from flightplan.plan.calibration.estimate import Estimate, duration_guess
from flightplan.plan.calibration.matching import Matcher, run_estimate, stage_estimate
from flightplan.plan.calibration.power_models import power_estimates, seed_spread
from flightplan.plan.calibration.record import Calibration
from flightplan.plan.power import PairedModel
from flightplan.spec import CampaignSpec
from flightplan.units import SECONDS_PER_HOUR, Duration

__all__ = ["Calibrated", "calibrate"]


@dataclass(frozen=True)
class Calibrated:
    """What :func:`calibrate` gives the plan.

    Attributes:
        durations: stage or run name → the duration that replaces the file's (measured or
            scaled), for :func:`flightplan.plan.campaign_plan.plan_campaign`.
        estimates: every duration and power figure, file order (stages, runs, comparisons).
        models: variant name → the model of paired outcomes measured for its comparison,
            for :func:`flightplan.plan.power.campaign_power`.
        seed_spread: variant name → (sd of the metric over seeds, source) the earlier
            campaign measured over the replicates of the same run (the variant's, else
            its reference's), for :func:`flightplan.plan.power.campaign_power`.
        campaign: the earlier campaign's name (None: nothing to calibrate from).
    """

    durations: Mapping[str, Duration]
    estimates: tuple[Estimate, ...]
    models: Mapping[str, PairedModel] = field(default_factory=dict)
    campaign: str | None = None
    seed_spread: Mapping[str, tuple[float, str]] = field(default_factory=dict)


def calibrate(spec: CampaignSpec, calibration: Calibration | None, *,
              code_versions: Mapping[str, str] | None = None,
              predictions: Mapping[str, Predictions] | None = None) -> Calibrated:
    """Every estimate of ``spec``, from ``calibration`` where it applies (:mod:`.matching`,
    :mod:`.power_models`).

    Args:
        spec: the new campaign.
        calibration: the earlier campaign's record, or None (every estimate a guess).
        code_versions: run name → its task's code version now
            (:attr:`flightplan.tasks.loader.TaskSource.code_version`).
        predictions: run id of the earlier campaign → its predictions.

    Returns:
        The durations that replace the file's, every estimate, the measured power models.
    """
    matcher = None if calibration is None else Matcher(spec, calibration, code_versions or {})
    estimates = [stage_estimate(matcher, i, s) for i, s in enumerate(spec.stages)]
    for index, run in enumerate(spec.runs):
        estimates.append(duration_guess(run.name, float(run.duration.seconds), f"run[{index}].duration",
                                "") if matcher is None else run_estimate(matcher, index, run))
    power, models = power_estimates(spec, matcher, predictions or {})
    durations = {e.subject: Duration(max(1, round(e.value * SECONDS_PER_HOUR))) for e in estimates
                 if e.source != "guess"}
    return Calibrated(durations, tuple(estimates + power), models,
                      None if calibration is None else calibration.campaign,
                      {} if matcher is None else seed_spread(spec, matcher))
