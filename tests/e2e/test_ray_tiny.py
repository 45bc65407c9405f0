"""`flightplan run --executor ray` on a real Ray cluster of this machine, end to end.

The cluster (``ray.cluster_utils.Cluster``) has a head without flights (home) and two
nodes that declare one ``flight`` each, all bound to 127.0.0.1
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), with token authentication on (the driver has
the token) and ``RAY_TMPDIR`` in a folder of the test;
every process it started is stopped by its pid at the end. The tiny campaign (64 train /
16 test reviews, two essential runs) runs once with the local executor and once on the
cluster; during the cluster's run, as soon as lora-r4's first checkpoint has come home,
its worker is frozen (SIGSTOP, so the run cannot end first) and its node is killed
(raylet and every process under it, SIGKILL). The run must resume on the other flight
from that checkpoint and end with predictions, metrics and artifact byte-identical to the
local executor's (the same two runs, side by side); the ledger must show the interruption,
the node and the work lost; text ``status`` and ``results/flights.json`` the lost
flight. Once the run has started again, the driver (`flightplan run`) is SIGKILLed: its
worker must die with it, and `flightplan run` again must end the campaign with nothing
lost or duplicated; `verify` of results/ must pass. Before that, on the same cluster: a
run refused on the flight it was placed on (its package ends first) starts on the other
flight, and a run refused on both is not started at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightplan.durable import write_json_atomic
from flightplan.run.planned import plan_runs, trial_document
from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.ledger import Ledger
from flightplan.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ray_cluster import descendants, exposed_listeners, kill_node, loopback_cluster

from cli_run import FLIGHTPLAN

REPO = Path(__file__).resolve().parents[2]
HANG_S = 600
"""A campaign that takes longer than this has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _campaign(folder: Path) -> Path:
    """The tiny campaign on 64 train / 16 test reviews, without its useful run."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    for old, new in (("train_limit = 240", "train_limit = 64"), ("test_limit = 80", "test_limit = 16")):
        assert old in text
        text = text.replace(old, new)
    last = text.rindex("[[run]]")
    assert 'name = "lora-r4-len128"' in text[last:]
    spec = folder / "campaign.toml"
    spec.write_text(text[:last], encoding="utf-8")
    return spec


@pytest.fixture(scope="module")
def cluster():
    """Head (no flight) + two flight nodes on 127.0.0.1 (tests/fixtures/ray_cluster.py)."""
    with loopback_cluster(flights=2, env={"HF_HUB_OFFLINE": "1",
                                          "TRANSFORMERS_OFFLINE": "1"}) as made:
        yield made


def _worker_pid(marker: str) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "flightplan.run.worker" in cmd and marker in cmd:
                return int(entry)
    return None


def _kill_node_of(run_dir: Path, scratch: Path, run_id: str, flights, made,
                  driver: subprocess.Popen) -> dict:
    """Wait until the run's first checkpoint is home (with the row of the interval chosen
    after it: a checkpoint streams home while the trial is still writing that row), freeze
    its worker, kill its node."""
    deadline = time.time() + HANG_S
    frozen = None
    while True:
        if driver.poll() is not None or time.time() > deadline:
            out, err = driver.communicate(timeout=HANG_S)
            raise AssertionError(f"no checkpoint of {run_id} came home before the driver "
                                 f"ended ({driver.returncode}): {err[-3000:]} {out[-2000:]}")
        if frozen is None:
            ready = [p for p in scratch.glob(f"flightplan-{run_id}-*/checkpoints/step-*")
                     if p.name[5:].isdigit()]            # committed (not .tmp)
            if ready and b'"checkpoint_interval"' in (ready[0].parents[1] /
                                                      "measurements.jsonl").read_bytes():
                frozen = _worker_pid(str(ready[0].parents[1]))
                if frozen is not None:
                    os.kill(frozen, signal.SIGSTOP)
        elif any(p.name[5:].isdigit() for p in (run_dir / "checkpoints").glob("step-*")) \
                and b'"checkpoint_interval"' in (run_dir / "measurements.jsonl").read_bytes():
            break    # its first checkpoint home, and the interval its trial chose after it
        time.sleep(0.05)
    header = [line for line in (run_dir / "log.txt").read_text().splitlines()
              if "flightplan worker started" in line][-1]
    node = next(n for n in flights if f"on node {n.node_id[:12]}" in header)
    assert frozen in kill_node(made, node)
    return {"node_id": node.node_id, "frozen": frozen,
            "home": sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))}


def _kill_driver_once_resumed(run_dir: Path, driver: subprocess.Popen) -> int:
    """SIGKILL the driver as soon as the run's second execution started; returns that
    execution's worker pid after checking that it died with the driver's actors."""
    deadline = time.time() + HANG_S
    while time.time() < deadline and driver.poll() is None:
        headers = [line for line in (run_dir / "log.txt").read_text().splitlines()
                   if "flightplan worker started" in line]
        if len(headers) == 2:
            break
        time.sleep(0.05)
    scratch = headers[-1].rsplit("scratch ", 1)[1].split(" ---")[0]
    worker = None
    while worker is None and time.time() < deadline:
        worker = _worker_pid(scratch)
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    while _worker_pid(scratch) is not None and time.time() < deadline:
        time.sleep(0.1)
    assert _worker_pid(scratch) is None, "the worker outlived the killed driver"
    return worker


@pytest.fixture(scope="module")
def campaigns(cluster, tmp_path_factory):
    made, flights, tmp = cluster
    ray_dir = tmp_path_factory.mktemp("ray")
    spec = _campaign(ray_dir)
    ids = {p.run.name: p.run_id for p in plan_runs(load_spec(spec))}
    lora_dir = ray_dir / "runs" / ids["lora-r4"]
    argv = [str(FLIGHTPLAN), "run", str(spec), "--executor", "ray", "--address", made.address,
            "--json"]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        killed = _kill_node_of(lora_dir, tmp / "scratch", ids["lora-r4"], flights, made, driver)
        exposed = exposed_listeners(descendants([p.process.pid for n in made.list_all_nodes()
                                                 for procs in n.all_processes.values()
                                                 for p in procs]))
        killed["driver_worker"] = _kill_driver_once_resumed(lora_dir, driver)
    finally:
        driver.kill()
        driver.wait()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S)
    verified = subprocess.run([str(FLIGHTPLAN), "verify", str(ray_dir / "results"), "--json"],
                              capture_output=True, text=True, timeout=HANG_S)
    status = subprocess.run([str(FLIGHTPLAN), "status", str(spec)], capture_output=True,
                            text=True, timeout=HANG_S, env=dict(os.environ, COLUMNS="200"))
    # the same two runs with the local executor, side by side, from fresh trial.json files
    local_dir = tmp_path_factory.mktemp("local")
    local_spec = load_spec(_campaign(local_dir))
    jobs = []
    for planned in plan_runs(local_spec):
        planned.run_dir.mkdir(parents=True)
        write_json_atomic(planned.run_dir / "trial.json",
                          trial_document(local_spec, planned, resume=False))
        jobs.append(Job(planned.run_id, planned.run_dir))
    local = LocalExecutor(slots=2).run(jobs)
    return {"local": (local_dir, local), "ray": (ray_dir, again), "ids": ids,
            "killed": killed, "exposed": exposed, "verified": verified, "status": status}


def test_a_run_refused_on_one_flight_starts_on_the_other_or_nowhere(cluster, tmp_path):
    from flightplan.run.executors.ray_executor import RayExecutor

    made, flights, tmp = cluster
    names = {f"{n.node_id[:12]} (127.0.0.1)" for n in flights}
    jobs = {}
    for run_id in ("r-1", "r-2"):
        (tmp_path / run_id).mkdir()
        # a trial the worker refuses at once (exit 2): what matters is where it starts
        (tmp_path / run_id / "trial.json").write_text(json.dumps({"run_id": run_id}))
        jobs[run_id] = Job(run_id, tmp_path / run_id)
    asked: list[tuple[str, str]] = []

    def admit(job: Job, flight: str) -> bool:
        asked.append((job.run_id, flight))
        # r-1: the first flight it is placed on ends first; r-2: both do
        return job.run_id == "r-1" and len(asked) > 1

    executor = RayExecutor(address=made.address, scratch=str(tmp / "scratch"))
    try:
        [started] = executor.run([jobs["r-1"]], admit=admit)
        assert [r for r, _ in asked] == ["r-1", "r-1"] and {f for _, f in asked} == names
        assert started.node == asked[1][1] and started.exit_code == 2
        asked.clear()
        assert executor.run([jobs["r-2"]], admit=admit) == []
    finally:
        executor.close()
    assert [r for r, _ in asked] == ["r-2", "r-2"] and {f for _, f in asked} == names
    log = (tmp_path / "r-2" / "log.txt").read_text()
    assert log.splitlines()[-1] == ("--- flightplan: not started: no flight left where it can "
                                    "finish before the package ends (flightplan status says "
                                    "why) ---")
    assert "flightplan worker started" not in log


def _paced_job(folder: Path, run_id: str) -> Job:
    """A 60-step MLP run at 0.05 s a step (tests/fixtures/paced_task.py)."""
    folder.mkdir(parents=True)
    (folder / "trial.json").write_text(json.dumps({
        "run_id": run_id, "task": "paced_task.py", "campaign_dir": str(REPO / "tests" / "fixtures"),
        "params": {"steps": 60, "step_sleep_s": 0.05}}))
    return Job(run_id, folder)


def test_a_run_leaves_a_flight_whose_package_ends_and_resumes_on_the_other(cluster, tmp_path):
    from flightplan.run.executors.leave_watch import LeaveBy
    from flightplan.run.executors.ray_executor import RayExecutor

    made, flights, tmp = cluster
    [plain] = LocalExecutor(slots=1).run([_paced_job(tmp_path / "plain", "p-1")])
    expected = (tmp_path / "plain" / "artifact" / "weights.bin").read_bytes()
    job = _paced_job(tmp_path / "left", "l-1")
    now = time.time()
    asked: list[str] = []

    def leave_by(job: Job, flight: str):
        asked.append(flight)       # the first flight's runs must leave it at once
        return LeaveBy(at=now, ends_at=now + 120.0, stop=True, flight=flight) \
            if len(asked) == 1 else None

    interruptions = []
    executor = RayExecutor(address=made.address, scratch=str(tmp / "scratch"), poll_s=0.1)
    try:
        [result] = executor.run([job], leave_by=leave_by,
                                on_interrupted=lambda j, info: interruptions.append(info))
    finally:
        executor.close()
    assert plain.exit_code == 0 and result.exit_code == 0
    assert len(asked) == 2 and asked[0] != asked[1] and result.node == asked[1]
    [info] = interruptions
    assert (info.cause, info.node, info.steps_lost, info.resumes) == ("package_end", asked[0],
                                                                      0, True)
    rows = [json.loads(line) for line in (job.run_dir / "measurements.jsonl").open()]
    [forced] = [r for r in rows if r.get("event") == "forced_checkpoint"]
    assert forced["name"] == info.checkpoint and forced["then"] == "stop"
    [home] = [r for r in rows if r.get("event") == "checkpoint_transfer"
              and r["name"] == info.checkpoint]
    assert home["node"] == asked[0] and home["time"] < now + 120.0    # home before the end
    restored = [r for r in rows if r.get("event") == "restore" and r.get("source")]
    assert [r["source"] for r in restored] == [info.checkpoint]
    assert (job.run_dir / "artifact" / "weights.bin").read_bytes() == expected


def test_every_node_listens_on_loopback_only(campaigns):
    assert campaigns["exposed"] == {}           # pid → its listeners not on 127.0.0.1


def test_products_on_two_flights_are_bitwise_those_of_the_local_executor(campaigns):
    local_dir, local = campaigns["local"]
    ray_dir, again = campaigns["ray"]
    assert sorted(r.exit_code for r in local) == [0, 0]
    assert again.returncode == 0, again.stderr[-3000:]
    outcome = json.loads(again.stdout)                  # Ray's own notices went to stderr
    assert outcome["pilot"]["ok"] is True and outcome["pilot"]["mismatches"] == []
    assert outcome["statuses"] == {"control": "finished", "lora-r4": "finished"}
    for run_id in campaigns["ids"].values():
        mine, theirs = ray_dir / "runs" / run_id, local_dir / "runs" / run_id
        names = sorted(p.relative_to(theirs).as_posix() for p in theirs.rglob("*")
                       if p.is_file() and p.parts[len(theirs.parts)] in
                       ("predictions.csv", "metrics.json", "artifact"))
        assert len(names) >= 4 and "artifact/model.safetensors" in names
        for name in names:
            assert (mine / name).read_bytes() == (theirs / name).read_bytes(), name
        assert not (mine / ".incoming").exists()
    # both runs ran side by side, each on its own flight
    with Ledger.open(ray_dir, create=False) as ledger:
        nodes = {e.run_id: e.data["node"] for e in ledger.events(kind="finished")}
        runs = {r.run_id: r for r in ledger.runs()}
    assert len(nodes) == 2
    control, lora = (campaigns["ids"][n] for n in ("control", "lora-r4"))
    first, second = sorted((runs[control], runs[lora]), key=lambda r: r.started_at)
    assert second.started_at < first.ended_at        # the two overlapped in time
    # lora-r4 began on the flight that was killed, control ran on the other one
    assert not nodes[control].startswith(campaigns["killed"]["node_id"][:12])


def test_a_lost_flight_resumes_elsewhere_from_the_checkpoint_that_came_home(campaigns):
    ray_dir, _ = campaigns["ray"]
    lora = campaigns["ids"]["lora-r4"]
    killed = campaigns["killed"]["node_id"][:12]
    with Ledger.open(ray_dir, create=False) as ledger:
        kinds = [e.kind for e in ledger.events(lora)]
        lost = ledger.events(lora, kind="interrupted")
        finished = ledger.events(lora, kind="finished")
        run = ledger.run(lora)
    assert kinds.index("started") < kinds.index("interrupted") < kinds.index("resumed") \
        < kinds.index("finished")
    data = lost[0].data
    assert data["cause"] == "flight_lost" and data["node"].startswith(killed)
    assert data["checkpoint"] == campaigns["killed"]["home"][-1] and data["resumes"] is True
    assert data["steps_lost"] >= 0 and data["lost_s"] >= 0
    assert not finished[0].data["node"].startswith(killed)
    assert run.status == "finished"
    log = (ray_dir / "runs" / lora / "log.txt").read_text()
    assert "lost node" in log and log.count("flightplan worker started") == 3
    rows = [json.loads(line) for line in
            (ray_dir / "runs" / lora / "measurements.jsonl").read_text().splitlines()]
    restores = [r for r in rows if r.get("event") == "restore"]
    assert data["checkpoint"] in [r["source"] for r in restores]
    transfers = [r for r in rows if r.get("event") == "checkpoint_transfer"]
    assert transfers and all(r["bytes"] > 0 and r["wait_s"] >= 0 for r in transfers)
    # the pilot's transfers are its figures; the run's trial bounded its interval by them
    with Ledger.open(ray_dir, create=False) as ledger:
        figures = ledger.decisions()[0].figures
    assert figures["pilot"]["transfer_s"] > 0 and figures["pilot"]["transfer_bytes_per_s"] > 0
    assert figures["estimates"]["lora-r4"]["transfer_s"] > 0
    intervals = [r for r in rows if r.get("event") == "checkpoint_interval"]
    assert intervals[0]["transfer_s"] > 0
    assert intervals[0]["interval_s"] == pytest.approx(
        60 - intervals[0]["persist_s"] - intervals[0]["transfer_s"] - intervals[0]["restore_s"])
    verified = campaigns["verified"]
    report = json.loads(verified.stdout)
    # run published every run's products, and they reload; only close completes results/
    assert [f["check"] for f in report["findings"]] == ["incomplete"], verified.stdout[-3000:]
    assert verified.returncode == 1 and set(report["reload"].values()) == {"reproduced"}
    # the flight is lost in the ledger, in text status and in results/
    with Ledger.open(ray_dir, create=False) as ledger:
        joined = [e.data for e in ledger.events(kind="cluster_joined")]
        gone = [e.data for e in ledger.events(kind="flight_lost")]
    assert len(joined) == 2 and all(j["token"] and j["loopback"] and not j["trusted_network"]
                                    for j in joined)
    assert [g["flight"] for g in gone] == [data["node"]]
    flights = {f["flight"]: f for f in
               json.loads((ray_dir / "results" / "flights.json").read_text())}
    assert flights[data["node"]]["lost_at"] == gone[0]["at"]
    assert flights[data["node"]]["hours_left"] == 0.0
    status = campaigns["status"]
    assert status.returncode == 0, status.stderr
    assert f"ray cluster {joined[-1]['address']}: token authentication, loopback only" \
        in status.stdout
    # its line under "flights (packages)", then its hours bought under goodput's section
    line, bought = [x for x in status.stdout.splitlines() if x.strip().startswith(data["node"])]
    assert line.split()[2] == "lost" and "h left" not in line
    assert "slot" in bought or "×" in bought


def test_a_killed_driver_run_again_loses_and_duplicates_nothing(campaigns):
    ray_dir, again = campaigns["ray"]
    assert again.returncode == 0, again.stderr[-3000:]
    lora = campaigns["ids"]["lora-r4"]
    with Ledger.open(ray_dir, create=False) as ledger:
        assert ledger.integrity_check() == "ok"
        for run_id in campaigns["ids"].values():
            kinds = [e.kind for e in ledger.events(run_id)]
            assert kinds.count("started") == 1 and kinds.count("finished") == 1, kinds
        lost = [e.data for e in ledger.events(lora, kind="interrupted")]
    # one loss of the flight, one of the driver (the runner: no data)
    assert [d and d["cause"] for d in lost] == ["flight_lost", None]
    manifest = json.loads((ray_dir / "results" / "MANIFEST.json").read_text())
    paths = [f["path"] for f in manifest["files"]]
    assert len(paths) == len(set(paths))
    assert sorted(manifest["expected_run_ids"]) == sorted(campaigns["ids"].values())
