"""Kill processes at chosen moments, run them again, and check that nothing was lost.

A :class:`CrashPoint` names one moment: the n-th ``os.replace``/``os.rename``, ``os.fsync``,
``os.unlink``, file opened for writing, or SQLite ``COMMIT``/``INSERT`` of the runner or of a
trial process (carried out by the ``faultshim/sitecustomize.py`` in the child), or a seeded
delay after which the whole process group gets SIGKILL. On a Ray cluster
(:class:`~.flight_faults.Flights`) a point of role ``flight`` kills the whole flight node a
trial process runs on, at such a call or at a delay. :func:`count_calls` runs a command once
in count mode so that crash points are drawn among calls that really happen
(:func:`draw_points`).

After the runs, :func:`fingerprint` takes the sha256 of every product (parameters,
predictions, metrics), :func:`ledger_findings` checks the ledger (SQLite
``PRAGMA integrity_check`` and, for every run, events in a valid order) and
:func:`store_fingerprint` reads back what ``flightplan export mlflow`` left in an MLflow
store. :func:`crash_campaign` takes one campaign through ``run``, ``close`` and ``export``,
each killed at its points and run again.

Usage::

    counts = count_calls(argv, cwd=campaign_dir)
    for point in draw_points(counts, n=3, seed=0):
        attempt = run_with_crash(argv, cwd=campaign_dir, point=point, marker=tmp / "fired")
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from flightplan.run.records import EVENT_KINDS

from .cli_harness import child_env

if TYPE_CHECKING:
    from .flight_faults import Flights

__all__ = ["SHIM_DIR", "shim_path", "CrashPoint", "Attempt", "CampaignCrashReport", "crash_campaign",
           "count_calls", "draw_points", "run_with_crash", "fingerprint", "store_fingerprint",
           "ledger_findings", "event_order_ok", "WATCHED"]

SHIM_DIR = Path(__file__).resolve().with_name("faultshim")


def shim_path(pythonpath: str | None) -> str:
    """A ``PYTHONPATH`` that loads the fault shim (its ``sitecustomize``) first, then
    ``pythonpath`` (may be empty or None)."""
    return os.pathsep.join(p for p in (str(SHIM_DIR), pythonpath) if p)
# substrings that count-mode tallies separately: checkpoint files, the results directory,
# the folders where the Trainer and Lightning write their own saves, MLflow's artifacts
WATCHED = ("checkpoints", "results", "staging", "mlartifacts")


@dataclass(frozen=True)
class CrashPoint:
    """One moment to SIGKILL at.

    Attributes:
        role: ``runner`` (the ``flightplan`` process), ``trial`` (a worker), ``any``, or
            ``flight``: a worker on a Ray flight node, where the whole node is killed.
        point: ``replace``, ``fsync``, ``unlink``, ``open``, ``commit``, ``insert`` or
            ``timer``.
        nth: fire at this call (1-based) within one process of that role.
        after: fire right after the call instead of right before it.
        contains: only calls whose path contains this (``replace``/``fsync``/``unlink``/``open``).
        group: kill the whole process group (the machine dies) or only that process.
        delay_s: for ``timer``: seconds after the start (``flight``: then the first flight
            node that runs a worker).
    """

    role: str
    point: str
    nth: int = 1
    after: bool = False
    contains: str = ""
    group: bool = True
    delay_s: float = 0.0

    def label(self) -> str:
        """Short text for tables: ``trial fsync#3 (checkpoints) before``."""
        if self.point == "timer":
            return (f"flight node at {self.delay_s:.1f} s" if self.role == "flight"
                    else f"whole group at {self.delay_s:.1f} s")
        where = f" ({self.contains})" if self.contains else ""
        call = f"{self.point}#{self.nth}{where} {'after' if self.after else 'before'}"
        if self.role == "flight":
            return f"flight node at trial {call}"
        return f"{self.role} {call}" + ("" if self.group else ", that process only")


@dataclass
class Attempt:
    """One execution: its exit code (negative: killed by that signal), whether the crash
    point fired, seconds it took, its stdout and the end of its stderr."""

    code: int
    fired: bool
    wall_s: float
    stderr_tail: str
    stdout: str = ""


def fault_config(point: CrashPoint, marker: Path) -> dict:
    """The shim's JSON for ``point`` (``faultshim/sitecustomize.py``)."""
    return dict({k: v for k, v in asdict(point).items() if k != "delay_s"}, marker=str(marker))


def _env(point: CrashPoint | None, marker: Path | None, count_file: Path | None) -> dict[str, str]:
    env = child_env()
    env.pop("FLIGHTPLAN_FAULT_FILE", None)   # a flight node's, not this process's
    env["PYTHONPATH"] = shim_path(env.get("PYTHONPATH"))
    if count_file is not None:
        env["FLIGHTPLAN_FAULT_COUNT"] = str(count_file)
        env["FLIGHTPLAN_FAULT_CONTAINS"] = ",".join(WATCHED)
    elif point is not None and point.point != "timer" and point.role != "flight":
        env["FLIGHTPLAN_FAULT"] = json.dumps(fault_config(point, marker))
    return env


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
         kill_after_s: float | None = None,
         watch: Callable[[subprocess.Popen], None] | None = None) -> tuple[int, float, str, str]:
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    watcher = threading.Thread(target=watch, args=(proc,), daemon=True) if watch else None
    if watcher is not None:
        watcher.start()
    out = err = b""
    try:
        try:
            out, err = proc.communicate(timeout=kill_after_s or timeout_s)
        except subprocess.TimeoutExpired:
            if kill_after_s is None:
                raise
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=timeout_s)
    finally:
        try:  # nothing of this execution may outlive it (a worker left behind would race the next)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.kill()
        proc.wait()
        if watcher is not None:
            watcher.join()
    text = err.decode("utf-8", "replace")
    return (proc.returncode, time.monotonic() - start, "\n".join(text.strip().splitlines()[-5:]),
            out.decode("utf-8", "replace"))


def count_calls(argv: list[str], *, cwd: Path, timeout_s: float = 900,
                flights: Flights | None = None) -> tuple[int, dict]:
    """Run ``argv`` once without faults, counting calls (on ``flights`` too: their trial
    processes count as ``trial``). Returns (exit code, counts) with counts ``{(role, point,
    contains): the most calls one process of that role made}``."""
    count_file = cwd / ".fault-counts.jsonl"
    count_file.unlink(missing_ok=True)
    if flights is not None:
        flights.arm({"count": str(count_file), "contains": ",".join(WATCHED)})
    try:
        code, _, _, _ = _run(argv, cwd=cwd, env=_env(None, None, count_file), timeout_s=timeout_s)
    finally:
        if flights is not None:
            flights.arm(None)
    counts: dict[tuple[str, str, str], int] = {}
    if count_file.is_file():
        for line in count_file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            key = (row["role"], row["point"], row["contains"])
            counts[key] = max(counts.get(key, 0), row["count"])
        count_file.unlink()
    return code, counts


def draw_points(counts: dict, *, n: int, seed: int, kinds: list[tuple[str, str, str]] | None = None,
                timer_max_s: float | None = None) -> list[CrashPoint]:
    """``n`` crash points drawn with ``random.Random(seed)`` among the counted calls of
    ``kinds`` (role, point, contains), before or after the call, and — when
    ``timer_max_s`` is given — seeded delays up to it."""
    rng = random.Random(seed)
    pool = [key for key in (kinds or sorted(counts)) if counts.get(key, 0) > 0]
    points = []
    for _ in range(n):
        if timer_max_s and (not pool or rng.random() < 0.25):
            points.append(CrashPoint("any", "timer", delay_s=round(rng.uniform(0.5, timer_max_s), 2)))
            continue
        role, point, contains = rng.choice(pool)
        points.append(CrashPoint(role, point, nth=rng.randint(1, counts[(role, point, contains)]),
                                 after=rng.random() < 0.5, contains=contains,
                                 group=role == "runner" or rng.random() < 0.5))
    return points


def run_with_crash(argv: list[str], *, cwd: Path, point: CrashPoint | None, marker: Path,
                   timeout_s: float = 900, flights: Flights | None = None) -> Attempt:
    """Run ``argv`` with ``point`` armed (None: no fault). ``marker`` records firing. A point
    of role ``flight`` needs ``flights`` (the Ray cluster whose node it kills)."""
    marker.unlink(missing_ok=True)
    on_flight = point is not None and point.role == "flight"
    if on_flight and flights is None:
        raise ValueError(f"{point.label()}: a flight point needs the cluster's Flights")
    kill_after = point.delay_s if point is not None and point.point == "timer" and not on_flight \
        else None
    watch = None
    if on_flight:
        flights.arm(None if point.point == "timer" else dict(fault_config(point, marker),
                                                            role="trial", freeze=True))
        watch = flights.watcher(point, marker)
    try:
        code, wall_s, tail, out = _run(argv, cwd=cwd, env=_env(point, marker, None),
                                       timeout_s=timeout_s, kill_after_s=kill_after, watch=watch)
    finally:
        if on_flight:
            flights.arm(None)
            flights.replenish()
    fired = marker.exists() or (kill_after is not None and code == -signal.SIGKILL)
    marker.unlink(missing_ok=True)
    return Attempt(code, fired, wall_s, tail, out)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


PRODUCTS = ("artifact/model.safetensors", "artifact/artifact.json", "predictions.csv", "metrics.json")


def fingerprint(campaign_dir: Path) -> dict[str, str]:
    """sha256 of every run's products (``runs/<id>/`` parameters, artifact description,
    predictions, metrics) and of the same files published under ``results/``. A folder set
    aside (``runs/<id>.restarted-<n>``: a pilot run again after a kill) is kept evidence,
    not a product."""
    out = {}
    for run_dir in sorted(p for p in (campaign_dir / "runs").iterdir()
                          if ".restarted-" not in p.name):
        for rel in PRODUCTS:
            if (run_dir / rel).is_file():
                out[f"runs/{run_dir.name}/{rel}"] = _sha(run_dir / rel)
    results = campaign_dir / "results"
    for pattern in ("predictions/*.csv", "metrics/*.json", "artifacts/*/model.safetensors"):
        for path in sorted(results.glob(pattern)):
            out[path.relative_to(campaign_dir).as_posix()] = _sha(path)
    return out


# one letter per event: executions [SR]C*[FI] (or a bare I), then the final T (or a cut X)
_VALID_RUN = re.compile(r"^(?:[SR]C*[FI]|I)*(?:[SR]C*T|T|X)?$")
# every event a trial's rows become (checkpoints saved, verified, rejected, forced, sent home
# from a flight) is a C
_OPEN_RUN = re.compile(r"^(?:[SR]C*[FI]|I)*[SR]C*$")
_TOKENS = {**{kind: "C" for kind in (*EVENT_KINDS.values(), "checkpoint_verified")},
           "started": "S", "resumed": "R", "finished": "T", "stopped": "T",
           "failed": "F", "interrupted": "I", "cut": "X",
           "not_started": "", "past_end": ""}     # the rental's end: before an execution


def event_order_ok(kinds: list[str], *, open_execution: bool = False) -> bool:
    """Whether one run's event kinds (in ledger order) are in a valid order: executions
    that each begin with ``started``/``resumed`` and end ``failed``, ``interrupted`` (a
    killed runner, noted by the next one) or, last, ``finished``/``stopped``; or ``cut``.
    ``open_execution``: the runner was killed and no runner has run since, so the last
    execution may still be open (``started``/``resumed`` and its checkpoints, no end yet:
    the next runner notes it ``interrupted``)."""
    tokens = "".join(_TOKENS.get(kind, "?") for kind in kinds)
    return bool(_VALID_RUN.match(tokens) or (open_execution and _OPEN_RUN.match(tokens)))


def ledger_findings(campaign_dir: Path, *, finished: bool = True) -> list[str]:
    """What is wrong with the ledger: ``PRAGMA integrity_check`` not ``ok``, a run whose
    events are out of order, or (``finished``) a run whose status is not final. Not
    ``finished`` (the runner was killed and none ran since): a run's last execution may be
    open, started and not yet noted as interrupted."""
    path = campaign_dir / ".flightplan" / "ledger.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        findings = []
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            findings.append(f"integrity_check: {check}")
        runs = db.execute("SELECT run_id, status FROM runs").fetchall()
        for run_id, status in runs:
            kinds = [k for (k,) in db.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY id",
                                              (run_id,))]
            if not event_order_ok(kinds, open_execution=not finished):
                findings.append(f"{run_id}: events out of order: {' '.join(kinds)}")
            if finished and status not in ("finished", "stopped", "cut", "superseded"):
                findings.append(f"{run_id}: status {status} after the campaign finished")
        return findings
    finally:
        db.close()


def store_fingerprint(database: Path) -> dict[str, str]:
    """What an MLflow SQLite store holds, read back through ``MlflowClient``, keyed by
    experiment name and the tag ``flightplan.run_id`` (MLflow's own ids and the folders
    artifacts live in differ between stores and are left out): per experiment its tags;
    per run its status, start and end, name, params, tags, every metric's whole history
    (step, timestamp, value), dataset inputs and the sha256 of each artifact MLflow lists; a flightplan
    run held by more than one MLflow run is ``"<n> runs"``."""
    from urllib.parse import unquote, urlparse

    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{database}")
    out: dict[str, str] = {}
    for experiment in client.search_experiments(view_type=ViewType.ALL):
        out[f"experiment {experiment.name}"] = json.dumps(
            [experiment.lifecycle_stage, sorted(experiment.tags.items())])
        held: dict[str, list] = {}
        for run in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL,
                                      max_results=50000):
            held.setdefault(str(run.data.tags.get("flightplan.run_id")), []).append(run)
        for run_id, runs in sorted(held.items()):
            key = f"{experiment.name}/{run_id}"
            if len(runs) != 1:
                out[key] = f"{len(runs)} runs"
                continue
            info, data = runs[0].info, runs[0].data
            out[key] = json.dumps([info.status, info.start_time, info.end_time,
                                   info.lifecycle_stage, info.run_name])
            out[f"{key} params"] = json.dumps(sorted(data.params.items()))
            out[f"{key} tags"] = json.dumps(sorted(data.tags.items()))
            for metric in sorted(data.metrics):
                out[f"{key} metric {metric}"] = json.dumps(sorted(
                    (m.step, m.timestamp, repr(m.value))
                    for m in client.get_metric_history(info.run_id, metric)))
            out[f"{key} inputs"] = json.dumps(sorted(
                [i.dataset.name, i.dataset.digest, i.dataset.source,
                 sorted((tag.key, tag.value) for tag in i.tags)]
                for i in runs[0].inputs.dataset_inputs))
            root = Path(unquote(urlparse(info.artifact_uri).path))
            for name in _artifacts(client, info.run_id):
                out[f"{key} artifact {name}"] = _sha(root / name)
    return out


def _artifacts(client, run_id: str, folder: str | None = None) -> list[str]:
    """Every artifact file of the run as MLflow lists it (MLflow hides the staging files
    of an upload it did not finish, ``.artifact.uploading.*``: no reader of the store sees
    them, and they are left out here too)."""
    found: list[str] = []
    for entry in client.list_artifacts(run_id, folder):
        found += _artifacts(client, run_id, entry.path) if entry.is_dir else [entry.path]
    return found


@dataclass
class CampaignCrashReport:
    """What :func:`crash_campaign` saw.

    Attributes:
        attempts: (crash point label or ``"clean"``, the attempt) in order.
        fired: crash points that fired (the process, or its flight node, really died there).
        differences: product paths whose sha256 differs from the reference (or missing/extra).
        ledger: :func:`ledger_findings` after the campaign finished.
        verify_code: exit code of ``flightplan verify results``.
        rejected: checkpoints set aside at restore (``*.corrupt-*``): a save was not atomic.
        finished: whether a clean ``run``, ``close`` (and ``export``) ended with exit 0.
        store_differences: with an export, the keys of :func:`store_fingerprint` that differ
            from an uninterrupted export of the same results into a fresh store.
    """

    attempts: list[tuple[str, Attempt]]
    fired: int
    differences: list[str]
    ledger: list[str]
    verify_code: int
    rejected: list[str]
    finished: bool
    store_differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """Finished, same products bit for bit (and the same store), ledger whole, results
        verified."""
        return self.finished and not self.differences and not self.ledger \
            and self.verify_code == 0 and not self.store_differences


def _differences(reference: dict[str, str], found: dict[str, str]) -> list[str]:
    return sorted(k for k in set(reference) | set(found) if reference.get(k) != found.get(k))


def crash_campaign(spec: Path, *, run_points: list[CrashPoint], close_points: list[CrashPoint],
                   reference: dict[str, str], export_points: list[CrashPoint] | None = None,
                   run_args: tuple[str, ...] = (), flights: Flights | None = None,
                   clean_tries: int = 3, timeout_s: float = 900) -> CampaignCrashReport:
    """Run ``flightplan run`` (with ``run_args``, on ``flights`` when given) once per crash
    point of ``run_points`` (stopping early if one does not fire and the campaign
    finishes), then clean until it exits 0; the same with ``flightplan close`` and
    ``close_points`` and, unless ``export_points`` is None, with ``flightplan export mlflow``
    into ``mlflow.db`` beside the campaign file; then verify, compare with ``reference`` (a
    :func:`fingerprint` of an uninterrupted campaign) and the store with one that an
    uninterrupted export of the same results fills."""
    from .cli_harness import FLIGHTPLAN

    folder = spec.parent
    marker = folder.parent / f".{folder.name}-fired"
    export = ["export", "mlflow", str(folder / "results"), "--tracking-uri"]
    verbs = [("run", ["run", str(spec), *run_args], run_points),
             ("close", ["close", str(spec)], close_points)]
    if export_points is not None:
        verbs.append(("export", [*export, f"sqlite:///{folder / 'mlflow.db'}"], export_points))
    attempts: list[tuple[str, Attempt]] = []
    finished = True
    for verb, args, points in verbs:
        argv = FLIGHTPLAN + args
        for point in points:
            attempt = run_with_crash(argv, cwd=folder, point=point, marker=marker,
                                     timeout_s=timeout_s, flights=flights)
            attempts.append((f"{verb}: {point.label()}", attempt))
            if not attempt.fired and attempt.code == 0:
                break
        for _ in range(clean_tries):
            attempt = run_with_crash(argv, cwd=folder, point=None, marker=marker, timeout_s=timeout_s)
            attempts.append((f"{verb}: clean", attempt))
            if attempt.code == 0:
                break
        finished = finished and attempts[-1][1].code == 0
    store_differences: list[str] = []
    if export_points is not None and finished:
        uninterrupted = folder / "uninterrupted-export" / "mlflow.db"
        uninterrupted.parent.mkdir()
        again = run_with_crash(FLIGHTPLAN + export + [f"sqlite:///{uninterrupted}"], cwd=folder,
                               point=None, marker=marker, timeout_s=timeout_s)
        store_differences = _differences(store_fingerprint(uninterrupted),
                                         store_fingerprint(folder / "mlflow.db")) \
            if again.code == 0 else [f"the uninterrupted export failed: {again.stderr_tail}"]
    verify = run_with_crash(FLIGHTPLAN + ["verify", str(folder / "results")], cwd=folder,
                            point=None, marker=marker, timeout_s=timeout_s)
    products = fingerprint(folder) if (folder / "runs").is_dir() else {}
    rejected = sorted(p.relative_to(folder).as_posix() for p in folder.glob("runs/*/checkpoints/*.corrupt-*"))
    return CampaignCrashReport(attempts=attempts, fired=sum(a.fired for _, a in attempts),
                               differences=_differences(reference, products),
                               ledger=ledger_findings(folder) if (folder / ".flightplan").is_dir()
                               else ["no ledger"],
                               verify_code=verify.code, rejected=rejected, finished=finished,
                               store_differences=store_differences)
