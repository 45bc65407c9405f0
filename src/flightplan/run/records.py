"""Run bookkeeping for the runner: what each run's directory says, put into the ledger.

The run directory is the truth about a run (``done.json``: finished; ``stop.json``:
stopped by a rule; checkpoints: resumable); the ledger records it, with the events read
from the run's measurements (checkpoint saves, restores that verified a checkpoint,
rejected checkpoints), and ``results/`` receives the run through ``publish_run`` as soon
as it ends. A runner killed between a worker's end and the ledger's update is caught up
by :meth:`RunRecorder.settle` on the next invocation.

Usage::

    recorder = RunRecorder(ledger, campaign_dir, metric="macro_f1")
    recorder.settle(planned)            # "finished", "stopped", or the ledger's status
    recorder.start(planned); ...; row = recorder.end(planned, job_result)
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from flightplan.publish.manifest import read_manifest
from flightplan.publish.results import RESULTS_DIRNAME, publish_run
from flightplan.errors import CheckFailed, SpecError, VerificationFailed
from flightplan.campaign_goodput import ledger_executions
from flightplan.goodput import run_goodput
from flightplan.metrics import metric_value, read_predictions
from flightplan.run.executors.contract import Interruption, JobResult
from flightplan.run.ledger import Ledger
from flightplan.rows import Restore
from flightplan.rundir import RunDir, shown_path

if TYPE_CHECKING:
    from flightplan.run.planned import PlannedRun

__all__ = ["RunRecorder", "EVENT_KINDS"]

EVENT_KINDS = {"checkpoint": "checkpoint_saved", "checkpoint_rejected": "checkpoint_rejected",
               "checkpoint_failed": "checkpoint_failed",
               "checkpoint_transfer": "checkpoint_transferred",
               "checkpoint_transfer_failed": "checkpoint_transfer_failed",
               "forced_checkpoint": "checkpoint_forced"}
"""Measurement row ``event`` → ledger event kind. A ``restore`` row with a ``source``
becomes ``checkpoint_verified`` (restore checks every hash before loading)."""

_LOG_TAIL_LINES = 5


class RunRecorder:
    """Records runs of one campaign in its ledger and publishes them to ``results/``.

    Args:
        ledger: the open ledger.   campaign_dir: the campaign directory.
        metric: the campaign's decision metric, computed from ``predictions.csv`` as
            close computes it (not the task's own figure in ``metrics.json``); None when
            the predictions cannot give it.
    """

    def __init__(self, ledger: Ledger, campaign_dir: Path, *, metric: str) -> None:
        self.ledger = ledger
        self.dir = Path(campaign_dir)
        self.metric = metric
        self._offsets: dict[str, int] = {}

    def _metric(self, run_dir: Path) -> float | None:
        try:
            return metric_value(self.metric, read_predictions(RunDir(run_dir).predictions))
        except (CheckFailed, SpecError):
            return None

    def _published(self, run_id: str, status: str) -> bool:
        """Whether ``results/MANIFEST.json`` holds the run with this status (the manifest
        is the last thing ``publish_run`` rewrites)."""
        try:
            manifest = read_manifest(self.dir / RESULTS_DIRNAME)
        except VerificationFailed:
            return False
        return bool((manifest.get("runs") or {}).get(run_id, {}).get("status") == status)

    def settle(self, planned: "PlannedRun") -> str:
        """Bring the ledger and ``results/`` up to the run directory: a finished or stopped
        run that the ledger does not know as such is recorded now, and published if the
        manifest lacks it (a runner killed in between). Returns the status."""
        entry = self.ledger.run(planned.run_id)
        status = "pending" if entry is None else entry.status
        on_disk = RunDir(planned.run_dir).status()
        if on_disk is None:
            return status
        if status == on_disk:
            if not self._published(planned.run_id, on_disk):
                publish_run(self.dir, planned.run_id)
            return on_disk
        stop = RunDir(planned.run_dir).read_json(RunDir.STOP) if on_disk == "stopped" else None
        done = RunDir(planned.run_dir).read_json(RunDir.DONE) or {}
        ended = (stop or {}).get("time") or _iso_to_unix(done.get("finished_at"))
        ended = float(ended) if ended else planned.run_dir.stat().st_mtime
        self.ledger.record_late_end(planned.run_id, status=on_disk, ended_at=ended, stop=stop,
                                    metric=self._metric(planned.run_dir))
        publish_run(self.dir, planned.run_id)
        return on_disk

    def reset_interrupted(self) -> list[str]:
        """Runs a killed runner left ``running`` go back to ``pending``
        (:meth:`Ledger.reset_interrupted`); each killed execution counts until its last sign
        of life: the newest write of its measurements, log, ``done.json`` or ``stop.json``.
        A run whose folder shows it ended (``done.json`` or ``stop.json``: the runner was
        stopped as it finished) is not interrupted: it is recorded finished or stopped
        (:meth:`record_ended_on_disk`). Returns the ids reset (the interrupted ones)."""
        seen = {}
        for run in self.ledger.runs():
            if run.status != "running":
                continue
            run_dir = RunDir.of(self.dir, run.run_id)
            if run_dir.status() is not None:
                self.record_ended_on_disk(run.run_id, run_dir.path)
                continue
            last = run_dir.last_written()
            if last is not None:
                seen[run.run_id] = last
        return self.ledger.reset_interrupted(seen)

    def record_ended_on_disk(self, run_id: str, run_dir: Path, *,
                             extra_events: Sequence[Mapping[str, Any]] = ()) -> str | None:
        """Close the execution of a run that the ledger has ``running`` but whose folder
        shows it ended (``done.json``: finished; ``stop.json``: stopped), because the runner
        was stopped (Ctrl-C, SIGTERM, a kill) before it saw the worker's end: its status,
        stop record and metric, its time from its latest ``started``/``resumed`` event to
        its last sign of life (:meth:`RunDir.last_written`), ``extra_events`` and its
        ``finished``/``stopped`` event (data ``ended_as_runner_stopped``), in one
        transaction. Publishing it is left to the caller (:meth:`settle` does it on the
        next invocation). Returns the status, or None when the folder shows no end."""
        run = RunDir(run_dir)
        on_disk = run.status()
        if on_disk is None:
            return None
        starts = [e.at for e in self.ledger.events(run_id) if e.kind in ("started", "resumed")]
        ended = run.last_written() or time.time()
        started = min(starts[-1], ended) if starts else ended
        stop = run.read_json(RunDir.STOP) if on_disk == "stopped" else None
        self.ledger.record_run_end(run_id, status=on_disk, started_at=started, ended_at=ended,
                                   stop=stop, metric=self._metric(run.path),
                                   data={"ended_as_runner_stopped": True,
                                         "wall_s": ended - started},
                                   extra_events=extra_events)
        return on_disk

    def end_on_disk(self, planned: "PlannedRun") -> str | None:
        """The runner is being stopped and ``planned``'s execution, started by this
        invocation, was not seen to end: when its folder shows it ended, record it so
        (:meth:`record_ended_on_disk`, with the events of this execution's rows) and publish
        it. Returns the status, or None (it is interrupted: the next invocation resets it)."""
        status = self.record_ended_on_disk(planned.run_id, planned.run_dir,
                                           extra_events=self._events(planned))
        if status is not None and RunDir(planned.run_dir).trial_json.is_file():
            publish_run(self.dir, planned.run_id)
        return status

    def saved_before(self, run_id: str, run_dir: Path, *, on_flight: bool) -> bool:
        """Whether run ``run_id`` has had a checkpoint at home since it was last (re)started:
        a ``checkpoint_saved`` event in the ledger, or a row of its measurements that
        records a save (:meth:`RunDir.saved_checkpoint`: ``checkpoint_saving``, durable
        before the checkpoint is in place, or ``checkpoint``); ``on_flight`` (an executor
        whose runs save on a flight): a ``checkpoint_transferred`` event or a
        ``checkpoint_transfer`` row, since a checkpoint that never came home went with its
        flight."""
        events = self.ledger.events(run_id)
        restarts = [i for i, e in enumerate(events) if e.kind == "restarted"]
        since = events[restarts[-1] + 1:] if restarts else events
        kind = "checkpoint_transferred" if on_flight else "checkpoint_saved"
        if any(e.kind == kind for e in since):
            return True
        return RunDir(run_dir).saved_checkpoint(on_flight=on_flight)

    def resumes_how(self, run_id: str, *, on_flight: bool) -> str:
        """How run ``run_id``, interrupted, goes on when executed again, in words: from its
        last checkpoint; from step 0 when it saved none; or not at all when the checkpoints
        it saved are gone (it is started with ``resume = true`` and stops with
        ``no_usable_resume``; ``--restart`` starts it over on purpose)."""
        run_dir = RunDir.of(self.dir, run_id)
        if run_dir.has_checkpoint():
            return "it resumes from its last checkpoint"
        if self.saved_before(run_id, run_dir.path, on_flight=on_flight):
            return ("the checkpoints it saved are gone: it stops with no_usable_resume "
                    "(flightplan run --restart NAME starts it over)")
        return "it had saved no checkpoint: it starts over from step 0"

    def cut(self, planned: "PlannedRun") -> None:
        """Mark a run ``cut`` by the decision point (it is not executed)."""
        self.ledger.set_run_status(planned.run_id, "cut", event="cut")

    def start(self, planned: "PlannedRun") -> None:
        """Mark the run running (``started`` or ``resumed``); remember where its
        measurements end, so that only this execution's rows become events."""
        run = RunDir(planned.run_dir)
        self._offsets[planned.run_id] = (run.measurements.stat().st_size
                                         if run.measurements.is_file() else 0)
        trial = run.read_json(RunDir.TRIAL) or {}
        self.ledger.record_run_start(planned.run_id, resumed=bool(trial.get("resume")))

    def _events(self, planned: "PlannedRun") -> list[dict[str, Any]]:
        rows, _ = RunDir(planned.run_dir).read_rows(self._offsets.get(planned.run_id, 0))
        events = []
        for row in rows:
            if isinstance(row, Restore) and row.source:
                kind: str | None = "checkpoint_verified"
            else:
                kind = EVENT_KINDS.get(row.EVENT or "")
            if kind:
                data = {"step": row.step, **{k: list(v) if isinstance(v, tuple) else v
                                             for k, v in row.fields().items()}}
                events.append({"kind": kind, "at": row.time, "data": data})
        return events

    def end(self, planned: "PlannedRun", result: JobResult) -> dict[str, Any]:
        """Record how one execution ended and publish the run; returns its summary row.

        Exit 0 with ``done.json``: finished; exit 1 with ``stop.json``: stopped (its record
        kept); anything else: failed (exit code and the log's last lines in the event).
        """
        on_disk = RunDir(planned.run_dir).status()
        if result.exit_code == 0 and on_disk == "finished":
            status = "finished"
        elif result.exit_code == 1 and on_disk == "stopped":
            status = "stopped"
        else:
            status = "failed"
        stop = RunDir(planned.run_dir).read_json(RunDir.STOP) if status == "stopped" else None
        data: dict[str, Any] = {"exit_code": result.exit_code, "wall_s": result.wall_s}
        if result.node is not None:
            data["node"] = result.node
        if status == "failed":
            data["log_tail"] = RunDir(planned.run_dir).log_tail(_LOG_TAIL_LINES)
        self.ledger.record_run_end(planned.run_id, status=status, started_at=result.started_at,
                                   ended_at=result.ended_at, stop=stop,
                                   metric=self._metric(planned.run_dir), data=data,
                                   extra_events=self._events(planned))
        if RunDir(planned.run_dir).trial_json.is_file():
            publish_run(self.dir, planned.run_id)
        return self.row(planned, exit_code=result.exit_code)

    def interrupted(self, planned: "PlannedRun", info: Interruption) -> None:
        """Record an execution that ended without its run ending (its flight was lost, or it
        left a flight whose package ends): wall time counted, its measurement events, and an
        ``interrupted`` event with the cause, the node and the work lost; the run is
        ``pending`` until an executor starts it again."""
        data = {"cause": info.cause, "node": info.node, "reason": info.reason,
                "steps_done": info.steps_done, "checkpoint": info.checkpoint,
                "steps_lost": info.steps_lost, "lost_s": info.lost_s, "resumes": info.resumes}
        self.ledger.record_run_end(planned.run_id, status="pending", started_at=info.started_at,
                                   ended_at=info.at, data=data, event="interrupted",
                                   extra_events=self._events(planned))

    def goodput(self, planned: "PlannedRun") -> dict[str, Any] | None:
        """The run's wall time by cause over every execution the ledger recorded
        (:meth:`flightplan.goodput.GoodputSplit.to_json`), or None before it ran."""
        executions = ledger_executions(self.ledger.runs(), self.ledger.stage_times(),
                                       self.ledger.events()).get(planned.run_id)
        if not executions:
            return None
        return run_goodput(RunDir(planned.run_dir).rows_across_restarts(),
                           [execution for execution, _ in executions]).to_json()

    def row(self, planned: "PlannedRun", *, exit_code: int | None = None) -> dict[str, Any]:
        """The summary row ``{run_id, name, tier, replicate_of, status, metric, wall_s, stop,
        reason, resumed_from, resharded_from, goodput}`` (``replicate_of``: the run a
        replicate of several seeds executes, else None) (``resumed_from``: the checkpoint
        its latest execution resumed from, or None; ``resharded_from``: the number of
        processes that saved it when another number restored it, ``[[run]] reshard``, else
        None; ``goodput``: :meth:`goodput`)."""
        entry = self.ledger.run(planned.run_id)
        status = "pending" if entry is None else entry.status
        reason = ""
        if status == "failed":
            code = exit_code if exit_code is not None else self._last_exit(planned.run_id)
            last = RunDir(planned.run_dir).log_tail(1).strip()
            reason = (f"process exited with code {code}"
                      + (f" ({last[:160]})" if last else "")
                      + f"; see {shown_path(RunDir(planned.run_dir).log)}")
        elif status == "cut":
            reason = "cut at the decision point"
        return {"run_id": planned.run_id, "name": planned.name, "tier": planned.run.tier,
                "replicate_of": planned.replicate_of,
                "status": status, "metric": None if entry is None else entry.metric,
                "wall_s": None if entry is None else entry.wall_s,
                "stop": None if entry is None else entry.stop, "reason": reason,
                **self._resumed_from(planned.run_id),
                "goodput": self.goodput(planned)}

    def _resumed_from(self, run_id: str) -> dict[str, Any]:
        """``{resumed_from, resharded_from}``: the checkpoint the run's latest execution
        restored (its ``checkpoint_verified`` event after the last ``resumed``) and, when
        another number of processes had saved it, that number; both None when it started
        from step 0."""
        events = self.ledger.events(run_id)
        starts = [i for i, e in enumerate(events) if e.kind in ("started", "resumed")]
        verified = {} if not starts or events[starts[-1]].kind != "resumed" else next(
            (e.data or {} for e in events[starts[-1]:] if e.kind == "checkpoint_verified"), {})
        return {"resumed_from": verified.get("source"),
                "resharded_from": verified.get("resharded_from")}

    def _last_exit(self, run_id: str) -> Any:
        failed = self.ledger.events(run_id, kind="failed")
        return (failed[-1].data or {}).get("exit_code") if failed else None

    def summary(self, planned: list["PlannedRun"]) -> list[dict[str, Any]]:
        """Summary rows of the current runs, in tier order."""
        return [self.row(p) for p in planned]


def _iso_to_unix(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
