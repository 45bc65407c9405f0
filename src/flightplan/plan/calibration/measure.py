"""What an ended campaign measured, as ``close`` records it in ``calibration.json``: each
run's time figures from its measurement rows, and the record of runs, stages, corpus and
pilot (:class:`flightplan.plan.calibration.record.Calibration`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from flightplan.ids import corpus_view
from flightplan.plan.calibration.record import (Calibration, MeasuredRun, MeasuredStage,
                                                RunFigures, hours_to_seconds)
from flightplan.rows import CheckpointSaved, Evaluation, Measurement, Restore, Row
from flightplan.spec import CampaignSpec
from flightplan.tasks.estimate import step_times
from flightplan.transfer_time import TransferTally

__all__ = ["run_figures", "calibration_record"]


def run_figures(rows: Sequence[Row]) -> RunFigures:
    """The time figures of one run from its measurement rows (:class:`RunFigures`); the
    rows of every process of a resumed run count."""
    timed = sorted(rows, key=lambda r: r.time)
    first = timed[0].time if timed else 0.0
    steps = step_times(timed, first)
    tokens = [v for r in steps.rows if (v := r.number("tokens")) is not None]
    load_s = next((v for r in timed if isinstance(r, Measurement)
                   and (v := r.number("load_s")) is not None), None)
    eval_s, evaluations, eval_examples = 0.0, 0, None
    last = first
    for row in timed:
        gap = row.time - last
        last = row.time
        if isinstance(row, Evaluation):
            evaluations += 1
            logged = row.number("eval_s")
            eval_s += gap if logged is None else logged
            count = row.number("n_test")
            eval_examples = int(count) if count is not None and math.isfinite(count) \
                else eval_examples
    saves = [r for r in rows if isinstance(r, CheckpointSaved)]
    restores = [r.restore_s for r in rows
                if isinstance(r, Restore) and r.source and r.restore_s is not None]
    tally = TransferTally.from_rows(rows)
    if load_s is None:
        load_s = (steps.rows[0].time - first) if steps.rows else 0.0
    return RunFigures(
        steps=len(steps.rows), train_s=steps.train_s, step_s=steps.step_s,
        tokens_per_step=sum(tokens) / len(tokens) if tokens else None,
        load_s=float(load_s), evaluations=evaluations, eval_s=eval_s,
        eval_examples=eval_examples, checkpoints=len(saves),
        save_stall_s=sum(r.stall_s for r in saves),
        persist_s=sum(r.persist_s for r in saves) / len(saves) if saves else 0.0,
        restore_s=sum(restores) / len(restores) if restores else None,
        transfers=tally.checkpoints, transfer_s=tally.moving_s + tally.wait_s)


def calibration_record(spec: CampaignSpec, *, runs: Sequence[Mapping[str, Any]],
                       trials: Mapping[str, Mapping[str, Any]],
                       rows: Mapping[str, Sequence[Row]], revisions: Mapping[str, Any],
                       predictions: Mapping[str, str], plan_vs_execution: Mapping[str, Any],
                       data_check: Mapping[str, Any] | None,
                       seed_sd: Mapping[str, float] | None = None) -> Calibration:
    """What ``close`` writes into ``results/calibration.json``.

    Args:
        spec: the campaign (offer, control, references, stages' ``uses``).
        runs: the ledger's runs the campaign owes (``{run_id, name, tier, status}``).
        trials: run id → its ``trial.json`` as published (``params/<id>.json``): task,
            code_version, params, base_model, corpus. A run without one is left out.
        rows: run id → its measurement rows. revisions: run id → the base revision its
            artifact names. predictions: run id → its predictions file (relative).
        plan_vs_execution: the ``plan_vs_execution.json`` object (observed durations,
            the decision point's pilot figures).
        data_check: ``data_check.json`` (split sizes), or None.
        seed_sd: run name → the standard deviation of its decision metric over its
            replicates (the conclusion's seed spread): every replicate of that run records
            it as ``seed_sd`` (a later campaign matches any one of them).
    """
    observed = {i["name"]: i for i in plan_vs_execution.get("items", [])}
    measured = []
    for run in runs:
        trial = trials.get(run["run_id"])
        if trial is None:
            continue
        item = observed.get(run["name"]) or {}
        run_rows = rows.get(run["run_id"])
        replicate = spec.replicate_named(run["name"])
        of = replicate.run if replicate is not None else None
        measured.append(MeasuredRun(
            name=run["name"], run_id=run["run_id"], reference=of.reference if of else None,
            tier=str(run["tier"]), status=str(run["status"]), task=str(trial.get("task")),
            code_version=str(trial.get("code_version")), params=dict(trial.get("params") or {}),
            base_model=trial.get("base_model"), base_revision=revisions.get(run["run_id"]),
            corpus_view=corpus_view(trial.get("corpus")),
            observed_s=hours_to_seconds(item.get("observed_hours")),
            executions=int(item.get("executions") or 0),
            predictions=predictions.get(run["run_id"]),
            figures=run_figures(run_rows) if run_rows else None,
            seed_sd=(seed_sd or {}).get(of.name) if of and replicate and replicate.count > 1
            else None))
    stages = []
    for stage in spec.stages:
        item = observed.get(stage.name) or {}
        stages.append(MeasuredStage(
            name=stage.name, uses=tuple(stage.uses), planned_s=hours_to_seconds(item.get("planned_hours")),
            observed_s=hours_to_seconds(item.get("observed_hours")),
            executions=int(item.get("executions") or 0)))
    pilots = [d.get("figures", {}).get("pilot") for d in plan_vs_execution.get("decisions", [])
              if d.get("kind") == "pilot"]
    split_rows, splits = _split_rows(data_check)
    return Calibration(
        campaign=spec.campaign.name, offer=spec.rental.offer,
        corpus_sha256=dict(spec.corpus.sha256) if spec.corpus else None,
        train_rows=split_rows.get("train"), test_rows=split_rows.get("test"),
        n_train=splits.get("train"), n_test=splits.get("test"), control=spec.control.name,
        pilot=next((p for p in reversed(pilots) if p), None), runs=tuple(measured),
        stages=tuple(stages))


def _split_rows(data_check: Mapping[str, Any] | None) -> tuple[dict[str, int], dict[str, int]]:
    """(split → rows of its files before the limits, split → rows after them) from the
    data check; a split whose files' rows are unknown is left out."""
    if not data_check:
        return {}, {}
    before: dict[str, int] = {}
    unknown: set[str] = set()
    for entry in (data_check.get("files") or {}).values():
        split, count = entry.get("split"), entry.get("rows")
        if not isinstance(count, int):
            unknown.add(split)
        else:
            before[split] = before.get(split, 0) + count
    after = {name: int(entry["rows"]) for name, entry in (data_check.get("splits") or {}).items()
             if isinstance(entry, dict) and isinstance(entry.get("rows"), int)}
    return {k: v for k, v in before.items() if k not in unknown}, after
