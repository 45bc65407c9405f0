"""Kill processes at chosen moments, run them again, and check that nothing was lost.

A :class:`CrashPoint` names one moment: the n-th ``os.replace``/``os.rename``, ``os.fsync``,
``os.unlink`` or SQLite ``COMMIT``/``INSERT`` of the runner or of a trial process (carried out by the
``faultshim/sitecustomize.py`` in the child), or a seeded delay after which the whole
process group gets SIGKILL. :func:`count_calls` runs a command once in count mode so that
crash points are drawn among calls that really happen (:func:`draw_points`).

After the runs, :func:`fingerprint` takes the sha256 of every product (parameters,
predictions, metrics) and :func:`ledger_findings` checks the ledger: SQLite
``PRAGMA integrity_check`` and, for every run, events in a valid order.

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
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .cli_harness import child_env

__all__ = ["SHIM_DIR", "CrashPoint", "Attempt", "CampaignCrashReport", "crash_campaign",
           "count_calls", "draw_points", "run_with_crash",
           "fingerprint", "ledger_findings", "event_order_ok", "WATCHED"]

SHIM_DIR = Path(__file__).resolve().with_name("faultshim")
# substrings that count-mode tallies separately: checkpoint files, the results directory
WATCHED = ("checkpoints", "results")


@dataclass(frozen=True)
class CrashPoint:
    """One moment to SIGKILL at.

    Attributes:
        role: ``runner`` (the ``flightplan`` process), ``trial`` (a worker) or ``any``.
        point: ``replace``, ``fsync``, ``unlink``, ``commit``, ``insert`` or ``timer``.
        nth: fire at this call (1-based) within one process of that role.
        after: fire right after the call instead of right before it.
        contains: only calls whose path contains this (``replace``/``fsync``/``unlink``).
        group: kill the whole process group (the machine dies) or only that process.
        delay_s: for ``timer``: seconds after the start.
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
            return f"whole group at {self.delay_s:.1f} s"
        where = f" ({self.contains})" if self.contains else ""
        return (f"{self.role} {self.point}#{self.nth}{where} {'after' if self.after else 'before'}"
                + ("" if self.group else ", that process only"))


@dataclass
class Attempt:
    """One execution: its exit code (negative: killed by that signal), whether the crash
    point fired, seconds it took, its stdout and the end of its stderr."""

    code: int
    fired: bool
    wall_s: float
    stderr_tail: str
    stdout: str = ""


def _env(point: CrashPoint | None, marker: Path | None, count_file: Path | None) -> dict[str, str]:
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIM_DIR), env.get("PYTHONPATH", "")) if p)
    if count_file is not None:
        env["FLIGHTPLAN_FAULT_COUNT"] = str(count_file)
        env["FLIGHTPLAN_FAULT_CONTAINS"] = ",".join(WATCHED)
    elif point is not None and point.point != "timer":
        config = {k: v for k, v in asdict(point).items() if k != "delay_s"}
        env["FLIGHTPLAN_FAULT"] = json.dumps(dict(config, marker=str(marker)))
    return env


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
         kill_after_s: float | None = None) -> tuple[int, float, str, str]:
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
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
    text = err.decode("utf-8", "replace")
    return (proc.returncode, time.monotonic() - start, "\n".join(text.strip().splitlines()[-5:]),
            out.decode("utf-8", "replace"))


def count_calls(argv: list[str], *, cwd: Path, timeout_s: float = 900) -> tuple[int, dict]:
    """Run ``argv`` once without faults, counting calls. Returns (exit code, counts) with
    counts ``{(role, point, contains): total over processes of that role, max per process}``."""
    count_file = cwd / ".fault-counts.jsonl"
    count_file.unlink(missing_ok=True)
    code, _, _, _ = _run(argv, cwd=cwd, env=_env(None, None, count_file), timeout_s=timeout_s)
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
                   timeout_s: float = 900) -> Attempt:
    """Run ``argv`` with ``point`` armed (None: no fault). ``marker`` records firing."""
    marker.unlink(missing_ok=True)
    kill_after = point.delay_s if point is not None and point.point == "timer" else None
    code, wall_s, tail, out = _run(argv, cwd=cwd, env=_env(point, marker, None),
                                   timeout_s=timeout_s, kill_after_s=kill_after)
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
_TOKENS = {"started": "S", "resumed": "R", "checkpoint_saved": "C", "checkpoint_verified": "C",
           "checkpoint_rejected": "C", "checkpoint_failed": "C", "finished": "T", "stopped": "T",
           "failed": "F", "interrupted": "I", "cut": "X",
           "not_started": "", "past_end": ""}     # the rental's end: before an execution


def event_order_ok(kinds: list[str]) -> bool:
    """Whether one run's event kinds (in ledger order) are in a valid order: executions
    that each begin with ``started``/``resumed`` and end ``failed``, ``interrupted`` (a
    killed runner, noted by the next one) or, last, ``finished``/``stopped``; or ``cut``."""
    return bool(_VALID_RUN.match("".join(_TOKENS.get(kind, "?") for kind in kinds)))


def ledger_findings(campaign_dir: Path, *, finished: bool = True) -> list[str]:
    """What is wrong with the ledger: ``PRAGMA integrity_check`` not ``ok``, a run whose
    events are out of order, or (``finished``) a run whose status is not final."""
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
            if not event_order_ok(kinds):
                findings.append(f"{run_id}: events out of order: {' '.join(kinds)}")
            if finished and status not in ("finished", "stopped", "cut", "superseded"):
                findings.append(f"{run_id}: status {status} after the campaign finished")
        return findings
    finally:
        db.close()


@dataclass
class CampaignCrashReport:
    """What :func:`crash_campaign` saw.

    Attributes:
        attempts: (crash point label or ``"clean"``, the attempt) in order.
        fired: crash points that fired (the process really died there).
        differences: product paths whose sha256 differs from the reference (or missing/extra).
        ledger: :func:`ledger_findings` after the campaign finished.
        verify_code: exit code of ``flightplan verify results``.
        rejected: checkpoints set aside at restore (``*.corrupt-*``): a save was not atomic.
        finished: whether a clean ``run`` and ``close`` ended with exit 0.
    """

    attempts: list[tuple[str, Attempt]]
    fired: int
    differences: list[str]
    ledger: list[str]
    verify_code: int
    rejected: list[str]
    finished: bool

    @property
    def identical(self) -> bool:
        """Finished, same products bit for bit, ledger whole, results verified."""
        return self.finished and not self.differences and not self.ledger and self.verify_code == 0


def crash_campaign(spec: Path, *, run_points: list[CrashPoint], close_points: list[CrashPoint],
                   reference: dict[str, str], clean_tries: int = 3,
                   timeout_s: float = 900) -> CampaignCrashReport:
    """Run ``flightplan run`` once per crash point of ``run_points`` (stopping early if
    one does not fire and the campaign finishes), then clean until it exits 0; the same
    with ``flightplan close`` and ``close_points``; then verify and compare with
    ``reference`` (a :func:`fingerprint` of an uninterrupted campaign)."""
    from .cli_harness import FLIGHTPLAN

    folder = spec.parent
    marker = folder.parent / f".{folder.name}-fired"
    attempts: list[tuple[str, Attempt]] = []
    finished = True
    for verb, points in (("run", run_points), ("close", close_points)):
        argv = FLIGHTPLAN + [verb, str(spec)]
        for point in points:
            attempt = run_with_crash(argv, cwd=folder, point=point, marker=marker, timeout_s=timeout_s)
            attempts.append((f"{verb}: {point.label()}", attempt))
            if not attempt.fired and attempt.code == 0:
                break
        for _ in range(clean_tries):
            attempt = run_with_crash(argv, cwd=folder, point=None, marker=marker, timeout_s=timeout_s)
            attempts.append((f"{verb}: clean", attempt))
            if attempt.code == 0:
                break
        finished = finished and attempts[-1][1].code == 0
    verify = run_with_crash(FLIGHTPLAN + ["verify", str(folder / "results")], cwd=folder,
                            point=None, marker=marker, timeout_s=timeout_s)
    products = fingerprint(folder) if (folder / "runs").is_dir() else {}
    differences = sorted(k for k in set(reference) | set(products) if reference.get(k) != products.get(k))
    rejected = sorted(p.relative_to(folder).as_posix() for p in folder.glob("runs/*/checkpoints/*.corrupt-*"))
    return CampaignCrashReport(attempts=attempts, fired=sum(a.fired for _, a in attempts),
                               differences=differences,
                               ledger=ledger_findings(folder) if (folder / ".flightplan").is_dir()
                               else ["no ledger"],
                               verify_code=verify.code, rejected=rejected, finished=finished)
