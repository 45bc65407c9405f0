"""Choosing the executor (`flightplan run --executor/--address`, `[execution]`) and the
one-line errors around it; what a lost execution cost and how it resumes. The Ray
executor itself runs on a real cluster in tests/e2e/test_ray_tiny.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from flightplan.rundir import RunDir
from flightplan.rows import CheckpointTransferFailed
from flightplan.errors import ArgumentError, SpecError
from flightplan.run.commands import make_executor
from flightplan.run.executors.contract import Job, lost_execution
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.ray_executor import RayExecutor
from flightplan.run.executors.ray_host import RunHost
from flightplan.spec import parse_spec

REPO = Path(__file__).resolve().parents[4]
TINY = REPO / "examples" / "tiny" / "campaign.toml"


def _spec(execution: dict | None = None):
    data = tomllib.loads(TINY.read_text(encoding="utf-8"))
    if execution is not None:
        data["execution"] = execution
    return parse_spec(data)


def test_the_command_line_wins_over_the_campaign_file():
    assert isinstance(make_executor(_spec()), LocalExecutor)
    spec = _spec({"engine": "ray", "address": "127.0.0.1:6379"})
    chosen = make_executor(spec)
    assert isinstance(chosen, RayExecutor) and chosen.address == "127.0.0.1:6379"
    assert make_executor(spec, address="127.0.0.1:7000").address == "127.0.0.1:7000"
    assert isinstance(make_executor(spec, engine="local"), LocalExecutor)


def test_bad_choices_are_one_line_errors():
    with pytest.raises(ArgumentError, match=r"--executor slurm: not an executor; give local "
                                            r"or ray"):
        make_executor(_spec(), engine="slurm")
    with pytest.raises(ArgumentError, match=r"--address 10.0.0.5:6379: only the ray executor "
                                            r"takes an address; add --executor ray"):
        make_executor(_spec(), address="10.0.0.5:6379")
    with pytest.raises(SpecError, match=r"execution\.engine"):
        _spec({"engine": "rey"})
    with pytest.raises(SpecError, match=r"execution\.adress: unknown key 'adress'; did you mean "
                                        r"'address'\?"):
        _spec({"engine": "ray", "adress": "h:1"})


def test_the_cli_exits_2_naming_the_option(tmp_path):
    spec = tmp_path / "campaign.toml"
    spec.write_text(TINY.read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run([str(Path(sys.executable).parent / "flightplan"), "run", str(spec),
                           "--address", "10.0.0.5:6379"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --address 10.0.0.5:6379: only the ray executor takes an address; add "
        "--executor ray"]
    assert not (tmp_path / ".flightplan").exists()


def _lost_run(tmp_path, *, home: list[str], logged_steps: int):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in home:
        (run_dir / "checkpoints" / name).mkdir()
    (run_dir / "trial.json").write_text(json.dumps({"run_id": "r-1", "resume": False}))
    (run_dir / "measurements.jsonl").write_text("".join(
        json.dumps({"step": s, "time": 1.0, "loss": 1.0}) + "\n" for s in range(logged_steps)))
    return Job("r-1", run_dir)


def test_a_lost_execution_resumes_from_the_newest_checkpoint_home(tmp_path):
    job = _lost_run(tmp_path, home=["step-000002", "step-000004"], logged_steps=7)
    saved = (job.run_dir / "checkpoints" / "step-000004").stat().st_mtime
    info = lost_execution(job, node="abc (127.0.0.1)", reason="ActorDiedError: gone",
                          started_at=saved - 100.0, saved_any=True, now=saved + 12.5)
    assert (info.steps_done, info.checkpoint, info.steps_lost) == (7, "step-000004", 3)
    assert info.lost_s == 12.5 and info.resumes is True
    assert json.loads(job.trial_json.read_text())["resume"] is True
    assert "lost node abc (127.0.0.1)" in (job.run_dir / "log.txt").read_text()


def test_checkpoints_lost_everywhere_never_restart_from_scratch(tmp_path):
    # a checkpoint came home and has gone since: resume without one → no_usable_resume
    job = _lost_run(tmp_path, home=[], logged_steps=3)
    info = lost_execution(job, node="n", reason="r", started_at=1000.0, saved_any=True,
                          now=1030.0)
    assert (info.checkpoint, info.steps_lost, info.lost_s, info.resumes) == (None, 3, 30.0,
                                                                             False)
    assert json.loads(job.trial_json.read_text())["resume"] is True
    # none came home (what was saved on the flight went with it): start again from step 0
    job = _lost_run(tmp_path / "b", home=[], logged_steps=0)
    info = lost_execution(job, node="n", reason="r", started_at=1000.0, saved_any=False,
                          now=1004.0)
    assert info.resumes is True and json.loads(job.trial_json.read_text())["resume"] is False


def test_the_host_keeps_homes_transfer_figure_and_measures_the_wait(tmp_path):
    """RunHost without Ray: its worker is a process that has already ended; the checkpoint
    it committed goes home in chunks before its exit code."""
    host = RunHost("r-1", str(tmp_path), {}, chunk_bytes=4)
    with open(host.dir / "log.txt", "wb") as log:
        host.proc = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=log)
    host.proc.wait()
    step = host.dir / "checkpoints" / "step-000003"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"w" * 10)
    (step / "manifest.json").write_text(json.dumps({"files": {"model.safetensors": {
        "size": 10, "sha256": hashlib.sha256(b"w" * 10).hexdigest()}}}))
    for name in ("predictions.csv", "artifact/model.bin", "stray.bin", ".staging/step-1/x"):
        (host.dir / name).parent.mkdir(parents=True, exist_ok=True)
        (host.dir / name).write_bytes(b"made")
    durable = time.time() - 2.5            # the checkpoint became durable 2.5 s ago
    os.utime(step / "manifest.json", (durable, durable))
    figure = {"transfer_s": 0.75, "bytes_per_s": 4e6, "wait_s": 0.25, "checkpoints": 3}
    before = time.time()
    deltas = [host.poll(figure)]
    assert json.loads((host.dir / "transfer.json").read_text()) == figure
    while deltas[-1].exit_code is None:
        deltas.append(host.poll(None))     # no figure: the file is left as it was
    # 10 bytes in chunks of 4, then the manifest; the exit code only once all is sent
    chunks = [c for d in deltas for c in d.chunks]
    assert [(c.path, c.offset, c.size) for c in chunks] == [
        ("model.safetensors", 0, 4), ("model.safetensors", 4, 4), ("model.safetensors", 8, 2),
        ("manifest.json", 0, len((step / "manifest.json").read_bytes()))]
    assert [d.exit_code for d in deltas] == [None] * 4 + [0]
    assert 2.5 <= chunks[-1].waited_s <= 2.5 + (time.time() - before) + 0.01
    # only a run's outputs come home: not transfer.json, the log or a task's scratch files
    assert [b.path for b in deltas[-1].outputs] == ["artifact/model.bin", "predictions.csv"]
    assert json.loads((host.dir / "transfer.json").read_text()) == figure
    assert host.poll(None).exit_code is None             # reported once
    host.poll(dict(figure, checkpoints=4, transfer_s=0.5))
    assert json.loads((host.dir / "transfer.json").read_text())["checkpoints"] == 4
    host.close()
    assert not host.dir.exists()


def test_a_checkpoint_name_from_a_flight_that_is_not_one_is_refused_not_fatal(tmp_path):
    """Home takes the step count from a name the flight sends: a bad one is a refused
    transfer (a ``checkpoint_transfer_failed`` row), never an exception in the runner."""
    from flightplan.run.executors.ray_executor import _Execution
    from flightplan.run.executors.ray_host import PollUpdate
    from flightplan.run.executors.stream import CheckpointReceiver, Chunk

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    ex = _Execution(Job("r-1", run_dir), actor=None, ref=None,
                    receiver=CheckpointReceiver(run_dir / "checkpoints"),
                    where={"node_id": "n" * 12, "ip": "127.0.0.1"})
    chunks = [Chunk("step-12x", "model.bin", 0, b"x", 0),
              Chunk("step-" + "9" * 40, "model.bin", 0, b"x", 0),
              Chunk("step-000001", "../../escape", 0, b"x", 0)]
    RayExecutor()._absorb(ex, PollUpdate(b"", b"", chunks, None, []), asked_at=time.time())
    rows = RunDir(run_dir).rows()
    # a name that is not a checkpoint's holds no steps: its row is at step 0
    assert [(type(r), r.step, r.name) for r in rows] == [
        (CheckpointTransferFailed, 0, "step-12x"),
        (CheckpointTransferFailed, 0, "step-" + "9" * 40),
        (CheckpointTransferFailed, 1, "step-000001")]
    assert "not a checkpoint name" in rows[0].error
    assert "must be relative" in rows[2].error
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == []
    assert not (tmp_path / "escape").exists()
