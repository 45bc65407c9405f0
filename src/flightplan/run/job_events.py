"""What the runner does when a job of the executor starts, ends or is interrupted: record
it in the ledger (:class:`~flightplan.run.records.RunRecorder`) and say it in one line.
"""

from __future__ import annotations

from typing import Mapping

from flightplan.run.executors.contract import Interruption, Job, JobResult
from flightplan.run.invocation import Invocation
from flightplan.run.planned import PlannedRun
from flightplan.run.progress import format_stop
from flightplan.units import counted, time_unit

__all__ = ["JobEvents"]


class JobEvents:
    """The executor's callbacks for the runs of one invocation (``by_id``: run id → its
    planned run)."""

    def __init__(self, campaign: Invocation, by_id: Mapping[str, PlannedRun]) -> None:
        self.campaign, self.by_id = campaign, by_id
        self.in_progress: list[str] = []     # run ids started and not yet seen to end

    def started(self, job: Job) -> None:
        """A job started: its progress bar, and ``started`` (or ``resumed``) recorded."""
        self.campaign.add_bar(job)
        self.campaign.recorder.start(self.by_id[job.run_id])
        self.in_progress.append(job.run_id)

    def stopping(self) -> None:
        """The runner is being stopped (Ctrl-C, SIGTERM) and the executor has stopped its
        workers: each run in progress whose folder shows it ended (``done.json`` or
        ``stop.json``: the signal landed as it finished) is recorded finished or stopped
        (:meth:`~flightplan.run.records.RunRecorder.end_on_disk`), said in one line and no
        longer named as in progress; the others stay ``running`` in the ledger, which the
        next invocation resets as interrupted."""
        for run_id in list(self.in_progress):
            status = self.campaign.recorder.end_on_disk(self.by_id[run_id])
            if status is None:
                continue
            self.in_progress.remove(run_id)
            self.campaign.running.ended(run_id)
            self.campaign.say(f"{self.by_id[run_id].name} ({run_id}): {status} (it ended as "
                              f"the runner was stopped)")

    def ended(self, result: JobResult) -> None:
        """A job ended: its outcome recorded and said in one line."""
        self._gone(result.run_id)
        self.campaign.running.ended(result.run_id)
        row = self.campaign.recorder.end(self.by_id[result.run_id], result)
        goodput = row.get("goodput") or {}
        self.campaign.say(f"{row['name']} ({result.run_id}): {row['status']}"
                          + (f", {self.campaign.spec.campaign.metric} {row['metric']:.4f}"
                             if row.get("metric") is not None else "")
                          + (f"; goodput {goodput['goodput']:.1%} of "
                             f"{_duration(goodput['wall_hours'])}"
                             if goodput.get("goodput") is not None else "")
                          + (f"; resumed from {row['resumed_from']}" if row["resumed_from"] else "")
                          + (f" (saved by {counted(row['resharded_from'], 'process', 'processes')}"
                             f", resharded: not bitwise from there)"
                             if row.get("resharded_from") else "")
                          + (f"; {format_stop(row['stop'])}" if row.get("stop") else "")
                          + (f"; {row['reason']}" if row.get("reason") else ""))

    def interrupted(self, job: Job, info: Interruption) -> None:
        """A job left its flight (its package ends) or lost it: recorded and said; a lost
        flight is told to the rental clock."""
        name = self.by_id[job.run_id].name
        self._gone(job.run_id)
        self.campaign.running.ended(job.run_id)
        self.campaign.recorder.interrupted(self.by_id[job.run_id], info)
        if info.cause == "flight_lost":
            self.campaign.rental.lost(info.node, at=info.at, reason=info.reason)
        else:
            self.campaign.say(f"{name} ({job.run_id}): left flight {info.node} after "
                              f"{info.steps_done} steps with {info.checkpoint} home "
                              f"({info.reason}); it resumes from there on a flight with time "
                              f"left")
            return
        self.campaign.say(f"{name} ({job.run_id}): flight {info.node} lost after {info.steps_done} "
                          f"steps; {info.steps_lost} steps ({info.lost_s:.0f} s) lost; "
                          + (f"resumes from {info.checkpoint}" if info.checkpoint else
                             "restarts from step 0" if info.resumes else
                             "a checkpoint came home and has gone since: stops with "
                             "no_usable_resume"))

    def _gone(self, run_id: str) -> None:
        if run_id in self.in_progress:
            self.in_progress.remove(run_id)


def _duration(hours: float) -> str:
    """``7.9 s``, ``12.5 min`` or ``3.2 h`` (:func:`flightplan.units.time_unit`)."""
    unit, scale = time_unit(hours)
    return f"{hours * scale:.1f} {unit}"
