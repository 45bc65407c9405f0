"""Fault injection at scale: crashes, corruption, full disks, hostile input, bad specs.

Runs the faults of the reliability suite (``tests/reliability/``) at a larger N and prints
one table — faults tried, and how many were handled as promised — then every failure.
What "handled" means per family is in the table's last column: bad campaign files give a
one-line error naming the field (and via ``flightplan plan``: exit 2, nothing written);
corrupt and hostile checkpoints are set aside at restore and the previous one is used,
with no code run; hostile results directories are findings of ``verify``; a full disk
(RLIMIT_FSIZE, and a small tmpfs when root can mount one) fails the save clearly and the
run resumes bitwise; a second concurrent ``run`` refuses; SIGKILL at seeded crash points
of a trial-API script resumes bitwise.

The ``campaign`` family kills every way a run executes at ``--crash-points`` (100) points
drawn with ``--seed``, split over ``--kinds``: (a) ``tiny`` and ``digits``: the built-in
text classifier and a plain PyTorch file task; (b) ``file-task``: the regression written as
``docs/tasks.md`` shows; (c) ``trainer`` and ``lightning``: the integrations, also inside
the library's own save (a file it opens in its staging folder) and inside flightplan's
commit of it; (d) ``ray-driver`` and ``ray-node``: the driver of a Ray campaign on a
loopback cluster (token authentication on) and a whole flight node, at a trial's call or
a delay; (e) ``close`` and ``export`` (``flightplan export mlflow`` into a SQLite store);
(f) ``ddp``: ``examples/digits-ddp``, each run two processes (plain PyTorch DDP, gloo): a
point in a trial kills the rank that reaches it, and the executor ends the other.
Each copy of a campaign is killed several times in a row (``--per-campaign``), run again
until it finishes, closed and exported (killed there too), and must end with products
bitwise those of an uninterrupted campaign (a Ray campaign: those of the local one), the
ledger whole with every run's events in order, ``verify`` passing, no checkpoint set
aside, and an MLflow store equal to that of an uninterrupted export. The campaigns are cut
to the least that exercises them (``tests/reliability/small_campaigns.py``; ``--full-tiny``:
the tiny campaign as is).

Usage::

    .venv/bin/python bench/faults.py --only campaign --seed 4417   # the 100 crash points
    .venv/bin/python bench/faults.py --only campaign --seed 4417 --jobs 3   # campaigns side by side
    .venv/bin/python bench/faults.py --only campaign --kinds ray-node,ray-driver --crash-points 10
    .venv/bin/python bench/faults.py --quick          # a few of each (a few minutes)
    .venv/bin/python bench/faults.py --only specs,corruption,hostile

Exit status 0 when every fault was handled, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _freeze_source() -> tempfile.TemporaryDirectory | None:
    """Run this process and every child on a copy of ``src/flightplan`` taken now, so that
    edits to the working tree during a long bench cannot differ between the reference
    campaign and the crashed ones (``--live`` skips it)."""
    if "--live" in sys.argv:
        return None
    frozen = tempfile.TemporaryDirectory(prefix="flightplan-src-")
    shutil.copytree(ROOT / "src" / "flightplan", Path(frozen.name) / "flightplan",
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, frozen.name)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (frozen.name, os.environ.get("PYTHONPATH")) if p)
    return frozen


_FROZEN = _freeze_source()

from reliability import broken_specs, checkpoint_faults, crash_harness, results_faults  # noqa: E402
from reliability import trial_script  # noqa: E402
from reliability.cli_harness import FLIGHTPLAN, TINY, child_env, run_inprocess, snapshot  # noqa: E402
from reliability.small_campaigns import BUILDERS  # noqa: E402
FAMILIES = ("specs", "corruption", "hostile", "disk", "concurrent", "script", "campaign")


@dataclass
class Row:
    """One line of the table: ``handled`` of ``tried``, and what went wrong otherwise."""

    family: str
    handled_means: str
    tried: int = 0
    handled: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    kinds: collections.Counter = field(default_factory=collections.Counter)

    def add(self, ok: bool, what: str) -> None:
        """Count one fault; keep ``what`` when it was not handled."""
        self.tried += 1
        self.handled += bool(ok)
        if not ok:
            self.failures.append(what)

    def absorb(self, other: "Row") -> None:
        """Add ``other``'s counts, failures, seconds and kinds to this row's."""
        self.tried += other.tried
        self.handled += other.handled
        self.failures += other.failures
        self.seconds += other.seconds
        self.kinds.update(other.kinds)


# --- bad campaign files ------------------------------------------------------------------

def _spec_case(case: broken_specs.BrokenSpec, folder: Path) -> tuple[bool, str]:
    from flightplan.errors import SpecError
    from flightplan.spec import load_spec

    path = folder / "campaign.toml"
    path.write_bytes(case.text if isinstance(case.text, bytes) else case.text.encode("utf-8"))
    try:
        load_spec(path)
    except SpecError as exc:
        message = str(exc)
        ok = "\n" not in message and message.startswith(f"{path}: ") and \
            (case.field is None or (exc.field or "").startswith(case.field)) and case.words in message
        return ok, f"{case.family}: {message[:160]!r} (expected field {case.field})"
    except Exception as exc:  # noqa: BLE001 - a crash is what the bench counts
        return False, f"{case.family}: {type(exc).__name__}: {exc}"[:200]
    return False, f"{case.family}: accepted (expected an error on {case.field})"


def _cli_case(case: broken_specs.BrokenSpec, folder: Path) -> tuple[bool, str]:
    path = folder / "campaign.toml"
    path.write_bytes(case.text if isinstance(case.text, bytes) else case.text.encode("utf-8"))
    before = snapshot(folder)
    outcome = run_inprocess(["plan", str(path)])
    lines = outcome.stderr.strip().splitlines()
    ok = outcome.code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and \
        "Traceback" not in outcome.stderr and (case.field is None or case.field in lines[0]) and \
        snapshot(folder) == before
    return ok, f"{case.family}: exit {outcome.code}: {outcome.stderr.strip()[-160:]!r}"


def _draw(strategy, n: int, seed: int) -> list:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    drawn: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value) -> None:
        drawn.append(value)

    collect()
    return drawn


def bench_specs(n: int, seed: int, work: Path) -> list[Row]:
    """Generated broken files through ``load_spec``, and a tenth of them through the CLI."""
    from hypothesis import strategies as st

    direct = Row("bad campaign files (load_spec)", "one-line SpecError naming the field")
    cli = Row("bad campaign files (flightplan plan)", "exit 2, one line, field named, nothing written")
    start = time.monotonic()
    cases = _draw(broken_specs.broken_spec(), n, seed)
    cases += _draw(broken_specs.raw_fault(), max(1, n // 10), seed)
    for i, case in enumerate(cases):
        folder = work / f"spec-{i}"
        folder.mkdir()
        direct.add(*_spec_case(case, folder))
    direct.seconds = time.monotonic() - start
    start = time.monotonic()
    both = st.one_of(broken_specs.broken_spec(), broken_specs.catalog_fault(), broken_specs.raw_fault())
    for i, case in enumerate(_draw(both, max(1, n // 10), seed + 1)):
        folder = work / f"cli-{i}"
        folder.mkdir()
        cli.add(*_cli_case(case, folder))
    cli.seconds = time.monotonic() - start
    return [direct, cli]


# --- checkpoints: corruption and hostile files, at restore --------------------------------

def _history(work: Path) -> dict:
    base = work / "history"
    trial_script.train(base / "run", steps=6, checkpoint_at={1, 3, 5})
    _, after4 = trial_script.train(base / "four", steps=4, checkpoint_at=set())
    _, after6 = trial_script.train(base / "six", steps=6, checkpoint_at=set())
    trial_script.train(base / "other", steps=8, checkpoint_at={7}, run_id="mlp-other00000")
    return {"run": base / "run", "after4": trial_script.parameters(after4),
            "after6": trial_script.parameters(after6),
            "other": base / "other" / "checkpoints" / "step-000008"}


def _restore(run: Path) -> tuple[int, dict[str, bytes], list[dict]]:
    from flightplan.trial import Trial

    model, optimizer = trial_script.build()
    trial = Trial.local(run, name="mlp", run_id=trial_script.RUN_ID, params={"lr": 1e-2})
    trial.register(model=model, optimizer=optimizer)
    with contextlib.redirect_stderr(io.StringIO()):  # the rejection lines; the rows hold them
        start = trial.restore()
    rows = [json.loads(line) for line in (run / "measurements.jsonl").read_text().splitlines()]
    return start, trial_script.parameters(model), [r for r in rows if r.get("event") == "checkpoint_rejected"]


def _previous_used(history: dict, run: Path, name: str = "step-000006", start_at: int = 4) -> tuple[bool, str]:
    try:
        start, params, rejected = _restore(run)
    except Exception as exc:  # noqa: BLE001
        return False, f"restore raised {type(exc).__name__}: {exc}"[:200]
    aside = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(f"{name}.corrupt-")]
    expected = history["after4"] if start_at == 4 else history["after6"]
    ok = start == start_at and params == expected and len(aside) == 1 and \
        [r["name"] for r in rejected] == [name]
    if ok:
        _, model = trial_script.train(run, steps=6, checkpoint_at=set())
        ok = trial_script.parameters(model) == history["after6"]
    return ok, f"restored {start} steps, set aside {aside}, rejected {[r['name'] for r in rejected]}"


def bench_checkpoints(seeds: int, work: Path, *, hostile: bool) -> list[Row]:
    """Every corruption (or hostile file) × ``seeds`` applied to the newest checkpoint."""
    history = _history(work)
    if not hostile:
        row = Row("corrupt checkpoints (at restore)", "named, set aside, previous used, bitwise")
        start = time.monotonic()
        for name, corrupt in sorted(checkpoint_faults.CORRUPTIONS.items()):
            for seed in range(seeds):
                run = work / f"corrupt-{row.tried}"
                shutil.copytree(history["run"], run)
                corrupt(run / "checkpoints" / "step-000006", random.Random(seed))
                ok, what = _previous_used(history, run)
                row.add(ok, f"{name} (seed {seed}): {what}")
        run = work / "other-run"
        shutil.copytree(history["run"], run)
        shutil.copytree(history["other"], run / "checkpoints" / "step-000008")
        ok, what = _previous_used(history, run, name="step-000008", start_at=6)
        row.add(ok, f"newer checkpoint of another run: {what}")
        row.seconds = time.monotonic() - start
        return [row]
    row = Row("hostile files", "refused, no code ran, nothing read outside")
    start = time.monotonic()
    for name, build in sorted(checkpoint_faults.HOSTILE.items()):
        for seed in range(seeds):
            run = work / f"hostile-{row.tried}"
            shutil.copytree(history["run"], run)
            marker = work / f"hostile-{row.tried}.ran"
            build(run / "checkpoints" / "step-000006", random.Random(seed), marker)
            ok, what = _previous_used(history, run)
            row.add(ok and not marker.exists(), f"checkpoint: {name} (seed {seed}): {what}"
                    + ("; CODE RAN" if marker.exists() else ""))
    for ok, what in results_faults.run_all(work):
        row.add(ok, f"results: {what}")
    row.seconds = time.monotonic() - start
    return [row]


# --- full disk -------------------------------------------------------------------------------

def _script_run(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tests" / "reliability" / "trial_script.py"),
                           str(run_dir), "--steps", "6", "--checkpoint-at", "1,3,5", *extra],
                          capture_output=True, text=True, timeout=300, env=child_env())


def _disk_outcome(run: Path, full: subprocess.CompletedProcess, reference: str,
                  kept: list[str], resume: Callable[[], subprocess.CompletedProcess]) -> tuple[bool, str]:
    from flightplan.trial.checkpoint_check import check_checkpoint

    errors = [line for line in full.stderr.splitlines() if line.startswith("error: ")]
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    ok = full.returncode == 3 and len(errors) == 1 and "previous checkpoint is intact" in errors[0] \
        and "Traceback" not in full.stderr and names == kept \
        and all(check_checkpoint(run / "checkpoints" / name)["verified"] for name in kept)
    again = resume()
    ok = ok and again.returncode == 0 and again.stdout.strip() == reference
    return ok, f"exit {full.returncode}, {errors[:1]}, left {names}, resumed exit {again.returncode}"


def bench_disk(tries: int, work: Path) -> list[Row]:
    """Saves that run out of room: RLIMIT_FSIZE at several limits; a full tmpfs when root."""
    row = Row("full disk", "clear error, previous checkpoint intact, resumed bitwise")
    start = time.monotonic()
    reference = _script_run(work / "disk-reference").stdout.strip()
    for i in range(tries):
        after = 1 if i % 2 == 0 else 3
        limit_bytes = (4096, 8192, 16384)[i % 3]
        run = work / f"fsize-{i}"
        full = _script_run(run, "--fsize-after", str(after), "--fsize-bytes", str(limit_bytes))
        kept = [f"step-{s + 1:06d}" for s in (1, 3) if s <= after]  # keep_last = 2
        ok, what = _disk_outcome(run, full, reference, kept, lambda run=run: _script_run(run))
        row.add(ok, f"RLIMIT_FSIZE {limit_bytes} B after step {after}: {what}")
    if os.geteuid() == 0:
        _tmpfs(row, work, reference)
    row.seconds = time.monotonic() - start
    return [row]


def _tmpfs(row: Row, work: Path, reference: str) -> None:
    mount = work / "small-disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        return
    try:
        run = mount / "run"
        full = _script_run(run)

        def grow() -> subprocess.CompletedProcess:
            subprocess.run(["mount", "-o", "remount,size=4m", str(mount)], check=True)
            return _script_run(run)

        ok, what = _disk_outcome(run, full, reference, ["step-000002"], grow)
        row.add(ok, f"tmpfs of 128 KiB (ENOSPC): {what}")
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


# --- concurrency -------------------------------------------------------------------------------

def bench_concurrent(tries: int, work: Path) -> list[Row]:
    """Two ``flightplan run`` started at once on a copy of the tiny campaign."""
    import signal

    from flightplan.campaign_lock import lock_holder

    row = Row("concurrent runs", "second refused naming the holder, ledger whole")
    start = time.monotonic()
    for i in range(tries):
        folder = work / f"concurrent-{i}"
        folder.mkdir()
        spec = folder / "campaign.toml"
        shutil.copy(TINY, spec)
        procs = [subprocess.Popen(FLIGHTPLAN + ["run", str(spec)], cwd=folder, env=child_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True) for _ in range(2)]
        try:
            holder = None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (holder and holder.get("pid")):
                holder = lock_holder(folder)
                time.sleep(0.1)
            pid = (holder or {}).get("pid")
            loser = next((p for p in procs if p.pid != pid), procs[1])
            _, err = loser.communicate(timeout=120)
            lines = err.strip().splitlines()
            ok = loser.returncode == 1 and len(lines) == 1 and f"process {pid}" in lines[0]
        finally:
            for proc in procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.communicate()
        ledger = crash_harness.ledger_findings(folder, finished=False)
        row.add(ok and not ledger, f"try {i}: loser exit {loser.returncode}: {err.strip()[-160:]!r}; "
                f"ledger {ledger}")
    row.seconds = time.monotonic() - start
    return [row]


# --- crash points ----------------------------------------------------------------------------

def bench_script_crashes(n: int, seed: int, work: Path) -> list[Row]:
    """SIGKILL a trial-API script at ``n`` seeded calls around its checkpoint writes."""
    row = Row("crash points (trial script)", "resumed bitwise, no checkpoint rejected")
    start = time.monotonic()
    argv = lambda run: [sys.executable, str(ROOT / "tests" / "reliability" / "trial_script.py"),  # noqa: E731
                        str(run), "--steps", "6", "--checkpoint-at", "1,3,5"]
    code, counts = crash_harness.count_calls(argv(work / "script-reference"), cwd=work)
    reference = _script_run(work / "script-again").stdout.strip()
    kinds = [("runner", "fsync", "checkpoints"), ("runner", "replace", "checkpoints"),
             ("runner", "replace", "")]
    for i, point in enumerate(crash_harness.draw_points(counts, n=n, seed=seed, kinds=kinds)):
        point = crash_harness.CrashPoint("any", point.point, point.nth, point.after, point.contains)
        run = work / f"script-crash-{i}"
        crashed = crash_harness.run_with_crash(argv(run), cwd=work, point=point, marker=work / "fired")
        again = crash_harness.run_with_crash(argv(run), cwd=work, point=None, marker=work / "fired")
        rows = [json.loads(x) for x in (run / "measurements.jsonl").read_text().splitlines()]
        rejected = [r for r in rows if r.get("event") == "checkpoint_rejected"]
        row.add(crashed.fired and again.code == 0 and again.stdout.strip() == reference and not rejected,
                f"{point.label()}: fired={crashed.fired}, exit {again.code}, rejected {len(rejected)}")
    row.seconds = time.monotonic() - start
    return [row]


CAMPAIGN_KINDS = [
    ("runner", "commit", ""), ("runner", "insert", ""), ("runner", "replace", "results"),
    ("runner", "replace", ""), ("trial", "fsync", "checkpoints"), ("trial", "replace", "checkpoints"),
    ("trial", "replace", ""),
]
# the Trainer and Lightning write their own save into a staging folder (files opened for
# writing there: inside the library's save), then flightplan commits it (fsync of each file,
# manifest, renames) and prunes (unlink)
INTEGRATION_KINDS = CAMPAIGN_KINDS + [
    ("trial", "open", "staging"), ("trial", "fsync", "staging"), ("trial", "replace", "staging"),
    ("trial", "unlink", "checkpoints"),
]
# a trial process on a flight reaches the call: its whole node dies there
FLIGHT_KINDS = [("trial", "fsync", "checkpoints"), ("trial", "replace", "checkpoints"),
                ("trial", "open", "checkpoints"), ("trial", "replace", "")]
# the driver (flightplan run at home): its ledger, the checkpoints and outputs that come home
DRIVER_KINDS = [("runner", "commit", ""), ("runner", "insert", ""), ("runner", "replace", "checkpoints"),
                ("runner", "replace", "results"), ("runner", "replace", "")]
CLOSE_KINDS = [("runner", "replace", "results"), ("runner", "fsync", ""), ("runner", "commit", "")]
EXPORT_KINDS = [("runner", "commit", ""), ("runner", "insert", ""), ("runner", "open", "mlartifacts"),
                ("runner", "replace", "mlartifacts")]

# crash points of each kind per 100: (a) the tiny and digits campaigns, (b) the file task of
# docs/tasks.md, (c) the Trainer and Lightning integrations, (d) a flight node and the
# driver of a Ray campaign, (e) close and export; close and export run on every campaign
SPLIT = {"tiny": 12, "digits": 10, "file-task": 10, "trainer": 12, "lightning": 12,
         "ray-node": 10, "ray-driver": 10, "close": 14, "export": 10, "ddp": 10}
CAMPAIGNS = ("tiny", "digits", "file-task", "trainer", "lightning", "ray", "ddp")
LONGEST_FIRST = ("tiny", "ray", "trainer", "lightning", "ddp", "digits", "file-task")
"""The campaigns in the order of their share of the bench's time (seed 4417: tiny about
17 min, Ray 15, Trainer 13, Lightning 12, digits 8, the file task 6), so that ``--jobs``
starts the longest first."""
HANDLED = "bitwise identical, ledger ok, events in order, verify ok, none set aside"


def _kind(label: str) -> str:
    """``run: trial fsync#3 (checkpoints) after`` → ``run: trial fsync (checkpoints)``."""
    if "#" not in label:
        return label.split(" at ")[0]
    head, rest = label.split("#", 1)
    return f"{head} {rest[rest.find('('):rest.find(')') + 1]}".strip() if "(" in rest else head


def split_points(total: int, kinds: list[str]) -> dict[str, int]:
    """``total`` crash points over ``kinds`` in the proportions of :data:`SPLIT` (largest
    remainders first; every kind at least one when ``total`` allows)."""
    weight = sum(SPLIT[k] for k in kinds)
    exact = {k: total * SPLIT[k] / weight for k in kinds}
    out = {k: int(v) for k, v in exact.items()}
    for k in sorted(kinds, key=lambda k: exact[k] - out[k], reverse=True)[:total - sum(out.values())]:
        out[k] += 1
    for k in kinds:
        while out[k] == 0 and total >= len(kinds):
            donor = max(out, key=out.get)
            out[donor] -= 1
            out[k] += 1
    return out


def _shares(total: int, campaigns: list[str]) -> dict[str, int]:
    """``total`` close (or export) points spread evenly over the campaigns, first ones first."""
    return {c: total // len(campaigns) + (i < total % len(campaigns)) for i, c in enumerate(campaigns)}


@dataclass
class Reference:
    """An uninterrupted campaign of one kind: its products and the calls it made."""

    products: dict[str, str]
    run_counts: dict
    close_counts: dict
    export_counts: dict
    run_s: float


def _reference(build: Callable[[Path], Path], folder: Path, run_args: tuple[str, ...],
               flights) -> Reference | str:
    """Run, close and export one copy in count mode; a string says what failed."""
    spec = build(folder)
    t0 = time.monotonic()
    code, run_counts = crash_harness.count_calls(FLIGHTPLAN + ["run", str(spec), *run_args],
                                                 cwd=folder, flights=flights)
    run_s = time.monotonic() - t0
    close_code, close_counts = crash_harness.count_calls(FLIGHTPLAN + ["close", str(spec)], cwd=folder)
    export_code, export_counts = crash_harness.count_calls(
        FLIGHTPLAN + ["export", "mlflow", str(folder / "results"), "--tracking-uri",
                      f"sqlite:///{folder / 'mlflow.db'}"], cwd=folder)
    if (code, close_code, export_code) != (0, 0, 0):
        return f"run exit {code}, close exit {close_code}, export exit {export_code}"
    return Reference(crash_harness.fingerprint(folder), run_counts, close_counts, export_counts, run_s)


def _scaled(points: list, first: int = 0) -> list:
    """The i-th invocation of a chain has less left to do: draw among its first 1/(i+1)."""
    return [dataclasses.replace(p, nth=max(1, -(-p.nth // (i + 1))),
                                delay_s=round(max(5.0, p.delay_s / (i + 1)), 2))
            for i, p in enumerate(points, start=first)]


def _draw(counts: dict, kinds: list, n: int, seed: int, *, timer_max_s: float | None = None,
          role: str | None = None) -> list:
    points = crash_harness.draw_points(counts, n=n, seed=seed, kinds=kinds, timer_max_s=timer_max_s)
    return [dataclasses.replace(p, role=role, group=True) for p in points] if role else points


def bench_crash_points(args, work: Path, log) -> list[Row]:
    """Kill every way a run executes at ``args.crash_points`` fired crash points split as
    :data:`SPLIT` says (over ``args.kinds``): chains of ``args.per_campaign`` kills in a row
    on one copy of a campaign (a Ray chain: its driver's, then one of a flight node), one
    or more in ``close`` and in ``export`` at the end of a chain; each copy is run again
    until it finishes and compared with its kind's uninterrupted reference, made once."""
    kinds = [k for k in SPLIT if k in args.kinds]
    quota = split_points(args.crash_points, kinds)
    campaigns = [c for c in CAMPAIGNS if c in kinds or (c == "ray" and {"ray-node", "ray-driver"} & set(kinds))]
    campaigns = campaigns or ["file-task"]           # close or export alone: on the cheapest
    close_share = _shares(quota.get("close", 0), campaigns)
    export_share = _shares(quota.get("export", 0), campaigns)
    rows = {k: Row(f"crash points, {k}", HANDLED) for k in kinds}
    log("  crash points: " + ", ".join(f"{k} {quota[k]}" for k in kinds)
        + f" (seed {args.seed}, {args.per_campaign} in a row per copy)")

    def chains_of(campaign: str) -> dict[str, Row]:
        own = {k: Row(f"crash points, {k}", HANDLED) for k in kinds}
        try:
            if campaign == "ray":
                from reliability.flight_faults import Flights

                with Flights.start(count=2) as flights:
                    _campaign_chains(campaign, args, work, log, own, quota,
                                     close_share[campaign], export_share[campaign], flights)
            else:
                _campaign_chains(campaign, args, work, log, own, quota, close_share[campaign],
                                 export_share[campaign], None)
        except Exception as exc:  # noqa: BLE001 - the harness broke: say so, keep the others
            mine = [k for k in (("ray-driver", "ray-node") if campaign == "ray" else (campaign,))
                    if k in own] or list(own)
            own[mine[0]].add(False, f"{campaign}: the bench broke: {type(exc).__name__}: {exc}")
        return own

    # each campaign's chains in a thread of their own: the thread only waits on its
    # campaign's processes, which leave most of a core idle (load, fsync, Ray's polls);
    # the Ray campaign's in this (the main) thread, since Ray sets signal handlers
    ordered = sorted(campaigns, key=LONGEST_FIRST.index)
    threaded = [c for c in ordered if c != "ray"] if args.jobs > 1 else []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs - 1)) as pool:
        pending = [pool.submit(chains_of, c) for c in threaded]
        done = [chains_of(c) for c in ordered if c not in threaded]
        done += [future.result() for future in pending]
    for own in done:
        for name, row in own.items():
            rows[name].absorb(row)
    tried, handled = sum(r.tried for r in rows.values()), sum(r.handled for r in rows.values())
    log(f"  crash points: {handled} / {tried} bitwise identical, verify passed (seed {args.seed}, "
        f"{args.crash_points} asked)")
    return list(rows.values())


def _campaign_chains(campaign: str, args, work: Path, log, rows: dict[str, Row], quota: dict[str, int],
                     close_share: int, export_share: int, flights) -> None:
    """Every chain of one campaign, until its share of points fired."""
    start = time.monotonic()
    if campaign == "tiny" and args.full_tiny:
        def build(folder: Path) -> Path:
            folder.mkdir(parents=True)
            shutil.copy(TINY, folder / "campaign.toml")
            return folder / "campaign.toml"
    else:
        build = BUILDERS["file-task" if campaign == "ray" else campaign]
    run_args = ("--executor", "ray", "--address", flights.address) if flights else ()
    run_rows = ["ray-driver", "ray-node"] if campaign == "ray" else [campaign]
    wanted = {name: quota.get(name, 0) for name in run_rows}
    wanted["close"], wanted["export"] = close_share, export_share
    if not any(wanted.values()):
        return
    reference = _reference(build, work / f"{campaign}-reference", run_args, flights)
    if isinstance(reference, str):
        for name, n in wanted.items():
            if n:
                rows[name].add(False, f"{campaign}: the uninterrupted campaign itself failed: {reference}")
        return
    log(f"  {campaign}: reference run {reference.run_s:.0f} s, {len(reference.products)} products")
    if campaign == "ray":
        spec = BUILDERS["file-task"](work / "ray-local-reference")
        local = subprocess.run(FLIGHTPLAN + ["run", str(spec)], cwd=spec.parent, capture_output=True,
                               env=child_env(), timeout=900)
        same = local.returncode == 0 and crash_harness.fingerprint(spec.parent) == reference.products
        log(f"  ray: products of the uninterrupted Ray campaign bitwise those of the local executor: "
            f"{'yes' if same else 'NO'}")
    fired: collections.Counter = collections.Counter()
    side_s = 0.0   # close and export attempts: their own rows' time
    chains = max(1, -(-sum(wanted[name] for name in run_rows) // args.per_campaign))
    chain = 0
    while any(fired[name] < n for name, n in wanted.items()):
        if chain >= 4 * chains + 4:
            for name, n in wanted.items():
                if fired[name] < n:
                    rows[name].add(False, f"{campaign}: only {fired[name]} of {n} points fired "
                                   f"in {chain} copies")
            break
        seed = args.seed * 1000 + CAMPAIGNS.index(campaign) * 100 + chain
        left = {name: max(0, n - fired[name]) for name, n in wanted.items()}
        if campaign == "ray":
            # half the chain the driver's kills, then flight nodes' (a fresh node replaces
            # each one killed before the next attempt)
            n_node = min(left["ray-node"], max(1, args.per_campaign // 2))
            n_driver = min(left["ray-driver"], args.per_campaign - n_node)
            driver = _draw(reference.run_counts, DRIVER_KINDS, n_driver, seed, timer_max_s=reference.run_s)
            node = _draw(reference.run_counts, FLIGHT_KINDS, n_node, seed + 1,
                         timer_max_s=reference.run_s, role="flight")
            run_points = _scaled(driver + node)
        else:
            kinds = INTEGRATION_KINDS if campaign in ("trainer", "lightning") else CAMPAIGN_KINDS
            run_points = _scaled(_draw(reference.run_counts, kinds, min(left[campaign], args.per_campaign),
                                       seed, timer_max_s=reference.run_s))
        # close and export: their share spread over the copies this campaign needs
        n_close, n_export = (min(left[name], max(1, -(-wanted[name] // chains))) for name in ("close", "export"))
        close_points = _draw(reference.close_counts, CLOSE_KINDS, n_close, seed)
        export_points = _draw(reference.export_counts, EXPORT_KINDS, n_export, seed)
        spec = build(work / f"{campaign}-{chain}")
        report = crash_harness.crash_campaign(
            spec, run_points=run_points, close_points=close_points, reference=reference.products,
            export_points=export_points if wanted["export"] else None, run_args=run_args,
            flights=flights)
        ok = report.identical and not report.rejected
        for label, attempt in report.attempts:
            verb = label.split(":")[0]
            name = verb if verb in ("close", "export") else (
                ("ray-node" if "flight node" in label else "ray-driver") if campaign == "ray" else campaign)
            if verb in ("close", "export"):
                side_s += attempt.wall_s
                if name in rows:
                    rows[name].seconds += attempt.wall_s
            if not attempt.fired:
                continue
            fired[name] += 1
            rows[name].kinds[f"{campaign}: {_kind(label)}"] += 1
            rows[name].add(ok, f"{campaign} copy {chain}: {label}: differences {report.differences[:3]}, "
                           f"store {report.store_differences[:3]}, ledger {report.ledger[:2]}, verify exit "
                           f"{report.verify_code}, set aside {report.rejected}, last attempt exit "
                           f"{report.attempts[-1][1].code}: {report.attempts[-1][1].stderr_tail[-300:]!r}")
        log(f"  {campaign} copy {chain}: {report.fired} fired, {'identical' if ok else 'NOT identical'} ("
            + ", ".join(f"{name} {fired[name]}/{n}" for name, n in wanted.items() if n) + ")")
        chain += 1
    for name in run_rows:   # the rest of the campaign's time: reference, runs, verify
        if name in rows:
            rows[name].seconds += (time.monotonic() - start - side_s) / len(run_rows)


# --- main -------------------------------------------------------------------------------------

def print_table(rows: list[Row]) -> None:
    """The summary table, then every failure."""
    width = max(len(r.family) for r in rows)
    print(f"\n| {'fault family':<{width}} | tried | handled | handled means | time (s) |")
    print(f"|{'-' * (width + 2)}|------:|--------:|---------------|---------:|")
    for r in rows:
        print(f"| {r.family:<{width}} | {r.tried:5d} | {r.handled:7d} | {r.handled_means} | {r.seconds:8.0f} |")
    for r in rows:
        if r.kinds:
            print(f"\n{r.family}, where they fired: "
                  + "; ".join(f"{kind}: {count}" for kind, count in sorted(r.kinds.items())))
    lost = sum(r.tried - r.handled for r in rows)
    print(f"\nnothing lost: {'yes' if lost == 0 else f'NO ({lost} not handled)'}")
    for r in rows:
        for failure in r.failures[:20]:
            print(f"  {r.family}: {failure}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few of each family")
    parser.add_argument("--live", action="store_true",
                        help="use src/ as it is during the run instead of a copy taken at start")
    parser.add_argument("--only", default=",".join(FAMILIES), help=f"comma-separated: {', '.join(FAMILIES)}")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--specs", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=10, help="seeds per corruption / hostile kind")
    parser.add_argument("--disk", type=int, default=6)
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--script-points", type=int, default=20)
    parser.add_argument("--crash-points", type=int, default=100,
                        help="fired crash points of the campaign family, split over --kinds")
    parser.add_argument("--kinds", default=None,
                        help=f"comma-separated, of: {', '.join(SPLIT)} (default: all; --quick: tiny,close,export)")
    parser.add_argument("--per-campaign", type=int, default=4, help="crash points in a row on one copy")
    parser.add_argument("--jobs", type=int, default=1,
                        help="campaigns whose crash points run side by side (each waits on its "
                             "own processes; 3 on 2 cores runs them in about 0.4 of the time); "
                             "the Ray campaign runs in the main thread beside them")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep every copy in this (new or empty) folder instead of a "
                             "temporary one removed at the end, to look into a failure")
    parser.add_argument("--full-tiny", action="store_true",
                        help="crash the unmodified tiny campaign (240/80 reviews, 3 runs; slower)")
    args = parser.parse_args(argv)
    if args.quick:
        args.specs, args.seeds, args.disk, args.concurrent = 100, 2, 2, 1
        args.script_points, args.crash_points = 3, 3
    args.kinds = (args.kinds or ("tiny,close,export" if args.quick else ",".join(SPLIT))).split(",")
    unknown = sorted(set(args.kinds) - set(SPLIT))
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; choose among {', '.join(SPLIT)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    only = set(args.only.split(","))

    def log(text: str) -> None:
        print(text, flush=True)

    import flightplan
    log(f"flightplan from {Path(flightplan.__file__).parent}"
        + (" (a copy of src/ taken at start)" if _FROZEN else ""))
    rows: list[Row] = []
    started = time.monotonic()
    with (contextlib.nullcontext(str(args.work)) if args.work
          else tempfile.TemporaryDirectory(prefix="flightplan-faults-")) as scratch:
        work = Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        steps = [("campaign", lambda w: bench_crash_points(args, w, log)),
                 ("specs", lambda w: bench_specs(args.specs, args.seed, w)),
                 ("corruption", lambda w: bench_checkpoints(args.seeds, w, hostile=False)),
                 ("hostile", lambda w: bench_checkpoints(args.seeds, w, hostile=True)),
                 ("disk", lambda w: bench_disk(args.disk, w)),
                 ("concurrent", lambda w: bench_concurrent(args.concurrent, w)),
                 ("script", lambda w: bench_script_crashes(args.script_points, args.seed, w))]
        for name, step in steps:
            if name not in only:
                continue
            log(f"{name} ...")
            folder = work / name
            folder.mkdir()
            try:
                done = step(folder)
            except Exception as exc:  # noqa: BLE001 - the harness broke: say so, keep the rest
                done = [Row(name, "the bench itself ran", tried=1, failures=[f"{type(exc).__name__}: {exc}"])]
            for row in done:
                rows.append(row)
                log(f"  {row.family}: {row.handled}/{row.tried} handled in {row.seconds:.0f} s")
    print_table(rows)
    print(f"wall time {time.monotonic() - started:.0f} s")
    return 0 if all(r.tried == r.handled for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
