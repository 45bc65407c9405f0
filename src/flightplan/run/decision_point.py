"""The decision point after the pilot: each run re-estimated from the pilot's figures, the
plan re-solved, the variants ranked by decision value, and the decision (continue, cut or
stop) made and recorded, or the last one kept while it still serves.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Mapping

from flightplan import activity
from flightplan.ids import pilot_id
from flightplan.errors import CheckFailed
from flightplan.ledger_rows import DecisionRow
from flightplan.metrics import read_predictions
from flightplan.plan.campaign_plan import plan_campaign
from flightplan.plan.decision_rule import decision_rule
from flightplan.plan.power import TestSplit
from flightplan.run.data_check import DataCheckReport
from flightplan.run.decision import (Decision, ValueRanking, choose, cut_steps, rank_variants,
                                     replan_from_options, runs_done, with_value_cuts)
from flightplan.run.invocation import Invocation
from flightplan.run.pilot import PilotResult
from flightplan.rundir import RunDir
from flightplan.tasks.estimate import PilotRecord, control_steps, estimate_run_seconds
from flightplan.units import Duration

__all__ = ["DecisionPoint"]


class DecisionPoint:
    """The decision of one invocation (:meth:`decision`), from the pilot and the data check."""

    def __init__(self, campaign: Invocation) -> None:
        self.campaign = campaign

    def decision(self, pilot: PilotResult, report: DataCheckReport) -> Decision:
        """The decision for this control and decision rule: the last one recorded when it
        was made for them (and no ``--decide`` is given), else a new one."""
        kept = self._kept_decision()
        if kept is not None:
            return kept
        activity.doing("the decision point (re-estimating the runs, re-solving the plan)")
        durations, estimates = self._re_estimates(pilot, report)   # the hooks, before writes
        # what the pilot and the finished stages measured wins over the earlier campaign's
        plan_result = plan_campaign(self.campaign.spec, catalog=self.campaign.catalog,
                                    durations={**self.campaign.calibrated, **durations})
        plan = plan_result.to_json()
        done = self._done_runs()
        value = self._value_ranking(report, estimates, done)
        steps = cut_steps([(r.name, r.tier) for r in self.campaign.spec.runs], done=done)
        computed = with_value_cuts(
            choose(steps, replan_from_options(plan, {r.name for r in self.campaign.spec.runs},
                                              replicates={p.name: p.run.name
                                                          for p in self.campaign.planned})),
            value,
            [(r.name, r.tier, r.reference) for r in self.campaign.spec.runs])
        chosen, dropped = computed.decision, computed.dropped
        if self.campaign.decide is not None and self.campaign.decide != computed.decision:
            chosen = self.campaign.decide
            dropped = (computed.dropped or next((s for s in steps[1:]), [])) \
                if chosen == "cut" else []
        version = self.campaign.ledger.add_plan_version(plan, reason="re-estimated from the pilot")
        made = Decision(decision=chosen, computed=computed.decision, dropped=tuple(dropped),
                        reason=computed.reason, plan_version=version,
                        fitting_option=computed.fitting_option,
                        control_id=self.campaign.control().run_id,
                        rule=decision_rule(self.campaign.spec),
                        at=time.time(), value=value)
        self.campaign.ledger.add_decision(decision=chosen, computed=computed.decision,
                                          figures=made.figures(pilot=None if pilot.figures is None
                                                               else pilot.figures.to_json(),
                                                               estimates=estimates, plan=plan),
                                          dropped=list(dropped))
        # as recorded (its time is the ledger's), so a kept one reads back the same
        made = replace(Decision.from_ledger(self.campaign.ledger.decisions()[-1]),
                       kept_from_earlier_run=False)
        self._say_decision(made, plan_result.time_left())
        return made

    def _done_runs(self) -> set[str]:
        """The spec's runs whose every execution (each replicate) ended, finished or
        stopped: their time is spent, so they are never dropped."""
        ended = {r.run_id for r in self.campaign.ledger.runs()
                 if r.status in ("finished", "stopped")}
        return runs_done({run.name: [p.run_id for p in self.campaign.planned
                                     if p.run.name == run.name]
                          for run in self.campaign.spec.runs}, ended)

    def _value_ranking(self, report: DataCheckReport, estimates: Mapping[str, Any],
                       done: set[str]) -> ValueRanking:
        """The variants not run yet, ranked by decision value per GPU-hour of their
        re-estimate, on the test split the data check counted, with the pilot's predictions
        as evidence on the reference (:func:`flightplan.run.decision.rank_variants`); a
        run's GPU-hours count all its replicates."""
        split = report.splits.get("test") if report.splits else None
        test = TestSplit(split.rows, split.labels, "the data check") if split else None
        path = RunDir(self.campaign.dir / "runs"
                      / pilot_id(self.campaign.control().run_id)).predictions
        try:
            reference = read_predictions(path) if path.is_file() else None
        except CheckFailed:
            reference = None
        gpu_hours = {run.name: float(estimates.get(run.name, {}).get(
            "total_s", run.duration.seconds)) / 3600.0 * run.gpus * self.campaign.spec.seeds_of(run)
            for run in self.campaign.spec.runs}          # every replicate of the run
        return rank_variants(
            self.campaign.spec, pending=[r.name for r in self.campaign.spec.runs
                                         if r.reference is not None and r.name not in done],
            gpu_hours=gpu_hours, test=test, reference=reference,
            reference_source=f"pilot of {self.campaign.spec.control.name}",
            measured=self.campaign.measured_models, seed_spread=self.campaign.seed_spread,
            why_unknown="the data check counted no test examples (the task reads the "
                        "corpus itself)")

    def _kept_decision(self) -> Decision | None:
        """The last recorded decision when it serves this invocation: no ``--decide``, and
        made for this control and this decision rule; None otherwise (said why)."""
        previous = self.campaign.ledger.decisions()
        if not previous or self.campaign.decide is not None:
            return None
        last = Decision.from_ledger(previous[-1], control_id=self._pilot_before(previous[-1]))
        control = self.campaign.control()
        if last.control_id != control.run_id:
            self.campaign.say(f"decision: made for the control {last.control_id}, which is now "
                              f"{control.run_id}: decided again from its pilot")
            return None
        if last.rule is not None and last.rule != decision_rule(self.campaign.spec):
            self.campaign.say("decision: made under another decision rule: decided again")
            return None
        return last

    def _pilot_before(self, decision: DecisionRow) -> str | None:
        """The control id of the last passed pilot before ``decision`` (a ledger row that
        predates the decision's own ``control_id``)."""
        ids = [(e.data or {}).get("control_id") for e in self.campaign.ledger.events(kind="pilot")
               if e.at <= decision.at and (e.data or {}).get("ok")]
        return ids[-1] if ids else None

    def _say_decision(self, made: Decision, left: dict[str, Any]) -> None:
        verb = made.decision + (f" (computed: {made.computed})" if made.overridden else "")
        package = "" if not left else (
            f"; the package started {self.campaign.spec.rental.started:%Y-%m-%d %H:%M %Z} has "
            f"{left['hours_left']:.2f} h left"
            + ("" if left["fits_time_left"] else
               ": runs that cannot finish in them are not started"))
        self.campaign.say(f"decision: {verb}: {made.reason}"
                          + (f"; dropping {', '.join(made.dropped)}" if made.dropped else "")
                          + package)
        self.campaign.say(f"decision value: {made.value.line()}")

    def _re_estimates(self, pilot: PilotResult, report: DataCheckReport
                      ) -> tuple[dict[str, Duration], dict[str, Any]]:
        """Each stage's measured duration and each run's re-estimate from the pilot.

        Raises:
            TaskHookFailed: a task's ``estimate_run`` hook raised.
        """
        durations: dict[str, Duration] = {}
        estimates: dict[str, Any] = {}
        names = {s.name for s in self.campaign.spec.stages}
        for stage in self.campaign.ledger.stage_times():
            if stage.kind == "stage" and stage.name in names:
                seconds = round(stage.ended_at - stage.started_at)
                durations[stage.name] = Duration(max(1, seconds))
        if pilot.figures is None:
            return durations, estimates
        figures = pilot.figures
        pilot_dir = self.campaign.dir / "runs" / pilot_id(self.campaign.control().run_id)
        record = PilotRecord(figures, RunDir(pilot_dir).rows(), RunDir(pilot_dir / "resume").rows())
        policy = self.campaign.spec.checkpoint
        mtbi = policy.mean_time_between_interruptions
        tolerated_s = float(policy.tolerated_loss.seconds)
        mtbi_s = float(mtbi.seconds) if mtbi else None
        default_steps = control_steps(figures)
        for run in self.campaign.spec.runs:
            estimate: dict[str, Any] | None = self.campaign.tasks[run.name].estimate_run(
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
