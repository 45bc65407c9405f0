"""The live mirror's own process: tail a campaign's run folders and send them to MLflow.

``flightplan run`` with live tracking (:mod:`flightplan.tracking.live`) starts::

    FLIGHTPLAN_MIRROR_TRACKING_URI=URI python -m flightplan.tracking.mirror CAMPAIGN_DIR \
        --experiment NAME [--poll-s S]

at the runner's own CPU priority (the URI, which may carry a credential, comes through the
environment: a command line is shown to every user by ``ps``). It opens the store and the experiment at once (a new
SQLite store's tables are created while the data check runs, not when the first rows
come), then every ``poll_s`` seconds reads the complete rows appended to
``runs/<run_id>/measurements.jsonl`` of every run (the pilot too, tagged
``flightplan.pilot``; a replicate of a run of several seeds ``flightplan.replicate_of``)
and sends each run's new rows as one batch of metric points, the run's params and tags,
and its status: RUNNING while it trains; FINISHED at ``done.json``;
FAILED with the rule and reason at ``stop.json``; KILLED on the last pass when the run is
neither finished nor stopped; RUNNING again when a later ``flightplan run`` resumes it.
While the store fails, everything read is kept and sent when it answers again, the wait
between attempts doubling up to :data:`MAX_BACKOFF_S`.

Talking to the runner (its only link besides the files it reads):

- stdin, runner → mirror: a line ``final``, or end of file (the runner went away): make the
  last pass (runs neither finished nor stopped become KILLED), report and exit;
- stdout, mirror → runner: JSON lines ``{"say": LINE}`` (the store failed, or answers
  again: the runner prints it) and ``{"report": ...}`` (:class:`MirrorReport`, after every
  pass that changed it, and after the last pass with ``"final": true``);
- stderr: MLflow's own log lines (the runner keeps them in ``.flightplan/mlflow_mirror.log``).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from flightplan.errors import TrackingFailed
from flightplan.redact import redact
from flightplan.rundir import RunDir
from flightplan.tracking.store import (
    MetricPoint, MlflowRun, MlflowStore, flatten, metric_points, require_mlflow)

__all__ = ["Mirror", "MirrorReport", "RunReport", "serve", "main", "POLL_S", "MAX_BACKOFF_S",
           "FINAL_COMMAND", "TERMINAL_STATUSES", "URI_VARIABLE"]

POLL_S = 2.0          # seconds between passes while the store answers: each run's new rows
                      # go as one log_batch (~4.5 ms of CPU a call + ~0.07 ms a point on
                      # SQLite, measured here), so rows are batched for that long
MAX_BACKOFF_S = 30.0  # longest wait between attempts while the store fails
FINAL_COMMAND = "final"
URI_VARIABLE = "FLIGHTPLAN_MIRROR_TRACKING_URI"   # the environment variable giving the store
TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")


@dataclass(frozen=True)
class RunReport:
    """What the store holds of one run, as far as the mirror knows.

    Attributes:
        points: metric points of the run's measurements the store holds (it held them, or
            the mirror sent them).
        status: the last status the store accepted (``RUNNING``, ``FINISHED``, ``FAILED``,
            ``KILLED``), None before the run exists there.
    """

    points: int
    status: str | None


@dataclass(frozen=True)
class MirrorReport:
    """The mirror's state after a pass.

    Attributes:
        runs: run id → :class:`RunReport`, for every run with measurement rows.
        sent: metric points this mirror sent in all.
        error: the last failure (the :class:`~flightplan.errors.TrackingFailed` message),
            None when the last pass succeeded.
        reason: that failure's cause alone (``unreachable: [Errno 111] Connection refused``).
        cpu_s: CPU seconds the mirror process used so far (MLflow's import included).
        final: this is the report of the last pass.
    """

    runs: dict[str, RunReport] = field(default_factory=dict)
    sent: int = 0
    error: str | None = None
    reason: str | None = None
    cpu_s: float = 0.0
    final: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``report`` object of the stdout protocol."""
        return {"runs": {run_id: {"points": r.points, "status": r.status}
                         for run_id, r in self.runs.items()},
                "sent": self.sent, "error": self.error, "reason": self.reason,
                "cpu_s": self.cpu_s, "final": self.final}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MirrorReport":
        """The inverse of :meth:`to_json`."""
        return cls({run_id: RunReport(int(r["points"]), r["status"])
                    for run_id, r in data["runs"].items()},
                   int(data["sent"]), data["error"], data["reason"], float(data["cpu_s"]),
                   bool(data["final"]))


@dataclass
class _RunState:
    """What the mirror knows of one run directory."""

    run_dir: Path
    offset: int = 0                                   # bytes of measurements.jsonl read
    read: int = 0                                     # metric points read from it
    pending: list[MetricPoint] = field(default_factory=list)   # read, not yet in the store
    first_ms: int | None = None
    last_ms: int | None = None
    run: MlflowRun | None = None
    status: str | None = None                         # last status the store accepted
    end_ms: int | None = None                         # end time sent with that status


class Mirror:
    """Mirrors ``<campaign_dir>/runs/*`` into MLflow, one :meth:`sweep` at a time.

    Args:
        campaign_dir: the campaign folder.
        tracking_uri: the MLflow store (a relative SQLite path resolved already).
        experiment: the MLflow experiment name.

    Every method that talks to the store raises :class:`~flightplan.errors.TrackingFailed`;
    what was read stays pending and is sent by a later sweep.
    """

    def __init__(self, campaign_dir: Path, tracking_uri: str, *, experiment: str) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.uri = tracking_uri
        self.experiment = experiment
        self.sent = 0
        self._runs: dict[str, _RunState] = {}
        self._store: MlflowStore | None = None
        self._experiment_id: str | None = None

    def open(self) -> None:
        """Open the store and the experiment (created when missing; no-op once open)."""
        if self._store is None:
            self._store = MlflowStore(self.uri)
        if self._experiment_id is None:
            self._experiment_id = self._store.experiment(
                self.experiment, tags={"flightplan.campaign": self.experiment})

    def sweep(self, *, final: bool) -> None:
        """Read every run's new rows, then send what the store lacks (``final``: runs
        neither finished nor stopped become KILLED)."""
        runs_dir = self.campaign_dir / "runs"
        folders = sorted(p for p in runs_dir.iterdir() if RunDir(p).trial_json.is_file()) \
            if runs_dir.is_dir() else []
        for folder in folders:
            self._read(self._runs.setdefault(folder.name, _RunState(folder)))
        self.open()
        for run_id, state in self._runs.items():
            if state.first_ms is not None:
                self._send(run_id, state, final=final)

    def report(self, *, error: TrackingFailed | None = None, final: bool = False) -> MirrorReport:
        """The state now (see :class:`MirrorReport`)."""
        return MirrorReport({run_id: RunReport(s.read - len(s.pending), s.status)
                             for run_id, s in sorted(self._runs.items())
                             if s.first_ms is not None},
                            self.sent, str(error) if error else None,
                            error.reason if error else None, time.process_time(), final)

    def _read(self, state: _RunState) -> None:
        """Parse the complete rows appended since the last sweep into ``state.pending``."""
        run = RunDir(state.run_dir)
        try:
            if run.measurements.stat().st_size < state.offset:
                state.offset, state.read = 0, 0          # a new file: read it whole again
                state.pending = []
        except FileNotFoundError:
            return
        rows, state.offset = run.read_rows(state.offset)
        for row in rows:
            stamp = int(round(row.time * 1000))
            state.first_ms = stamp if state.first_ms is None else state.first_ms
            state.last_ms = stamp
            points = metric_points(row)
            state.read += len(points)
            state.pending.extend(points)

    def _send(self, run_id: str, state: _RunState, *, final: bool) -> None:
        store = self._store
        assert store is not None and self._experiment_id is not None
        assert state.first_ms is not None
        if state.run is None:
            trial = RunDir(state.run_dir).read_json(RunDir.TRIAL) or {}
            tags = {"flightplan.config_hash": str(trial.get("config_hash")),
                    "flightplan.tier": str(trial.get("tier")),
                    "flightplan.task": str(trial.get("task")), "flightplan.live": "true"}
            if run_id.startswith("pilot-"):
                tags["flightplan.pilot"] = "true"
            elif trial.get("replicate_of"):
                tags["flightplan.replicate_of"] = str(trial["replicate_of"])
            run = store.run(self._experiment_id, run_id,
                            name="pilot" if run_id.startswith("pilot-") else str(trial.get("name")),
                            start_ms=state.first_ms, tags=tags)
            store.log_params(run, flatten(trial.get("params") or {}))
            state.run = run
        if state.pending:
            self.sent += store.log_points(state.run, state.pending)
            state.pending = []
        status, tags = self._status(state, final=final)
        # done.json comes just before the trial's last row: a terminal status is sent
        # again while rows still arrive, so the end time is the last row's
        if status != state.status or (status != "RUNNING" and state.last_ms != state.end_ms):
            store.set_tags(state.run, tags)
            store.finish(state.run, status, state.last_ms)
            state.status, state.end_ms = status, state.last_ms

    @staticmethod
    def _status(state: _RunState, *, final: bool) -> tuple[str, dict[str, str]]:
        run = RunDir(state.run_dir)
        if run.stop_json.is_file():
            stop = run.read_json(RunDir.STOP) or {}
            reason = (f"stopped by rule {stop.get('rule')} at step {stop.get('step')}: "
                      f"{stop.get('message')}")
            return "FAILED", {"flightplan.status": "stopped", "flightplan.status_reason": reason,
                              "flightplan.stop_rule": str(stop.get("rule")),
                              "flightplan.stop_reason": str(stop.get("message"))}
        if run.done_json.is_file():
            return "FINISHED", {"flightplan.status": "finished",
                                "flightplan.status_reason": "finished: done.json written"}
        if final:
            return "KILLED", {"flightplan.status": "incomplete", "flightplan.status_reason":
                              "the runner ended before this run finished (crash or interrupt); "
                              "`flightplan run` resumes it"}
        return "RUNNING", {"flightplan.status": "running"}


def _final_asked(commands: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the runner; True when it asked for the last pass (the
    line ``final``) or went away (end of file)."""
    readable, _, _ = select.select([commands], [], [], max(0.0, timeout_s))
    if not readable:
        return False
    data = os.read(commands, 4096)
    return not data or FINAL_COMMAND.encode() in data


def serve(mirror: Mirror, *, commands: int, emit: Callable[[dict[str, Any]], None],
          poll_s: float = POLL_S) -> None:
    """The mirror process's loop (see the module docstring): open the store, then a
    :meth:`Mirror.sweep` every ``poll_s`` seconds until the runner asks for the last one.

    Args:
        mirror: what to mirror.
        commands: the file descriptor the runner's commands arrive on (stdin).
        emit: sends one message (``{"say": ...}`` or ``{"report": ...}``) to the runner.
        poll_s: seconds between sweeps while the store answers.
    """
    error: TrackingFailed | None = None
    said: tuple[Any, ...] | None = None
    wait = 0.0
    try:
        mirror.open()
    except TrackingFailed as exc:
        error, wait = exc, poll_s
        emit({"say": f"live tracking: {exc}; training goes on: the rows are kept and sent "
                     f"when MLflow answers"})
    while True:
        final = _final_asked(commands, wait)
        try:
            mirror.sweep(final=final)
        except Exception as exc:  # noqa: BLE001 (the store is down or refused: retry later)
            failed = exc if isinstance(exc, TrackingFailed) else TrackingFailed(
                f"MLflow at {mirror.uri}: {type(exc).__name__}: {exc}", uri=mirror.uri)
            if error is None:
                emit({"say": f"live tracking: {failed}; training goes on: the rows are kept "
                             f"and sent when MLflow answers"})
            error, wait = failed, min(max(wait, poll_s) * 2, MAX_BACKOFF_S)
        else:
            if error is not None:
                emit({"say": f"live tracking: MLflow at {redact(mirror.uri)} answers again; the rows "
                             f"kept meanwhile are sent"})
            error, wait = None, poll_s
        report = mirror.report(error=error, final=final)
        state = (report.runs, report.sent, report.error)
        if final or state != said:
            emit({"report": report.to_json()})
            said = state
        if final:
            return


def main(argv: list[str] | None = None) -> int:
    """``python -m flightplan.tracking.mirror``: parse the arguments and :func:`serve`.

    Returns:
        0 after the last pass (whether or not the store took everything: the report says).
    """
    parser = argparse.ArgumentParser(prog="python -m flightplan.tracking.mirror",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("campaign_dir", type=Path)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--poll-s", type=float, default=POLL_S)
    args = parser.parse_args(argv)
    uri = os.environ.get(URI_VARIABLE)
    if not uri:
        parser.error(f"${URI_VARIABLE} names no tracking store; set it to the MLflow URI")
    # the protocol keeps stdout; anything a library prints goes to stderr (the log) instead
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def emit(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    require_mlflow()   # imported now, while the runner checks the data, not at the first rows
    serve(Mirror(args.campaign_dir, uri, experiment=args.experiment),
          commands=sys.stdin.fileno(), emit=emit, poll_s=args.poll_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
