"""The ``close`` and ``verify`` verbs.

``flightplan close SPEC`` completes ``results/`` from the ledger and the run directories:
it (re)publishes every run, judges each product (:mod:`.acceptance`), writes the error
analyses, the conclusion, the budget, plan versus execution, ``calibration.json`` (what
the next campaign plans from: :mod:`flightplan.plan.calibration`), README.md and
report.html, rewrites the manifest, and then runs :func:`flightplan.close.verify.verify_results` on
the directory. It reports success (exit 0) only when verification passes; otherwise it
names each finding and exits 1.

``flightplan verify DIR`` runs the same verification from the directory alone.

Usage::

    close_command(Path("examples/tiny/campaign.toml"), as_json=True,
                  open_ledger=Ledger.open_existing)   # the CLI passes run's ledger
    verify_command(Path("examples/tiny/results"), as_json=False)
"""

from __future__ import annotations

import json
import shlex
import time
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightplan.activity import WaitDisplay, doing
from flightplan.campaign_lock import CampaignLock
from flightplan.close.acceptance import (Verdict, accept_runs, accepted_product_count,
                                         comparisons, replicate_verdicts)
from flightplan.close.analysis import error_analysis, error_markdown
from flightplan.close.budget import budget_inputs, build_budget
from flightplan.close.closed import inputs_fingerprint, unchanged_close
from flightplan.close.conclusion import conclude
from flightplan.close.replicates import run_seed_spreads, with_run_seed_spreads
from flightplan.close.ledger_reader import LedgerOpener, LedgerReader
from flightplan.close.plan_vs_execution import plan_vs_execution, plan_vs_execution_markdown
from flightplan.close.report import loss_curves, render_readme, render_report
from flightplan.close.resumes import run_resumes
from flightplan.close.seed_notice import calibrated_seed_spread, with_seed_spread
from flightplan.close.verify import (CLOSE_FILES, DEFAULT_SAMPLE, changed_files, run_files_digest,
                                     run_task, verify_results)
from flightplan.durable import write_atomic, write_json_atomic
from flightplan.errors import ArgumentError
from flightplan.campaign_goodput import ledger_goodput
from flightplan.ids import pilot_id
from flightplan.ledger_rows import PlanVersionRow, RunRow
from flightplan.metrics import read_predictions
from flightplan.plan.calibration.measure import calibration_record
from flightplan.plan.calibration.record import FILE_NAME as CALIBRATION_FILE
from flightplan.plan.catalog import flight_gpus
from flightplan.plan.decision_rule import RULE_CHANGED, check_rule_unchanged
from flightplan.publish.close_record import (CloseRecord, manifest_sha256, report_path,
                                             write_close_record)
from flightplan.publish.manifest import MANIFEST_NAME, read_manifest, update_manifest
from flightplan.publish.results import (portable, publish_pilot, publish_plan, publish_run,
                                        results_dir_of)
from flightplan.rows import Row, parse_rows
from flightplan.rundir import RunDir, shown_path
from flightplan.spec import CampaignSpec, load_spec
from flightplan.tasks import BUILTIN_TASKS
from flightplan.tasks.reload import reload_argv
from flightplan.units import time_unit

__all__ = ["close_campaign", "close_command", "report_command", "verify_command"]

# ledger statuses of runs the campaign no longer owes a product for
_NOT_OWED = ("cut", "superseded")
# findings that say files of a results directory differ from what close wrote
_CHANGED = ("checksum", "missing_file", "unlisted_file", "path_traversal", "config_hash")
# files only a results directory holds at its top (what `run` publishes first, what close
# writes): a folder with none of them and no MANIFEST.json is not a results directory
_RESULTS_FILES = ("plan.json", "data_check.json", "calibration.json",
                  *(name for name in CLOSE_FILES if name.endswith(".json")))


def _test_examples(spec: CampaignSpec) -> tuple[list[str] | None, dict[str, str]]:
    """Expected test example ids and their texts (None, {} without a [corpus] or when the
    task reads the corpus files itself)."""
    if spec.corpus is None or not spec.corpus.has_columns:
        return None, {}
    from flightplan.corpus import load_corpus

    corpus = load_corpus(spec.corpus, spec.campaign_dir)
    return [e.id for e in corpus.test], {e.id: e.text for e in corpus.test}


def _artifact_meta(results: Path, run_id: str) -> dict[str, Any]:
    """The run's ``artifact.json`` object ({} when missing or unreadable)."""
    path = results / "artifacts" / run_id / "artifact.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _input_limit(results: Path, run_id: str) -> int | None:
    """``input_limit`` recorded in the run's ``artifact.json`` (the length the task cut
    inputs at), or None."""
    value = _artifact_meta(results, run_id).get("input_limit")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class _Published:
    """Per run id, what close reads back from results/ for the calibration record and the
    resumes: the published trial.json, the measurement rows, the predictions file
    (relative to results/)."""

    trials: dict[str, Any]
    rows: dict[str, list[Row]]
    predictions: dict[str, str]


def _published(results: Path, runs: list[RunRow]) -> _Published:
    """:class:`_Published` of ``runs``; a run without a readable trial.json is left out."""
    trials, rows, predictions = {}, {}, {}
    for run in runs:
        try:
            trials[run.run_id] = json.loads((results / "params" / f"{run.run_id}.json").read_text(
                encoding="utf-8"))
        except (OSError, ValueError):
            continue
        measurements = results / "measurements" / f"{run.run_id}.jsonl"
        if measurements.is_file():
            rows[run.run_id] = parse_rows(measurements.read_bytes())[0]
        if (results / "predictions" / f"{run.run_id}.csv").is_file():
            predictions[run.run_id] = f"predictions/{run.run_id}.csv"
    return _Published(trials, rows, predictions)


def _latest_runs(ledger: LedgerReader) -> list[RunRow]:
    """The ledger's runs the campaign still owes (not cut, not superseded), in order."""
    return [r for r in ledger.runs() if r.status not in _NOT_OWED]


def _write_text(results: Path, rel: str, text: str, written: list[str]) -> None:
    write_atomic(results / rel, text.encode("utf-8"))
    written.append(rel)


def _write_json(results: Path, rel: str, value: Any, written: list[str]) -> None:
    write_json_atomic(results / rel, value)
    written.append(rel)


def _artifact_commands(results: Path, run_ids: list[str]) -> list[dict[str, Any]]:
    """For README.md: per artifact, the shell line that reproduces its predictions,
    ``package``, the built-in task's module (None for a file or module task), and
    ``base_revision``, whether its ``artifact.json`` records a base model."""
    manifest = read_manifest(results)
    out = []
    for run_id in run_ids:
        if not (results / "artifacts" / run_id / "artifact.json").is_file():
            continue
        try:
            record = run_task(results, manifest, run_id)
        except ValueError:
            continue
        source = record.get("source") if record.get("kind") != "builtin" else None
        argv = reload_argv(record["entry"], f"artifacts/{run_id}", f"../reproduced-{run_id}.csv",
                           task_root=source, python="python")
        out.append({"run_id": run_id, "command": shlex.join(argv),
                    "package": BUILTIN_TASKS.get(record["entry"])
                    if record.get("kind") == "builtin" else None,
                    "base_revision": _artifact_meta(results, run_id).get("base_revision")
                    is not None})
    return out


def close_campaign(spec: CampaignSpec, ledger: LedgerReader, *, sample: int | None = DEFAULT_SAMPLE
                   ) -> dict[str, Any]:
    """Complete and verify ``results/`` of a campaign.

    Args:
        spec: the campaign.
        ledger: the campaign's ledger, read through :class:`LedgerReader`.
        sample: test examples re-predicted per artifact by the final verification, for
            artifacts the acceptance step did not already reload in full.

    Returns:
        ``{verified, findings, results_dir, accepted (run ids), budget, conclusion,
        unfinished, rewritten}``; ``unfinished``: ``{run_id, name, status}`` of each run
        that did not run to its end, ``interrupted`` (its runner was stopped: close holds
        the lock, so none is running) or ``pending`` (never started); ``rewritten``: the
        files of ``results/`` that had changed since they were written (their bytes no
        longer those the manifest gives, :func:`flightplan.close.verify.changed_files`),
        which this close wrote again from ``runs/`` and the ledger.

    Raises:
        ArgumentError: the campaign has no frozen plan yet (it never ran).
        SpecError: the decision rule in the campaign file is not the one frozen with the
            plan (:mod:`flightplan.plan.decision_rule`).
    """
    original = ledger.original_plan()
    if original is None:
        raise ArgumentError(f"{spec.source}: the campaign has no frozen plan; run "
                            f"`flightplan run {spec.source}` before closing it")
    check_rule_unchanged(spec, original.plan, ledger.events(kind=RULE_CHANGED))
    results = results_dir_of(spec.campaign_dir)
    rewritten = changed_files(results)
    runs = _publish_runs(spec, ledger, original)
    expected_ids, texts = _test_examples(spec)
    verdicts = accept_runs(results, runs, spec=spec, expected_ids=expected_ids)
    written: list[str] = []
    analyses = _write_analyses(results, spec, runs, texts, written)

    section = spec.campaign
    doing("comparing each variant with its reference (paired bootstrap)")
    conclusion = with_run_seed_spreads(
        conclude(question=section.question, metric=section.metric, goal=section.goal,
                 min_gain=section.min_gain, multiple=section.multiple,
                 comparisons=with_seed_spread(spec, comparisons(results, spec, verdicts),
                                              calibrated_seed_spread(spec))),
        run_seed_spreads({name: [(v.run_id, v.metric_value) for v in group
                                 if v.usable and v.metric_value is not None]
                          for name, group in replicate_verdicts(spec, verdicts).items()}))
    _write_json(results, "conclusion.json", conclusion, written)
    budget = _write_budget(results, spec, ledger, runs, verdicts, written)
    goodput = ledger_goodput(ledger, spec, gpus_per_flight=flight_gpus(spec))
    published = _published(results, runs)
    pve = portable(plan_vs_execution(ledger, goodput=goodput,
                                     resumes=run_resumes(published.trials, published.rows)),
                   spec.campaign_dir)
    _write_json(results, "plan_vs_execution.json", pve, written)
    _write_text(results, "plan_vs_execution.md", plan_vs_execution_markdown(pve), written)
    _write_calibration(results, spec, runs, published, pve, written,
                       seed_sd={name: spread["sd"] for name, spread
                                in (conclusion.get("seed_spread") or {}).items()})
    _write_pages(results, spec, runs, {"conclusion": conclusion, "products": verdicts,
                                       "plan_vs_execution": pve, "budget": budget,
                                       "runs": analyses}, written)

    accepted = [v.run_id for v in verdicts if v.accepted]
    judged = read_manifest(results)     # the runs' files as judged: verify compares
    update_manifest(results, written=written, meta={
        "campaign": section.name, "question": section.question, "metric": section.metric,
        "plan_sha256": original.plan_sha256,
        "corpus_sha256": dict(spec.corpus.sha256) if spec.corpus else None,
        "order_number": spec.rental.order, "expected_run_ids": [r.run_id for r in runs],
        "accepted_run_ids": accepted},
        runs={v.run_id: {"accepted": v.accepted, "reasons": v.reasons,
                         "metric_value": v.metric_value,
                         "judged_sha256": run_files_digest(judged, v.run_id)}
              for v in verdicts})
    report = verify_results(results, sample=sample, reproduced={
        v.run_id: v.reload_findings for v in verdicts if v.reload_findings is not None})
    unfinished = [{"run_id": r.run_id, "name": r.name,
                   "status": "interrupted" if r.status == "running" else r.status}
                  for r in runs if r.status in ("running", "pending", "failed")]
    not_accepted = [{"run_id": v.run_id, "reasons": v.reasons} for v in verdicts
                    if not v.accepted]
    return report | {"results_dir": str(results), "accepted": accepted,
                     "not_accepted": not_accepted, "budget": budget,
                     "conclusion": conclusion, "unfinished": unfinished,
                     "rewritten": rewritten}


def _write_calibration(results: Path, spec: CampaignSpec, runs: list[RunRow],
                       published: _Published, pve: dict[str, Any], written: list[str], *,
                       seed_sd: dict[str, float]) -> None:
    """``calibration.json``: what the next campaign plans from (``plan --from``,
    :func:`flightplan.plan.calibration.measure.calibration_record`), with ``seed_sd`` (run name →
    its metric's sd over its replicates) on each replicate of a run of several seeds."""
    data_check = results / "data_check.json"
    calibration = calibration_record(
        spec, runs=[r.to_json() for r in runs], trials=published.trials, rows=published.rows,
        predictions=published.predictions,
        revisions={r.run_id: _artifact_meta(results, r.run_id).get("base_revision")
                   for r in runs},
        plan_vs_execution=pve,
        data_check=json.loads(data_check.read_text(encoding="utf-8"))
        if data_check.is_file() else None, seed_sd=seed_sd)
    _write_json(results, CALIBRATION_FILE, portable(calibration.to_json(), spec.campaign_dir),
                written)


def _publish_runs(spec: CampaignSpec, ledger: LedgerReader, original: PlanVersionRow
                  ) -> list[RunRow]:
    """Publish the original plan, every run the campaign owes (again: what a runner
    killed before publishing left out) and the rows of the latest pilot (its control's, in
    the ledger's last ``pilot`` event); returns those runs."""
    publish_plan(spec.campaign_dir, original.plan)
    runs = _latest_runs(ledger)
    for done, run in enumerate(runs):
        doing("publishing runs into results/", done=done, total=len(runs), unit="runs")
        if (spec.campaign_dir / "runs" / run.run_id / "trial.json").is_file():
            publish_run(spec.campaign_dir, run.run_id)
    controls = [str(e.data["control_id"]) for e in ledger.events(kind="pilot")
                if isinstance(e.data, dict) and e.data.get("control_id")]
    if controls:
        publish_pilot(spec.campaign_dir, pilot_id(controls[-1]))
    return runs


def _write_analyses(results: Path, spec: CampaignSpec, runs: list[RunRow],
                    texts: dict[str, str], written: list[str]) -> list[dict[str, Any]]:
    """``errors/<id>.json`` and ``.md`` of every run with predictions; returns ``[{run_id,
    name, analysis (None without predictions)}]`` for the report."""
    analyses = []
    for run in runs:
        path = results / "predictions" / f"{run.run_id}.csv"
        analysis = None
        if path.is_file():
            analysis = error_analysis(read_predictions(path), metric=spec.campaign.metric,
                                      goal=spec.campaign.goal, texts=texts,
                                      input_limit=_input_limit(results, run.run_id))
            _write_json(results, f"errors/{run.run_id}.json",
                        analysis | {"run_id": run.run_id, "name": run.name}, written)
            _write_text(results, f"errors/{run.run_id}.md",
                        error_markdown(run.run_id, run.name, analysis), written)
        analyses.append({"run_id": run.run_id, "name": run.name, "analysis": analysis})
    return analyses


def _write_budget(results: Path, spec: CampaignSpec, ledger: LedgerReader, runs: list[RunRow],
                  verdicts: list[Verdict], written: list[str]) -> dict[str, Any]:
    """``budget.json`` (:func:`flightplan.close.budget.build_budget`); returns it."""
    packages, external = budget_inputs(spec, ledger.expenses())
    stopped = [{"run_id": r.run_id, "rule": (r.stop or {}).get("rule"),
                "reason": (r.stop or {}).get("message")}
               for r in runs if r.status == "stopped"]
    budget = build_budget(packages=packages, external=external,
                          accepted_products=accepted_product_count(verdicts, spec),
                          rejections=[{"run_id": v.run_id, "reasons": v.reasons}
                                      for v in verdicts if not v.accepted],
                          stopped_runs=stopped)
    portable_budget: dict[str, Any] = portable(budget, spec.campaign_dir)
    _write_json(results, "budget.json", portable_budget, written)
    return portable_budget


def _write_pages(results: Path, spec: CampaignSpec, runs: list[RunRow],
                 parts: dict[str, Any], written: list[str]) -> None:
    """``README.md`` and ``report.html`` from ``parts`` (``conclusion``, ``products``,
    ``plan_vs_execution``, ``budget``, ``runs``: the analyses)."""
    section = spec.campaign
    doing("writing README.md and report.html")
    context = {"campaign": section.name, "conclusion": parts["conclusion"],
               "products": parts["products"], "order_number": spec.rental.order,
               "metric": section.metric,
               "resumes": {r["run_id"]: r["summary"]
                           for r in parts["plan_vs_execution"].get("resumes") or []}}
    _write_text(results, "README.md", render_readme(
        context | {"artifacts": _artifact_commands(results, [r.run_id for r in runs]),
                   "goodput": _goodput_shares(parts["plan_vs_execution"])}), written)
    curves = {r.name: loss_curves(results / "measurements" / f"{r.run_id}.jsonl") for r in runs}
    _write_text(results, "report.html", render_report(
        context | {"plan_vs_execution": parts["plan_vs_execution"], "budget": parts["budget"],
                   "runs": parts["runs"], "curves": curves}), written)


def _goodput_shares(pve: dict[str, Any]) -> dict[str, str]:
    """Run id → ``"39.4 % of 7.9 s"``: its goodput and wall time, for README.md."""
    shares = {}
    for run in (pve.get("goodput") or {}).get("runs") or []:
        seen = run["observed"]
        if seen["goodput"] is not None:
            unit, scale = time_unit(seen["wall_hours"])
            shares[run["run_id"]] = f"{seen['goodput']:.1%} of {seen['wall_hours'] * scale:.1f} {unit}"
    return shares


def _print_findings(findings: list[dict[str, str]]) -> None:
    for f in findings:
        print(f"  {f['check']}: {f['path']}: {f['message']}")


def close_command(spec_path: Path, *, as_json: bool, open_ledger: LedgerOpener,
                  again: bool = False) -> int:
    """``flightplan close SPEC [--again] [--json]``: exit 0 when results/ verifies, 1 otherwise.

    Prints the campaign's answer (``yes``/``no``/``inconclusive``) and verdict, the
    family-wise level of its "yes", the accepted runs, the budget and the verification;
    ``--json``: one object with keys ``answer``, ``verdict``, ``multiple`` and
    ``family_wise_level`` (how the answer is controlled for the number of comparisons,
    :mod:`flightplan.close.multiple`), ``verified``, ``findings``, ``results_dir``,
    ``accepted``, ``not_accepted``, ``budget`` (money as decimal strings), ``unfinished``,
    ``already_closed`` and ``closed_at`` (unix seconds of the close that wrote results/).

    A campaign closed before whose inputs have not changed since and whose ``results/``
    still verifies (:func:`flightplan.close.closed.unchanged_close`) is not closed again:
    the command says it is already closed and verified and prints that close's answer
    (``already_closed``: true), unless ``again``. Every close leaves its record
    (:mod:`flightplan.publish.close_record`), which ``flightplan status`` shows.

    ``open_ledger(campaign_dir)`` opens the campaign's ledger for reading (the command
    line passes ``run``'s; ``close`` reads it only through :class:`LedgerReader`). Close
    holds the campaign lock (:mod:`flightplan.campaign_lock`) while it reads the ledger
    and writes ``results/``, so it never publishes a half-run campaign beside a runner
    that still writes there. On a terminal, stderr shows what is being done and how far
    along while it works (:class:`flightplan.activity.WaitDisplay`); nothing when stderr
    is not a terminal.

    Raises:
        SpecError: the campaign file is invalid. ArgumentError: the campaign never ran.
        LockHeld: ``flightplan run`` (or another close) holds the campaign; the line names
            its pid and says to close once it has finished.
    """
    spec = load_spec(spec_path)
    ledger = open_ledger(spec.campaign_dir)      # refuses a campaign that never ran
    try:
        with CampaignLock(spec.campaign_dir, verb="close"), WaitDisplay():
            record = None if again else unchanged_close(spec, ledger)
            already = record is not None
            if record is None:
                outcome = close_campaign(spec, ledger)
                conclusion = outcome["conclusion"]
                summary = {**{k: conclusion[k] for k in ("answer", "verdict", "multiple",
                                                         "family_wise_level",
                                                         "comparisons_made")},
                           **{k: outcome[k] for k in ("verified", "findings", "results_dir",
                                                      "accepted", "not_accepted", "budget",
                                                      "unfinished", "rewritten")}}
                record = CloseRecord(time.time(), inputs_fingerprint(spec, ledger),
                                     manifest_sha256(spec.campaign_dir) or "", summary)
                write_close_record(spec.campaign_dir, record)
    finally:
        ledger.close()
    summary = record.summary
    if as_json:
        print(json.dumps(summary | {"already_closed": already, "closed_at": record.closed_at}))
        return 0 if summary["verified"] else 1
    if already:
        print(f"already closed and verified at {_local_time(record.closed_at)}; nothing close "
              f"reads has changed since, so nothing was redone (`flightplan close "
              f"{shlex.quote(str(spec_path))} --again` redoes it)")
    budget = summary["budget"]
    per = budget["rental_per_accepted"]
    if summary["unfinished"]:
        print(_unfinished_line(summary["unfinished"], spec_path, spec.campaign_dir))
    print(f"results: {summary['results_dir']}")
    rewritten = summary.get("rewritten") or []
    if rewritten and not already:
        print(f"rewrote {len(rewritten)} file(s) of results/ that had changed since they were "
              f"written (first: {rewritten[0]}), from runs/ and the ledger")
    print(f"answer: {summary['answer']}")
    print(f"verdict: {summary['verdict']}")
    print(f"family-wise level: {summary['family_wise_level']:.1%} "
          f"(multiple = {summary['multiple']}, {summary['comparisons_made']} comparison"
          f"{'' if summary['comparisons_made'] == 1 else 's'})")
    print(f"accepted: {', '.join(summary['accepted']) or 'none'}")
    for rejected in summary["not_accepted"]:
        print(f"not accepted: {rejected['run_id']}: {'; '.join(rejected['reasons'])}")
    print(f"budget: committed {budget['committed_total']} {budget['currency']}, other "
          f"{budget['external_total']}, per accepted product "
          f"{per if per is not None else 'undefined'}")
    print("verified" if summary["verified"] else
          f"NOT verified: {len(summary['findings'])} finding(s)")
    _print_findings(summary["findings"])
    return 0 if summary["verified"] else 1


def _local_time(at: float) -> str:
    """``2026-12-05 07:12`` in local time."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def report_command(spec_path: Path, *, open_browser: bool, as_json: bool) -> int:
    """``flightplan report [SPEC] [--open] [--json]``: print where the closed campaign's
    report is (``results/report.html``, an absolute path, and its ``README.md``); with
    ``open_browser``, also open the report with :func:`webbrowser.open` (which honours
    ``$BROWSER``), saying where to open it by hand when no browser can be started.
    ``--json``: ``{report, readme, opened}`` (``opened``: null without ``--open``).

    Raises:
        SpecError: the campaign file is missing or invalid.
        ArgumentError: there is no report yet (the campaign was never closed).
    """
    spec = load_spec(spec_path)
    path = report_path(spec.campaign_dir)
    if path is None:
        quoted = shlex.quote(str(spec_path))
        raise ArgumentError(f"{spec_path}: no report yet (`flightplan close` writes "
                            f"results/report.html once the campaign has run): run "
                            f"`flightplan run {quoted}` if it has not, then "
                            f"`flightplan close {quoted}`")
    opened: bool | None = None
    if open_browser:
        opened = webbrowser.open(path.as_uri())
    readme = path.with_name("README.md")
    if as_json:
        print(json.dumps({"report": str(path), "readme": str(readme), "opened": opened}))
        return 0
    print(f"report: {path}")
    print(f"README: {readme}")
    if opened is False:
        print(f"no web browser could be started here; open {path.as_uri()} in one")
    return 0


def _unfinished_line(unfinished: list[dict[str, str]], spec_path: Path, campaign_dir: Path) -> str:
    """``not finished: lora-r8 (interrupted), len256 (not started), r16 (failed: its log is
    runs/<id>/log.txt); …`` with the command that goes on with them (a failed run is retried
    once its task is fixed): the answer below is only what the finished runs can give. The
    log's path opens from the working directory (:func:`flightplan.rundir.shown_path`)."""
    def state(u: dict[str, str]) -> str:
        if u["status"] == "failed":
            return f"failed: its log is {shown_path(RunDir.of(campaign_dir, u['run_id']).log)}"
        return "not started" if u["status"] == "pending" else u["status"]
    runs = ", ".join(f"{u['name']} ({state(u)})" for u in unfinished)
    failed = any(u["status"] == "failed" for u in unfinished)
    return (f"not finished: {runs}; the answer below is only what the finished runs give. "
            + ("Fix what the log names, then " if failed else "")
            + f"{shlex.join(['flightplan', 'run', str(spec_path)])} goes on with them; close "
            f"again once they have ended")


def _reload_lines(report: dict[str, Any], directory: Path) -> list[str]:
    """The text lines about reloads: the artifacts whose predictions a fresh process
    re-created as stored; then those that did not run (untrusted code): the
    ``--trust-code`` command for the runs whose kept task source passes its checks, unless
    files of the directory were changed after close wrote them (a finding of
    :data:`_CHANGED`: then none, and the line says not to trust its code); and, for those
    whose source has a ``task_source`` finding, that ``--trust-code`` would refuse them
    too."""
    statuses = report.get("reload", {})
    reproduced = sorted(r for r, status in statuses.items() if status == "reproduced")
    lines = [f"reload: {len(reproduced)} artifact(s) reloaded in fresh processes re-created "
             f"their stored predictions on up to {DEFAULT_SAMPLE} test examples each "
             f"({', '.join(reproduced)})"] if reproduced else []
    not_run = sorted(r for r, status in statuses.items() if status == "not_run")
    if not not_run:
        return lines
    failing = {f["path"] for f in report["findings"] if f["check"] == "task_source"}
    runs = read_manifest(directory).get("runs") or {}
    refused = [r for r in not_run
               if ((runs.get(r) or {}).get("task") or {}).get("source") in failing]
    trusted = [r for r in not_run if r not in refused]
    changed = sorted({f["check"] for f in report["findings"] if f["check"] in _CHANGED},
                     key=_CHANGED.index)
    if trusted and changed:
        lines.append(f"reload: not run (untrusted code) for {', '.join(trusted)}; files of "
                     f"this copy were changed after close wrote them ({', '.join(changed)} "
                     f"above), so do not trust its code: get the directory again from its "
                     f"sender")
    elif trusted:
        lines.append(f"reload: not run (untrusted code) for {', '.join(trusted)}; run "
                     f"{shlex.join(['flightplan', 'verify', str(directory), '--trust-code'])} "
                     f"to reload")
    if refused:
        lines.append(f"reload: not run for {', '.join(refused)}: the task source kept for "
                     f"{'it' if len(refused) == 1 else 'them'} fails its checks (task_source "
                     f"above), so --trust-code would not run it either; only the code the "
                     f"runs were made from, every file as the manifest lists it, is run")
    return lines


def _results_dir_problem(directory: Path) -> str | None:
    """Why ``directory`` is no results directory at all (None when it is one).

    It is one when it holds MANIFEST.json or any of :data:`_RESULTS_FILES`: a results
    directory whose manifest is gone is still verified (a ``missing_file`` finding, exit
    1). The hint names ``<directory>/results`` (the campaign folder given) or
    ``<directory>/../results`` (a folder beside it, such as the data folder) when that
    holds a manifest.
    """
    if (directory / MANIFEST_NAME).exists() or \
            any((directory / name).is_file() for name in _RESULTS_FILES):
        return None
    hint = f"give the results directory (the folder holding {MANIFEST_NAME})"
    for candidate in (directory / "results", directory.parent / "results"):
        if (candidate / MANIFEST_NAME).is_file():
            hint = f"did you mean {candidate}?"
            break
    return f"{directory}: not a results directory (no {MANIFEST_NAME}); {hint}"


def verify_command(directory: Path, *, as_json: bool, trust_code: bool = False) -> int:
    """``flightplan verify DIR [--trust-code] [--json]``: exit 0 when verified, 1 with findings.

    Without ``trust_code`` the artifacts of file and module tasks are not reloaded (their
    code came inside the directory): the reload is reported ``not_run``, which alone still
    exits 0; their kept sources are hashed and checked all the same.

    Raises:
        ArgumentError: ``directory`` is not a directory, or no results directory (neither
            MANIFEST.json nor any other file a results directory holds; the line names
            ``DIR/results`` or ``DIR/../results`` when that is one).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ArgumentError(f"{directory}: not a directory; give the results directory "
                            f"(the folder holding {MANIFEST_NAME})")
    problem = _results_dir_problem(directory)
    if problem:
        raise ArgumentError(problem)
    with WaitDisplay():
        report = verify_results(directory, trust_code=trust_code)
    if as_json:
        print(json.dumps(report))
    else:
        print("verified" if report["verified"] else
              f"NOT verified: {len(report['findings'])} finding(s)")
        _print_findings(report["findings"])
        for line in _reload_lines(report, directory):
            print(line)
    return 0 if report["verified"] else 1
