"""Leaving a flight before its package ends (run/executors/leave_watch.py): the trial's forced
checkpoint, home's watch and its need figure, and a real worker asked to leave by the
local executor that resumes bitwise identical to a run never asked."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from flightplan.errors import TrialPreempted
from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.leave_watch import (LEAVE_SIGNAL, SAVE_SIGNAL, LeaveBy,
                                       LeaveWatch, leave_need_s)
from flightplan.trial.trial import Trial
from flightplan.rows import ForcedCheckpoint, Row
from flightplan.rundir import RunDir

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _rows(run_dir: Path) -> list[Row]:
    return RunDir(run_dir).rows()


def _mlp_trial(run_dir: Path) -> tuple[Trial, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trial = Trial.local(run_dir, params={"lr": 0.1})
    trial.register(model=model, optimizer=optimizer)
    assert trial.restore() == 0
    return trial, model, optimizer


def test_a_request_to_leave_saves_at_the_next_step_then_stops(tmp_path):
    trial, model, optimizer = _mlp_trial(tmp_path / "run")
    for step in range(3):
        trial.log(step, loss=1.0)
        trial.maybe_checkpoint(step)   # step 0: the first save; then the 30 min interval
    trial.wait_for_checkpoint()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000001"]
    trial.request_leave(stop=True)
    trial.log(3, loss=1.0)
    with pytest.raises(TrialPreempted) as caught:
        trial.maybe_checkpoint(3)
    assert (caught.value.steps_done, caught.value.checkpoint) == (4, "step-000004")
    # the checkpoint is durable and whole before the exception
    assert (tmp_path / "run" / "checkpoints" / "step-000004" / "manifest.json").is_file()
    last = _rows(tmp_path / "run")[-1]
    assert isinstance(last, ForcedCheckpoint)
    assert (last.step, last.name, last.then) == (4, "step-000004", "stop")


def test_a_request_to_save_and_go_on_saves_once_and_continues(tmp_path):
    trial, _, _ = _mlp_trial(tmp_path / "run")
    trial.log(0, loss=1.0)
    trial.maybe_checkpoint(0)
    trial.request_leave(stop=False)
    trial.log(1, loss=1.0)
    assert trial.maybe_checkpoint(1) is True
    trial.log(2, loss=1.0)
    assert trial.maybe_checkpoint(2) is False    # the request was served once
    trial.finish()
    forced = [r for r in _rows(tmp_path / "run") if isinstance(r, ForcedCheckpoint)]
    assert [(r.name, r.then) for r in forced] == [("step-000002", "continue")]


def test_the_watch_asks_once_the_run_logs_and_the_deadline_less_its_need_has_come(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [{"step": 0, "time": 100.0, "loss": 1.0}, {"step": 1, "time": 102.0, "loss": 1.0},
            {"step": 2, "time": 105.0, "loss": 1.0},
            {"step": 3, "time": 106.0, "event": "checkpoint", "stall_s": 0.5, "persist_s": 1.5},
            {"step": 3, "time": 107.0, "event": "checkpoint_transfer", "wait_s": 0.5,
             "fetch_s": 3.0, "commit_s": 1.0}]
    (run_dir / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    watch = LeaveWatch(LeaveBy(at=1000.0, ends_at=1900.0, stop=True, flight="n1"), run_dir,
                       poll_s=0.5)
    # step gaps 2 s and 3 s: median 2.5; save 0.5 + 1.5; transfer 0.5 + 3 + 1; two polls
    assert watch.need_s() == 2 * (2.5 + 2.0 + 4.5) + 2 * 0.5 == 19.0
    assert leave_need_s(step_s=2.5, save_s=2.0, transfer_s=4.5, poll_s=0.5) == 19.0
    assert watch.signal == LEAVE_SIGNAL
    # those rows are an earlier execution's: this one has logged nothing yet
    assert watch.due(999.0) is False
    with open(run_dir / "measurements.jsonl", "a") as out:
        out.write(json.dumps({"step": 4, "time": 110.0, "step_s": 2.5, "loss": 1.0}) + "\n")
    assert watch.due(980.0) is False           # 1000 − 19 = 981
    assert watch.due(981.0) is True
    assert watch.due(990.0) is False           # asked once
    sent = []
    watch.ask(sent.append)
    assert sent == [int(LEAVE_SIGNAL)]
    assert (run_dir / "log.txt").read_text() == (
        "--- flightplan: the package of flight n1 ends 1970-01-01 00:31:40 UTC: checkpoint "
        "now and leave ---\n")
    going_on = LeaveWatch(LeaveBy(at=0.0, ends_at=0.0, stop=False, flight="n1"), run_dir,
                          poll_s=0.5)
    assert going_on.signal == SAVE_SIGNAL


def _job(folder: Path, run_id: str, *, steps: int, sleep_s: float, **params) -> Job:
    folder.mkdir(parents=True)
    (folder / "trial.json").write_text(json.dumps({
        "run_id": run_id, "task": "paced_task.py", "campaign_dir": str(FIXTURES),
        "params": {"steps": steps, "step_sleep_s": sleep_s, **params}}))
    return Job(run_id, folder)


def test_a_worker_asked_to_leave_resumes_bitwise_identical(tmp_path):
    executor = LocalExecutor(slots=1, poll_s=0.05)
    [plain] = executor.run([_job(tmp_path / "plain", "p-1", steps=40, sleep_s=0.02)])
    assert plain.exit_code == 0
    # a task that sets no thread count computes with the run's (default 1), BLAS too
    assert json.loads((tmp_path / "plain" / "artifact" / "threads.json").read_text()) == {
        "torch": 1, "omp": "1"}
    expected = (tmp_path / "plain" / "artifact" / "weights.bin").read_bytes()

    job = _job(tmp_path / "left", "l-1", steps=40, sleep_s=0.02)
    interruptions = []
    now = time.time()
    deadline = LeaveBy(at=now, ends_at=now + 60.0, stop=True, flight="local")
    results = executor.run([job], on_interrupted=lambda j, info: interruptions.append(info),
                           leave_by=lambda j, flight: deadline)
    assert results == []                        # it did not end: it left
    [info] = interruptions
    forced = [r for r in _rows(job.run_dir) if isinstance(r, ForcedCheckpoint)]
    [row] = forced
    assert row.then == "stop" and row.time < deadline.ends_at
    assert info.cause == "package_end" and info.node == "local"
    assert info.checkpoint == row.name and info.steps_lost == 0 and info.resumes
    assert 0 < info.steps_done < 40
    assert json.loads(job.trial_json.read_text())["resume"] is True
    log = (job.run_dir / "log.txt").read_text()
    assert "checkpoint now and leave ---" in log and "left flight local at" in log
    assert "exited with code" not in log
    assert not (job.run_dir / "artifact" / "weights.bin").exists()

    [again] = executor.run([job])
    assert again.exit_code == 0
    assert (job.run_dir / "artifact" / "weights.bin").read_bytes() == expected

    # --past-end: the checkpoint is made and brought home, and the run goes on
    going = _job(tmp_path / "going", "g-1", steps=40, sleep_s=0.02)
    on = LeaveBy(at=now, ends_at=now + 60.0, stop=False, flight="local")
    [ended] = executor.run([going], leave_by=lambda j, flight: on)
    assert ended.exit_code == 0
    assert [r.then for r in _rows(going.run_dir) if isinstance(r, ForcedCheckpoint)] \
        == ["continue"]
    assert (going.run_dir / "artifact" / "weights.bin").read_bytes() == expected


def test_a_request_from_elsewhere_is_honoured_too(tmp_path):
    """SLURM's --signal=USR1@N and spot-instance notices send SIGUSR1 themselves (here the
    task sends it to its own process after step 3)."""
    executor = LocalExecutor(slots=1, poll_s=0.05)
    job = _job(tmp_path / "slurm", "s-1", steps=40, sleep_s=0.0, signal_self_at=3)
    interruptions = []
    results = executor.run([job], on_interrupted=lambda j, info: interruptions.append(info))
    [info] = interruptions
    assert results == [] and info.cause == "preempted" and info.checkpoint == "step-000004"
    assert info.reason == ("the worker was asked to leave (SIGUSR1) by something other than "
                           "flightplan")
