"""Each comparison's model of paired outcomes, and its seed spread, from an earlier
campaign: measured where its two runs match two runs of that campaign, else the campaign
file's guess.

A comparison whose two runs match two runs of the earlier campaign (offer aside:
predictions do not depend on the GPU) takes the model of paired outcomes built from their
predictions (:func:`flightplan.plan.power.model_from_predictions`), so its resolution
comes from the measured disagreement (or, for a metric column, the measured sd of the
per-example differences); its range is the binomial interval of the share, or the sd's
sampling spread (:mod:`flightplan.plan.calibration.estimate`). Otherwise the disagreement
is the campaign file's ``expected_disagreement`` (or the default), the difference sd its
``expected_difference_sd``, each a guess. The seed spread is the one the earlier campaign
measured over the replicates of the same run.
"""

from __future__ import annotations

import math
from typing import Mapping

from flightplan.errors import CheckFailed
from flightplan.metrics import Predictions, parse_metric
from flightplan.plan.calibration.estimate import GUESS_FACTOR, Estimate
from flightplan.plan.calibration.matching import Matcher
from flightplan.plan.power import DEFAULT_DISAGREEMENT, PairedModel, model_from_predictions
from flightplan.spec import CampaignSpec, Run

__all__ = ["power_estimates", "seed_spread"]

_Z = 1.959963984540054          # Φ⁻¹(0.975): the binomial interval of a measured share


def power_estimates(spec: CampaignSpec, matcher: Matcher | None,
                    predictions: Mapping[str, Predictions]
                    ) -> tuple[list[Estimate], dict[str, PairedModel]]:
    """Each comparison's disagreement (or difference sd): measured from the paired
    predictions of the two matching runs, else the file's or the default guess."""
    section = spec.campaign
    column = parse_metric(section.metric).kind == "column"
    estimates: list[Estimate] = []
    models: dict[str, PairedModel] = {}
    for run in spec.runs:
        if run.reference is None:
            continue
        subject = f"{run.name} − {run.reference}"
        model, note = _measured_model(spec, matcher, run, predictions)
        if model is not None:
            models[run.name] = model
            inputs = model.inputs
            n = int(inputs.get("examples") or 0)
            if column:
                sd = float(inputs["difference_sd"])
                spread = _Z / math.sqrt(2 * (n - 1)) if n > 1 else 0.0
                estimates.append(Estimate(subject, "difference_sd", sd, sd * max(0.0, 1 - spread),
                                          sd * (1 + spread), "measured",
                                          f"{note}, {n} paired test examples"))
            else:
                d = float(inputs["disagreement"])
                half = _Z * math.sqrt(d * (1 - d) / n) if n else 0.0
                estimates.append(Estimate(subject, "disagreement", d, max(0.0, d - half),
                                          min(1.0, d + half), "measured",
                                          f"{note}, {n} paired test examples"))
            continue
        if column:
            if section.expected_difference_sd is None:
                continue
            v = section.expected_difference_sd
            estimates.append(Estimate(subject, "difference_sd", v, v / GUESS_FACTOR,
                                      v * GUESS_FACTOR, "guess",
                                      "campaign file ([campaign] expected_difference_sd)"
                                      + (f"; {note}" if note else "")))
            continue
        given = section.expected_disagreement
        v = DEFAULT_DISAGREEMENT if given is None else given
        where = ("default (set [campaign] expected_disagreement)" if given is None
                 else "campaign file ([campaign] expected_disagreement)")
        estimates.append(Estimate(subject, "disagreement", v, v / GUESS_FACTOR,
                                  min(1.0, v * GUESS_FACTOR), "guess",
                                  where + (f"; {note}" if note else "")))
    return estimates, models


def _measured_model(spec: CampaignSpec, matcher: Matcher | None, run: Run,
                    predictions: Mapping[str, Predictions]) -> tuple[PairedModel | None, str]:
    """The model of paired outcomes of ``run`` and its reference from the predictions of
    the two runs of the earlier campaign with their configurations, and where it came from;
    or (None, why not)."""
    if matcher is None:
        return None, ""
    c = matcher.c
    reference = spec.item(run.reference or "")
    assert isinstance(reference, Run)
    pair = []
    for wanted in (reference, run):
        found, _ = matcher.candidates(wanted)
        same = next((x.measured for x in found if not x.differing), None)
        if same is None or same.run_id not in predictions:
            return None, (f"campaign {c.campaign} has no predictions of a run like "
                          f"{wanted.name}")
        pair.append(same)
    if pair[0].run_id == pair[1].run_id:
        return None, f"{run.name} and {run.reference} match the same run of {c.campaign}"
    try:
        model = model_from_predictions(
            spec.campaign.metric, predictions[pair[0].run_id], predictions[pair[1].run_id],
            goal=spec.campaign.goal,
            source=f"measured in campaign {c.campaign} ({pair[1].name} vs {pair[0].name})")
    except CheckFailed as exc:
        return None, f"the predictions of campaign {c.campaign} do not give it ({exc})"
    return model, f"campaign {c.campaign}, predictions of {pair[1].name} vs {pair[0].name}"


def seed_spread(spec: CampaignSpec, matcher: Matcher) -> dict[str, tuple[float, str]]:
    """Variant → the seed spread the earlier campaign measured for the same run (its
    whole configuration: :meth:`Matcher.exact`), the variant's, else its reference's."""
    out = {}
    for run in spec.runs:
        if run.reference is None:
            continue
        for side in [run] + [r for r in spec.runs if r.name == run.reference]:
            found = matcher.exact(side)
            if found is not None and found.seed_sd is not None:
                out[run.name] = (found.seed_sd, f"measured in campaign {matcher.c.campaign} "
                                                f"({found.name} over its replicates)")
                break
    return out
