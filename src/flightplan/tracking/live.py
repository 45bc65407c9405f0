"""Live tracking: mirror a campaign's runs into MLflow while they train.

``flightplan run`` with ``[tracking] mlflow = "URI"`` (or ``--tracking-uri``) starts a
:class:`LiveMirror`: a process of its own (:mod:`flightplan.tracking.mirror`, at the
runner's CPU priority) that tails ``runs/<run_id>/measurements.jsonl`` of every run and
sends the rows, params, tags and statuses to MLflow. The runner process does no MLflow
work and shares no lock, thread or interpreter with it, so neither a slow, locked or down
store nor a mirror waiting for CPU on a saturated machine can slow training or delay
stopping it:

- the trials never talk to MLflow: the rows are read from the files they write anyway
  (the ledger and run directories stay the source of truth);
- the mirror's own lines (the store fails, training goes on; it answers again) are
  printed by the runner as they come; MLflow's log lines go to
  ``.flightplan/mlflow_mirror.log`` in the campaign folder;
- at the end the runner asks the mirror for its last pass and waits at most
  :data:`FLUSH_TIMEOUT_S` (:data:`INTERRUPT_FLUSH_S` after Ctrl-C or SIGTERM, by when the
  runner has already killed its workers), then stops it, counts from the run folders
  what the store lacks (:class:`MirrorOutcome`) and says it in one line, with the command
  that sends it: running ``flightplan run`` again when runs are left to resume, else
  ``flightplan export mlflow`` after ``close`` (which sends every row, the pilot's too:
  ``results/pilot/`` holds them).

Usage (the CLI gives the runner :func:`observer`)::

    with mirror_runs(spec.campaign_dir, uri, experiment=spec.campaign.name, say=print,
                     spec_file="campaign.toml"):
        ...  # data check, pilot, runs
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, ContextManager, Iterator

from flightplan.publish.results import RESULTS_DIRNAME
from flightplan.redact import redact
from flightplan.rundir import RunDir
from flightplan.run.executors.tether import tethered
from flightplan.spec import CampaignSpec
from flightplan.tracking.mirror import (
    FINAL_COMMAND, POLL_S, TERMINAL_STATUSES, URI_VARIABLE, MirrorReport)
from flightplan.tracking.store import metric_points

__all__ = ["LiveMirror", "MirrorOutcome", "mirror_runs", "mirrored_store", "observer",
           "resolve_tracking_uri", "left_line", "FLUSH_TIMEOUT_S", "INTERRUPT_FLUSH_S",
           "LOG_NAME"]

FLUSH_TIMEOUT_S = 10.0   # the runner's wait for the mirror's last pass at the end
INTERRUPT_FLUSH_S = 2.0  # the same after Ctrl-C/SIGTERM: the prompt comes back first
LOG_NAME = "mlflow_mirror.log"   # in <campaign>/.flightplan/: MLflow's own lines


def resolve_tracking_uri(uri: str, base_dir: Path) -> str:
    """``uri`` with a relative ``sqlite:///name.db`` made absolute under ``base_dir``
    (the campaign folder); any other URI unchanged."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str((Path(base_dir) / uri[len(prefix):]).resolve())
    return uri


@dataclass(frozen=True)
class MirrorOutcome:
    """What the store lacks when the mirror stopped, counted from the run folders.

    Attributes:
        sent: metric points the mirror sent.
        missing_points: run id → metric points of its measurements the store lacks (runs
            lacking none are left out).
        missing_status: runs with measurement rows whose final status (FINISHED, FAILED or
            KILLED) the store lacks.
        incomplete: runs with measurement rows neither finished nor stopped (a later
            ``flightplan run`` resumes them).
        error: the mirror's last failure (None: its last pass succeeded).
        cpu_s: CPU seconds the mirror process used (None when it never reported).
        complete: the mirror made its last pass and reported it.
    """

    sent: int
    missing_points: dict[str, int]
    missing_status: tuple[str, ...]
    incomplete: tuple[str, ...]
    error: str | None
    cpu_s: float | None
    complete: bool

    @property
    def points(self) -> int:
        """Metric points the store lacks, in all."""
        return sum(self.missing_points.values())

    @property
    def runs(self) -> list[str]:
        """Runs the store lacks something of (points or final status), sorted."""
        return sorted(set(self.missing_points) | set(self.missing_status))


def _audit(campaign_dir: Path, report: MirrorReport | None, *, error: str | None,
           complete: bool) -> MirrorOutcome:
    """Compare every run folder's measurements with what ``report`` says the store holds."""
    runs_dir = Path(campaign_dir) / "runs"
    folders = sorted(p for p in runs_dir.iterdir() if RunDir(p).trial_json.is_file()) \
        if runs_dir.is_dir() else []
    known = report.runs if report else {}
    missing: dict[str, int] = {}
    no_status, incomplete = [], []
    for folder in folders:
        rows = RunDir(folder).rows()
        if not rows:
            continue
        held = known.get(folder.name)
        lacking = sum(len(metric_points(row)) for row in rows) - (held.points if held else 0)
        if lacking > 0:
            missing[folder.name] = lacking
        if held is None or held.status not in TERMINAL_STATUSES:
            no_status.append(folder.name)
        if RunDir(folder).status() is None:
            incomplete.append(folder.name)
    return MirrorOutcome(report.sent if report else 0, missing, tuple(no_status),
                         tuple(incomplete), error, report.cpu_s if report else None, complete)


class LiveMirror:
    """The runner's handle on the mirror process (:mod:`flightplan.tracking.mirror`).

    Args:
        campaign_dir: the campaign folder.
        tracking_uri: the MLflow store (resolve a relative SQLite path first).
        experiment: the MLflow experiment name.
        say: called, from a thread of the runner, with each line the mirror has for the
            user (the store failed, training goes on; it answers again).
        poll_s: seconds between the mirror's passes.

    Raises:
        Nothing: the mirror's failures are reported, never raised.
    """

    def __init__(self, campaign_dir: Path, tracking_uri: str, *, experiment: str,
                 say: Callable[[str], None] | None = None, poll_s: float = POLL_S) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.uri = tracking_uri
        self.experiment = experiment
        self.say = say or (lambda line: None)
        self.poll_s = poll_s
        self.report: MirrorReport | None = None   # the latest report of the mirror
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._logger: threading.Thread | None = None    # copies its stderr into the log
        self._ended = threading.Event()           # the last report came, or the pipe closed

    @property
    def log_path(self) -> Path:
        """``<campaign>/.flightplan/mlflow_mirror.log``: the mirror process's stderr."""
        return self.campaign_dir / ".flightplan" / LOG_NAME

    @property
    def error(self) -> str | None:
        """The mirror's last failure, None while its passes succeed."""
        return self.report.error if self.report else None

    @property
    def sent(self) -> int:
        """Metric points the mirror sent so far."""
        return self.report.sent if self.report else 0

    def start(self) -> None:
        """Start the mirror process; it dies with the runner and ignores Ctrl-C (the
        runner stops it), like the workers (:func:`flightplan.run.executors.tether.tethered`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # the URI may carry a credential: it goes through the environment (readable by this
        # user alone), never on the command line (`ps` shows that to every user)
        argv = [sys.executable, "-m", "flightplan.tracking.mirror", str(self.campaign_dir),
                "--experiment", self.experiment, "--poll-s", str(self.poll_s)]
        with open(self.log_path, "ab") as log:
            log.write(f"--- flightplan live tracking into {redact(self.uri)} started "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%S')} ---\n".encode())
        self._process = subprocess.Popen(
            tethered(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **{URI_VARIABLE: self.uri}))
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,),
                                        name="flightplan-mlflow-mirror", daemon=True)
        self._logger = threading.Thread(target=self._log, args=(self._process.stderr,),
                                        name="flightplan-mlflow-mirror-log", daemon=True)
        self._reader.start()
        self._logger.start()

    def _log(self, stream: IO[bytes]) -> None:
        """Append the mirror's stderr (MLflow's own lines) to :attr:`log_path`, each line
        with its credentials masked (MLflow may name the store's URI)."""
        with open(self.log_path, "ab") as log:
            for line in stream:
                log.write(redact(line.decode("utf-8", "replace")).encode())
                log.flush()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "say" in message:
                self.say(str(message["say"]))
            elif "report" in message:
                self.report = MirrorReport.from_json(message["report"])
                if self.report.final:
                    self._ended.set()
        self._ended.set()

    def stop(self, timeout_s: float = FLUSH_TIMEOUT_S) -> MirrorOutcome:
        """Ask for the last pass, wait for it at most ``timeout_s`` seconds, stop the process
        (killed when still busy) and count what the store lacks.

        Returns:
            :class:`MirrorOutcome`.
        """
        process = self._process
        assert process is not None and process.stdin is not None, "start() first"
        why: str | None = None
        try:
            with contextlib.suppress(OSError):      # the process may have ended already
                process.stdin.write(f"{FINAL_COMMAND}\n".encode())
                process.stdin.close()
            if not self._ended.wait(timeout_s):
                why = f"the mirror did not finish its last pass within {timeout_s:g} s"
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1.0)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
        for thread in (self._reader, self._logger):
            if thread is not None:
                thread.join(timeout=1.0)
        report = self.report
        complete = report is not None and report.final
        if not complete and why is None:
            why = (f"the mirror process ended with exit code {process.returncode} before its "
                   f"last pass; see {self.log_path}")
        # the store's last failure explains best what is missing; else why the pass is
        error = report.reason if report is not None and report.error else why
        return _audit(self.campaign_dir, report, error=error, complete=complete)


def _shown(path: Path) -> str:
    """``path`` as the user would type it here: relative to the working folder when that is
    shorter."""
    absolute = str(Path(path).resolve())
    relative = os.path.relpath(absolute)
    return relative if len(relative) < len(absolute) else absolute


def left_line(outcome: MirrorOutcome, *, uri: str, spec_file: str, campaign_dir: Path,
              resume: bool) -> str | None:
    """The runner's last line on live tracking, None when the store lacks nothing.

    Args:
        outcome: what the store lacks.
        uri: the store (shown with its credentials masked).
        spec_file: the campaign file as given to ``flightplan run``.
        campaign_dir: the campaign folder (``results/`` is in it).
        resume: the runner was interrupted or failed: running it again is the next step.
    """
    if not outcome.runs:
        return None
    uri = redact(uri)
    parts = []
    if outcome.points:
        parts.append(f"{outcome.points} metric point(s) of {len(outcome.missing_points)} run(s)")
    if outcome.missing_status:
        parts.append(f"the final status of {len(outcome.missing_status)} run(s)")
    head = (f"live tracking: {' and '.join(parts)} not sent to {uri}"
            + (f" ({outcome.error})" if outcome.error else ""))
    again = f"running `flightplan run {spec_file}` again sends them"
    if resume or outcome.incomplete:
        return f"{head}; {again}"
    results = _shown(Path(campaign_dir) / RESULTS_DIRNAME)
    return (f"{head}; `flightplan export mlflow {results} --tracking-uri {uri}` after "
            f"`flightplan close {spec_file}` sends them")


@contextlib.contextmanager
def mirror_runs(campaign_dir: Path, tracking_uri: str | None, *, experiment: str,
                say: Callable[[str], None] | None = None,
                spec_file: str = "campaign.toml") -> Iterator[LiveMirror | None]:
    """Run a :class:`LiveMirror` for the body of the ``with`` (nothing when no URI).

    On exit it waits at most :data:`FLUSH_TIMEOUT_S` for the mirror's last pass
    (:data:`INTERRUPT_FLUSH_S` when the body ends by Ctrl-C or SIGTERM) and says, through
    ``say``, what the store lacks and which command sends it (:func:`left_line`).
    """
    if not tracking_uri:
        yield None
        return
    mirror = LiveMirror(campaign_dir, resolve_tracking_uri(tracking_uri, campaign_dir),
                        experiment=experiment, say=say)
    mirror.start()
    signalled = failed = False
    try:
        yield mirror
    except KeyboardInterrupt:     # flightplan.interrupts.Interrupted is one
        signalled = True
        raise
    except BaseException:
        failed = True
        raise
    finally:
        outcome = mirror.stop(INTERRUPT_FLUSH_S if signalled else FLUSH_TIMEOUT_S)
        line = left_line(outcome, uri=mirror.uri, spec_file=spec_file,
                         campaign_dir=campaign_dir, resume=signalled or failed)
        if line and say is not None:
            say(line)


def mirrored_store(spec: CampaignSpec, tracking_uri: str | None) -> str | None:
    """The store ``flightplan run`` mirrors ``spec``'s runs into: ``tracking_uri`` (the
    command line's ``--tracking-uri``, a relative ``sqlite:///`` path taken from the current
    folder, as ``export`` takes it), else the campaign file's ``[tracking] mlflow`` (a
    relative path taken from the campaign folder, by :func:`mirror_runs`); None when
    neither names one."""
    if tracking_uri:
        return resolve_tracking_uri(tracking_uri, Path.cwd())
    return spec.tracking.mlflow if spec.tracking else None


def observer(tracking_uri: str | None = None) -> Callable[[CampaignSpec], ContextManager[object]]:
    """The observer ``flightplan run`` attaches (:data:`flightplan.run.campaign.Observer`):
    for a campaign, :func:`mirror_runs` into :func:`mirrored_store`, in its ``[tracking]
    experiment`` (default: the campaign's name), with its lines on stderr; nothing when
    no store is named."""
    def watch(spec: CampaignSpec) -> ContextManager[object]:
        uri = mirrored_store(spec, tracking_uri)
        experiment = (spec.tracking.experiment if spec.tracking else None) or spec.campaign.name
        return mirror_runs(spec.campaign_dir, uri, experiment=experiment,
                           say=lambda line: print(line, file=sys.stderr, flush=True),
                           spec_file=spec.source)
    return watch
