"""Which runs delivered an accepted product, and the variant-versus-reference comparisons.

A run's product is accepted only when all four hold:

1. the run finished without a stop (ledger status ``finished``, no stop record);
2. its artifact reloaded in a fresh process and reproduced *all* its stored predictions
   (:func:`flightplan.close.verify.reproduce_run` with no limit, trusting the campaign's own
   task code; a task without a ``reload_predictions`` hook is not reloadable, so never
   accepted); the runs' reloads run side by side as the cores allow
   (:func:`~flightplan.close.verify.reproduce_runs`);
3. its predictions cover every expected test example id;
4. its decision metric (any metric of :mod:`flightplan.metrics`) can be computed from its
   predictions and is at least ``accept_at_least`` (at most, when the goal is ``min``).

Timing repeats of one configuration (the same config hash) are one product: the count of
accepted products is the number of distinct config hashes among the accepted runs.

Usage::

    verdicts = accept_runs(results, runs, spec=spec, expected_ids=ids)
    products = accepted_product_count(verdicts)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightplan.activity import doing
from flightplan.close.conclusion import compare_runs
from flightplan.close.verify import reproduce_runs
from flightplan.errors import CheckFailed
from flightplan.findings import Finding
from flightplan.ledger_rows import RunRow
from flightplan.metrics import (Predictions, metric_value, parse_metric,
                                 read_predictions_or_none)
from flightplan.spec import CampaignSpec

__all__ = ["Verdict", "accept_runs", "accepted_product_count", "comparisons"]


@dataclass(frozen=True)
class Verdict:
    """Whether one run delivered an accepted product, and why not.

    Attributes:
        run_id, name, tier, status, config_hash: the run (its ledger row).
        metric_value: the decision metric from its predictions (6 places), None when they
            cannot give it.
        accepted: all four conditions of the module docstring hold (``reasons`` empty).
        usable: only the quality threshold (if anything) kept it from being accepted: its
            predictions are sound for a comparison.
        reasons: why it was not accepted, one line each.
        reload_findings: the findings of the full reload in a fresh process (``[]`` when
            it reproduced every prediction; None when no reload was attempted).
    """

    run_id: str
    name: str
    tier: str
    status: str
    config_hash: str | None
    metric_value: float | None
    accepted: bool
    usable: bool
    reasons: list[str]
    reload_findings: list[Finding] | None


def _load(results: Path, run_id: str) -> Predictions | None:
    return read_predictions_or_none(results / "predictions" / f"{run_id}.csv")


def accept_runs(results: Path, runs: list[RunRow], *, spec: CampaignSpec,
                expected_ids: list[str] | None) -> list[Verdict]:
    """Judge every run.

    Args:
        results: the results directory (runs already published into it).
        runs: the ledger's rows of the runs to judge.
        spec: the campaign (metric, goal, accept_at_least).
        expected_ids: the test example ids every product must cover (None: not checked).

    Returns:
        One :class:`Verdict` per run, in the given order.
    """
    section = spec.campaign
    metric = parse_metric(section.metric)
    loaded = {run.run_id: _load(results, run.run_id) for run in runs}
    to_reload = [run.run_id for run in runs if run.status == "finished" and not run.stop
                 and loaded[run.run_id] is not None]

    def progress(reloaded: int) -> None:        # a run that needs no reload is judged at once
        doing("reloading each artifact in a fresh process",
              done=len(runs) - len(to_reload) + reloaded, total=len(runs), unit="runs")
    progress(0)
    reloads = reproduce_runs(results, to_reload, limit=None, trust_code=True,
                             campaign_dir=spec.campaign_dir, on_done=progress)
    verdicts = []
    for run in runs:
        run_id, reasons = run.run_id, []
        predictions = loaded[run_id]
        value, reproduced, usable = None, None, False
        if run.status != "finished" or run.stop:
            rule = (run.stop or {}).get("rule")
            reasons.append(f"stopped by rule {rule}" if rule else f"status {run.status}, "
                           f"not finished")
        elif predictions is None:
            reasons.append("no readable predictions")
        else:
            _, reproduced = reloads[run_id]
            reasons += [f"{f.check}: {f.message}" for f in reproduced]
            if expected_ids is not None:
                missing = sorted(set(expected_ids) - set(predictions.ids))
                if missing:
                    reasons.append(f"predictions miss {len(missing)} expected example ids "
                                   f"(first: {', '.join(missing[:5])})")
            try:
                value = metric_value(metric, predictions, source=f"predictions/{run_id}.csv")
            except CheckFailed as exc:
                reasons.append(str(exc))
            usable = not reasons
            threshold = section.accept_at_least
            if threshold is not None and value is not None:
                below = value < threshold if section.goal == "max" else value > threshold
                if below:
                    word = "below" if section.goal == "max" else "above"
                    reasons.append(f"{section.metric} {value:.4f} is {word} accept_at_least "
                                   f"{threshold}")
        verdicts.append(Verdict(run_id, run.name, run.tier, run.status, run.config_hash,
                                None if value is None else round(value, 6), not reasons,
                                usable, reasons, reproduced))
    return verdicts


def accepted_product_count(verdicts: list[Verdict]) -> int:
    """Distinct products among the accepted runs (same config hash → one product)."""
    return len({v.config_hash or v.run_id for v in verdicts if v.accepted})


def comparisons(results: Path, spec: CampaignSpec, verdicts: list[Verdict]
                ) -> list[dict[str, Any]]:
    """Each variant of the spec against its reference.

    Both runs must be usable (finished, reloaded and reproduced, every test example
    covered); a run below ``accept_at_least`` is not an accepted product but is still a
    sound point of comparison (a weak control is exactly what a variant should beat).
    Both runs' predictions are aligned on the example ids they share (and on the union of
    their classes); gold labels come from the reference's file.

    Returns:
        One entry per run with a ``reference``: ``{variant, reference, variant_run_id,
        reference_run_id, ...compare() keys}`` or ``{..., verdict: "not_available",
        reason}``.
    """
    by_name = {v.name: v for v in verdicts}
    section = spec.campaign
    out = []
    for run in spec.runs:
        if run.reference is None:
            continue
        sides = [by_name.get(run.name), by_name.get(run.reference)]
        entry: dict[str, Any] = {"variant": run.name, "reference": run.reference,
                                 "variant_run_id": sides[0].run_id if sides[0] else None,
                                 "reference_run_id": sides[1].run_id if sides[1] else None}
        unusable = [name for name, v in zip((run.name, run.reference), sides)
                    if v is None or not v.usable]
        if unusable:
            why = [f"{name}: {v.reasons[0]}" for name, v in zip((run.name, run.reference), sides)
                   if v is not None and not v.usable and v.reasons]
            out.append(entry | {"verdict": "not_available",
                                "reason": f"no usable predictions for {' and '.join(unusable)}"
                                          + (f" ({'; '.join(why)})" if why else "")})
            continue
        variant = _load(results, entry["variant_run_id"])
        reference = _load(results, entry["reference_run_id"])
        if variant is None or reference is None:
            out.append(entry | {"verdict": "not_available", "reason": "predictions unreadable"})
            continue
        try:
            out.append(entry | compare_runs(reference, variant, metric=section.metric,
                                            goal=section.goal, min_gain=section.min_gain))
        except CheckFailed as exc:
            out.append(entry | {"verdict": "not_available", "reason": str(exc)})
    return out
