"""One suite for every executor (run/executors/contract.py): a new executor is done when
this suite passes on it.

Each case runs against the local executor and against the Ray executor on a real
loopback cluster with token authentication (a head and two flights, ``conftest.py``,
started once for the module), with the fake worker of ``tests/fixtures/fake_worker.py`` (no torch):
a run starts and finishes; a rule stops one; a killed runner leaves no worker behind; a
run asked to leave before its flight's package ends comes home with its checkpoint; a run
holding N GPUs gets N of its own (a fake two-GPU machine: the local executor's GPU count
given, a Ray node declaring two GPUs), and one asking for more than any flight has is not
started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from flightplan.rows import ForcedCheckpoint, ProcessStart
from flightplan.run.executors.contract import (EXIT_NO_FLIGHT, Executor, GpuLimit, Job,
                                               check_gpus)
from flightplan.run.executors.leave_watch import LeaveBy
from flightplan.run.executors.local import LocalExecutor
from flightplan.rundir import RunDir
from processes import alive  # tests/fixtures, put on the path by conftest.py

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
FAKE_WORKER = FIXTURES / "fake_worker.py"
WAIT_S = 120
"""Longer than any case takes on a loaded machine: a safety net, not a speed check."""

sys.path.insert(0, str(FIXTURES))
from ray_cluster import remove_node  # noqa: E402 (fixtures put on the path)


def _fake_argv(trial_json: Path) -> list[str]:
    return [sys.executable, str(FAKE_WORKER), str(trial_json)]


Make = Callable[..., Executor]


@pytest.fixture(params=["local", "ray"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make(kind: str, request: pytest.FixtureRequest) -> Make:
    """``make(**options)``: a new executor of this case's kind running the fake worker;
    ``gpus`` stands for a machine (local) or a flight (Ray) with that many GPUs."""
    if kind == "local":
        def local(*, gpus: int = 0, slots: int = 2) -> Executor:
            return LocalExecutor(slots=slots, argv=_fake_argv, poll_s=0.05, gpus=gpus)
        return local
    made, _, tmp = request.getfixturevalue("cluster")
    from flightplan.run.executors.ray_executor import RayExecutor

    def remote(*, gpus: int = 0, slots: int = 2) -> Executor:
        del gpus, slots                    # the cluster's nodes say what they have
        return RayExecutor(address=made.address, scratch=str(tmp / "scratch"), poll_s=0.05,
                           no_flight_s=1.0, worker=[sys.executable, str(FAKE_WORKER)])
    return remote


def _job(root: Path, run_id: str, *, gpus: int = 1, **params: Any) -> Job:
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "trial.json").write_text(json.dumps({"run_id": run_id, "params": params,
                                                    "planned_steps": None, "max_steps": None}))
    return Job(run_id, run_dir, gpus=gpus)


def _rows(job: Job) -> list[dict[str, Any]]:
    return RunDir(job.run_dir).rows()


def test_a_run_starts_and_finishes(make: Make, tmp_path: Path) -> None:
    job = _job(tmp_path, "a-1", steps=3, process_start=True)
    events: list[tuple[str, str]] = []
    progress: list[tuple[int, int | None, float | None]] = []
    [result] = make().run([job], on_start=lambda j: events.append(("start", j.run_id)),
                          on_done=lambda r: events.append(("done", r.run_id)),
                          on_progress=lambda j, p: progress.append((p.completed, p.total,
                                                                    p.loss)))
    assert events == [("start", "a-1"), ("done", "a-1")]
    assert (result.run_id, result.exit_code) == ("a-1", 0) and result.wall_s >= 0
    assert progress[-1] == (3, 3, 1 / 3)             # every row is home by the end
    assert RunDir(job.run_dir).status() == "finished"
    rows = _rows(job)
    assert [r.step for r in rows] == [0, 0, 0, 1, 2]
    # the execution began before its process did (the kernel's start time is floored to a
    # clock tick, 10 ms): the process's start is inside the execution, before its first row
    assert isinstance(rows[0], ProcessStart)
    assert result.started_at - 0.01 <= rows[0].time <= rows[1].time <= result.ended_at
    log = RunDir(job.run_dir).log.read_text()
    assert "flightplan worker started" in log and "fake worker a-1 on" in log
    assert "to stderr" in log


def test_a_rule_stops_a_run(make: Make, tmp_path: Path) -> None:
    job = _job(tmp_path, "s-1", steps=10, stop_at=2)
    [result] = make().run([job])
    assert result.exit_code == 1
    assert RunDir(job.run_dir).status() == "stopped"
    stop = RunDir(job.run_dir).read_json(RunDir.STOP)
    assert (stop["rule"], stop["step"]) == ("fake_rule", 2)
    assert [r.step for r in _rows(job)][-1] == 2        # nothing after the stop


_RUNNER = """
import json, sys
from pathlib import Path
sys.path.insert(0, {fixtures!r})
from flightplan.run.executors.contract import Job
kind, run_dir, address, scratch = sys.argv[1:5]
worker = [sys.executable, {worker!r}]
if kind == "local":
    from flightplan.run.executors.local import LocalExecutor
    executor = LocalExecutor(slots=1, argv=lambda t: [*worker, str(t)], poll_s=0.05)
else:
    from flightplan.run.executors.ray_executor import RayExecutor
    executor = RayExecutor(address=address, scratch=scratch, poll_s=0.05, worker=worker)
print("starting", flush=True)
executor.run([Job("slow-1", Path(run_dir))])
"""


def _wait(what: str, ready: Callable[[], Any]) -> Any:
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {WAIT_S} s")


def test_a_killed_runner_leaves_no_worker_behind(kind: str, make: Make, tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    make()                                             # starts the cluster for Ray
    job = _job(tmp_path, "slow-1", steps=1, sleep_s=300)
    address = scratch = ""
    if kind == "ray":
        made, _, tmp = request.getfixturevalue("cluster")
        address, scratch = made.address, str(tmp / "scratch")
    runner = subprocess.Popen([sys.executable, "-c",
                               _RUNNER.format(fixtures=str(FIXTURES), worker=str(FAKE_WORKER)),
                               kind, str(job.run_dir), address, scratch],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert runner.stdout is not None and runner.stdout.readline().strip() == "starting"
        log = RunDir(job.run_dir).log

        def worker_pid() -> int | None:      # the log comes home as it is written
            text = log.read_text() if log.is_file() else ""
            found = [line for line in text.splitlines() if line.startswith("fake worker pid")]
            return int(found[0].split()[-1]) if found else None

        pid = _wait("the worker's pid in log.txt", worker_pid)
        assert alive(pid)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _wait(f"worker {pid} to die with its runner", lambda: not alive(pid))
    finally:
        runner.kill()
        runner.wait()
    assert RunDir(job.run_dir).status() is None          # not finished: it resumes


def test_a_run_leaves_before_its_flights_package_ends(make: Make, tmp_path: Path) -> None:
    job = _job(tmp_path, "l-1", steps=400, sleep_s=0.05)
    now = time.time()
    interruptions = []
    flights: list[str] = []

    def admit(job: Job, flight: str) -> bool:
        flights.append(flight)
        return not interruptions           # once it left, no flight has time for it

    results = make().run([job], admit=admit,
                         leave_by=lambda j, flight: LeaveBy(at=now, ends_at=now + 60.0,
                                                            stop=True, flight=flight),
                         on_interrupted=lambda j, info: interruptions.append(info))
    assert results == []                                  # it did not end: it left
    [info] = interruptions
    assert (info.cause, info.node, info.steps_lost, info.resumes) == (
        "package_end", flights[0], 0, True)
    assert info.steps_done > 0 and info.checkpoint == f"step-{info.steps_done:06d}"
    home = RunDir(job.run_dir).checkpoints / info.checkpoint
    assert json.loads((home / "manifest.json").read_text())["step"] == info.steps_done
    [forced] = [r for r in _rows(job) if isinstance(r, ForcedCheckpoint)]
    assert (forced.name, forced.then) == (info.checkpoint, "stop")
    assert json.loads(job.trial_json.read_text())["resume"] is True
    assert "checkpoint now and leave ---" in RunDir(job.run_dir).log.read_text()


def _devices(job: Job) -> list[str]:
    return json.loads((job.run_dir / "metrics.json").read_text())["cuda_visible_devices"] \
        .split(",")


@pytest.fixture
def two_gpus(kind: str, request: pytest.FixtureRequest,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine (local: the runner's ``CUDA_VISIBLE_DEVICES=5,7``) or a flight (Ray: a
    node of the cluster declaring two GPUs; while it is there, runs ask Ray for GPUs)."""
    if kind == "local":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
        yield
        return
    import ray

    made, _, _ = request.getfixturevalue("cluster")
    node = made.add_node(num_cpus=2, num_gpus=2)
    made.wait_for_nodes()
    try:
        _wait("the GPU node", lambda: ray.cluster_resources().get("GPU") == 2)
        yield
    finally:
        remove_node(made, node)
        _wait("the GPU node to go", lambda: "GPU" not in ray.cluster_resources())


def test_each_run_holds_its_own_gpus(kind: str, make: Make, two_gpus: None,
                                     tmp_path: Path) -> None:
    jobs = [_job(tmp_path, "two-1", gpus=2, steps=2, sleep_s=0.2),
            _job(tmp_path, "one-2", gpus=1, steps=8, sleep_s=0.1),
            _job(tmp_path, "one-3", gpus=1, steps=8, sleep_s=0.1),
            _job(tmp_path, "three-4", gpus=3, steps=1)]
    results = {r.run_id: r for r in make(gpus=2).run(jobs)}
    assert {k: r.exit_code for k, r in results.items()} == {
        "two-1": 0, "one-2": 0, "one-3": 0, "three-4": EXIT_NO_FLIGHT}
    held = {j.run_id: _devices(j) for j in jobs[:3]}
    assert len(held["two-1"]) == 2 and len(set(held["two-1"])) == 2
    assert len(held["one-2"]) == len(held["one-3"]) == 1
    if kind == "local":                       # the runner's own GPUs, by their names
        assert held["two-1"] == ["5", "7"] and held["one-2"] + held["one-3"] in (
            ["5", "7"], ["7", "5"])
    # runs that overlapped in time never shared a GPU
    for a in held:
        for b in held:
            overlap = results[a].started_at < results[b].ended_at \
                and results[b].started_at < results[a].ended_at
            if a < b and overlap:
                assert not set(held[a]) & set(held[b]), (a, b, held)
    assert results["one-2"].started_at < results["one-3"].ended_at     # side by side
    log = RunDir(jobs[3].run_dir).log.read_text()
    assert "not started" in log and "flightplan worker started" not in log
    assert ("3 GPUs" in log) and ("has 2" in log if kind == "local" else "waited" in log)


def test_a_campaign_asking_more_gpus_than_the_machine_has_is_refused_before_anything(
        tmp_path: Path) -> None:
    """Planned for two-GPU flights (B200), run on a machine with one GPU: exit 2 naming the
    run, ``[[run]] gpus`` and what the machine has; nothing written."""
    from flightplan.errors import SpecError
    from flightplan.run.campaign import run_campaign
    from flightplan.spec import load_spec

    text = (Path(__file__).resolve().parents[4] / "examples" / "tiny" / "campaign.toml"
            ).read_text(encoding="utf-8")
    text = text.replace('offer = "RTX 4090"', 'offer = "B200"\ncatalog = "offers.toml"')
    text = text.replace('duration = "20s"', 'duration = "20s"\ngpus = 2')   # lora-r4
    (tmp_path / "offers.toml").write_text('[[offer]]\nname = "B200"\ncurrency = "USD"\n'
                                          '[[offer.package]]\ndays = 3\nprice = "500.00"\n')
    (tmp_path / "campaign.toml").write_text(text, encoding="utf-8")
    spec = load_spec(tmp_path / "campaign.toml")
    executor = LocalExecutor(argv=_fake_argv, gpus=1)
    assert executor.gpu_limit() == GpuLimit(1, f"this machine (CUDA_VISIBLE_DEVICES="
                                               f"{_first_gpu()})")
    with pytest.raises(SpecError) as refused:
        run_campaign(spec, executor=executor, quiet=True)
    assert str(refused.value) == (
        f"{spec.source}: run[1].gpus: 'lora-r4' needs 2 GPUs ([[run]] gpus) but this machine "
        f"(CUDA_VISIBLE_DEVICES={_first_gpu()}) has 1; give gpus = 1 or fewer, or run the "
        f"campaign on flights that have 2 (--executor ray)")
    assert refused.value.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml", "offers.toml"]
    # what fits, or a machine without GPUs (runs compute on the CPU), passes
    check_gpus(spec.runs, GpuLimit(2, "a flight"), source=None)
    check_gpus(spec.runs, LocalExecutor(argv=_fake_argv, gpus=0).gpu_limit(), source=None)


def _first_gpu() -> str:
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return given or "0"
