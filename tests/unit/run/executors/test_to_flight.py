"""run/executors/to_flight.py on a real loopback Ray cluster (conftest.py): a checkpoint
sent from home to a flight in chunks, as a checkpoint comes home.

- a run that leaves one flight resumes on the other from a checkpoint sent in many small
  chunks, and ends bitwise as the same run on the local executor;
- a chunk damaged on the way is sent again from its offset, and what arrives is byte for
  byte home's checkpoint;
- a checkpoint that rotted at home is set aside, and the one before it is sent instead;
- while one run's checkpoint is on its way to a flight that stopped answering, another
  execution's rows keep coming home.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.stream import Chunk

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "fixtures"
FAKE_WORKER = FIXTURES / "fake_worker.py"
HANG_S = 300
"""A wait longer than this has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _checkpoint(folder: Path, files: dict[str, bytes]) -> None:
    """A committed checkpoint folder holding ``files`` and their manifest."""
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "manifest.json").write_text(json.dumps({
        "format": "flightplan-checkpoint/1", "tensors": {},
        "files": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                  for n, d in files.items()}}))


def _host(tmp: Path, run_id: str) -> tuple[Any, Path]:
    """A RunHost actor on a flight and its scratch folder there."""
    import ray

    from flightplan.run.executors.ray_host import RunHost

    host: Any = ray.remote(RunHost)
    actor = host.options(num_cpus=1, resources={"flight": 1}, max_restarts=0,
                         max_task_retries=0).remote(run_id, str(tmp / "scratch"), {})
    return actor, Path(ray.get(actor.where.remote())["scratch"])


class _Wire:
    """The way from home to the flight's host, where the bytes of one chunk are damaged
    once (a bit flipped in transit, after home took its CRC-32); every chunk it carries is
    noted as ``(path, offset, size)``."""

    def __init__(self, actor: Any, damage: tuple[str, int]) -> None:
        self.actor, self.damage, self.carried = actor, damage, []
        self.receive = self                   # wire.receive.remote(chunk), as on the actor

    def remote(self, chunk: Chunk) -> Any:
        self.carried.append((chunk.path, chunk.offset, chunk.size))
        if (chunk.path, chunk.offset) == self.damage:
            self.damage = ("", -1)
            flipped = bytearray(memoryview(chunk.data).cast("B"))
            flipped[7] ^= 0x10
            chunk = replace(chunk, data=bytes(flipped))
        return self.actor.receive.remote(chunk)


def test_a_chunk_damaged_on_the_way_is_sent_again_from_its_offset(cluster, tmp_path):
    import ray

    from flightplan.run.executors.to_flight import FlightFeed

    _, _, tmp = cluster
    home = tmp_path / "checkpoints"
    files = {"model.safetensors": os.urandom(10 * 1024), "optimizer.pt": os.urandom(3000)}
    _checkpoint(home / "step-000004", files)
    _checkpoint(home / "step-000002", {"model.safetensors": b"older"})
    actor, scratch = _host(tmp, "d-1")
    wire = _Wire(actor, ("model.safetensors", 4096))
    try:
        feed = FlightFeed(home, wire, chunk_bytes=1024, depth=4).start()
        assert feed.done.wait(HANG_S)
        assert feed.error is None and feed.set_aside is None and feed.sent is not None
        # only the newest goes, byte for byte (its files' sha256 checked on the flight)
        assert sorted(os.listdir(scratch / "checkpoints")) == ["step-000004"]
        for name in ("model.safetensors", "optimizer.pt", "manifest.json"):
            assert (scratch / "checkpoints" / "step-000004" / name).read_bytes() == \
                (home / "step-000004" / name).read_bytes()
    finally:
        ray.kill(actor)
    carried = wire.carried
    damaged = carried.index(("model.safetensors", 4096, 1024))
    again = carried.index(("model.safetensors", 4096, 1024), damaged + 1)
    # never before the damaged chunk: from its offset on, what followed it behind it
    model = [offset for path, offset, _ in carried if path == "model.safetensors"]
    assert model[:5] == [0, 1024, 2048, 3072, 4096]
    assert sorted(set(model)) == list(range(0, 10 * 1024, 1024))
    assert all(offset >= 4096 for offset in model[5:])
    assert [o for p, o, _ in carried[again:] if p == "model.safetensors"] == \
        list(range(4096, 10 * 1024, 1024))
    resent = sum(size for path, _, size in carried[damaged:again] if path == "model.safetensors")
    sent = feed.sent
    assert (sent.name, sent.bytes, sent.resent_bytes) == ("step-000004", 10 * 1024 + 3000,
                                                          resent)
    assert sent.chunks == len(carried) and sent.peak_bytes_out <= 4 * 1024
    assert carried[-1][0] == "manifest.json"


def test_a_checkpoint_rotten_at_home_is_set_aside_and_the_one_before_is_sent(cluster,
                                                                              tmp_path):
    import ray

    from flightplan.run.executors.to_flight import FlightFeed

    _, _, tmp = cluster
    home = tmp_path / "checkpoints"
    _checkpoint(home / "step-000002", {"model.safetensors": b"two" * 100})
    _checkpoint(home / "step-000004", {"model.safetensors": b"four" * 100})
    (home / "step-000004" / "model.safetensors").write_bytes(b"fouR" * 100)   # rot on disk
    sent = []
    for run_id in ("r-1", "r-2"):
        actor, scratch = _host(tmp, run_id)
        try:
            feed = FlightFeed(home, actor, chunk_bytes=64).start()
            assert feed.done.wait(HANG_S) and feed.error is None
            sent.append((feed.sent and feed.sent.name, feed.set_aside,
                         sorted(os.listdir(scratch / "checkpoints"))))
        finally:
            ray.kill(actor)
    # the flight found the file unlike its manifest (nothing committed there); home's own
    # copy is unlike it too
    assert sent == [(None, home / "step-000004.corrupt-transfer", ["step-000004.tmp"]),
                    ("step-000002", None, ["step-000002"])]
    assert sorted(p.name for p in home.iterdir()) == ["step-000002",
                                                      "step-000004.corrupt-transfer"]


def _paced_job(folder: Path, run_id: str) -> Job:
    """A 60-step MLP run at 0.05 s a step (tests/fixtures/paced_task.py)."""
    folder.mkdir(parents=True)
    (folder / "trial.json").write_text(json.dumps({
        "run_id": run_id, "task": "paced_task.py", "campaign_dir": str(FIXTURES),
        "params": {"steps": 60, "step_sleep_s": 0.05}}))
    return Job(run_id, folder)


def test_a_run_resumes_on_another_flight_from_a_checkpoint_sent_in_many_chunks(cluster,
                                                                                tmp_path):
    from flightplan.run.executors.leave_watch import LeaveBy
    from flightplan.run.executors.ray_executor import RayExecutor

    made, _, tmp = cluster
    [plain] = LocalExecutor(slots=1).run([_paced_job(tmp_path / "plain", "p-1")])
    expected = (tmp_path / "plain" / "artifact" / "weights.bin").read_bytes()
    job = _paced_job(tmp_path / "left", "l-1")
    now = time.time()
    asked: list[str] = []

    def leave_by(job: Job, flight: str) -> LeaveBy | None:
        asked.append(flight)       # the first flight's runs must leave it at once
        return LeaveBy(at=now, ends_at=now + 120.0, stop=True, flight=flight) \
            if len(asked) == 1 else None

    interruptions = []
    executor = RayExecutor(address=made.address, scratch=str(tmp / "scratch"), poll_s=0.1,
                           chunk_bytes=4096)
    try:
        [result] = executor.run([job], leave_by=leave_by,
                                on_interrupted=lambda j, info: interruptions.append(info))
    finally:
        executor.close()
    assert plain.exit_code == 0 and result.exit_code == 0
    assert len(asked) == 2 and asked[0] != asked[1] and result.node == asked[1]
    [info] = interruptions
    checkpoint = job.run_dir / "checkpoints" / info.checkpoint
    size = sum(p.stat().st_size for p in checkpoint.iterdir() if p.name != "manifest.json")
    files = len(list(checkpoint.iterdir())) - 1
    log = (job.run_dir / "log.txt").read_text()
    [line] = [s for s in log.splitlines() if s.startswith("--- flightplan: sent ")]
    # the files one after the other in chunks of at most 4096 bytes (one chunk of the
    # stream may end a file and begin the next: two pieces), the manifest last, nothing
    # sent twice
    ends, total = [], 0
    for path in sorted(checkpoint.iterdir()):
        if path.name != "manifest.json":
            total += path.stat().st_size
            ends.append(total)
    cuts = sorted(set(range(0, total, 4096)) | {0, *ends[:-1]})
    chunks = len(cuts) + 1
    assert size > 4 * 4096 and files >= 1
    assert line.startswith(f"--- flightplan: sent {info.checkpoint} to node {asked[1]}: "
                           f"{size} bytes in {chunks} chunks (0 bytes sent again) in ")
    assert log.index(line) < log.rindex("flightplan worker started")
    rows = [json.loads(s) for s in (job.run_dir / "measurements.jsonl").open()]
    restored = [r for r in rows if r.get("event") == "restore" and r.get("source")]
    assert [r["source"] for r in restored] == [info.checkpoint]
    assert (job.run_dir / "artifact" / "weights.bin").read_bytes() == expected


def _hosts_on(nodes: list[Any], flight: str) -> list[int]:
    """Pids of the flights' hosts (``ray::RunHost``) running under the node named
    ``flight`` (``<node id[:12]> (<ip>)``)."""
    from ray_cluster import node_of

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(b"ray::RunHost"):
                    node = node_of(nodes, int(entry))
                    if node is not None and node.node_id[:12] == flight[:12]:
                        found.append(int(entry))
    return found


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_rows_keep_coming_home_while_a_checkpoint_goes_to_a_slow_flight(cluster, tmp_path):
    """Run b-1 runs on one flight; a-1 resumes on the other, whose host stops answering
    (SIGSTOP) as soon as its checkpoint begins to go there: b-1's rows must keep coming
    home before a-1's checkpoint is committed there."""
    from flightplan.run.executors.ray_executor import RayExecutor

    made, nodes, tmp = cluster
    jobs = {}
    for run_id, params in (("b-1", {"steps": 200, "sleep_s": 0.05}), ("a-1", {"steps": 1})):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "trial.json").write_text(json.dumps({
            "run_id": run_id, "params": params, "resume": run_id == "a-1"}))
        jobs[run_id] = Job(run_id, tmp_path / run_id)
    _checkpoint(jobs["a-1"].run_dir / "checkpoints" / "step-000007",
                {"model.bin": os.urandom(256 * 1024)})
    rows_b = jobs["b-1"].run_dir / "measurements.jsonl"
    seen: dict[str, Any] = {}

    def unfreeze_once_rows_came(frozen: list[int]) -> None:
        before = _lines(rows_b)
        deadline = time.time() + HANG_S
        while _lines(rows_b) < before + 5 and time.time() < deadline:
            time.sleep(0.05)
        seen["rows"] = (before, _lines(rows_b))
        seen["sent_then"] = "--- flightplan: sent" in (jobs["a-1"].run_dir / "log.txt") \
            .read_text() if (jobs["a-1"].run_dir / "log.txt").exists() else False
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)

    def admit(job: Job, flight: str) -> bool:
        if job.run_id == "a-1":          # its checkpoint goes next: its flight stops
            frozen = _hosts_on(nodes, flight)
            seen["frozen"] = frozen
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            threading.Thread(target=unfreeze_once_rows_came, args=(frozen,),
                             daemon=True).start()
        return True

    executor = RayExecutor(address=made.address, scratch=str(tmp / "scratch"), poll_s=0.05,
                           worker=[sys.executable, str(FAKE_WORKER)], chunk_bytes=4096)
    try:
        results = executor.run([jobs["b-1"], jobs["a-1"]], admit=admit)
    finally:
        executor.close()
    assert sorted((r.run_id, r.exit_code) for r in results) == [("a-1", 0), ("b-1", 0)]
    assert len(seen["frozen"]) == 1
    before, after = seen["rows"]
    assert after >= before + 5 and seen["sent_then"] is False
    log = (jobs["a-1"].run_dir / "log.txt").read_text()
    assert "--- flightplan: sent step-000007 to node " in log
    assert f"{256 * 1024} bytes in {256 // 4 + 1} chunks (0 bytes sent again)" in log
    assert _lines(rows_b) == 201         # b-1's rows: its planned_steps row and 200 steps


def test_the_to_flight_bench_runs_small(cluster, tmp_path, capsys):
    """``bench/distributed.py --to-flight`` on this cluster with a 4 MiB checkpoint in
    1 MiB chunks (so that it cannot rot): its two lines, figures in place."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("distributed_bench",
                                                  REPO / "bench" / "distributed.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    made, _, tmp = cluster
    bench._to_flight(made, tmp, tmp_path, mib=4, chunk_mib=1)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["to", "memory"]
    assert lines[0].startswith("to flight 4 MB checkpoint sent to a flight in 1 MiB chunks: ")
    assert lines[1].endswith("chunks (target <= 4)")
