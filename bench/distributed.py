"""Two Ray flights against the local executor, and a checkpoint streamed home against a
local copy.

From one run, on this machine, on a loopback cluster with token authentication (a head
and two nodes of one CPU and one ``flight`` each, ``tests/fixtures/ray_cluster.py``):

1. **makespan**: ``flightplan run`` of the tiny campaign (``examples/tiny``: data check,
   pilot, three runs) with the local executor (on a machine without GPU: as many runs at
   once as the cores allow, two here), then with ``--executor ray`` on the two flights.
   Wall time of each command and their ratio; the products of both are compared byte for
   byte.
2. **transfer**: a checkpoint of ``--mib`` MiB (two random tensor files and a manifest)
   committed on a flight by a stand-in worker, streamed home by the Ray executor
   (:mod:`flightplan.run.executors.stream`: chunks, a CRC-32 of each on both sides, each
   file's sha256 at home, fsync, rename at home) over its direct connection
   (:mod:`flightplan.run.executors.channel`); its
   throughput is its bytes over its ``stream_s`` (the ``checkpoint_transfer`` row: from
   its first chunk coming to durable at home), against ``shutil.copytree`` of the same
   folder plus an fsync of every file. Best of ``--rounds`` each; their ratio. Beside it,
   the same checkpoint with Ray's polls (the fallback, ``RayExecutor(direct=False)``), and
   the peak resident memory above idle of the flight's host (the ``RunHost`` actor
   process) and of home (this process), each reset to its idle size first
   (``/proc/<pid>/clear_refs``), against the target of four chunk sizes.
3. **to flight** (``--to-flight [MIB]``, alone): a checkpoint of that many MiB (default
   2048) at home, sent to a flight for a run that resumes there
   (:mod:`flightplan.run.executors.to_flight`: chunks, a CRC-32 of each on both sides,
   each file's sha256 against the manifest on the flight, fsync, rename there) before a
   stand-in worker checks that it is there; its throughput (bytes over the seconds the
   executor logged for the send) against ``shutil.copytree`` + fsync of the same folder,
   and home's peak resident memory above idle while it ran (``VmHWM``, reset first: Ray's
   object store included; and its private pages), in chunks (target: at most 4).

Usage::

    .venv/bin/python bench/distributed.py [--mib 1024] [--rounds 3] [--skip-campaign]
        [--free-ms MS] [--skip-polls]
    .venv/bin/python bench/distributed.py --to-flight [MIB] [--chunk-mib 8]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from ray_cluster import loopback_cluster  # noqa: E402 (tests/fixtures is put on sys.path first)

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
PRODUCTS = ("predictions.csv", "metrics.json", "artifact")
MIB = 1 << 20

STAND_IN = """
import json, os, sys, time
from pathlib import Path
trial = Path(sys.argv[1])
source = Path(json.loads(trial.read_text())["params"]["source"])
time.sleep(3)                       # the bench resets the host's peak memory meanwhile
tmp = trial.parent / "checkpoints" / f"{source.name}.tmp"
tmp.mkdir(parents=True)
for path in source.iterdir():
    os.link(path, tmp / path.name)  # the same bytes, committed at once: a pure transfer
tmp.rename(tmp.with_name(source.name))
(trial.parent / "done.json").write_text("{}")
"""
"""The worker on the flight: commits ``params.source`` as its checkpoint and ends."""


def _campaign(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "tiny" / "campaign.toml", folder / "campaign.toml")
    return folder / "campaign.toml"


def _run(spec: Path, *extra: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(FLIGHTPLAN), "run", str(spec), "--json", *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"flightplan run {spec} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall


def _products(folder: Path) -> dict[str, bytes]:
    found = {}
    for run_dir in sorted((folder / "runs").iterdir()):
        if run_dir.name.startswith("pilot-"):
            continue
        for path in sorted(run_dir.rglob("*")):
            relative = path.relative_to(run_dir)
            if path.is_file() and relative.parts[0] in PRODUCTS:
                found[f"{run_dir.name}/{relative.as_posix()}"] = path.read_bytes()
    return found


def _checkpoint(folder: Path, mib: int) -> int:
    """A checkpoint folder of ``mib`` MiB of random bytes; returns its files' bytes."""
    folder.mkdir(parents=True)
    files = {}
    for name, share in (("model.safetensors", 3), ("optimizer.safetensors", 1)):
        sha, size = hashlib.sha256(), mib * MIB * share // 4
        with open(folder / name, "wb") as out:
            for _ in range(size // (64 * MIB)):
                piece = os.urandom(64 * MIB)
                sha.update(piece)
                out.write(piece)
            rest = os.urandom(size % (64 * MIB))
            sha.update(rest)
            out.write(rest)
        files[name] = {"size": size, "sha256": sha.hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(
        {"format": "flightplan-checkpoint/1", "step": 1, "files": files, "tensors": {}}))
    return sum(f["size"] for f in files.values())


def _copy_fsync(source: Path, target: Path) -> None:
    shutil.copytree(source, target)
    for path in target.iterdir():
        with open(path, "rb+") as handle:
            os.fsync(handle.fileno())
    fd = os.open(target, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def _status(pid: int | str, key: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of ``/proc/<pid>/status`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _memory(pid: int | str) -> tuple[int, int]:
    """``(private, shared)`` resident bytes of a process: ``RssAnon + RssFile`` and
    ``RssShmem`` (Ray's object store, mapped by every process that reads or writes it)."""
    return (_status(pid, "RssAnon") + _status(pid, "RssFile"), _status(pid, "RssShmem"))


def _reset_peak(pid: int | str) -> int:
    """Reset a process's peak resident size to its current one; returns that size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmRSS")


def _cpu_s(pid: int | str) -> float:
    """CPU seconds (user + system) a process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Peak(threading.Thread):
    """The peak resident size above idle of one process while a transfer runs: in all
    (``VmHWM``, reset to the idle size first) and of its private pages (``RssAnon +
    RssFile``, read every 10 ms), and the CPU seconds it has used, with the time of each
    reading (:meth:`cpu_between`). ``pid`` None: find the flight's host (the process titled
    ``ray::RunHost``) and measure it once it is up and idle."""

    seen: set[int] = set()
    """Hosts of earlier rounds (one may still be on its way out)."""

    def __init__(self, pid: int | str | None) -> None:
        super().__init__(daemon=True)
        self.pid, self.total, self.private = pid, 0, 0
        self.cpu: list[tuple[float, float]] = []         # (unix time, CPU seconds)
        self.stop = threading.Event()

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds used between unix times ``start`` and ``end`` (the readings nearest
        inside them, 10 ms apart)."""
        inside = [cpu for at, cpu in self.cpu if start <= at <= end]
        return inside[-1] - inside[0] if inside else float("nan")

    def _find(self) -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in self.seen:
                try:
                    if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(b"ray::RunHost"):
                        return int(entry)
                except OSError:
                    continue
        return None

    def run(self) -> None:
        while self.pid is None and not self.stop.is_set():
            self.pid = self._find()
            time.sleep(0.05)
            if self.pid is not None:
                self.seen.add(int(self.pid))
                time.sleep(1.0)                      # started, idle: the worker waits
        if self.pid is None:
            return
        try:
            idle, (private_idle, _) = _reset_peak(self.pid), _memory(self.pid)
            while not self.stop.is_set():
                self.total = max(self.total, _status(self.pid, "VmHWM") - idle)
                self.private = max(self.private, _memory(self.pid)[0] - private_idle)
                self.cpu.append((time.time(), _cpu_s(self.pid)))
                time.sleep(0.01)
        except (OSError, KeyError):
            return                                   # it ended: its last peak was read


def _transfer(executor, work: Path, source: Path, round_: int) -> tuple[dict, Peak, Peak]:
    """Stream ``source`` home once: its ``checkpoint_transfer`` row and the peaks of the
    flight's host and of home."""
    from flightplan.run.executors.contract import Job

    run_dir = work / f"run-{round_}"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps({"run_id": f"bench-{round_}",
                                                    "params": {"source": str(source)}}))
    host, home = Peak(None), Peak("self")
    host.start()
    home.start()
    [result] = executor.run([Job(f"bench-{round_}", run_dir)])
    for watch in (host, home):
        watch.stop.set()
        watch.join()
    if result.exit_code != 0:
        raise SystemExit(f"the stand-in worker exited {result.exit_code}: "
                         f"{(run_dir / 'log.txt').read_text()[-2000:]}")
    [row] = [json.loads(line) for line in (run_dir / "measurements.jsonl").open()
             if '"checkpoint_transfer"' in line]
    shutil.rmtree(run_dir)
    return row, host, home


def _ray_alone(nbytes: int) -> float:
    """Seconds Ray takes to bring home one object of ``nbytes`` bytes made on a flight
    (no hashing, no disk): the floor of its own transport here."""
    import numpy
    import ray

    @ray.remote(resources={"flight": 1}, num_cpus=1, max_retries=0)
    def make(size: int) -> numpy.ndarray:
        return numpy.full(size, 7, dtype=numpy.uint8)

    best = float("inf")
    for _ in range(2):
        ref = make.remote(nbytes)
        ray.wait([ref], fetch_local=False)
        started = time.perf_counter()
        got = ray.get(ref)
        best = min(best, time.perf_counter() - started)
        del got, ref
    return best


def _makespan(cluster, work: Path) -> None:
    """The tiny campaign with each executor: wall times, ratio, products compared."""
    local_s = _run(_campaign(work / "local"))
    ray_s = _run(_campaign(work / "ray"), "--executor", "ray", "--address", cluster.address)
    same = _products(work / "local") == _products(work / "ray")
    print(f"makespan  tiny campaign: local executor (2 runs at once) {local_s:6.1f} s, ray on "
          f"2 flights {ray_s:6.1f} s, products identical: {same} -> {ray_s / local_s:.2f} "
          f"(ray / local)", flush=True)


def _streamed(cluster, tmp: Path, work: Path, *, mib: int, rounds: int, polls: bool) -> None:
    """A ``mib`` MiB checkpoint streamed home ``rounds`` times over the direct connection
    (and, unless not ``polls``, with Ray's polls) against copy + fsync, with the peak memory
    of both sides on the direct connection."""
    from flightplan.run.executors.ray_executor import RayExecutor
    from flightplan.run.executors.stream import CHUNK_BYTES, DEPTH

    stand_in = work / "stand_in.py"
    stand_in.write_text(STAND_IN)
    executors = {direct: RayExecutor(address=cluster.address, scratch=str(tmp / "scratch"),
                                     worker=[sys.executable, str(stand_in)], direct=direct)
                 for direct in ((True, False) if polls else (True,))}
    executors[True].connect()
    warm = work / "warm" / "step-000001"
    _checkpoint(warm, 16)
    for executor in executors.values():
        _transfer(executor, work, warm, 0)           # every code path imported
    source = work / "flight" / "step-000001"
    size = _checkpoint(source, mib)
    best = {direct: float("inf") for direct in executors}
    best_copy = copy_cpu = float("inf")
    peaks = {"host": [0, 0], "home": [0, 0]}
    cpu = {"host": float("inf"), "home": float("inf")}
    for round_ in range(1, rounds + 1):
        for direct, executor in executors.items():
            row, host, home = _transfer(executor, work, source, round_)
            assert row["bytes"] == size and row["resent_bytes"] == 0
            best[direct] = min(best[direct], row["stream_s"])
            for name, peak in (("host", host), ("home", home)):
                if direct:
                    peaks[name] = [max(peaks[name][0], peak.private),
                                   max(peaks[name][1], peak.total)]
                    cpu[name] = min(cpu[name], peak.cpu_between(
                        row["time"] - row["stream_s"], row["time"]))
        started, cpu_started = time.perf_counter(), time.process_time()
        _copy_fsync(source, work / f"copy-{round_}")
        best_copy = min(best_copy, time.perf_counter() - started)
        copy_cpu = min(copy_cpu, time.process_time() - cpu_started)
        shutil.rmtree(work / f"copy-{round_}")
    alone = _ray_alone(size)
    executors[True].close()
    mb, chunks = size / 1e6, 4 * CHUNK_BYTES
    by_polls = (f"; with Ray's polls, {DEPTH} in flight: {mb / best[False]:.0f} MB/s"
                if False in best else "")
    print(f"transfer  {mb:.0f} MB checkpoint streamed home in {CHUNK_BYTES // MIB} MiB chunks "
          f"over the direct connection: {mb / best[True]:.0f} MB/s{by_polls} (Ray's "
          f"transport alone, one object: {mb / alone:.0f} MB/s); local copy + fsync "
          f"{mb / best_copy:.0f} MB/s -> {best_copy / best[True]:.2f} (target >= 0.5)",
          flush=True)
    gb = size / 1e9
    print(f"cpu       seconds per GB while it streamed over the direct connection (least of "
          f"the rounds): flight "
          f"host {cpu['host'] / gb:.2f}, home {cpu['home'] / gb:.2f} (the two sides share this "
          f"machine's {os.cpu_count()} cores); local copy + fsync {copy_cpu / gb:.2f}",
          flush=True)
    print(f"memory    peak resident above idle on the direct connection, private / in all "
          f"(Ray's object store included): flight "
          f"host {peaks['host'][0] / MIB:.0f} / {peaks['host'][1] / MIB:.0f} MiB, home "
          f"{peaks['home'][0] / MIB:.0f} / {peaks['home'][1] / MIB:.0f} MiB -> "
          f"{max(peaks['host'][0], peaks['home'][0]) / chunks:.2f} / "
          f"{max(peaks['host'][1], peaks['home'][1]) / chunks:.2f} of 4 chunks "
          f"({chunks // MIB} MiB; target <= 1)", flush=True)


TO_FLIGHT_WORKER = """
import json, sys
from pathlib import Path
trial = Path(sys.argv[1])
name = json.loads(trial.read_text())["params"]["checkpoint"]
sys.exit(0 if (trial.parent / "checkpoints" / name / "manifest.json").is_file() else 3)
"""
"""The worker on the flight: exits 0 when the checkpoint home sent is committed there."""


def _send_once(executor, work: Path, mib: int, round_: int) -> tuple[int, float, Peak]:
    """One run resumed on a flight from a ``mib`` MiB checkpoint at home: its bytes, the
    seconds the send took (the executor's log line) and home's peak."""
    from flightplan.run.executors.contract import Job

    run_dir = work / f"to-{round_}"
    size = _checkpoint(run_dir / "checkpoints" / "step-000001", mib)
    (run_dir / "trial.json").write_text(json.dumps({
        "run_id": f"to-{round_}", "resume": True, "params": {"checkpoint": "step-000001"}}))
    home = Peak("self")
    home.start()
    [result] = executor.run([Job(f"to-{round_}", run_dir)])
    home.stop.set()
    home.join()
    log = (run_dir / "log.txt").read_text()
    if result.exit_code != 0:
        raise SystemExit(f"the stand-in worker exited {result.exit_code}: {log[-2000:]}")
    [line] = [s for s in log.splitlines() if s.startswith("--- flightplan: sent ")]
    seconds = float(line.rsplit(" in ", 1)[1].split()[0])
    return size, seconds, home


def _to_flight(cluster, tmp: Path, work: Path, *, mib: int, chunk_mib: int) -> None:
    """A ``mib`` MiB checkpoint sent from home to a flight, against copy + fsync, with
    home's peak memory in chunks."""
    from flightplan.run.executors.ray_executor import RayExecutor

    stand_in = work / "to_flight_worker.py"
    stand_in.write_text(TO_FLIGHT_WORKER)
    chunk = chunk_mib * MIB
    executor = RayExecutor(address=cluster.address, scratch=str(tmp / "scratch"),
                           worker=[sys.executable, str(stand_in)], chunk_bytes=chunk)
    executor.connect()
    try:
        _send_once(executor, work, 16, 0)            # every code path imported
        shutil.rmtree(work / "to-0")
        size, seconds, home = _send_once(executor, work, mib, 1)
    finally:
        executor.close()
    started = time.perf_counter()
    _copy_fsync(work / "to-1" / "checkpoints" / "step-000001", work / "to-copy")
    copy_s = time.perf_counter() - started
    shutil.rmtree(work / "to-copy")
    mb = size / 1e6
    print(f"to flight {mb:.0f} MB checkpoint sent to a flight in {chunk_mib} MiB chunks: "
          f"{mb / seconds:.0f} MB/s; local copy + fsync {mb / copy_s:.0f} MB/s -> "
          f"{copy_s / seconds:.2f} (sent / copy)", flush=True)
    print(f"memory    home's peak resident above idle while it was sent, private / in all "
          f"(Ray's object store included): {home.private / MIB:.0f} / "
          f"{home.total / MIB:.0f} MiB -> {home.private / chunk:.2f} / "
          f"{home.total / chunk:.2f} chunks (target <= 4)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="checkpoint size (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-campaign", action="store_true", help="transfer only")
    parser.add_argument("--skip-polls", action="store_true",
                        help="not the same checkpoint with Ray's polls")
    parser.add_argument("--to-flight", type=int, nargs="?", const=2048, default=None,
                        metavar="MIB", help="only: a checkpoint of MIB MiB (default 2048) "
                                            "sent from home to a flight")
    parser.add_argument("--chunk-mib", type=int, default=8,
                        help="chunk size of --to-flight (MiB; the executor's default: 8)")
    parser.add_argument("--free-ms", type=int, default=None,
                        help="Ray's free_objects_period_milliseconds on every node (Ray's "
                             "default: 1000)")
    args = parser.parse_args()
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if args.free_ms is not None:
        env["RAY_free_objects_period_milliseconds"] = str(args.free_ms)
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="fpbench-", dir="/tmp"))
    try:
        with loopback_cluster(flights=2, env=env) as (cluster, _, tmp):
            if args.to_flight is not None:
                _to_flight(cluster, tmp, work, mib=args.to_flight, chunk_mib=args.chunk_mib)
                return
            if not args.skip_campaign:
                _makespan(cluster, work)
            _streamed(cluster, tmp, work, mib=args.mib, rounds=args.rounds,
                      polls=not args.skip_polls)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
