"""``flightplan export mlflow RESULTS_DIR``: a closed campaign into an MLflow tracking store.

Reads the results directory alone (so it works on any copy that verifies) and refuses
one that does not verify. What it writes (names are the contract the tests read back):

- the experiment (``--experiment``, default the campaign name), tags ``flightplan.*``:
  ``campaign, question, metric, threshold`` (``min_gain`` with the goal), ``verdict``
  (the conclusion's paragraph), ``answer`` (``yes``, ``no`` or ``inconclusive``),
  ``committed_budget`` (``"47.14 USD"``), ``rental_per_accepted`` (``"15.71 USD"``
  or ``"undefined: 0 accepted"``), ``accepted_products, plan_sha256, order_number``, and
  ``mlflow.note.content`` (the question and verdict, shown as the description);
- one run per expected flightplan run (tag ``flightplan.run_id``): params = the task's
  ``params`` flattened (``adapter.rank``); the metric history of
  ``measurements/<id>.jsonl`` (see :func:`.store.metric_points`) and the final
  metrics of ``metrics/<id>.json`` as ``final/<key>`` and ``final/<label>/<f1|…>`` at
  the last step; tags ``flightplan.config_hash, tier, task, reference, accepted,
  reasons, status, status_reason, stop_rule, stop_reason, base_model.*`` and, for a
  replicate of a run of several seeds, ``flightplan.replicate_of`` (the run it
  replicates, whose ``reference`` it carries); status FINISHED
  (finished), FAILED (stopped by a rule) or KILLED (neither finished nor stopped: crashed
  or interrupted), the reason in ``flightplan.status_reason``; start and end = the
  first and last measurement row's time (the stop record's time for a stopped run); the
  corpus files as dataset inputs (digest = the file's sha256 cut to MLflow's 36
  characters, the full sha256 in the profile and the input tag ``flightplan.sha256``);
  artifacts at their results paths ``predictions/<id>.csv, metrics/<id>.json,
  params/<id>.json, measurements/<id>.jsonl, errors/<id>.json, errors/<id>.md`` and
  ``artifact/`` (the reloadable artifact);
- the pilot (tag ``flightplan.pilot = true``, id ``pilot-<control run id>``): the metric
  history of its first process's rows (``pilot/<pilot id>.jsonl``; the resumed process's
  rows, ``pilot/<pilot id>.resume.jsonl``, stay in ``results/``: they repeat its steps)
  and its figures as ``pilot/<name>`` metrics, FINISHED when its resume check passed,
  else FAILED;
- a summary run (``flightplan.run_id = summary``, ``flightplan.summary = true``) holding
  README.md, report.html, conclusion.json, budget.json, plan.json, plan_vs_execution.*,
  data_check.json, stops.json and MANIFEST.json.

Exporting again sends only what the store lacks, so it never duplicates.

Usage::

    outcome = export_results(Path("results"), tracking_uri="sqlite:////abs/mlflow.db")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flightplan.errors import ArgumentError, VerificationFailed
from flightplan.findings import Finding
from flightplan.ids import pilot_id
from flightplan.publish.results import PILOT_DIRNAME
from flightplan.redact import redact
from flightplan.tracking.store import (
    MetricPoint, MlflowRun, MlflowStore, default_tracking_uri, flatten, metric_key,
    metric_points, require_mlflow)
from flightplan.rows import parse_rows

__all__ = ["export_results", "export_command", "run_record", "SUMMARY_ID"]

SUMMARY_ID = "summary"
# results/ files of a run, uploaded to the same relative paths (``predictions/<id>.csv``)
_RUN_ARTIFACTS = ("predictions/{id}.csv", "metrics/{id}.json", "params/{id}.json",
                  "measurements/{id}.jsonl", "errors/{id}.json", "errors/{id}.md")
_SUMMARY_FILES = ("README.md", "report.html", "conclusion.json", "budget.json", "plan.json",
                  "plan_vs_execution.json", "plan_vs_execution.md", "data_check.json",
                  "stops.json", "MANIFEST.json")
_STATUS = {"finished": "FINISHED", "stopped": "FAILED"}


def _json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else default


def _ms(unix_s: float | None) -> int | None:
    return None if unix_s is None else int(round(float(unix_s) * 1000))


def _numbers(prefix: str, values: dict[str, Any], step: int, at_ms: int) -> list[MetricPoint]:
    """The numbers of ``values`` (booleans aside) as points ``<prefix><key>``."""
    return [MetricPoint(metric_key(prefix + key), float(value), step, at_ms)
            for key, value in values.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)]


def run_record(results: Path, run_id: str, manifest: dict[str, Any],
               references: dict[str, str], stops: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Everything MLflow gets about one run, from ``results/`` alone.

    Returns:
        ``{name, params (flat str→str), points [MetricPoint], tags, status, start_ms,
        end_ms}``.
    """
    trial = _json(results / "params" / f"{run_id}.json", {})
    facts = manifest.get("runs", {}).get(run_id, {})
    path = results / "measurements" / f"{run_id}.jsonl"
    rows = parse_rows(path.read_bytes())[0] if path.is_file() else []
    points = [p for row in rows for p in metric_points(row)]
    times = [r.time for r in rows]
    stop = stops.get(run_id)
    state = facts.get("status") or ("stopped" if stop else "incomplete")
    start_ms = _ms(min(times)) if times else _ms((stop or {}).get("time"))
    end_ms = _ms((stop or {}).get("time")) if stop else (_ms(max(times)) if times else None)
    last_step = max((p.step for p in points), default=0)
    metrics = _json(results / "metrics" / f"{run_id}.json", {})
    final_ms = end_ms if end_ms is not None else 0
    points += _numbers("final/", metrics, last_step, final_ms)
    for label, scores in (metrics.get("per_class") or {}).items():
        points += _numbers(f"final/{label}/", scores, last_step, final_ms)
    name = trial.get("name") or facts.get("name") or run_id
    if state == "finished":
        reason = "finished: done.json written"
    elif state == "stopped":
        reason = (f"stopped by rule {(stop or {}).get('rule')} at step {(stop or {}).get('step')}: "
                  f"{(stop or {}).get('message')}")
    else:
        reason = ("did not finish and was not stopped by a rule (the process crashed or was "
                  "interrupted); `flightplan run` resumes it")
    tags = {"flightplan.config_hash": str(trial.get("config_hash") or facts.get("config_hash")),
            "flightplan.tier": str(trial.get("tier") or facts.get("tier")),
            "flightplan.task": str(trial.get("task")),
            "flightplan.status": state, "flightplan.status_reason": reason,
            "flightplan.accepted": "true" if facts.get("accepted") else "false",
            "flightplan.reasons": "; ".join(facts.get("reasons") or []),
            "mlflow.note.content": f"flightplan run `{run_id}`: {reason}"}
    replicate_of = trial.get("replicate_of")
    if replicate_of:
        tags["flightplan.replicate_of"] = str(replicate_of)
    if (replicate_of or name) in references:
        tags["flightplan.reference"] = references[replicate_of or name]
    if stop:
        tags |= {"flightplan.stop_rule": str(stop.get("rule")),
                 "flightplan.stop_reason": str(stop.get("message"))}
    artifact = _json(results / "artifacts" / run_id / "artifact.json", {})
    revision = artifact.get("base_revision") or manifest.get("base_model_revision") or {}
    tags |= flatten(revision, prefix="flightplan.base_model.")
    return {"name": name, "params": flatten(trial.get("params") or {}), "points": points,
            "tags": tags, "status": _STATUS.get(state, "KILLED"), "start_ms": start_ms,
            "end_ms": end_ms, "corpus": trial.get("corpus") or {}}


def corpus_inputs(corpus: dict[str, Any], splits: dict[str, str]) -> list[Any]:
    """The corpus files as MLflow dataset inputs (one per file, context = its split)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    source = corpus.get("package") or corpus.get("path") or "corpus"
    inputs = []
    for file_name, sha256 in sorted((corpus.get("sha256") or {}).items()):
        split = splits.get(file_name, "")
        dataset = Dataset(name=f"{source}/{file_name}", digest=sha256[:36],
                          source_type="flightplan-corpus",
                          source=json.dumps({"corpus": source, "file": file_name}),
                          profile=json.dumps({"sha256": sha256, "split": split,
                                              "limits": {k: corpus.get(k) for k in
                                                         ("train_limit", "test_limit")}}))
        tags = [InputTag("flightplan.sha256", sha256)]
        if split:
            tags.append(InputTag("mlflow.data.context", split))
        inputs.append(DatasetInput(dataset, tags))
    return inputs


def _send_run(store: MlflowStore, experiment_id: str, run_id: str,
              record: dict[str, Any]) -> tuple[MlflowRun, int]:
    run = store.run(experiment_id, run_id, name=record["name"], start_ms=record["start_ms"],
                    tags=record["tags"])
    store.log_params(run, record["params"])
    sent = store.log_points(run, record["points"])
    store.set_tags(run, record["tags"])
    store.finish(run, record["status"], record["end_ms"])
    return run, sent


def _experiment_tags(manifest: dict[str, Any], conclusion: dict[str, Any],
                     budget: dict[str, Any]) -> dict[str, str]:
    currency = budget.get("currency") or ""
    per = budget.get("rental_per_accepted")
    accepted = budget.get("accepted_products")
    tags = {"flightplan.campaign": manifest.get("campaign"),
            "flightplan.question": manifest.get("question"),
            "flightplan.metric": manifest.get("metric"),
            "flightplan.threshold": f"{conclusion.get('goal', '')} gain >= "
                                    f"{conclusion.get('min_gain')}",
            "flightplan.verdict": conclusion.get("verdict"),
            "flightplan.answer": conclusion.get("answer"),
            "flightplan.committed_budget": f"{budget.get('committed_total')} {currency}",
            "flightplan.rental_per_accepted": f"{per} {currency}" if per is not None
            else f"undefined: {accepted} accepted",
            "flightplan.accepted_products": accepted,
            "flightplan.plan_sha256": manifest.get("plan_sha256"),
            "flightplan.order_number": manifest.get("order_number"),
            "mlflow.note.content": f"**{manifest.get('question')}**\n\n{conclusion.get('verdict')}"}
    return {k: str(v) for k, v in tags.items() if v is not None}


def _pilot(results: Path) -> dict[str, Any] | None:
    """The pilot, from plan_vs_execution.json's decisions (None when it holds none): its
    measurement rows (``pilot/<pilot id>.jsonl``, the first process's, as live tracking
    sends them) and its figures."""
    pve = _json(results / "plan_vs_execution.json", {})
    check = next((d for d in pve.get("decisions", []) if d.get("kind") == "pilot_check"), None)
    if check is None:
        return None
    decision: dict[str, Any] = next(
        (d for d in pve.get("decisions", []) if d.get("kind") == "pilot"), {})
    figures = (decision.get("figures") or {}).get("pilot") or {}
    stage: dict[str, Any] = next(
        (i for i in pve.get("items", []) if i.get("name") == "pilot"), {})
    end_ms = _ms(check.get("at"))
    hours = stage.get("observed_hours")
    start_ms = end_ms - int(round(hours * 3_600_000)) \
        if hours is not None and end_ms is not None else end_ms
    control_id = check.get("control_id")
    run_id = pilot_id(control_id) if control_id else "pilot"
    path = results / PILOT_DIRNAME / f"{run_id}.jsonl"     # the pilot's rows (first process)
    rows = parse_rows(path.read_bytes())[0] if control_id and path.is_file() else []
    points = [p for row in rows for p in metric_points(row)]
    points += _numbers("pilot/", figures, 0, end_ms or 0)
    return {"run_id": run_id,
            "name": "pilot", "params": {}, "points": points, "start_ms": start_ms,
            "end_ms": end_ms, "status": "FINISHED" if check.get("ok") else "FAILED",
            "tags": {"flightplan.pilot": "true", "flightplan.status_reason": str(check.get("message")),
                     "mlflow.note.content": f"pilot: {check.get('message')}"}}


def export_results(results: Path, *, tracking_uri: str | None = None,
                   experiment: str | None = None) -> dict[str, Any]:
    """Export a verified results directory into MLflow (see the module docstring).

    Args:
        results: the results directory (holding MANIFEST.json).
        tracking_uri: the MLflow store; default ``$MLFLOW_TRACKING_URI`` or
            ``sqlite:///<cwd>/mlflow.db``.
        experiment: the experiment name; default the campaign name.

    Returns:
        ``{tracking_uri (its credentials masked), experiment, experiment_id, runs: [{run_id, mlflow_run_id,
        status, points, sent}], summary_run_id}``; ``sent`` counts the metric points
        this call added (0 on a repeated export).

    Raises:
        ArgumentError: ``results`` is not a directory, or MLflow is not installed.
        VerificationFailed: the directory does not verify (the findings are named).
        TrackingFailed: the store could not be reached or refused a write.
    """
    from flightplan.close.verify import verify_results

    require_mlflow()  # before the minutes of verification, not after
    results = Path(results)
    if not results.is_dir():
        raise ArgumentError(f"{results}: not a directory; give the results directory "
                            f"(the folder holding MANIFEST.json)")
    report = verify_results(results)
    if not report["verified"]:
        named = "; ".join(f"{f['check']}: {f['path']}: {f['message']}"
                          for f in report["findings"][:5])
        raise VerificationFailed(
            f"{results}: does not verify, so it is not exported ({len(report['findings'])} "
            f"finding(s): {named}); run `flightplan verify {results}` and fix or re-close it",
            [Finding.from_dict(f) for f in report["findings"]])
    uri = default_tracking_uri(tracking_uri)
    manifest = _json(results / "MANIFEST.json")
    conclusion = _json(results / "conclusion.json", {})
    budget = _json(results / "budget.json", {})
    store = MlflowStore(uri)
    name = experiment or manifest.get("campaign") or results.resolve().parent.name
    experiment_id = store.experiment(name, tags=_experiment_tags(manifest, conclusion, budget))

    references = {c["variant"]: c["reference"] for c in conclusion.get("comparisons", [])
                  if c.get("variant") and c.get("reference")}
    stops = {s["run_id"]: s for s in _json(results / "stops.json", []) if s.get("run_id")}
    splits = {f: (info or {}).get("split", "") for f, info in
              (_json(results / "data_check.json", {}).get("files") or {}).items()}
    out_runs, records = [], []
    for run_id in manifest.get("expected_run_ids", []):
        record = run_record(results, run_id, manifest, references, stops)
        records.append(record)
        run, sent = _send_run(store, experiment_id, run_id, record)
        store.log_datasets(run, corpus_inputs(record["corpus"], splits))
        for pattern in _RUN_ARTIFACTS:
            rel = pattern.format(id=run_id)
            if (results / rel).is_file():
                store.log_artifact(run, results / rel, rel.split("/")[0])
        if (results / "artifacts" / run_id).is_dir():
            store.log_artifact(run, results / "artifacts" / run_id, "artifact")
        out_runs.append({"run_id": run_id, "mlflow_run_id": run.mlflow_run_id,
                         "status": record["status"], "points": len(record["points"]),
                         "sent": sent})
    pilot = _pilot(results)
    if pilot is not None:
        run, sent = _send_run(store, experiment_id, pilot["run_id"], pilot)
        out_runs.append({"run_id": pilot["run_id"], "mlflow_run_id": run.mlflow_run_id,
                         "status": pilot["status"], "points": len(pilot["points"]), "sent": sent})
    summary: dict[str, Any] = {
        "name": "summary", "params": {}, "points": [], "status": "FINISHED",
        "start_ms": min((r["start_ms"] for r in records if r["start_ms"]), default=None),
        "end_ms": max((r["end_ms"] for r in records if r["end_ms"]), default=None),
        "tags": {"flightplan.summary": "true",
                 "mlflow.note.content": str(conclusion.get("verdict"))}}
    run, _ = _send_run(store, experiment_id, SUMMARY_ID, summary)
    for file_name in _SUMMARY_FILES:
        if (results / file_name).is_file():
            store.log_artifact(run, results / file_name, None)
    return {"tracking_uri": redact(uri), "experiment": name, "experiment_id": experiment_id,
            "runs": out_runs, "summary_run_id": run.mlflow_run_id}


def export_command(target: str, results: Path, *, tracking_uri: str | None,
                   experiment: str | None, as_json: bool) -> int:
    """``flightplan export mlflow RESULTS_DIR [--tracking-uri URI] [--experiment NAME] [--json]``.

    Returns:
        0 when exported. Raises as :func:`export_results`; an unknown ``target`` is an
        ArgumentError (only ``mlflow`` exists).
    """
    if target != "mlflow":
        raise ArgumentError(f"export target {target!r} is unknown; the only target is `mlflow`")
    outcome = export_results(results, tracking_uri=tracking_uri, experiment=experiment)
    if as_json:
        print(json.dumps(outcome))
        return 0
    print(f"exported to {outcome['tracking_uri']}, experiment {outcome['experiment']!r} "
          f"(id {outcome['experiment_id']})")
    for run in outcome["runs"]:
        print(f"  {run['run_id']}: {run['status']}, {run['points']} metric points "
              f"({run['sent']} new), MLflow run {run['mlflow_run_id']}")
    print(f"  summary: MLflow run {outcome['summary_run_id']}")
    return 0
