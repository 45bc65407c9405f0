"""`flightplan run --executor ray` on a real Ray cluster of this machine, end to end.

The cluster (``ray.cluster_utils.Cluster``) has a head without flights (home) and two
nodes that declare one ``flight`` each, all bound to 127.0.0.1
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), with ``RAY_TMPDIR`` in a folder of the test;
every process it started is stopped by its pid at the end. The tiny campaign (64 train /
16 test reviews, two essential runs) runs once with the local executor and once on the
cluster; during the cluster's run, as soon as lora-r4's first checkpoint has come home,
its worker is frozen (SIGSTOP, so the run cannot end first) and its node is killed
(raylet and every process under it, SIGKILL). The run must resume on the other flight
from that checkpoint and end with predictions, metrics and artifact byte-identical to the
local executor's (the same two runs, side by side); the ledger must show the interruption,
the node and the work lost; and `verify` of results/ must pass.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from flightplan.durable import write_json_atomic
from flightplan.run.campaign import plan_runs, trial_document
from flightplan.run.executor import Job, LocalExecutor
from flightplan.run.ledger import Ledger
from flightplan.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
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


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            tree.setdefault(parent, []).append(int(entry))
    return tree


def _descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process under them (read from /proc)."""
    tree, found, todo = _children(), [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _node_pids(node) -> list[int]:
    return [p.process.pid for procs in node.all_processes.values() for p in procs]


def _non_loopback_listeners() -> dict[str, str]:
    """Socket inode → ``/proc/net`` line, for sockets listening on an address other than
    127.0.0.1 / ::1."""
    inodes = {}
    for table, loopback in (("/proc/net/tcp", {"0100007F"}),
                            ("/proc/net/tcp6", {"00000000000000000000000001000000",
                                                "0000000000000000FFFF00000100007F"})):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[1].split(":")[0] not in loopback:   # LISTEN
                inodes[fields[9]] = line
    return inodes


def _sockets(pid: int) -> set[str]:
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                found.add(target[8:-1])
    except OSError:
        pass
    return found


@pytest.fixture(scope="module")
def cluster():
    """Head (no flight) + two flight nodes on 127.0.0.1; stopped by pid afterwards."""
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="fpray-", dir="/tmp"))   # short: AF_UNIX path limit
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": str(tmp),
           "FLIGHTPLAN_SCRATCH": str(tmp / "scratch"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    started: list[int] = []
    made = None
    try:
        made = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "_system_config": {
                "health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                "health_check_failure_threshold": 3}})
        flights = [made.add_node(num_cpus=1, resources={"flight": 1}) for _ in range(2)]
        made.wait_for_nodes()
        started = _descendants([pid for n in made.list_all_nodes() for pid in _node_pids(n)])
        yield made, flights, tmp, started
    finally:
        started = _descendants(started) if started else []
        if made is not None:
            made.shutdown()
        _kill(_descendants(started))
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(tmp, ignore_errors=True)


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
    """Wait until the run's first checkpoint is home, freeze its worker, kill its node."""
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
            if ready:
                frozen = _worker_pid(str(ready[0].parents[1]))
                if frozen is not None:
                    os.kill(frozen, signal.SIGSTOP)
        elif any(p.name[5:].isdigit() for p in (run_dir / "checkpoints").glob("step-*")):
            break
        time.sleep(0.05)
    header = [line for line in (run_dir / "log.txt").read_text().splitlines()
              if "flightplan worker started" in line][-1]
    node = next(n for n in flights if f"on node {n.node_id[:12]}" in header)
    pids = _descendants(_node_pids(node))
    assert frozen in pids
    made.remove_node(node, allow_graceful=False)
    _kill(pids)
    return {"node_id": node.node_id, "frozen": frozen,
            "home": sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))}


@pytest.fixture(scope="module")
def campaigns(cluster, tmp_path_factory):
    made, flights, tmp, started = cluster
    ray_dir = tmp_path_factory.mktemp("ray")
    spec = _campaign(ray_dir)
    ids = {p.run.name: p.run_id for p in plan_runs(load_spec(spec))}
    driver = subprocess.Popen([str(FLIGHTPLAN), "run", str(spec), "--executor", "ray",
                               "--address", made.address, "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        exposed = {}
        killed = _kill_node_of(ray_dir / "runs" / ids["lora-r4"], tmp / "scratch",
                               ids["lora-r4"], flights, made, driver)
        # inherited from this process (e.g. the harness's own server) is not the cluster's
        listening = _non_loopback_listeners()
        for inode in _sockets(os.getpid()):
            listening.pop(inode, None)
        exposed = {pid: (Path(f"/proc/{pid}/cmdline").read_bytes()[:60],
                         [listening[i] for i in _sockets(pid) if i in listening])
                   for pid in _descendants(started) if _sockets(pid) & set(listening)}
        out, err = driver.communicate(timeout=HANG_S)
    finally:
        driver.kill()
    verified = subprocess.run([str(FLIGHTPLAN), "verify", str(ray_dir / "results"), "--json"],
                              capture_output=True, text=True, timeout=HANG_S)
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
    return {"local": (local_dir, local), "ray": (ray_dir, driver.returncode, out, err),
            "ids": ids, "killed": killed, "exposed": exposed, "verified": verified}


def test_every_node_listens_on_loopback_only(campaigns):
    assert campaigns["exposed"] == {}


def test_products_on_two_flights_are_bitwise_those_of_the_local_executor(campaigns):
    local_dir, local = campaigns["local"]
    ray_dir, code, out, err = campaigns["ray"]
    assert sorted(r.exit_code for r in local) == [0, 0]
    assert code == 0, err[-3000:]
    outcome = json.loads(out)
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
        nodes = {e["run_id"]: e["data"]["node"] for e in ledger.events(kind="finished")}
        starts = {r["run_id"]: (r["started_at"]) for r in ledger.runs()}
    assert len(nodes) == 2
    control, lora = (campaigns["ids"][n] for n in ("control", "lora-r4"))
    assert abs(starts[control] - starts[lora]) < 20


def test_a_lost_flight_resumes_elsewhere_from_the_checkpoint_that_came_home(campaigns):
    ray_dir, code, out, err = campaigns["ray"]
    lora = campaigns["ids"]["lora-r4"]
    killed = campaigns["killed"]["node_id"][:12]
    with Ledger.open(ray_dir, create=False) as ledger:
        kinds = [e["kind"] for e in ledger.events(lora)]
        lost = ledger.events(lora, kind="interrupted")
        finished = ledger.events(lora, kind="finished")
        run = ledger.run(lora)
    assert kinds.index("started") < kinds.index("interrupted") < kinds.index("resumed") \
        < kinds.index("finished")
    data = lost[0]["data"]
    assert data["cause"] == "flight_lost" and data["node"].startswith(killed)
    assert data["checkpoint"] == campaigns["killed"]["home"][-1] and data["resumes"] is True
    assert data["steps_lost"] >= 0 and data["lost_s"] >= 0
    assert not finished[0]["data"]["node"].startswith(killed)
    assert run["status"] == "finished"
    log = (ray_dir / "runs" / lora / "log.txt").read_text()
    assert "lost node" in log and log.count("flightplan worker started") == 2
    rows = [json.loads(line) for line in
            (ray_dir / "runs" / lora / "measurements.jsonl").read_text().splitlines()]
    restores = [r for r in rows if r.get("event") == "restore"]
    assert restores[-1]["source"] == data["checkpoint"]
    transfers = [r for r in rows if r.get("event") == "checkpoint_transfer"]
    assert transfers and all(r["bytes"] > 0 for r in transfers)
    verified = campaigns["verified"]
    assert verified.returncode == 0, verified.stderr[-3000:] + verified.stdout[-3000:]
