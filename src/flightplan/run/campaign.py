"""Carry out a campaign: data check, kernel check (on GPUs), pilot, decision point, then the
runs.

The runs start longest first (by the decision point's re-estimates) when all of them fit,
one after another, in the time the rental has left; otherwise in tier order.

Running it again continues where it stopped: finished and stopped runs are skipped, an
interrupted run resumes from its checkpoints, a run whose configuration changed gets a
new id (the old id stays in the ledger as ``superseded``). The pilot that passed for the
control's id is kept (also after the control changed and was changed back), and the
decision is kept while it was made for this control and this decision rule and no
``--decide`` is given (:class:`~flightplan.run.decision.Decision`). Until a run beyond the
pilot has started, a corrected decision rule is accepted and recorded
(:mod:`flightplan.plan.decision_rule`). Everything is written under the campaign
directory.

Exit code of :func:`run_campaign` (in :class:`CampaignOutcome`): 0 when every run that
was not cut ended, finished or stopped by its own rule; 1 when the campaign was stopped
(corpus mismatch, an op without a deterministic kernel in the kernel check,
``no_usable_resume`` in the pilot, the decision ``stop``) or a run's
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

from rich.console import Console

from flightplan import activity
from flightplan.corpus import check_corpus_source
from flightplan.durable import write_atomic, write_json_atomic
from flightplan.ids import pilot_id
from flightplan.publish.results import publish_data_check, publish_pilot, publish_plan
from flightplan.errors import (ArgumentError, CheckFailed, CorpusMismatch, SpecError,
                               TaskHookFailed)
from flightplan.plan.campaign_plan import plan_campaign
from flightplan.plan.decision_rule import (RULE_CHANGED, check_rule_unchanged, decision_rule,
                                           rule_in_force)
from flightplan.plan.frozen_rental import check_rental_unchanged
from flightplan.plan.catalog import (Catalog, catalog_for_spec, check_spec_against_catalog,
                                     expense_rows)
from flightplan.run.data_check import (DataCheckReport, DataCheckSummary, prepare_data,
                                       run_data_check)
from flightplan.plan.calibration import Calibrated
from flightplan.plan.power import TestSplit
from flightplan.run.decision import (DECISIONS, Decision, ValueRanking, choose, cut_steps,
                                     rank_variants, replan_from_options, runs_done,
                                     with_value_cuts)
from flightplan.run.executors.contract import (Executor, Interruption, Job, JobResult,
                                               ClusterJoined, check_gpus,
                                               check_processes)
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.ledger import Ledger
from flightplan.campaign_lock import CampaignLock
from flightplan.run.kernel_check import (KernelCheck, KernelCheckResult, kernel_check_due,
                                         run_kernel_check)
from flightplan.run.planned import PlannedRun, load_run_task, plan_runs, trial_document
from flightplan.run.pilot import METRIC_UNAVAILABLE, RESUME_CAUSES, PilotResult, run_pilot
from flightplan.run.progress import ProgressBoard, RunActivity, format_stop
from flightplan.run.records import RunRecorder
from flightplan.run.rental import RentalClock, left_flight, run_needs_s, waiting_reasons
from flightplan.ledger_rows import DecisionRow
from flightplan.metrics import metric_value, parse_metric, read_predictions
from flightplan.rundir import RunDir
from flightplan.spec import CampaignSpec
from flightplan.tasks.estimate import PilotRecord, control_steps, estimate_run_seconds
from flightplan.tasks.loader import LoadedTask, check_metric_columns
from flightplan.units import Duration, time_unit

__all__ = ["CampaignOutcome", "Observer", "run_campaign", "DATA_CHECK_STAGE", "PILOT_STAGE",
           "RUNNER_LOG"]

Observer = Callable[[CampaignSpec], ContextManager[object]]
"""Watches a campaign while it runs: called with the spec once ``run`` holds the campaign's
lock, entered for the rest of the command and left before the lock is released. It reads
only what the runs write (measurement rows, ``stop.json``, ``done.json``) and never stops a
run; the CLI attaches the live MLflow mirror (:func:`flightplan.tracking.live.observer`)."""

DATA_CHECK_STAGE = "data-check"
PILOT_STAGE = "pilot"
KERNEL_CHECK_EVENT = "kernel_check"
RUNNER_LOG = Path(".flightplan") / "runner.log"
"""Where the runner appends the traceback of a task hook that raised (relative to the
campaign folder); the error itself is one line."""


@dataclass
class CampaignOutcome:
    """How ``flightplan run`` ended. ``stopped_by``: None, ``"data_check"``,
    ``"kernel_check"``, ``"pilot"`` or ``"decision"``; ``runs``: summary rows ``{run_id, name, tier, status, metric,
    wall_s, stop, reason, resumed_from, goodput}`` (:meth:`RunRecorder.row`);
    ``data_check``, ``pilot`` and ``decision`` as far as the campaign got."""

    campaign: str
    exit_code: int
    message: str
    stopped_by: str | None = None
    decision: Decision | None = None
    pilot: PilotResult | None = None
    data_check: DataCheckSummary | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``flightplan run --json`` object."""
        return {"campaign": self.campaign, "exit_code": self.exit_code,
                "status": "stopped" if self.stopped_by else "completed",
                "stopped_by": self.stopped_by, "message": self.message,
                "data_check": None if self.data_check is None else self.data_check.to_json(),
                "pilot": None if self.pilot is None else self.pilot.to_json(),
                "decision": None if self.decision is None else self.decision.to_json(),
                "runs": self.runs, "statuses": {r["name"]: r["status"] for r in self.runs},
                "wall_s": self.wall_s}


class _Campaign:
    """One invocation of ``flightplan run`` under the lock (see :func:`run_campaign`)."""

    def __init__(self, spec: CampaignSpec, ledger: Ledger, *, catalog: Catalog,
                 tasks: dict[str, LoadedTask], decide: str | None, executor: Executor,
                 console: Console, board: ProgressBoard, quiet: bool,
                 past_end: bool = False,
                 calibrated: Calibrated | None = None) -> None:
        self.spec, self.ledger, self.decide, self.catalog = spec, ledger, decide, catalog
        # stage/run name → duration an earlier campaign measured ([calibrate] from), and
        # variant name → the model of paired outcomes it measured for that comparison
        self.calibrated = dict(calibrated.durations) if calibrated else {}
        self.measured_models = dict(calibrated.models) if calibrated else {}
        self.seed_spread = dict(calibrated.seed_spread) if calibrated else {}
        self.tasks = tasks                      # run name → its task, loaded once
        self.executor, self.console, self.board, self.quiet = executor, console, board, quiet
        self.dir = spec.campaign_dir
        self.recorder = RunRecorder(ledger, self.dir, metric=spec.campaign.metric)
        self.started = time.time()
        self.rental = RentalClock(
            ledger, package_days=spec.rental.package_days, started=spec.rental.started,
            past_end=past_end, leave_before_s=float(spec.rental.checkpoint_before_end.seconds))
        self._flight_of: dict[str, str] = {}    # run id → "flight (h left)" it started on
        self._by_id: dict[str, PlannedRun] = {}
        self._decisions: list[DecisionRow] = []
        self._running = RunActivity()           # what the interruption line names

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
        offer = self.catalog.offers[spec.rental.offer]
        frozen = ledger.original_plan()
        if frozen is not None:                       # before anything is written
            check_rental_unchanged(spec, offer, frozen.plan)
        corrected = self._rule_correction()
        self.planned = plan_runs(spec, tasks=self.tasks)    # calls base_revision hooks
        if corrected is not None:
            ledger.add_event(RULE_CHANGED, data={"from": dict(corrected),
                                                 "to": decision_rule(spec)})
            changed = ", ".join(f"campaign.{k} {corrected[k]!r} → {v!r}"
                                for k, v in decision_rule(spec).items()
                                if corrected.get(k) != v)
            self.say(f"decision rule corrected before any run: {changed} (recorded in the "
                     f"ledger)")
        source = Path(spec.source).resolve()
        ledger.ensure_campaign(name=spec.campaign.name, spec_path=source.name,
                               spec_sha256=hashlib.sha256(source.read_bytes()).hexdigest())
        plan = plan_campaign(spec, catalog=self.catalog,
                             durations=self.calibrated or None).to_json()
        original, written = ledger.freeze_original(plan)
        publish_plan(self.dir, original.plan)
        if written:
            self.say(f"plan frozen: {plan['reserved_hours']:.2f} h of {plan['window_hours']:.0f} h "
                     f"(sha256 {original.plan_sha256[:12]})")
        ledger.sync_expenses(expense_rows(spec, offer))
        for interrupted in self.recorder.reset_interrupted():
            self.say(f"{interrupted} was interrupted; it resumes from its last checkpoint")
        for planned in self.planned:
            ledger.ensure_run(run_id=planned.run_id, name=planned.name,
                              tier=planned.run.tier, config_hash=planned.config_hash)

    def _rule_correction(self) -> Mapping[str, Any] | None:
        """The rule in force when the campaign file corrects it while no run beyond the
        pilot has started (a pilot that could not compute a misspelt metric); None when
        the rule is unchanged.

        Raises:
            SpecError: the rule differs after a run started (:func:`check_rule_unchanged`).
        """
        frozen = self.ledger.original_plan()
        if frozen is None:
            return None
        changes = self.ledger.events(kind=RULE_CHANGED)
        try:
            check_rule_unchanged(self.spec, frozen.plan, changes)
        except SpecError:
            if self.ledger.events(kind="started"):
                raise
            return rule_in_force(frozen.plan, changes)
        return None

    def data_check(self) -> DataCheckReport | CampaignOutcome:
        started = time.time()
        activity.doing("the data check")
        out = self.dir / ".flightplan" / "data_check.json"
        previous = out.read_bytes() if out.is_file() else None
        try:
            report = run_data_check(self.spec, out=out, tasks=self.tasks)
            if previous is not None and self._as_recorded(previous, report):
                write_atomic(out, previous)      # the recorded check stands: nothing changed
                self.say("data check ok: the corpus is as the recorded check found it, and "
                         "every run has ended")
                return report
            prepare_data(self.spec, self.tasks)      # the runs' data, once, into the cache
        except CorpusMismatch as exc:
            written = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
            mismatch = DataCheckReport("corpus_mismatch", float(written.get("wall_s", 0.0)),
                                       message=str(exc), source=written.get("source"),
                                       files=written.get("files"))
            self._record_data_check(mismatch, started)
            return self._stopped("data_check", f"data check: {exc}",
                                 data_check=mismatch.summary())
        self._record_data_check(report, started)
        dups = len(report.cross_split_duplicates or [])
        summary = report.summary().summary
        self.say(f"data check ok: corpus hashes match; {f'{summary}; ' if summary else ''}"
                 f"{dups} input(s) in both train and test")
        unseen = report.test_labels_not_in_train or []
        if unseen and report.splits:
            counts = report.splits["test"].labels or {}
            listed = ", ".join(f"{label!r} ({counts.get(label, 0)} test examples)"
                               for label in unseen)
            self.say(f"data check: label(s) of the test split that no training example has: "
                     f"{listed}; no run learns them from the training split, and the "
                     f"classification metrics count them as classes (with recall 0 unless "
                     f"predicted)")
        return report

    def _as_recorded(self, previous: bytes, report: DataCheckReport) -> bool:
        """Whether this data check changes nothing: every planned run has ended (finished,
        stopped or cut: nothing is left to run) and ``report`` says what the recorded one
        (``previous``, its JSON) said, its wall time aside. Then it is neither recorded nor
        published again, so a closed campaign stays closed (its close record's
        fingerprint covers the ledger and ``results/``)."""
        ended = {r.run_id for r in self.ledger.runs()
                 if r.status in ("finished", "stopped", "cut")}
        if not all(p.run_id in ended for p in self.planned):
            return False
        try:
            recorded = json.loads(previous)
        except ValueError:
            return False
        fresh = json.loads(json.dumps(report.to_json()))
        return isinstance(recorded, dict) and \
            {k: v for k, v in recorded.items() if k != "wall_s"} == \
            {k: v for k, v in fresh.items() if k != "wall_s"}

    def _record_data_check(self, report: DataCheckReport, started: float) -> None:
        self.ledger.record_stage(DATA_CHECK_STAGE, started_at=started, ended_at=time.time(),
                                 event="data_check", data=report.summary().to_json())
        publish_data_check(self.dir, report.to_json())

    def _control(self) -> PlannedRun:
        """The control's first replicate: the one the pilot runs (its only one with one seed)."""
        return next(p for p in self.planned if p.run.name == self.spec.control.name)

    def kernel_check(self, report: DataCheckReport) -> KernelCheckResult | CampaignOutcome | None:
        """One step of every run on the flight's GPUs (:mod:`.kernel_check`), once per set
        of run ids (a passed check in the ledger for the same ids is kept); None where the
        runs compute on CPUs. An op without a deterministic kernel stops the campaign."""
        if not kernel_check_due(self.executor):
            return None
        first: dict[str, PlannedRun] = {}
        for planned in self.planned:          # one replicate of each run: the same ops
            first.setdefault(planned.run.name, planned)
        ids = sorted(p.run_id for p in first.values())
        for event in reversed(self.ledger.events(kind=KERNEL_CHECK_EVENT)):
            data = event.data or {}
            if data.get("ok") and data.get("run_ids") == ids:
                return None
        activity.doing("the kernel check")
        self.say(f"kernel check: one step of {len(first)} run(s) on the runs' device")
        result = run_kernel_check(
            [KernelCheck(p.run.name, trial_document(self.spec, p, resume=False),
                         self.tasks[p.run.name], gpus=p.run.gpus, processes=p.run.processes)
             for p in first.values()], self.dir, report, executor=self.executor)
        self.ledger.add_event(KERNEL_CHECK_EVENT, data={
            **result.to_json(), "run_ids": ids,
            "resume_check": {name: "not bitwise (deterministic = false)" if name in result.skipped
                             else "bitwise" for name in first}})
        if not result.ok:
            return self._stopped(KERNEL_CHECK_EVENT, f"campaign stopped by the kernel check: "
                                                     f"{result.message()}")
        self.say(result.message())
        return result

    def pilot(self, report: DataCheckReport) -> PilotResult | CampaignOutcome:
        control = self._control()
        result = self._kept_pilot(control)
        if result is None:
            self.say(f"pilot of {control.run.name}: short run, early checkpoint, resume in a "
                     f"new process")
            result = replace(run_pilot(
                trial_document(self.spec, control, resume=False), self.dir, report,
                task=self.tasks[control.run.name], executor=self.executor, on_start=self._bar,
                on_progress=self._progress, processes=control.run.processes),
                control_id=control.run_id)
            for key in (pilot_id(control.run_id), _resumed(pilot_id(control.run_id))):
                self._running.ended(key)         # both pilot processes
            publish_pilot(self.dir, pilot_id(control.run_id))   # its rows: the evidence
            self.ledger.record_stage(PILOT_STAGE, started_at=result.started_at,
                                     ended_at=result.ended_at, event="pilot",
                                     data=result.to_json())
            self.say(f"pilot ok: {result.message}" if result.ok else
                     f"pilot failed ({result.cause}): {result.message}")
        if not result.ok:
            if result.cause not in RESUME_CAUSES:
                return self._stopped("pilot", f"campaign stopped: the pilot failed "
                                              f"({result.cause}): {result.message}", pilot=result)
            if self.spec.stop.require_resume:
                return self._stopped("pilot", f"campaign stopped by rule no_usable_resume: "
                                              f"{result.message}", pilot=result)
            return result
        problem = self._metric_problem(control)
        if problem:
            result = replace(result, ok=False, cause=METRIC_UNAVAILABLE, message=problem)
            self.ledger.add_event("pilot", data=result.to_json())
            return self._stopped("pilot", f"campaign stopped: the pilot's predictions cannot "
                                          f"give the decision metric: {problem}; correct "
                                          f"campaign.metric in {self.spec.source} and run "
                                          f"flightplan run again (until a run beyond the "
                                          f"pilot starts, the decision rule may still change)",
                                 pilot=result)
        return result

    def _kept_pilot(self, control: PlannedRun) -> PilotResult | None:
        """The pilot of this control id recorded by an earlier ``flightplan run`` and still
        whole on disk, when its latest outcome passed (a ``metric_unavailable`` stop after
        it is the metric's fault, not the pilot's: that pilot is kept, and the metric is
        checked again); None when it must run."""
        if not RunDir(self.dir / "runs" / pilot_id(control.run_id)).measurements.is_file():
            return None
        for event in reversed(self.ledger.events(kind="pilot")):
            kept = PilotResult.from_json(event.data or {})
            if kept.control_id != control.run_id or kept.cause == METRIC_UNAVAILABLE:
                continue
            if not kept.ok:
                return None
            when = time.strftime("%H:%M:%S", time.localtime(event.at))
            self.say(f"pilot: kept from {when} ({kept.message})")
            return kept
        return None

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

    def decision(self, pilot: PilotResult, report: DataCheckReport) -> Decision:
        """The decision for this control and decision rule: the last one recorded when it
        was made for them (and no ``--decide`` is given), else a new one."""
        kept = self._kept_decision()
        if kept is not None:
            return kept
        durations, estimates = self._re_estimates(pilot, report)   # the hooks, before writes
        # what the pilot and the finished stages measured wins over the earlier campaign's
        plan_result = plan_campaign(self.spec, catalog=self.catalog,
                                    durations={**self.calibrated, **durations})
        plan = plan_result.to_json()
        done = self._done_runs()
        value = self._value_ranking(report, estimates, done)
        steps = cut_steps([(r.name, r.tier) for r in self.spec.runs], done=done)
        computed = with_value_cuts(
            choose(steps, replan_from_options(plan, {r.name for r in self.spec.runs},
                                              replicates={p.name: p.run.name
                                                          for p in self.planned})), value,
            [(r.name, r.tier, r.reference) for r in self.spec.runs])
        chosen, dropped = computed.decision, computed.dropped
        if self.decide is not None and self.decide != computed.decision:
            chosen = self.decide
            dropped = (computed.dropped or next((s for s in steps[1:]), [])) \
                if chosen == "cut" else []
        version = self.ledger.add_plan_version(plan, reason="re-estimated from the pilot")
        made = Decision(decision=chosen, computed=computed.decision, dropped=tuple(dropped),
                        reason=computed.reason, plan_version=version,
                        fitting_option=computed.fitting_option,
                        control_id=self._control().run_id, rule=decision_rule(self.spec),
                        at=time.time(), value=value)
        self.ledger.add_decision(decision=chosen, computed=computed.decision,
                                 figures=made.figures(pilot=None if pilot.figures is None
                                                      else pilot.figures.to_json(),
                                                      estimates=estimates, plan=plan),
                                 dropped=list(dropped))
        # as recorded (its time is the ledger's), so a kept one reads back the same
        made = replace(Decision.from_ledger(self.ledger.decisions()[-1]),
                       kept_from_earlier_run=False)
        self._say_decision(made, plan_result.time_left())
        return made

    def _done_runs(self) -> set[str]:
        """The spec's runs whose every execution (each replicate) ended, finished or
        stopped: their time is spent, so they are never dropped."""
        ended = {r.run_id for r in self.ledger.runs() if r.status in ("finished", "stopped")}
        return runs_done({run.name: [p.run_id for p in self.planned if p.run.name == run.name]
                          for run in self.spec.runs}, ended)

    def _value_ranking(self, report: DataCheckReport, estimates: Mapping[str, Any],
                       done: set[str]) -> ValueRanking:
        """The variants not run yet, ranked by decision value per GPU-hour of their
        re-estimate, on the test split the data check counted, with the pilot's predictions
        as evidence on the reference (:func:`flightplan.run.decision.rank_variants`); a
        run's GPU-hours count all its replicates."""
        split = report.splits.get("test") if report.splits else None
        test = TestSplit(split.rows, split.labels, "the data check") if split else None
        path = RunDir(self.dir / "runs" / pilot_id(self._control().run_id)).predictions
        try:
            reference = read_predictions(path) if path.is_file() else None
        except CheckFailed:
            reference = None
        gpu_hours = {run.name: float(estimates.get(run.name, {}).get(
            "total_s", run.duration.seconds)) / 3600.0 * run.gpus * self.spec.seeds_of(run)
            for run in self.spec.runs}          # every replicate of the run
        return rank_variants(
            self.spec, pending=[r.name for r in self.spec.runs
                                if r.reference is not None and r.name not in done],
            gpu_hours=gpu_hours, test=test, reference=reference,
            reference_source=f"pilot of {self.spec.control.name}",
            measured=self.measured_models, seed_spread=self.seed_spread,
            why_unknown="the data check counted no test examples (the task reads the "
                        "corpus itself)")

    def _kept_decision(self) -> Decision | None:
        """The last recorded decision when it serves this invocation: no ``--decide``, and
        made for this control and this decision rule; None otherwise (said why)."""
        previous = self.ledger.decisions()
        if not previous or self.decide is not None:
            return None
        last = Decision.from_ledger(previous[-1], control_id=self._pilot_before(previous[-1]))
        control = self._control()
        if last.control_id != control.run_id:
            self.say(f"decision: made for the control {last.control_id}, which is now "
                     f"{control.run_id}: decided again from its pilot")
            return None
        if last.rule is not None and last.rule != decision_rule(self.spec):
            self.say("decision: made under another decision rule: decided again")
            return None
        return last

    def _pilot_before(self, decision: DecisionRow) -> str | None:
        """The control id of the last passed pilot before ``decision`` (a ledger row that
        predates the decision's own ``control_id``)."""
        ids = [(e.data or {}).get("control_id") for e in self.ledger.events(kind="pilot")
               if e.at <= decision.at and (e.data or {}).get("ok")]
        return ids[-1] if ids else None

    def _say_decision(self, made: Decision, left: dict[str, Any]) -> None:
        verb = made.decision + (f" (computed: {made.computed})" if made.overridden else "")
        package = "" if not left else (
            f"; the package started {self.spec.rental.started:%Y-%m-%d %H:%M %Z} has "
            f"{left['hours_left']:.2f} h left"
            + ("" if left["fits_time_left"] else
               ": runs that cannot finish in them are not started"))
        self.say(f"decision: {verb}: {made.reason}"
                 + (f"; dropping {', '.join(made.dropped)}" if made.dropped else "") + package)
        self.say(f"decision value: {made.value.line()}")

    def _re_estimates(self, pilot: PilotResult, report: DataCheckReport
                      ) -> tuple[dict[str, Duration], dict[str, Any]]:
        """Each stage's measured duration and each run's re-estimate from the pilot.

        Raises:
            TaskHookFailed: a task's ``estimate_run`` hook raised.
        """
        durations: dict[str, Duration] = {}
        estimates: dict[str, Any] = {}
        names = {s.name for s in self.spec.stages}
        for stage in self.ledger.stage_times():
            if stage.kind == "stage" and stage.name in names:
                seconds = round(stage.ended_at - stage.started_at)
                durations[stage.name] = Duration(max(1, seconds))
        if pilot.figures is None:
            return durations, estimates
        figures = pilot.figures
        pilot_dir = self.dir / "runs" / pilot_id(self._control().run_id)
        record = PilotRecord(figures, RunDir(pilot_dir).rows(), RunDir(pilot_dir / "resume").rows())
        policy = self.spec.checkpoint
        mtbi = policy.mean_time_between_interruptions
        tolerated_s = float(policy.tolerated_loss.seconds)
        mtbi_s = float(mtbi.seconds) if mtbi else None
        default_steps = control_steps(figures)
        for run in self.spec.runs:
            estimate: dict[str, Any] | None = self.tasks[run.name].estimate_run(
                record, report.to_json(), run.params, tolerated_loss_s=tolerated_s,
                mtbi_s=mtbi_s)
            steps = run.steps or default_steps
            if estimate is not None:
                estimate = dict(estimate, model="task")
            elif steps is not None:
                estimate = dict(estimate_run_seconds(figures, steps=steps,
                                                     tolerated_loss_s=tolerated_s,
                                                     mtbi_s=mtbi_s), model="generic")
            else:
                estimates[run.name] = {"model": "none", "total_s": run.duration.seconds,
                                       "reason": "no planned steps: give the run steps or "
                                                 "set trial.planned_steps in the task"}
                continue
            estimates[run.name] = estimate
            durations[run.name] = Duration(max(1, round(estimate["total_s"])))
        return durations, estimates

    def runs(self, dropped: list[str]) -> None:
        """Execute every run not ended and not ``dropped`` (those are cut), through the
        executor, recording each start, end and interruption as it happens."""
        self._by_id = {p.run_id: p for p in self.planned}
        self._decisions = self.ledger.decisions()        # the estimates the clock reads
        jobs = self._longest_first(self._jobs(dropped))
        self.executor.run(jobs, on_start=self._started, on_done=self._ended,
                          on_progress=self._progress, on_interrupted=self._interrupted,
                          admit=self._admit,
                          leave_by=lambda job, flight: self.rental.leave_by(flight))

    def _jobs(self, dropped: list[str]) -> list[Job]:
        """A job, with its ``trial.json`` written, for every run to execute now; the runs
        in ``dropped`` are recorded as cut."""
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
            jobs.append(Job(planned.run_id, planned.run_dir, gpus=planned.run.gpus,
                            processes=planned.run.processes))
        return jobs

    def _longest_first(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` longest first by their re-estimate (:func:`run_needs_s`; equal ones in
        tier order) when all of them, one after another, fit in the time the rental has
        left on every flight (:meth:`RentalClock.least_left_s`): then no order leaves one
        unstarted for lack of time, and starting the longest first ends them together
        instead of leaving cores idle behind the last long run (longest processing time
        first, Graham 1969). Otherwise in tier order, essential runs first."""
        needs = {job.run_id: run_needs_s(self._by_id[job.run_id].run, self._decisions)
                 for job in jobs}
        if sum(needs.values()) > self.rental.least_left_s():
            return jobs
        return sorted(jobs, key=lambda job: -needs[job.run_id])

    def _admit(self, job: Job, flight: str) -> bool:
        """Whether ``job`` may start on ``flight`` now (:meth:`RentalClock.admit`)."""
        planned = self._by_id[job.run_id]
        if not self.rental.admit(job.run_id, needs_s=run_needs_s(planned.run, self._decisions),
                                 flight=flight):
            self.say(f"{planned.name} ({job.run_id}): "
                     f"{waiting_reasons(self.ledger.events(job.run_id))[job.run_id]}")
            return False
        left = self.rental.window(flight).hours_left(time.time())
        self._flight_of[job.run_id] = f"{flight}, {left:.2f} h left"
        last = self.ledger.events(job.run_id)[-1:]
        if last and last[0].kind == "past_end":
            self.say(f"{planned.name} ({job.run_id}): {(last[0].data or {})['message']}")
        return True

    def _started(self, job: Job) -> None:
        self._bar(job)
        self.recorder.start(self._by_id[job.run_id])

    def _ended(self, result: JobResult) -> None:
        self._running.ended(result.run_id)
        row = self.recorder.end(self._by_id[result.run_id], result)
        goodput = row.get("goodput") or {}
        self.say(f"{row['name']} ({result.run_id}): {row['status']}"
                 + (f", {self.spec.campaign.metric} {row['metric']:.4f}"
                    if row.get("metric") is not None else "")
                 + (f"; goodput {goodput['goodput']:.1%} of {_duration(goodput['wall_hours'])}"
                    if goodput.get("goodput") is not None else "")
                 + (f"; resumed from {row['resumed_from']}" if row["resumed_from"] else "")
                 + (f"; {format_stop(row['stop'])}" if row.get("stop") else "")
                 + (f"; {row['reason']}" if row.get("reason") else ""))

    def _interrupted(self, job: Job, info: Interruption) -> None:
        name = self._by_id[job.run_id].name
        self._running.ended(job.run_id)
        self.recorder.interrupted(self._by_id[job.run_id], info)
        if info.cause == "flight_lost":
            self.rental.lost(info.node, at=info.at, reason=info.reason)
        else:
            self.say(f"{name} ({job.run_id}): left flight {info.node} after {info.steps_done} "
                     f"steps with {info.checkpoint} home ({info.reason}); it resumes from "
                     f"there on a flight with time left")
            return
        self.say(f"{name} ({job.run_id}): flight {info.node} lost after {info.steps_done} "
                 f"steps; {info.steps_lost} steps ({info.lost_s:.0f} s) lost; "
                 + (f"resumes from {info.checkpoint}" if info.checkpoint else
                    "restarts from step 0" if info.resumes else
                    "a checkpoint came home and has gone since: stops with "
                    "no_usable_resume"))

    def _saved_before(self, planned: PlannedRun) -> bool:
        """Whether this run id has had a checkpoint at home since it was last (re)started:
        a ``checkpoint_saved`` event in the ledger, or a row of its measurements that
        records a save (:meth:`RunDir.saved_checkpoint`: ``checkpoint_saving``, durable
        before the checkpoint is in place, or ``checkpoint``); on an executor whose runs
        save on a flight (``saves_on_flight``), a ``checkpoint_transferred`` event or a
        ``checkpoint_transfer`` row: a checkpoint that never came home went with its
        flight. Such a run is started with ``resume = true``, so that, if every checkpoint
        has gone, the trial stops with ``no_usable_resume`` instead of training from
        scratch (``--restart NAME`` starts it over on purpose)."""
        on_flight = self.executor.saves_on_flight
        events = self.ledger.events(planned.run_id)
        restarts = [i for i, e in enumerate(events) if e.kind == "restarted"]
        since = events[restarts[-1] + 1:] if restarts else events
        kind = "checkpoint_transferred" if on_flight else "checkpoint_saved"
        if any(e.kind == kind for e in since):
            return True
        return RunDir(planned.run_dir).saved_checkpoint(on_flight=on_flight)

    def restart(self, names: list[str]) -> None:
        """Start the runs called ``names`` (runs of the campaign: :func:`run_campaign`
        checked them before anything was written) over on purpose: each run directory is
        moved aside to ``runs/<id>.restarted-<n>`` (nothing is deleted) and a
        ``restarted`` event is recorded, so earlier checkpoints no longer demand a resume.
        A run's name restarts all its replicates; a replicate's name, that one alone.
        """
        for name in names:
            for planned in [p for p in self.planned if name in (p.name, p.run.name)]:
                RunDir(planned.run_dir).set_aside()
                self.ledger.set_run_status(planned.run_id, "pending", event="restarted",
                                           data={"name": planned.name})
                self.say(f"{planned.name} ({planned.run_id}) restarts from step 0 on purpose")

    def _bar(self, job: Job) -> None:
        flight = self._flight_of.get(job.run_id)
        self.board.add(str(job.run_dir), (job.run_id if job.run_dir.name != "resume"
                                          else _resumed(job.run_id))
                       + (f" on {flight}" if flight else ""))

    def _progress(self, job: Job, progress: Any) -> None:
        self.board.update(str(job.run_dir), progress)
        resumed = job.run_dir.name == "resume"      # the resumed pilot, beside the first
        self._running.update(_resumed(job.run_id) if resumed else job.run_id,
                             f"run {_resumed(job.run_id) if resumed else job.run_id}", progress)


def _resumed(run_id: str) -> str:
    """How the resumed pilot process of ``run_id`` is named while it runs."""
    return f"{run_id} (resumed)"


def _duration(hours: float) -> str:
    """``7.9 s``, ``12.5 min`` or ``3.2 h`` (:func:`flightplan.units.time_unit`)."""
    unit, scale = time_unit(hours)
    return f"{hours * scale:.1f} {unit}"


def run_campaign(spec: CampaignSpec, *, decide: str | None = None,
                 executor: Executor | None = None, console: Console | None = None,
                 quiet: bool = False, restart: Sequence[str] = (),
                 observer: Observer | None = None, past_end: bool = False,
                 calibrated: Calibrated | None = None) -> CampaignOutcome:
    """Carry out the campaign (see the module docstring) under its lock.

    Args:
        spec: the loaded campaign.
        decide: ``continue``, ``cut`` or ``stop`` to override the computed decision.
        executor: where runs execute (default :class:`LocalExecutor`).
        console: where messages, bars and tables go (default stdout).
        quiet: print nothing (``--json``).
        restart: run (or replicate) names to start over on purpose
            (:meth:`_Campaign.restart`).
        observer: watches the runs while the campaign holds its lock (:data:`Observer`;
            the CLI attaches the live MLflow mirror, :mod:`flightplan.tracking.live`).
        past_end: start runs that cannot finish before their flight's package ends
            (``--past-end``); without it they stay pending (:mod:`flightplan.run.rental`).
        calibrated: what an earlier campaign measured (``[calibrate] from``,
            :func:`flightplan.plan.commands.calibrated_estimates`): the frozen plan uses
            its durations, as ``flightplan plan`` did (the re-estimate after the pilot
            replaces them where the pilot measured), and the decision point's ranking its
            measured disagreement or difference spread per comparison
            (:func:`flightplan.run.decision.rank_variants`).

    Raises:
        ArgumentError: ``decide`` is not one of continue, cut, stop; a ``restart`` name is
            not a run (both before anything is written).
        SpecError: the campaign has no ``[corpus]``, or its folder or package is not there
            (:func:`flightplan.corpus.check_corpus_source`); a task's declared prediction columns
            cannot give the metric; the decision rule changed after a run started.
        LockHeld: another ``flightplan run`` (or a ``flightplan close``) holds the campaign.
        SpecError, CatalogError: the campaign does not plan, or a run asks for more GPUs
            than the executor's machine has (before anything is written).
        InputError: the executor cannot or must not reach where runs execute (a Ray head
            that does not answer, or without token authentication on a network not stated
            trusted), before anything is written.
        TaskError: a run's task cannot be loaded; TaskHookFailed: one of its hooks raised
            (its traceback appended to :data:`RUNNER_LOG`, nothing of that step recorded).
    """
    if decide is not None and decide not in DECISIONS:
        raise ArgumentError(f"--decide {decide}: not a decision; give continue, cut or stop")
    runs = sorted({run.name for run in spec.runs} | {rep.name for rep in spec.executions})
    for name in restart:
        if name not in runs:
            raise ArgumentError(f"--restart {name}: not a run of the campaign; give one of "
                                f"{', '.join(runs)}")
    if spec.corpus is None:
        raise SpecError("the campaign has no [corpus], so it has nothing to train on; add "
                        "[corpus] with package or path and sha256 (plan works without it)",
                        file=spec.source, field="corpus")
    check_corpus_source(spec.corpus, spec.campaign_dir, source=spec.source)
    # a campaign that does not plan, or whose tasks cannot be loaded, is refused before
    # anything is written
    catalog = catalog_for_spec(spec)           # read once for the whole command
    check_spec_against_catalog(spec, catalog)
    tasks = {run.name: load_run_task(run, spec) for run in spec.runs}
    for run in spec.runs:       # a metric the declared prediction columns cannot give
        check_metric_columns(spec.campaign.metric, tasks[run.name].prediction_columns,
                             run.task, source=spec.source)
    executor = executor or LocalExecutor()
    joined = executor.connect()
    limit = executor.gpu_limit()
    check_gpus(spec.runs, limit, source=spec.source)
    check_processes(spec.runs, limit, launches_ranks=executor.launches_ranks,
                    source=spec.source)
    console = console or Console()
    with CampaignLock(spec.campaign_dir), Ledger.open(spec.campaign_dir) as ledger, \
            (observer(spec) if observer else contextlib.nullcontext()), \
            ProgressBoard(console, enabled=console.is_terminal and not quiet) as board:
        campaign = _Campaign(spec, ledger, catalog=catalog, tasks=tasks, decide=decide,
                             executor=executor,
                             console=console, board=board, quiet=quiet, past_end=past_end,
                             calibrated=calibrated)
        try:
            return _carry_out(campaign, restart, joined)
        except TaskHookFailed as exc:
            raise exc.logged(str(_log_traceback(spec.campaign_dir, exc))) from exc.exception


def _log_traceback(campaign_dir: Path, failed: TaskHookFailed) -> Path:
    """Append a failed hook's traceback to :data:`RUNNER_LOG`; its path."""
    log = campaign_dir / RUNNER_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S %z')} task {failed.task!r}, hook "
                  f"{failed.hook}: {failed.error}\n{failed.details.rstrip()}\n")
    return log


def _carry_out(campaign: _Campaign, restart: Sequence[str],
               joined: ClusterJoined | None) -> CampaignOutcome:
    """The steps of :func:`run_campaign` under the lock (``joined``: the cluster the
    executor connected to, recorded once the campaign is prepared)."""
    campaign.prepare()
    if joined is not None:
        campaign.ledger.add_event("cluster_joined", data=joined.to_json())
    campaign.restart(list(restart))
    report = campaign.data_check()
    if isinstance(report, CampaignOutcome):
        return report
    kernels = campaign.kernel_check(report)
    if isinstance(kernels, CampaignOutcome):
        return kernels
    pilot = campaign.pilot(report)
    if isinstance(pilot, CampaignOutcome):
        return pilot
    decision = campaign.decision(pilot, report)
    check = report.summary()
    if decision.decision == "stop":
        return campaign._stopped("decision", f"campaign stopped at the decision point: "
                                             f"{decision.reason}",
                                 decision=decision, pilot=pilot, data_check=check)
    campaign.runs(list(decision.dropped) if decision.decision == "cut" else [])
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
