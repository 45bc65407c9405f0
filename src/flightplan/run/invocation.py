"""One ``flightplan run`` under the campaign's lock: what its steps share (the spec, the
ledger, the console, the planned runs, the rental clock) and how it ends
(:class:`CampaignOutcome`).

:func:`flightplan.run.campaign.run_campaign` makes one :class:`Invocation` and hands it to
each step: :class:`flightplan.run.preparation.Preparation` (the plan frozen, data check,
kernel check, pilot), :class:`flightplan.run.decision_point.DecisionPoint` and
:class:`flightplan.run.run_loop.RunLoop` (the runs, through the executor, with
:class:`flightplan.run.job_events.JobEvents` answering each job's start and end).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from flightplan.ids import pilot_id
from flightplan.plan.calibration.calibrate import Calibrated
from flightplan.plan.catalog import Catalog
from flightplan.run.data_check import DataCheckSummary
from flightplan.run.decision import Decision
from flightplan.run.executors.contract import Executor, Job
from flightplan.run.ledger import Ledger
from flightplan.run.pilot import PilotResult
from flightplan.run.planned import PlannedRun
from flightplan.run.progress import ProgressBoard, RunActivity
from flightplan.run.records import RunRecorder
from flightplan.run.rental import RentalClock, waiting_reasons
from flightplan.spec import CampaignSpec
from flightplan.tasks.loader import LoadedTask

__all__ = ["CampaignOutcome", "Invocation", "resumed_label"]


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


class Invocation:
    """One invocation of ``flightplan run`` under the lock (see
    :func:`flightplan.run.campaign.run_campaign`): the state its steps share."""

    planned: list[PlannedRun]
    """Every execution of the spec's runs with its id, set when the plan is frozen
    (:meth:`flightplan.run.preparation.Preparation.prepare`)."""

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
        self.flight_of: dict[str, str] = {}     # run id → "flight (h left)" it started on
        self.running = RunActivity()            # what the interruption line names

    def say(self, text: str) -> None:
        """Print one line (above the progress bars while they show; nothing when quiet)."""
        if self.quiet:
            return
        if self.board.enabled:
            self.board.note(text)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def outcome(self, message: str, *, code: int, stopped_by: str | None = None,
                **parts: Any) -> CampaignOutcome:
        """How the campaign ended: ``message``, exit ``code``, every run's summary row (a
        pending run's reason to wait filled in) and the wall time so far."""
        rows = self.recorder.summary(self.planned)
        waiting = waiting_reasons(self.ledger.events())
        for row in rows:
            if row["status"] == "pending" and row["run_id"] in waiting:
                row["reason"] = waiting[row["run_id"]]
        return CampaignOutcome(self.spec.campaign.name, code, message, stopped_by,
                               runs=rows, wall_s=time.time() - self.started, **parts)

    def stopped(self, by: str, message: str, **parts: Any) -> CampaignOutcome:
        """The campaign stops here: a ``stopped`` event without a run id, data ``{by,
        message}``, in the ledger (plan vs execution lists it) and the outcome, exit 1."""
        self.ledger.add_event("stopped", data={"by": by, "message": message})
        return self.outcome(message, code=1, stopped_by=by, **parts)

    def control(self) -> PlannedRun:
        """The control's first replicate: the one the pilot runs (its only one with one seed)."""
        return next(p for p in self.planned if p.run.name == self.spec.control.name)

    def add_bar(self, job: Job) -> None:
        """A progress bar for ``job``, named by its run id and the flight it started on."""
        flight = self.flight_of.get(job.run_id)
        self.board.add(str(job.run_dir), (job.run_id if job.run_dir.name != "resume"
                                          else resumed_label(job.run_id))
                       + (f" on {flight}" if flight else ""))

    def show_progress(self, job: Job, progress: Any) -> None:
        """``job``'s progress on its bar, and as what an interruption line names."""
        self.board.update(str(job.run_dir), progress)
        resumed = job.run_dir.name == "resume"      # the resumed pilot, beside the first
        pilot = any(job.run_id == pilot_id(p.run_id) for p in self.planned)
        self.running.update(resumed_label(job.run_id) if resumed else job.run_id,
                            f"run {resumed_label(job.run_id) if resumed else job.run_id}", progress,
                            job.run_dir, pilot=pilot)


def resumed_label(run_id: str) -> str:
    """How the resumed pilot process of ``run_id`` is named while it runs."""
    return f"{run_id} (resumed)"
