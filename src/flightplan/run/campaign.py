"""Carry out a campaign: data check, pilot, decision point, then the runs in tier order.

Running it again continues where it stopped: finished and stopped runs are skipped, an
interrupted run resumes from its checkpoints, a run whose configuration changed gets a
new id (the old id stays in the ledger as ``superseded``). The pilot and the decision
are kept in the ledger and not redone unless the control changed or ``--decide`` is
given. Everything is written under the campaign directory.

Exit code of :func:`run_campaign` (in :class:`CampaignOutcome`): 0 when every run that
was not cut ended, finished or stopped by its own rule; 1 when the campaign was stopped
(corpus mismatch, ``no_usable_resume`` in the pilot, the decision ``stop``) or a run's
process crashed (running again retries it).

Usage::

    outcome = run_campaign(load_spec("campaign.toml"), decide=None, console=Console())
    outcome.exit_code, outcome.to_json()
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

from rich.console import Console

from flightplan import activity
from flightplan.durable import write_json_atomic
from flightplan.publish.results import publish_data_check, publish_plan
from flightplan.errors import ArgumentError, CheckFailed, CorpusMismatch, SpecError
from flightplan.plan.campaign_plan import plan_campaign
from flightplan.plan.decision_rule import check_rule_unchanged
from flightplan.plan.catalog import (Catalog, catalog_for_spec, check_spec_against_catalog,
                                     expense_rows)
from flightplan.run.data_check import check_summary, run_data_check
from flightplan.run.decision import DECISIONS, choose, cut_steps, replan_from_options
from flightplan.run.executors.contract import Executor, Interruption, Job, JobResult
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.ledger import Ledger
from flightplan.run.lock import CampaignLock
from flightplan.run.planned import PlannedRun, load_run_task, plan_runs, trial_document
from flightplan.run.pilot import RESUME_CAUSES, PilotResult, pilot_id, run_pilot
from flightplan.run.progress import ProgressBoard, format_stop
from flightplan.run.records import RunRecorder
from flightplan.run.rental import RentalClock, left_flight, run_needs_s, waiting_reasons
from flightplan.metrics import metric_value, parse_metric, read_predictions
from flightplan.rundir import RunDir
from flightplan.spec import CampaignSpec
from flightplan.tasks.estimate import PilotFigures, PilotRecord, control_steps, estimate_run_seconds
from flightplan.tasks.loader import LoadedTask
from flightplan.units import Duration

__all__ = ["CampaignOutcome", "Observer", "run_campaign", "DATA_CHECK_STAGE", "PILOT_STAGE"]

Observer = Callable[[CampaignSpec], ContextManager[object]]
"""Watches a campaign while it runs: called with the spec once ``run`` holds the campaign's
lock, entered for the rest of the command and left before the lock is released. It reads
only what the runs write (measurement rows, ``stop.json``, ``done.json``) and never stops a
run; the CLI attaches the live MLflow mirror (:func:`flightplan.tracking.live.observer`)."""

DATA_CHECK_STAGE = "data-check"
PILOT_STAGE = "pilot"


@dataclass
class CampaignOutcome:
    """How ``flightplan run`` ended. ``stopped_by``: None, ``"data_check"``, ``"pilot"``
    or ``"decision"``; ``runs``: summary rows ``{run_id, name, tier, status, metric,
    wall_s, stop, reason}``."""

    campaign: str
    exit_code: int
    message: str
    stopped_by: str | None = None
    decision: dict[str, Any] | None = None
    pilot: dict[str, Any] | None = None
    data_check: dict[str, Any] | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``flightplan run --json`` object."""
        return {"campaign": self.campaign, "exit_code": self.exit_code,
                "status": "stopped" if self.stopped_by else "completed",
                "stopped_by": self.stopped_by, "message": self.message,
                "data_check": self.data_check, "pilot": self.pilot, "decision": self.decision,
                "runs": self.runs, "statuses": {r["name"]: r["status"] for r in self.runs},
                "wall_s": self.wall_s}


class _Campaign:
    """One invocation of ``flightplan run`` under the lock (see :func:`run_campaign`)."""

    def __init__(self, spec: CampaignSpec, ledger: Ledger, *, catalog: Catalog,
                 tasks: dict[str, LoadedTask], decide: str | None, executor: Executor,
                 console: Console, board: ProgressBoard, quiet: bool,
                 past_end: bool = False) -> None:
        self.spec, self.ledger, self.decide, self.catalog = spec, ledger, decide, catalog
        self.tasks = tasks                      # run name → its task, loaded once
        self.executor, self.console, self.board, self.quiet = executor, console, board, quiet
        self.dir = spec.campaign_dir
        self.recorder = RunRecorder(ledger, self.dir, metric=spec.campaign.metric)
        self.started = time.time()
        self.rental = RentalClock(
            ledger, package_days=spec.rental.package_days, started=spec.rental.started,
            past_end=past_end, leave_before_s=float(spec.rental.checkpoint_before_end.seconds))
        self._flight_of: dict[str, str] = {}    # run id → "flight (h left)" it started on

    def say(self, text: str) -> None:
        if self.quiet:
            return
        if self.board.enabled:
            self.board.note(text)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def outcome(self, message: str, *, code: int, stopped_by: str | None = None,
                **parts: Any) -> CampaignOutcome:
        rows = self.recorder.summary(self.planned)
        waiting = waiting_reasons(self.ledger.events())
        for row in rows:
            if row["status"] == "pending" and row["run_id"] in waiting:
                row["reason"] = waiting[row["run_id"]]
        return CampaignOutcome(self.spec.campaign.name, code, message, stopped_by,
                               runs=rows, wall_s=time.time() - self.started, **parts)

    def _stopped(self, by: str, message: str, **parts: Any) -> CampaignOutcome:
        """The campaign stops here: a ``stopped`` event without a run id, data ``{by,
        message}``, in the ledger (plan vs execution lists it) and the outcome, exit 1."""
        self.ledger.add_event("stopped", data={"by": by, "message": message})
        return self.outcome(message, code=1, stopped_by=by, **parts)

    # -- the steps --------------------------------------------------------------------
    def prepare(self) -> None:
        spec, ledger = self.spec, self.ledger
        activity.doing("freezing the plan")
        frozen = ledger.original_plan()
        if frozen is not None:  # before anything is written
            check_rule_unchanged(spec, frozen["plan"])
        source = Path(spec.source).resolve()
        ledger.ensure_campaign(name=spec.campaign.name, spec_path=source.name,
                               spec_sha256=hashlib.sha256(source.read_bytes()).hexdigest())
        plan = plan_campaign(spec, catalog=self.catalog).to_json()
        original, written = ledger.freeze_original(plan)
        publish_plan(self.dir, original["plan"])
        if written:
            self.say(f"plan frozen: {plan['reserved_hours']:.2f} h of {plan['window_hours']:.0f} h "
                     f"(sha256 {original['plan_sha256'][:12]})")
        ledger.sync_expenses(expense_rows(spec, self.catalog.offers[spec.rental.offer]))
        for interrupted in ledger.reset_interrupted():
            self.say(f"{interrupted} was interrupted; it resumes from its last checkpoint")
        self.planned = plan_runs(spec, tasks=self.tasks)
        for planned in self.planned:
            ledger.ensure_run(run_id=planned.run_id, name=planned.run.name,
                              tier=planned.run.tier, config_hash=planned.config_hash)

    def data_check(self) -> dict[str, Any] | CampaignOutcome:
        started = time.time()
        activity.doing("the data check")
        out = self.dir / ".flightplan" / "data_check.json"
        try:
            report = run_data_check(self.spec, out=out, tasks=self.tasks)
        except CorpusMismatch as exc:
            report = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {
                "status": "corpus_mismatch", "message": str(exc)}
            self.ledger.record_stage(DATA_CHECK_STAGE, started_at=started, ended_at=time.time(),
                                     event="data_check", data=check_summary(report))
            publish_data_check(self.dir, report)
            return self._stopped("data_check", f"data check: {exc}",
                                 data_check=check_summary(report))
        self.ledger.record_stage(DATA_CHECK_STAGE, started_at=started, ended_at=time.time(),
                                 event="data_check", data=check_summary(report))
        publish_data_check(self.dir, report)
        dups = len(report.get("cross_split_duplicates", []))
        summary = f"{report['summary']}; " if report.get("summary") else ""
        self.say(f"data check ok: corpus hashes match; {summary}{dups} input(s) in both train "
                 f"and test")
        unseen = report.get("test_labels_not_in_train") or []
        if unseen:
            counts = report["splits"]["test"]["labels"]
            listed = ", ".join(f"{label!r} ({counts[label]} test examples)" for label in unseen)
            self.say(f"data check: label(s) of the test split that no training example has: "
                     f"{listed}; no run learns them from the training split, and the "
                     f"classification metrics count them as classes (with recall 0 unless "
                     f"predicted)")
        return report

    def pilot(self, report: dict[str, Any]) -> dict[str, Any] | CampaignOutcome:
        control = next(p for p in self.planned if p.run.name == self.spec.control.name)
        for event in reversed(self.ledger.events(kind="pilot")):
            data = event["data"] or {}
            if data.get("control_id") == control.run_id and data.get("ok"):
                when = time.strftime("%H:%M:%S", time.localtime(event["at"]))
                self.say(f"pilot: kept from {when} ({data.get('message')})")
                return data
            break
        self.say(f"pilot of {control.run.name}: short run, early checkpoint, resume in a "
                 f"new process")
        result: PilotResult = run_pilot(
            trial_document(self.spec, control, resume=False), self.dir, report,
            task=self.tasks[control.run.name], executor=self.executor, on_start=self._bar,
            on_progress=self._progress)
        data = dict(result.to_json(), control_id=control.run_id)
        self.ledger.record_stage(PILOT_STAGE, started_at=result.started_at,
                                 ended_at=result.ended_at, event="pilot", data=data)
        if not result.ok:
            self.say(f"pilot failed ({result.cause}): {result.message}")
            if result.cause not in RESUME_CAUSES:
                return self._stopped("pilot", f"campaign stopped: the pilot failed "
                                              f"({result.cause}): {result.message}", pilot=data)
            if self.spec.stop.require_resume:
                return self._stopped("pilot", f"campaign stopped by rule no_usable_resume: "
                                              f"{result.message}", pilot=data)
        else:
            self.say(f"pilot ok: {result.message}")
            problem = self._metric_problem(control)
            if problem:
                data = dict(data, ok=False, cause="metric_unavailable", message=problem)
                self.ledger.add_event("pilot", data=data)
                return self._stopped("pilot", f"campaign stopped: the pilot's predictions "
                                              f"cannot give the decision metric: {problem}",
                                     pilot=data)
        return data

    def _metric_problem(self, control: PlannedRun) -> str | None:
        """Why the pilot's predictions cannot give the campaign's metric (a column the task
        does not write, no gold/predicted labels), or None: found before any run is paid
        for, not at close."""
        path = RunDir(self.dir / "runs" / pilot_id(control.run_id)).predictions
        if not path.is_file():
            return f"the pilot wrote no {RunDir.PREDICTIONS}; the task must write it"
        try:
            metric_value(parse_metric(self.spec.campaign.metric), read_predictions(path),
                         source=RunDir.PREDICTIONS)
        except CheckFailed as exc:
            return str(exc)
        return None

    def decision(self, pilot: dict[str, Any]) -> dict[str, Any]:
        previous = self.ledger.decisions()
        if previous and self.decide is None:
            last = previous[-1]
            return {k: last[k] for k in ("decision", "computed", "overridden", "dropped")} | {
                "reason": last["figures"].get("reason", ""), "kept_from_earlier_run": True}
        durations, estimates = self._re_estimates(pilot)
        plan_result = plan_campaign(self.spec, catalog=self.catalog, durations=durations)
        plan = plan_result.to_json()
        version = self.ledger.add_plan_version(plan, reason="re-estimated from the pilot")
        done = {r["name"] for r in self.ledger.runs() if r["status"] in ("finished", "stopped")}
        steps = cut_steps([(r.name, r.tier) for r in self.spec.runs], done=done)
        computed = choose(steps, replan_from_options(plan, {r.name for r in self.spec.runs}))
        chosen, dropped = computed.decision, computed.dropped
        if self.decide is not None and self.decide != computed.decision:
            chosen = self.decide
            dropped = (computed.dropped or next((s for s in steps[1:]), [])) \
                if chosen == "cut" else []
        figures = {"pilot": pilot.get("figures"), "estimates": estimates,
                   "plan_version": version, "reserved_hours": plan["reserved_hours"],
                   "window_hours": plan["window_hours"], "fits": plan["fits"],
                   "reason": computed.reason, "fitting_option": computed.fitting_option}
        self.ledger.add_decision(decision=chosen, computed=computed.decision, figures=figures,
                                 dropped=dropped)
        verb = chosen + (f" (computed: {computed.decision})" if chosen != computed.decision else "")
        left = plan_result.time_left()
        package = "" if not left else (
            f"; the package started {self.spec.rental.started:%Y-%m-%d %H:%M %Z} has "
            f"{left['hours_left']:.2f} h left"
            + ("" if left["fits_time_left"] else
               ": runs that cannot finish in them are not started"))
        self.say(f"decision: {verb}: {computed.reason}"
                 + (f"; dropping {', '.join(dropped)}" if dropped else "") + package)
        return {"decision": chosen, "computed": computed.decision,
                "overridden": chosen != computed.decision, "dropped": dropped,
                "reason": computed.reason, "plan_version": version,
                "fitting_option": computed.fitting_option}

    def _re_estimates(self, pilot: dict[str, Any]) -> tuple[dict[str, Duration], dict[str, Any]]:
        durations: dict[str, Duration] = {}
        estimates: dict[str, Any] = {}
        names = {s.name for s in self.spec.stages}
        for stage in self.ledger.stage_times():
            if stage["kind"] == "stage" and stage["name"] in names:
                seconds = round(stage["ended_at"] - stage["started_at"])
                durations[stage["name"]] = Duration(max(1, seconds))
        if not pilot.get("figures"):
            return durations, estimates
        figures = PilotFigures(**pilot["figures"])
        control = next(p for p in self.planned if p.run.name == self.spec.control.name)
        pilot_dir = self.dir / "runs" / pilot_id(control.run_id)
        record = PilotRecord(figures, RunDir(pilot_dir).rows(), RunDir(pilot_dir / "resume").rows())
        report = self._data_check_report()
        policy = self.spec.checkpoint
        mtbi = policy.mean_time_between_interruptions
        timing = {"tolerated_loss_s": policy.tolerated_loss.seconds,
                  "mtbi_s": mtbi.seconds if mtbi else None}
        default_steps = control_steps(figures)
        for run in self.spec.runs:
            estimate = self.tasks[run.name].estimate_run(record, report, run.params, **timing)
            if estimate is not None:
                estimate = dict(estimate, model="task")
            elif (run.steps or default_steps) is not None:
                estimate = dict(estimate_run_seconds(figures, steps=run.steps or default_steps,
                                                     **timing), model="generic")
            else:
                estimates[run.name] = {"model": "none", "total_s": run.duration.seconds,
                                       "reason": "no planned steps: give the run steps or "
                                                 "set trial.planned_steps in the task"}
                continue
            estimates[run.name] = estimate
            durations[run.name] = Duration(max(1, round(estimate["total_s"])))
        return durations, estimates

    def _data_check_report(self) -> dict[str, Any]:
        path = self.dir / ".flightplan" / "data_check.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def runs(self, dropped: list[str]) -> None:
        jobs: list[Job] = []
        for planned in self.planned:
            status = self.recorder.settle(planned)
            if status in ("finished", "stopped"):
                continue
            if planned.run.name in dropped:
                self.recorder.cut(planned)
                continue
            resume = RunDir(planned.run_dir).has_checkpoint() or self._saved_before(planned)
            planned.run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(RunDir(planned.run_dir).trial_json,
                              trial_document(self.spec, planned, resume=resume))
            jobs.append(Job(planned.run_id, planned.run_dir, gpus=planned.run.gpus))
        by_id = {p.run_id: p for p in self.planned}
        decisions = self.ledger.decisions()

        def admit(job: Job, flight: str) -> bool:
            planned = by_id[job.run_id]
            if not self.rental.admit(job.run_id, needs_s=run_needs_s(planned.run, decisions),
                                     flight=flight):
                self.say(f"{planned.run.name} ({job.run_id}): "
                         f"{waiting_reasons(self.ledger.events(job.run_id))[job.run_id]}")
                return False
            left = self.rental.window(flight).hours_left(time.time())
            self._flight_of[job.run_id] = f"{flight}, {left:.2f} h left"
            last = self.ledger.events(job.run_id)[-1:]
            if last and last[0]["kind"] == "past_end":
                self.say(f"{planned.run.name} ({job.run_id}): {last[0]['data']['message']}")
            return True

        def start(job: Job) -> None:
            self._bar(job)
            self.recorder.start(by_id[job.run_id])

        def done(result: JobResult) -> None:
            row = self.recorder.end(by_id[result.run_id], result)
            self.say(f"{row['name']} ({result.run_id}): {row['status']}"
                     + (f", {self.spec.campaign.metric} {row['metric']:.4f}"
                        if row.get("metric") is not None else "")
                     + (f"; resumed from {row['resumed_from']}" if row["resumed_from"] else "")
                     + (f"; {format_stop(row['stop'])}" if row.get("stop") else "")
                     + (f"; {row['reason']}" if row.get("reason") else ""))

        def interrupted(job: Job, info: Interruption) -> None:
            self.recorder.interrupted(by_id[job.run_id], info)
            if info.cause != "flight_lost":
                self.say(f"{by_id[job.run_id].run.name} ({job.run_id}): left flight "
                         f"{info.node} after {info.steps_done} steps with {info.checkpoint} "
                         f"home ({info.reason}); it resumes from there on a flight with "
                         f"time left")
                return
            self.say(f"{by_id[job.run_id].run.name} ({job.run_id}): flight {info.node} lost "
                     f"after {info.steps_done} steps; {info.steps_lost} steps "
                     f"({info.lost_s:.0f} s) lost; "
                     + (f"resumes from {info.checkpoint}" if info.checkpoint else
                        "restarts from step 0" if info.resumes else
                        "no checkpoint came home: stops with no_usable_resume"))

        self.executor.run(jobs, on_start=start, on_done=done, on_progress=self._progress,
                          on_interrupted=interrupted, admit=admit,
                          leave_by=lambda job, flight: self.rental.leave_by(flight))

    def _saved_before(self, planned: PlannedRun) -> bool:
        """Whether this run id saved a checkpoint since it was last (re)started: a
        ``checkpoint_saved`` event in the ledger, or a row of its measurements that records a
        save (:meth:`RunDir.saved_checkpoint`: ``checkpoint_saving``, durable before the
        checkpoint is in place, or ``checkpoint``). Such a run is started with ``resume =
        true``, so that, if every checkpoint has gone, the trial stops with
        ``no_usable_resume`` instead of training from scratch (``--restart NAME`` starts it
        over on purpose)."""
        events = self.ledger.events(planned.run_id)
        restarts = [i for i, e in enumerate(events) if e["kind"] == "restarted"]
        since = events[restarts[-1] + 1:] if restarts else events
        if any(e["kind"] == "checkpoint_saved" for e in since):
            return True
        return RunDir(planned.run_dir).saved_checkpoint()

    def restart(self, names: list[str]) -> None:
        """Start the runs called ``names`` over on purpose: each run directory is moved
        aside to ``runs/<id>.restarted-<n>`` (nothing is deleted) and a ``restarted``
        event is recorded, so earlier checkpoints no longer demand a resume.

        Raises:
            ArgumentError: a name is not a run of the campaign.
        """
        by_name = {p.run.name: p for p in self.planned}
        for name in names:
            planned = by_name.get(name)
            if planned is None:
                raise ArgumentError(f"--restart {name}: not a run of the campaign; give one of "
                                    f"{', '.join(sorted(by_name))}")
            if planned.run_dir.exists():
                n = 1
                while planned.run_dir.with_name(f"{planned.run_id}.restarted-{n}").exists():
                    n += 1
                planned.run_dir.rename(planned.run_dir.with_name(
                    f"{planned.run_id}.restarted-{n}"))
            self.ledger.set_run_status(planned.run_id, "pending", event="restarted",
                                       data={"name": name})
            self.say(f"{name} ({planned.run_id}) restarts from step 0 on purpose")

    def _bar(self, job: Job) -> None:
        flight = self._flight_of.get(job.run_id)
        self.board.add(str(job.run_dir), (job.run_id if job.run_dir.name != "resume"
                                          else f"{job.run_id} (resumed)")
                       + (f" on {flight}" if flight else ""))

    def _progress(self, job: Job, progress: Any) -> None:
        self.board.update(str(job.run_dir), progress)
        what = f"run {job.run_id}" + (" (resumed)" if job.run_dir.name == "resume" else "")
        activity.doing(what, done=progress.completed, total=progress.total, unit="steps")


def run_campaign(spec: CampaignSpec, *, decide: str | None = None,
                 executor: Executor | None = None, console: Console | None = None,
                 quiet: bool = False, restart: list[str] = (),
                 observer: Observer | None = None, past_end: bool = False) -> CampaignOutcome:
    """Carry out the campaign (see the module docstring) under its lock.

    Args:
        spec: the loaded campaign.
        decide: ``continue``, ``cut`` or ``stop`` to override the computed decision.
        executor: where runs execute (default :class:`LocalExecutor`).
        console: where messages, bars and tables go (default stdout).
        quiet: print nothing (``--json``).
        restart: run names to start over on purpose (:meth:`_Campaign.restart`).
        observer: watches the runs while the campaign holds its lock (:data:`Observer`;
            the CLI attaches the live MLflow mirror, :mod:`flightplan.tracking.live`).
        past_end: start runs that cannot finish before their flight's package ends
            (``--past-end``); without it they stay pending (:mod:`flightplan.run.rental`).

    Raises:
        ArgumentError: ``decide`` is not one of continue, cut, stop; a ``restart`` name is
            not a run.
        SpecError: the campaign has no ``[corpus]``.
        LockHeld: another ``flightplan run`` holds the campaign.
        SpecError, CatalogError: the campaign does not plan.
    """
    if decide is not None and decide not in DECISIONS:
        raise ArgumentError(f"--decide {decide}: not a decision; give continue, cut or stop")
    if spec.corpus is None:
        raise SpecError("the campaign has no [corpus], so it has nothing to train on; add "
                        "[corpus] with package or path and sha256 (plan works without it)",
                        file=spec.source, field="corpus")
    # a campaign that does not plan, or whose tasks cannot be loaded, is refused before
    # anything is written
    catalog = catalog_for_spec(spec)           # read once for the whole command
    check_spec_against_catalog(spec, catalog)
    tasks = {run.name: load_run_task(run, spec) for run in spec.runs}
    console = console or Console()
    with CampaignLock(spec.campaign_dir), Ledger.open(spec.campaign_dir) as ledger, \
            (observer(spec) if observer else contextlib.nullcontext()), \
            ProgressBoard(console, enabled=console.is_terminal and not quiet) as board:
        campaign = _Campaign(spec, ledger, catalog=catalog, tasks=tasks, decide=decide,
                             executor=executor or LocalExecutor(),
                             console=console, board=board, quiet=quiet, past_end=past_end)
        campaign.prepare()
        campaign.restart(list(restart))
        report = campaign.data_check()
        if isinstance(report, CampaignOutcome):
            return report
        pilot = campaign.pilot(report)
        if isinstance(pilot, CampaignOutcome):
            return pilot
        decision = campaign.decision(pilot)
        check = check_summary(report)
        if decision["decision"] == "stop":
            return campaign._stopped("decision", f"campaign stopped at the decision point: "
                                                 f"{decision['reason']}",
                                     decision=decision, pilot=pilot, data_check=check)
        campaign.runs(decision["dropped"] if decision["decision"] == "cut" else [])
        outcome = campaign.outcome("", code=0, decision=decision, pilot=pilot, data_check=check)
        failed = [r for r in outcome.runs if r["status"] == "failed"]
        waiting = [r for r in outcome.runs if r["status"] == "pending" and r["reason"]]
        left_ids = left_flight(campaign.ledger.events())
        left = [r for r in waiting if r["run_id"] in left_ids]
        waiting = [r for r in waiting if r not in left]
        stopped = [r for r in outcome.runs if r["status"] == "stopped"]
        outcome.exit_code = 1 if failed else 0
        outcome.message = (f"{sum(r['status'] == 'finished' for r in outcome.runs)} finished, "
                           f"{len(stopped)} stopped by a rule, "
                           f"{sum(r['status'] == 'cut' for r in outcome.runs)} cut, "
                           f"{len(failed)} failed"
                           + (f", {len(waiting)} not started (the rental ends first; "
                              f"--past-end starts them)" if waiting else "")
                           + (f", {len(left)} left a flight whose package ends (each resumes "
                              f"from its checkpoint on a flight with time left)" if left else "")
                           + ("; run again to retry the failed runs" if failed else ""))
        return outcome
