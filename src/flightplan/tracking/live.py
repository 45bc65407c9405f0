"""Live tracking: mirror a campaign's runs into MLflow while they train.

``flightplan run`` with ``[tracking] mlflow = "URI"`` (or ``--tracking-uri``) starts a
:class:`LiveMirror` in the runner process: one background thread that tails
``runs/<run_id>/measurements.jsonl`` of every run (the pilot too, tagged
``flightplan.pilot``) and sends the new rows as metric points, the run's params and tags,
and its status (RUNNING while it trains; FINISHED at ``done.json``; FAILED with the rule
and reason at ``stop.json``; KILLED when the runner ends with the run neither finished nor
stopped; RUNNING again when a later ``flightplan run`` resumes it). The trial processes
never talk to MLflow, so MLflow being slow or down cannot slow or stop training:

- rows are read from the files the trial writes anyway (the ledger and run directories
  stay the source of truth); the mirror keeps what it could not send and sends it when
  the store answers again (a pass every 2 s, backing off to 30 s between failed
  attempts); on Linux the thread runs at the lowest CPU priority (nice 19);
- at the end of the run the runner waits at most ``flush_timeout_s`` for the last rows,
  then leaves them: ``flightplan export mlflow results`` completes the record (it finds
  the same MLflow runs by their ``flightplan.run_id`` tag and sends only missing points).

Usage (the runner)::

    with mirror_runs(spec.campaign_dir, uri, experiment=spec.campaign.name, say=print):
        ...  # data check, pilot, runs
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from flightplan.tracking.store import (
    MetricPoint, MlflowRun, MlflowStore, flatten, metric_points)
from flightplan.rundir import RunDir
from flightplan.spec import CampaignSpec

__all__ = ["LiveMirror", "mirror_runs", "observer", "resolve_tracking_uri"]

POLL_S = 2.0          # seconds between passes while the store answers (a log_batch to
                      # SQLite costs ~10 ms + ~0.2 ms per point: fewer, larger batches)
NICE = 19             # the mirror thread's CPU priority (Linux): it yields to training
MAX_BACKOFF_S = 30.0  # longest wait between attempts while it does not
FLUSH_TIMEOUT_S = 10.0


def resolve_tracking_uri(uri: str, base_dir: Path) -> str:
    """``uri`` with a relative ``sqlite:///name.db`` made absolute under ``base_dir``
    (the campaign folder); any other URI unchanged."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str((Path(base_dir) / uri[len(prefix):]).resolve())
    return uri


@dataclass
class _RunState:
    """What the mirror knows of one run directory."""

    run_dir: Path
    offset: int = 0                                   # bytes of measurements.jsonl read
    pending: list[MetricPoint] = field(default_factory=list)
    first_ms: int | None = None
    last_ms: int | None = None
    run: MlflowRun | None = None
    status: str | None = None                         # last status the store accepted
    end_ms: int | None = None                         # end time sent with that status


class LiveMirror:
    """A background thread that mirrors ``<campaign_dir>/runs/*`` into MLflow.

    Args:
        campaign_dir: the campaign folder.
        tracking_uri: the MLflow store (resolve a relative SQLite path first).
        experiment: the MLflow experiment name.
        say: called with one line when the store fails the first time and when it
            answers again (default: nothing).
        poll_s: seconds between passes.

    Raises:
        Nothing: every MLflow failure is kept in :attr:`error` and retried.
    """

    def __init__(self, campaign_dir: Path, tracking_uri: str, *, experiment: str,
                 say: Callable[[str], None] | None = None, poll_s: float = POLL_S) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.uri = tracking_uri
        self.experiment = experiment
        self.say = say or (lambda line: None)
        self.poll_s = poll_s
        self.error: str | None = None
        self.sent = 0
        self.cpu_s = 0.0   # CPU time of the mirror's thread (MLflow's import included)
        self._runs: dict[str, _RunState] = {}
        self._store: MlflowStore | None = None
        self._experiment_id: str | None = None
        self._final = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="flightplan-mlflow", daemon=True)

    def start(self) -> None:
        """Start the thread (it imports MLflow itself, so the runner never waits for it)."""
        self._thread.start()

    def stop(self, timeout_s: float = FLUSH_TIMEOUT_S) -> dict[str, Any]:
        """Make a last pass (runs neither finished nor stopped become KILLED) and wait for it
        at most ``timeout_s`` seconds.

        Returns:
            ``{sent, pending_points, unsent_runs, error, cpu_s}``: points sent in all,
            points read but not sent, runs whose status or points the store lacks, the
            last error, the CPU seconds the thread used.
        """
        self._final.set()
        self._thread.join(timeout_s)
        states = list(self._runs.items())  # the thread may still run after a timeout
        unsent = sorted(r for r, s in states if s.pending or s.run is None or s.status is None)
        return {"sent": self.sent, "pending_points": sum(len(s.pending) for _, s in states),
                "unsent_runs": unsent, "error": self.error, "cpu_s": self.cpu_s}

    # the thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        try:  # Linux: a thread id is a scheduling entity; lowest priority for this one
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        except (AttributeError, OSError):
            pass  # elsewhere the thread keeps the runner's priority
        wait = self.poll_s
        while True:
            final = self._final.is_set()
            started = time.thread_time()
            try:
                self._pass(final=final)
                if self.error is not None:
                    self.say(f"live tracking: MLflow at {self.uri} answers again; "
                             f"rows kept meanwhile are sent")
                self.error, wait = None, self.poll_s
            except Exception as exc:  # the store is down or refused: keep everything, retry
                if self.error is None:
                    self.say(f"live tracking: {exc}; training goes on, the rows are kept and "
                             f"sent when MLflow answers (or by `flightplan export mlflow`)")
                self.error = str(exc)
                wait = min(wait * 2, MAX_BACKOFF_S)
            self.cpu_s += time.thread_time() - started
            if final:
                return
            self._final.wait(wait)

    def _pass(self, *, final: bool) -> None:
        runs_dir = self.campaign_dir / "runs"
        folders = sorted(p for p in runs_dir.iterdir() if RunDir(p).trial_json.is_file()) \
            if runs_dir.is_dir() else []
        for folder in folders:
            state = self._runs.setdefault(folder.name, _RunState(folder))
            self._read(state)
        if not any(s.first_ms is not None for s in self._runs.values()):
            return
        if self._store is None:
            self._store = MlflowStore(self.uri)
        if self._experiment_id is None:
            self._experiment_id = self._store.experiment(
                self.experiment, tags={"flightplan.campaign": self.experiment})
        for run_id, state in self._runs.items():
            if state.first_ms is not None:
                self._send(run_id, state, final=final)

    def _read(self, state: _RunState) -> None:
        """Parse the complete rows appended since the last pass into ``state.pending``."""
        run = RunDir(state.run_dir)
        try:
            if run.measurements.stat().st_size < state.offset:
                state.offset = 0                         # a new file: read it whole again
        except FileNotFoundError:
            return
        rows, state.offset = run.read_rows(state.offset)
        for row in rows:
            stamp = int(round(row.time * 1000))
            state.first_ms = stamp if state.first_ms is None else state.first_ms
            state.last_ms = stamp
            state.pending.extend(metric_points(row))

    def _send(self, run_id: str, state: _RunState, *, final: bool) -> None:
        store = self._store
        assert store is not None and self._experiment_id is not None
        if state.run is None:
            trial = RunDir(state.run_dir).read_json(RunDir.TRIAL) or {}
            tags = {"flightplan.config_hash": str(trial.get("config_hash")),
                    "flightplan.tier": str(trial.get("tier")),
                    "flightplan.task": str(trial.get("task")), "flightplan.live": "true"}
            if run_id.startswith("pilot-"):
                tags["flightplan.pilot"] = "true"
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


@contextlib.contextmanager
def mirror_runs(campaign_dir: Path, tracking_uri: str | None, *, experiment: str,
                say: Callable[[str], None] | None = None) -> Iterator[LiveMirror | None]:
    """Run a :class:`LiveMirror` for the body of the ``with`` (nothing when no URI).

    On exit it waits at most :data:`FLUSH_TIMEOUT_S` for the last rows and says what was
    left for ``flightplan export mlflow``.
    """
    if not tracking_uri:
        yield None
        return
    mirror = LiveMirror(campaign_dir, resolve_tracking_uri(tracking_uri, campaign_dir),
                        experiment=experiment, say=say)
    mirror.start()
    try:
        yield mirror
    finally:
        left = mirror.stop()
        if (left["pending_points"] or left["unsent_runs"]) and say is not None:
            say(f"live tracking: {left['pending_points']} metric point(s) and "
                f"{len(left['unsent_runs'])} run(s) not sent to {mirror.uri}; "
                f"`flightplan export mlflow results --tracking-uri {mirror.uri}` after "
                f"`flightplan close` completes the record")


def observer(tracking_uri: str | None = None) -> Callable[[CampaignSpec], ContextManager[object]]:
    """The observer ``flightplan run`` attaches (:data:`flightplan.run.campaign.Observer`):
    for a campaign, :func:`mirror_runs` into ``tracking_uri`` (``--tracking-uri``), else its
    ``[tracking] mlflow``, in its ``[tracking] experiment`` (default: the campaign's name),
    with its lines on stderr; nothing when neither names a store."""
    def watch(spec: CampaignSpec) -> ContextManager[object]:
        uri = tracking_uri or (spec.tracking.mlflow if spec.tracking else None)
        experiment = (spec.tracking.experiment if spec.tracking else None) or spec.campaign.name
        return mirror_runs(spec.campaign_dir, uri, experiment=experiment,
                           say=lambda line: print(line, file=sys.stderr))
    return watch
