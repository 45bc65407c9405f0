"""The runs: a job for every run not ended (its ``trial.json`` written, resumed when it
saved before), longest first when they all fit in the rental's time left, each admitted on
a flight only while it can finish there, all executed through the executor.
"""

from __future__ import annotations

import time

from flightplan.durable import write_json_atomic
from flightplan.ledger_rows import DecisionRow
from flightplan.run.executors.contract import Job
from flightplan.run.invocation import Invocation
from flightplan.run.job_events import JobEvents
from flightplan.run.planned import PlannedRun, trial_document
from flightplan.run.rental import run_needs_s, waiting_reasons
from flightplan.rundir import RunDir

__all__ = ["RunLoop"]


class RunLoop:
    """Executes the runs of one invocation (:meth:`runs`), after the decision point."""

    def __init__(self, campaign: Invocation) -> None:
        self.campaign = campaign
        self._by_id: dict[str, PlannedRun] = {}
        self._decisions: list[DecisionRow] = []

    def runs(self, dropped: list[str]) -> None:
        """Execute every run not ended and not ``dropped`` (those are cut), through the
        executor, recording each start, end and interruption as it happens; when the runner
        is stopped (Ctrl-C, SIGTERM), a run whose folder shows it ended is recorded so
        (:meth:`JobEvents.stopping`) before the signal goes on."""
        self._by_id = {p.run_id: p for p in self.campaign.planned}
        self._decisions = self.campaign.ledger.decisions()        # the estimates the clock reads
        jobs = self._longest_first(self._jobs(dropped))
        events, rental = JobEvents(self.campaign, self._by_id), self.campaign.rental
        try:
            self.campaign.executor.run(jobs, on_start=events.started, on_done=events.ended,
                                       on_progress=self.campaign.show_progress,
                                       on_interrupted=events.interrupted, admit=self._admit,
                                       leave_by=lambda job, flight: rental.leave_by(flight))
        except KeyboardInterrupt:       # Ctrl-C or SIGTERM, after the workers were stopped
            events.stopping()
            raise

    def _jobs(self, dropped: list[str]) -> list[Job]:
        """A job, with its ``trial.json`` written, for every run to execute now; the runs
        in ``dropped`` are recorded as cut."""
        jobs: list[Job] = []
        for planned in self.campaign.planned:
            status = self.campaign.recorder.settle(planned)
            if status in ("finished", "stopped"):
                continue
            if planned.run.name in dropped:
                self.campaign.recorder.cut(planned)
                continue
            resume = RunDir(planned.run_dir).has_checkpoint() or self._saved_before(planned)
            planned.run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(RunDir(planned.run_dir).trial_json,
                              trial_document(self.campaign.spec, planned, resume=resume))
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
        if sum(needs.values()) > self.campaign.rental.least_left_s():
            return jobs
        return sorted(jobs, key=lambda job: -needs[job.run_id])

    def _admit(self, job: Job, flight: str) -> bool:
        """Whether ``job`` may start on ``flight`` now (:meth:`RentalClock.admit`)."""
        planned = self._by_id[job.run_id]
        if not self.campaign.rental.admit(job.run_id,
                                          needs_s=run_needs_s(planned.run, self._decisions),
                                          flight=flight):
            reasons = waiting_reasons(self.campaign.ledger.events(job.run_id))
            self.campaign.say(f"{planned.name} ({job.run_id}): {reasons[job.run_id]}")
            return False
        left = self.campaign.rental.window(flight).hours_left(time.time())
        self.campaign.flight_of[job.run_id] = f"{flight}, {left:.2f} h left"
        last = self.campaign.ledger.events(job.run_id)[-1:]
        if last and last[0].kind == "past_end":
            self.campaign.say(f"{planned.name} ({job.run_id}): {(last[0].data or {})['message']}")
        return True

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
        return self.campaign.recorder.saved_before(
            planned.run_id, planned.run_dir, on_flight=self.campaign.executor.saves_on_flight)
