"""Which runs delivered an accepted product, and the variant-versus-reference comparisons.

A run's product is accepted only when all four hold:

1. the run finished without a stop (ledger status ``finished``, no stop record);
2. its artifact reloaded in a fresh process and reproduced *all* its stored predictions
   (:func:`flightplan.close.verify.reproduce_run` with no limit, trusting the campaign's own
   task code; a task without a ``reload_predictions`` hook is not reloadable, so never
   accepted); the runs' reloads run several to a process, as the cores or GPUs allow
   (:func:`~flightplan.close.verify.reproduce_runs`);
3. its predictions cover every expected test example id;
4. its decision metric (any metric of :mod:`flightplan.metrics`) can be computed from its
   predictions and is at least ``accept_at_least`` (at most, when the goal is ``min``).

Timing repeats of one configuration (the same config hash) are one product: the count of
accepted products is the number of distinct config hashes among the accepted runs. A run
that executes several replicates (``seeds`` ≥ 2) is one product, counted when every one
of its replicates is accepted (five seeds of one configuration are not five products).

A comparison whose sides executed one replicate each is the paired bootstrap over test
examples (:func:`flightplan.close.conclusion.compare_runs`); when either side executed
several, the two-level bootstrap over its usable replicates and the test examples
(:func:`flightplan.close.replicates.compare_replicated_runs`).

Usage::

    verdicts = accept_runs(results, runs, spec=spec, expected_ids=ids)
    products = accepted_product_count(verdicts)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightplan.activity import doing
from flightplan.close.conclusion import compare_runs, unusable_text
from flightplan.close.replicates import compare_replicated_runs
from flightplan.close.verify import reproduce_runs
from flightplan.errors import CheckFailed
from flightplan.findings import Finding
from flightplan.ledger_rows import RunRow
from flightplan.metrics import (Predictions, metric_value, parse_metric,
                                 read_predictions_or_none)
from flightplan.spec import CampaignSpec

__all__ = ["Verdict", "accept_runs", "accepted_product_count", "comparisons",
           "replicate_verdicts"]


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


def accepted_product_count(verdicts: list[Verdict], spec: CampaignSpec | None = None) -> int:
    """Distinct products among the accepted runs (same config hash → one product); with
    ``spec``, a run of ``seeds`` ≥ 2 is one product when all its replicates are accepted
    (none while one of them is not, or has not run)."""
    products: set[str] = set()
    replicated: dict[str, set[str]] = {}
    for v in verdicts:
        replicate = spec.replicate_named(v.name) if spec is not None else None
        if replicate is not None and replicate.count > 1:
            accepted = replicated.setdefault(replicate.run.name, set())
            if v.accepted:
                accepted.add(v.name)
        elif v.accepted:
            products.add(v.config_hash or v.run_id)
    for name, accepted in replicated.items():
        if spec is not None and len(accepted) == spec.seeds_of(spec.run_named(name)):
            products.add(f"run {name}")
    return len(products)


def replicate_verdicts(spec: CampaignSpec, verdicts: list[Verdict]) -> dict[str, list[Verdict]]:
    """Run name → the verdicts of its executions (its replicates in seed order, or the run
    itself with one seed); a verdict whose name is no execution of the spec is left out."""
    by_name = {v.name: v for v in verdicts}
    return {run.name: [by_name[rep.name] for rep in spec.replicates(run) if rep.name in by_name]
            for run in spec.runs}


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
        reason}``; when either side runs several seeds, also ``variant_run_ids``,
        ``reference_run_ids`` (the usable replicates) and ``replicates_used``, with the
        keys of :func:`flightplan.close.replicates.compare_replicates`.
    """
    by_name = {v.name: v for v in verdicts}
    section = spec.campaign
    out = []
    for run in spec.runs:
        if run.reference is None:
            continue
        if max(spec.seeds_of(run), spec.seeds_of(spec.run_named(run.reference))) > 1:
            out.append(_compare_replicated(results, spec, run.name, run.reference, verdicts))
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
            out.append(entry | {"verdict": "not_available", "unusable": unusable,
                                "reason": unusable_text(unusable)
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


def _compare_replicated(results: Path, spec: CampaignSpec, variant: str, reference: str,
                        verdicts: list[Verdict]) -> dict[str, Any]:
    """One comparison where a side executed several replicates: over the usable
    replicates of each side (``replicates_used``: ``{reference, variant}`` counts of the
    planned ones), ``not_available`` when a side has none."""
    groups = replicate_verdicts(spec, verdicts)
    usable = {name: [v for v in groups[name] if v.usable] for name in (variant, reference)}
    entry: dict[str, Any] = {
        "variant": variant, "reference": reference,
        "variant_run_id": usable[variant][0].run_id if usable[variant] else None,
        "reference_run_id": usable[reference][0].run_id if usable[reference] else None,
        "variant_run_ids": [v.run_id for v in usable[variant]],
        "reference_run_ids": [v.run_id for v in usable[reference]],
        "replicates_used": {side: f"{len(usable[name])} of "
                                  f"{spec.seeds_of(spec.run_named(name))}"
                            for side, name in (("reference", reference), ("variant", variant))}}
    missing = [name for name in (variant, reference) if not usable[name]]
    if missing:
        return entry | {"verdict": "not_available",
                        "reason": f"no usable replicate for {' and '.join(missing)}"}
    loaded = {name: [_load(results, v.run_id) for v in usable[name]]
              for name in (variant, reference)}
    if any(p is None for side in loaded.values() for p in side):
        return entry | {"verdict": "not_available", "reason": "predictions unreadable"}
    section = spec.campaign
    try:
        return entry | compare_replicated_runs(
            [p for p in loaded[reference] if p is not None],
            [p for p in loaded[variant] if p is not None],
            metric=section.metric, goal=section.goal, min_gain=section.min_gain)
    except CheckFailed as exc:
        return entry | {"verdict": "not_available", "reason": str(exc)}
