"""Goodput: a run's wall time split by cause, worked out by hand on rows with known time
stamps, and on a real run that is killed and resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightplan.goodput import CAUSES, Execution, run_goodput, total_goodput
from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Finished,
                             Measurement, Restore, Truncation)
from flightplan.rundir import RunDir


def _step(step: int, at: float) -> Measurement:
    return Measurement(step, at, {"loss": 1.0 / (step + 1), "step_s": 0.5})


# One execution from 100 s to 130 s: start and load until 110 (a restore of 1 s and an
# embedding pass of 2 s inside), steps every second from 110 to 115 with a checkpoint after
# step 1 that stalled the loop 0.25 s, an evaluation until 117, the output until 118, and
# finish / exit until 130.
ONE = [
    Truncation(0, 101.0, fraction=0.1),
    Restore(0, 103.0, source=None),
    Measurement(0, 105.0, {"encode_s": 2.0, "tokens": 320}),
    Restore(0, 107.0, source="step-000002", restore_s=1.0),
    Measurement(0, 110.0, {"load_s": 9.0, "planned_steps": 5}),
    _step(0, 111.0),
    _step(1, 112.0),
    CheckpointSaved(2, 112.6, name="step-000002", bytes=10, stall_s=0.25, persist_s=0.5),
    _step(2, 113.0),
    _step(3, 114.0),
    _step(4, 115.0),
    Evaluation(4, 117.0, {"macro_f1": 0.5, "eval_s": 1.5}),
    Measurement(4, 118.0, {"output_s": 0.8}),
    Finished(5, 119.0),
]


def test_one_execution_by_hand():
    split = run_goodput(ONE, [Execution(100.0, 130.0, finished=True)])
    parts = split.parts
    # start and load 100 → 110, less the restore (1 s) and the embedding pass (2 s)
    assert parts["start_load"] == pytest.approx(7.0)
    assert (parts["restore"], parts["data"]) == (pytest.approx(1.0), pytest.approx(2.0))
    # five step gaps of 1 s, less the 0.25 s stall of the checkpoint after step 1
    assert parts["steps"] == pytest.approx(4.75) and parts["checkpoint"] == pytest.approx(0.25)
    assert parts["evaluation"] == pytest.approx(2.0)
    # output row 117 → 118, finish 118 → 119, exit 119 → 130
    assert parts["output"] == pytest.approx(13.0)
    assert parts["lost"] == parts["transfer"] == 0.0
    assert split.wall_s == pytest.approx(30.0) and split.goodput == pytest.approx(4.75 / 30)
    assert set(parts) == set(CAUSES)


def test_a_resume_accounts_the_redone_steps_as_lost_work():
    # execution 1 (0 → 10 s): steps 0–3, a checkpoint after step 1, then killed at 10 s;
    # execution 2 (20 → 30 s): resumes from step-000002 and redoes steps 2 and 3, then 4
    first = [Measurement(0, 2.0, {"load_s": 2.0}), _step(0, 3.0), _step(1, 4.0),
             CheckpointSaved(2, 4.5, name="step-000002", bytes=10, stall_s=0.5, persist_s=0.5),
             _step(2, 5.0), _step(3, 6.0)]
    second = [Restore(2, 22.0, source="step-000002", restore_s=0.5),
              Measurement(2, 23.0, {"load_s": 3.0}), _step(2, 24.0), _step(3, 25.0),
              _step(4, 26.0), Measurement(4, 27.0, {"output_s": 1.0}), Finished(5, 28.0)]
    executions = [Execution(0.0, 10.0), Execution(20.0, 30.0, finished=True)]
    split = run_goodput(first + second, executions)
    parts = split.parts
    # execution 1: 2 s load, 4 steps (less 0.5 s stall: 3.5 s productive), 4 s after the
    # last step until the kill are lost; execution 2: 3 s start and load (0.5 s of it the
    # restore), steps 2 and 3 redone (2 s lost), step 4 productive, output 1 + 3 s
    assert parts["steps"] == pytest.approx(3.5 + 1.0)
    assert parts["lost"] == pytest.approx(4.0 + 2.0)
    assert parts["checkpoint"] == pytest.approx(0.5)
    assert parts["restore"] == pytest.approx(0.5)
    assert parts["start_load"] == pytest.approx(2.0 + 2.5)
    assert parts["output"] == pytest.approx(4.0)
    assert split.wall_s == pytest.approx(20.0)


def test_the_last_checkpoint_home_at_the_end_is_transfer_time():
    rows = [Measurement(0, 1.0, {"load_s": 1.0}), _step(0, 2.0), Finished(1, 3.0),
            CheckpointTransfer(1, 6.0, name="step-000001", bytes=10, wait_s=0.5, fetch_s=2.0,
                               commit_s=0.5, node="n1")]
    split = run_goodput(rows, [Execution(0.0, 7.0, finished=True)])
    assert split.parts["transfer"] == pytest.approx(2.5)
    assert split.parts["output"] == pytest.approx(1.0 + 4.0 - 2.5)
    assert split.wall_s == pytest.approx(7.0)


def test_rows_outside_every_window_change_nothing_and_an_empty_run_has_no_goodput():
    split = run_goodput([_step(0, 500.0)], [Execution(0.0, 10.0)])
    # the row at 500 s lies after the window ends: clipped to its end
    assert split.wall_s == pytest.approx(10.0)
    assert run_goodput([], []).goodput is None
    total = total_goodput([run_goodput(ONE, [Execution(100.0, 130.0, finished=True)])] * 2)
    assert total.wall_s == pytest.approx(60.0)
    assert total.to_json()["parts_hours"]["steps"] == round(9.5 / 3600, 6)


LOOP = """
import sys, time
import torch
from flightplan.trial import Trial
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
trial = Trial.local(sys.argv[1], name="loop", params={"lr": 0.1})
trial.register(model=model, optimizer=optimizer)
step = trial.restore()
trial.log(step, load_s=0.0)
while step < 30:
    t0 = time.perf_counter()
    loss = model(torch.ones(8, 4)).pow(2).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    time.sleep(0.02)
    trial.log(step, loss=loss.item(), step_s=time.perf_counter() - t0)
    if step == 5:
        trial.checkpoint(step)
        trial.wait_for_checkpoint()
    step += 1
trial.log(step - 1, output_s=0.0)
trial.finish()
"""


def _loop(run_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", LOOP, str(run_dir)], env=env)


@pytest.mark.slow
def test_a_real_run_killed_and_resumed_adds_up_to_its_wall_time(tmp_path):
    """A trial-API loop killed after step 12 and run again: the parts add up to the two
    processes' wall time within 1 %, and the steps it redid (6 to 12, after the checkpoint
    at 6 steps) are lost work."""
    run_dir = tmp_path / "run"
    started = time.time()
    child = _loop(run_dir)
    while not any(isinstance(r, Measurement) and r.is_step and r.step >= 12
                  for r in RunDir(run_dir).rows()):
        assert child.poll() is None, "the loop ended before it was killed"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    windows = [Execution(started, time.time())]
    started = time.time()
    assert _loop(run_dir).wait() == 0
    windows.append(Execution(started, time.time(), finished=True))
    rows = RunDir(run_dir).rows()
    split = run_goodput(rows, windows)
    wall = sum(w.ended_at - w.started_at for w in windows)
    assert abs(split.wall_s - wall) <= 0.01 * wall
    killed_at = max(r.step for r in rows if isinstance(r, Measurement) and r.is_step
                    and r.time < windows[1].started_at)
    redone = [r for r in rows if isinstance(r, Measurement) and r.is_step
              and r.time >= windows[1].started_at and r.step <= killed_at]
    assert [r.step for r in redone] == list(range(6, killed_at + 1))
    # each redone step's gap is lost work: at least the 20 ms it slept
    assert split.parts["lost"] >= 0.02 * len(redone)
    assert split.productive_s >= 0.02 * 30 and split.parts["restore"] > 0
