"""Before the runs: the plan frozen and the runs registered, runs restarted on purpose,
the data check, the kernel check (on GPUs) and the pilot, each recorded in the ledger.

A step that stops the campaign returns its :class:`~flightplan.run.invocation.CampaignOutcome`
(exit 1): a corpus mismatch, an op without a deterministic kernel, a failed pilot (or one
that cannot resume, with ``require_resume``), pilot predictions that cannot give the metric.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from flightplan import activity
from flightplan.durable import write_atomic
from flightplan.errors import CheckFailed, CorpusMismatch, SpecError
from flightplan.ids import pilot_id
from flightplan.metrics import metric_value, parse_metric, read_predictions
from flightplan.plan.campaign_plan import plan_campaign
from flightplan.plan.catalog import expense_rows
from flightplan.plan.decision_rule import (RULE_CHANGED, check_rule_unchanged, decision_rule,
                                           rule_in_force)
from flightplan.plan.frozen_rental import check_rental_unchanged
from flightplan.publish.results import publish_data_check, publish_pilot, publish_plan
from flightplan.run.data_check import DataCheckReport, prepare_data, run_data_check
from flightplan.run.invocation import CampaignOutcome, Invocation, resumed_label
from flightplan.run.kernel_check import (KernelCheck, KernelCheckResult, kernel_check_due,
                                         run_kernel_check)
from flightplan.run.pilot import METRIC_UNAVAILABLE, RESUME_CAUSES, PilotResult, run_pilot
from flightplan.run.progress import pilot_started
from flightplan.run.planned import PlannedRun, check_saved_world_sizes, plan_runs, trial_document
from flightplan.rundir import RunDir

__all__ = ["Preparation", "DATA_CHECK_STAGE", "PILOT_STAGE", "KERNEL_CHECK_EVENT"]

DATA_CHECK_STAGE = "data-check"
PILOT_STAGE = "pilot"
KERNEL_CHECK_EVENT = "kernel_check"


class Preparation:
    """The steps of one invocation before the decision point, in the order
    :func:`flightplan.run.campaign.run_campaign` takes them: :meth:`prepare`,
    :meth:`restart`, :meth:`data_check`, :meth:`kernel_check`, :meth:`pilot`."""

    def __init__(self, campaign: Invocation) -> None:
        self.campaign = campaign

    def prepare(self, restart: Sequence[str] = ()) -> None:
        """Plan the runs, refuse what cannot go on (a changed rental, a run that would resume
        at another world size: :func:`check_saved_world_sizes`, ``restart`` being the runs
        started over) before the ledger records anything, then freeze the plan and register
        the runs.

        Raises:
            SpecError: as above. TaskHookFailed: a task's ``base_revision`` hook raised.
        """
        spec, ledger = self.campaign.spec, self.campaign.ledger
        activity.doing("freezing the plan")
        offer = self.campaign.catalog.offers[spec.rental.offer]
        frozen = ledger.original_plan()
        if frozen is not None:                       # before anything is written
            check_rental_unchanged(spec, offer, frozen.plan)
        corrected = self._rule_correction()
        # calls base_revision hooks
        self.campaign.planned = plan_runs(spec, tasks=self.campaign.tasks)
        check_saved_world_sizes(spec, self.campaign.planned, restart)
        if corrected is not None:
            ledger.add_event(RULE_CHANGED, data={"from": dict(corrected),
                                                 "to": decision_rule(spec)})
            changed = ", ".join(f"campaign.{k} {corrected[k]!r} → {v!r}"
                                for k, v in decision_rule(spec).items()
                                if corrected.get(k) != v)
            self.campaign.say(f"decision rule corrected before any run: {changed} (recorded in the "
                              f"ledger)")
        source = Path(spec.source).resolve()
        ledger.ensure_campaign(name=spec.campaign.name, spec_path=source.name,
                               spec_sha256=hashlib.sha256(source.read_bytes()).hexdigest())
        plan = plan_campaign(spec, catalog=self.campaign.catalog,
                             durations=self.campaign.calibrated or None).to_json()
        original, written = ledger.freeze_original(plan)
        publish_plan(self.campaign.dir, original.plan)
        if written:
            self.campaign.say(f"plan frozen: {plan['reserved_hours']:.2f} h of "
                              f"{plan['window_hours']:.0f} h (sha256 {original.plan_sha256[:12]})")
        ledger.sync_expenses(expense_rows(spec, offer))
        for interrupted in self.campaign.recorder.reset_interrupted():
            how = self.campaign.recorder.resumes_how(
                interrupted, on_flight=self.campaign.executor.saves_on_flight)
            self.campaign.say(f"{interrupted} was interrupted; {how}")
        for planned in self.campaign.planned:
            ledger.ensure_run(run_id=planned.run_id, name=planned.name,
                              tier=planned.run.tier, config_hash=planned.config_hash)

    def _rule_correction(self) -> Mapping[str, Any] | None:
        """The rule in force when the campaign file corrects it while no run beyond the
        pilot has started (a pilot that could not compute a misspelt metric); None when
        the rule is unchanged.

        Raises:
            SpecError: the rule differs after a run started (:func:`check_rule_unchanged`).
        """
        frozen = self.campaign.ledger.original_plan()
        if frozen is None:
            return None
        changes = self.campaign.ledger.events(kind=RULE_CHANGED)
        try:
            check_rule_unchanged(self.campaign.spec, frozen.plan, changes)
        except SpecError:
            if self.campaign.ledger.events(kind="started"):
                raise
            return rule_in_force(frozen.plan, changes)
        return None

    def restart(self, names: list[str]) -> None:
        """Start the runs called ``names`` (runs of the campaign: :func:`run_campaign`
        checked them before anything was written) over on purpose: each run directory is
        moved aside to ``runs/<id>.restarted-<n>`` (nothing is deleted) and a
        ``restarted`` event is recorded, so earlier checkpoints no longer demand a resume.
        A run's name restarts all its replicates; a replicate's name, that one alone.
        """
        for name in names:
            for planned in [p for p in self.campaign.planned if name in (p.name, p.run.name)]:
                RunDir(planned.run_dir).set_aside()
                self.campaign.ledger.record_restart(planned.run_id, data={"name": planned.name})
                self.campaign.say(f"{planned.name} ({planned.run_id}) restarts from step 0 on "
                                  f"purpose")

    def data_check(self) -> DataCheckReport | CampaignOutcome:
        started = time.time()
        activity.doing("the data check")
        out = self.campaign.dir / ".flightplan" / "data_check.json"
        previous = out.read_bytes() if out.is_file() else None
        try:
            report = run_data_check(self.campaign.spec, out=out, tasks=self.campaign.tasks)
            if previous is not None and self._as_recorded(previous, report):
                write_atomic(out, previous)      # the recorded check stands: nothing changed
                self.campaign.say("data check ok: the corpus is as the recorded check found "
                                  "it, and every run has ended")
                return report
            # the runs' data, once, into the cache
            prepare_data(self.campaign.spec, self.campaign.tasks)
        except CorpusMismatch as exc:
            written = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
            mismatch = DataCheckReport("corpus_mismatch", float(written.get("wall_s", 0.0)),
                                       message=str(exc), source=written.get("source"),
                                       files=written.get("files"))
            self._record_data_check(mismatch, started)
            return self.campaign.stopped("data_check", f"data check: {exc}",
                                         data_check=mismatch.summary())
        self._record_data_check(report, started)
        dups = len(report.cross_split_duplicates or [])
        summary = report.summary().summary
        self.campaign.say(f"data check ok: corpus hashes match; {f'{summary}; ' if summary else ''}"
                          f"{dups} input(s) in both train and test")
        unseen = report.test_labels_not_in_train or []
        if unseen and report.splits:
            counts = report.splits["test"].labels or {}
            listed = ", ".join(f"{label!r} ({counts.get(label, 0)} test examples)"
                               for label in unseen)
            self.campaign.say(f"data check: label(s) of the test split that no training example "
                              f"has: {listed}; no run learns them from the training split, and "
                              f"the classification metrics count them as classes (with recall 0 "
                              f"unless predicted)")
        return report

    def _as_recorded(self, previous: bytes, report: DataCheckReport) -> bool:
        """Whether this data check changes nothing: every planned run has ended (finished,
        stopped or cut: nothing is left to run) and ``report`` says what the recorded one
        (``previous``, its JSON) said, its wall time aside. Then it is neither recorded nor
        published again, so a closed campaign stays closed (its close record's
        fingerprint covers the ledger and ``results/``)."""
        ended = {r.run_id for r in self.campaign.ledger.runs()
                 if r.status in ("finished", "stopped", "cut")}
        if not all(p.run_id in ended for p in self.campaign.planned):
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
        self.campaign.ledger.record_stage(DATA_CHECK_STAGE, started_at=started,
                                          ended_at=time.time(), event="data_check",
                                          data=report.summary().to_json())
        publish_data_check(self.campaign.dir, report.to_json())

    def kernel_check(self, report: DataCheckReport) -> KernelCheckResult | CampaignOutcome | None:
        """One step of every run on the flight's GPUs (:mod:`.kernel_check`), once per set
        of run ids (a passed check in the ledger for the same ids is kept); None where the
        runs compute on CPUs. An op without a deterministic kernel stops the campaign."""
        if not kernel_check_due(self.campaign.executor):
            return None
        first: dict[str, PlannedRun] = {}
        for planned in self.campaign.planned:          # one replicate of each run: the same ops
            first.setdefault(planned.run.name, planned)
        ids = sorted(p.run_id for p in first.values())
        for event in reversed(self.campaign.ledger.events(kind=KERNEL_CHECK_EVENT)):
            data = event.data or {}
            if data.get("ok") and data.get("run_ids") == ids:
                return None
        activity.doing("the kernel check")
        self.campaign.say(f"kernel check: one step of {len(first)} run(s) on the runs' device")
        result = run_kernel_check(
            [KernelCheck(p.run.name, trial_document(self.campaign.spec, p, resume=False),
                         self.campaign.tasks[p.run.name], gpus=p.run.gpus,
                         processes=p.run.processes)
             for p in first.values()], self.campaign.dir, report, executor=self.campaign.executor)
        self.campaign.ledger.add_event(KERNEL_CHECK_EVENT, data={
            **result.to_json(), "run_ids": ids,
            "resume_check": {name: "not bitwise (deterministic = false)" if name in result.skipped
                             else "bitwise" for name in first}})
        if not result.ok:
            return self.campaign.stopped(KERNEL_CHECK_EVENT, f"campaign stopped by the kernel "
                                                             f"check: {result.message()}")
        self.campaign.say(result.message())
        return result

    def pilot(self, report: DataCheckReport) -> PilotResult | CampaignOutcome:
        control = self.campaign.control()
        result = self._kept_pilot(control)
        if result is None:
            pilot_started(control.run.name)
            self.campaign.say(f"pilot of {control.run.name}: short run, early checkpoint, resume "
                              f"in a new process")
            result = replace(run_pilot(
                trial_document(self.campaign.spec, control, resume=False), self.campaign.dir,
                report, task=self.campaign.tasks[control.run.name],
                executor=self.campaign.executor, on_start=self.campaign.add_bar,
                on_progress=self.campaign.show_progress, processes=control.run.processes),
                control_id=control.run_id)
            for key in (pilot_id(control.run_id), resumed_label(pilot_id(control.run_id))):
                self.campaign.running.ended(key)         # both pilot processes
            publish_pilot(self.campaign.dir, pilot_id(control.run_id))   # its rows: the evidence
            self.campaign.ledger.record_stage(PILOT_STAGE, started_at=result.started_at,
                                              ended_at=result.ended_at, event="pilot",
                                              data=result.to_json())
            self.campaign.say(f"pilot ok: {result.message}" if result.ok else
                              f"pilot failed ({result.cause}): {result.message}")
        if not result.ok:
            if result.cause not in RESUME_CAUSES:
                return self.campaign.stopped("pilot", f"campaign stopped: the pilot failed "
                                                      f"({result.cause}): {result.message}",
                                             pilot=result)
            if self.campaign.spec.stop.require_resume:
                return self.campaign.stopped("pilot", f"campaign stopped by rule no_usable_resume: "
                                                      f"{result.message}", pilot=result)
            return result
        problem = self._metric_problem(control)
        if problem:
            result = replace(result, ok=False, cause=METRIC_UNAVAILABLE, message=problem)
            self.campaign.ledger.add_event("pilot", data=result.to_json())
            return self.campaign.stopped("pilot", f"campaign stopped: the pilot's predictions "
                                                  f"cannot give the decision metric: {problem}; "
                                                  f"correct campaign.metric in "
                                                  f"{self.campaign.spec.source} and run flightplan "
                                                  f"run again (until a run beyond the pilot "
                                                  f"starts, the decision rule may still change)",
                                         pilot=result)
        return result

    def _kept_pilot(self, control: PlannedRun) -> PilotResult | None:
        """The pilot of this control id recorded by an earlier ``flightplan run`` and still
        whole on disk, when its latest outcome passed (a ``metric_unavailable`` stop after
        it is the metric's fault, not the pilot's: that pilot is kept, and the metric is
        checked again); None when it must run."""
        if not RunDir(self.campaign.dir / "runs" / pilot_id(control.run_id)).measurements.is_file():
            return None
        for event in reversed(self.campaign.ledger.events(kind="pilot")):
            kept = PilotResult.from_json(event.data or {})
            if kept.control_id != control.run_id or kept.cause == METRIC_UNAVAILABLE:
                continue
            if not kept.ok:
                return None
            when = time.strftime("%H:%M:%S", time.localtime(event.at))
            self.campaign.say(f"pilot: kept from {when} ({kept.message})")
            return kept
        return None

    def _metric_problem(self, control: PlannedRun) -> str | None:
        """Why the pilot's predictions cannot give the campaign's metric (a column the task
        does not write, no gold/predicted labels), or None: found before any run is paid
        for, not at close."""
        path = RunDir(self.campaign.dir / "runs" / pilot_id(control.run_id)).predictions
        if not path.is_file():
            return f"the pilot wrote no {RunDir.PREDICTIONS}; the task must write it"
        try:
            metric_value(parse_metric(self.campaign.spec.campaign.metric), read_predictions(path),
                         source=RunDir.PREDICTIONS)
        except CheckFailed as exc:
            return str(exc)
        return None
