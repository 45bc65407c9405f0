"""Goodput: a run's wall time split by cause, worked out by hand on rows with known time
stamps, a campaign's flights by hand on ledger rows, and a real run that is killed and
resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightplan.campaign_goodput import (campaign_goodput, ledger_executions, ledger_goodput,
                                         open_executions)
from flightplan.goodput import (CAUSES, STAGES, Execution, execution_goodput, run_goodput,
                                total_goodput)
from flightplan.ledger_rows import EventRow, RunRow, StageTimeRow
from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Finished,
                             Measurement, ProcessStart, Restore, StopEvent, Truncation,
                             encode_row)
from flightplan.rundir import RunDir
from flightplan.run.commands import status_command
from flightplan.run.ledger import Ledger
from flightplan.spec import load_spec


def _step(step: int, at: float, step_s: float | None = 0.5) -> Measurement:
    values = {"loss": 1.0 / (step + 1)}
    return Measurement(step, at, values if step_s is None else values | {"step_s": step_s})


# One execution from 100 s to 130 s: the executor started it at 100 s, the process was
# created at 100.5 s; start and load until 110 (a restore of 1 s and an embedding pass of 2 s
# inside), steps every second from 110 to 115 (each stating 0.5 s) with a checkpoint after
# step 1 that stalled the loop 0.25 s, an evaluation until 117, the output until 118, and
# finish / exit until 130.
ONE = [
    ProcessStart(0, 100.5),
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
    # the executor's start to the process's: 0.5 s
    assert parts["waiting"] == pytest.approx(0.5)
    # start and load 100.5 → 110, less the restore (1 s) and the embedding pass (2 s), and
    # the half of step 0's gap before it began (its row states 0.5 s of its 1 s)
    assert parts["start_load"] == pytest.approx(6.5 + 0.5)
    assert (parts["restore"], parts["data"]) == (pytest.approx(1.0), pytest.approx(2.0))
    # five step gaps of 1 s, less that 0.5 s and the 0.25 s stall after step 1
    assert parts["steps"] == pytest.approx(4.25) and parts["checkpoint"] == pytest.approx(0.25)
    assert parts["evaluation"] == pytest.approx(2.0)
    # output row 117 → 118, finish 118 → 119, exit 119 → 130
    assert parts["output"] == pytest.approx(13.0)
    assert parts["lost"] == parts["transfer"] == 0.0
    assert split.wall_s == pytest.approx(30.0) and split.goodput == pytest.approx(4.25 / 30)
    assert set(parts) == set(CAUSES)


def test_embedding_batches_logged_after_the_restore_still_count_as_data():
    # the built-in control embeds before restore() and logs its batches after it: 3 s of
    # embedding in two rows at 108.01 s, right behind the restore row, still leave
    # start and load (100.5 → 110, less 1 s of restore) as data
    rows = [ProcessStart(0, 100.5), Restore(0, 108.0, source="step-000002", restore_s=1.0),
            Measurement(0, 108.01, {"encode_s": 2.0}), Measurement(0, 108.02, {"encode_s": 1.0}),
            Measurement(0, 110.0, {"load_s": 9.0, "data_s": 0.5}), _step(0, 111.0, None),
            Finished(1, 112.0)]
    parts = run_goodput(rows, [Execution(100.5, 112.0, finished=True)]).parts
    assert parts["data"] == pytest.approx(3.5) and parts["restore"] == pytest.approx(1.0)
    assert parts["start_load"] == pytest.approx(9.5 - 1.0 - 3.5)


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
    # execution 1: 2 s load and the 0.5 s before step 0 began, 4 step gaps (less that
    # 0.5 s and the 0.5 s stall: 3 s productive), 4 s after the last step until the kill
    # are lost; execution 2: 3 s start and load (0.5 s of it the restore) and the 0.5 s
    # before step 2 began, steps 2 and 3 redone (0.5 + 1 s lost), step 4 productive, output
    # 1 + 3 s
    assert parts["steps"] == pytest.approx(3.0 + 1.0)
    assert parts["lost"] == pytest.approx(4.0 + 1.5)
    assert parts["checkpoint"] == pytest.approx(0.5)
    assert parts["restore"] == pytest.approx(0.5)
    assert parts["start_load"] == pytest.approx(2.5 + 3.0)
    assert parts["output"] == pytest.approx(4.0)
    assert split.wall_s == pytest.approx(20.0)
    # one split per execution, each adding up to its own window
    assert [s.wall_s for s in execution_goodput(first + second, executions)] == \
        [pytest.approx(10.0), pytest.approx(10.0)]


def test_data_preparation_stated_at_the_load_row_comes_out_of_start_and_load():
    # the built-in task reads and tokenizes the corpus before it restores, and states how
    # long in its load row (data_s 4 s), whose own gap is only 2 s: the 4 s come out of the
    # execution's start and load so far (0.5 → 10 s: 9.5 s)
    rows = [ProcessStart(0, 0.5), Restore(0, 8.0, source=None),
            Measurement(0, 10.0, {"load_s": 9.0, "data_s": 4.0}), _step(0, 11.0, step_s=1.0),
            Finished(1, 12.0)]
    split = run_goodput(rows, [Execution(0.0, 20.0, finished=True)])
    assert split.parts == pytest.approx({
        "waiting": 0.5, "start_load": 9.5 - 4.0, "data": 4.0, "restore": 0.0, "steps": 1.0,
        "lost": 0.0, "checkpoint": 0.0, "evaluation": 0.0, "output": 1.0 + 8.0,
        "transfer": 0.0})
    # a figure larger than the start and load it could have happened in takes all of it
    rows[2] = Measurement(0, 10.0, {"load_s": 9.0, "data_s": 50.0})
    split = run_goodput(rows, [Execution(0.0, 20.0, finished=True)])
    assert (split.parts["start_load"], split.parts["data"]) == (0.0, pytest.approx(9.5))
    assert split.wall_s == pytest.approx(20.0)


def test_an_evaluation_redone_after_a_resume_is_lost_work_too():
    # execution 1 (0 → 5 s): steps 0–2 (no step_s: each gap is the step), an evaluation
    # after step 1, killed 1 s after step 2; execution 2 (10 → 20 s) restores step-000001
    # (0.5 s of its first second), redoes step 1, the evaluation after it and step 2, then
    # step 3, an evaluation of its own, finishes at 17 s and exits at 20 s
    first = [_step(0, 1.0, None), _step(1, 2.0, None), Evaluation(1, 3.0, {"macro_f1": 0.4}),
             _step(2, 4.0, None)]
    second = [Restore(1, 11.0, source="step-000001", restore_s=0.5), _step(1, 12.0, None),
              Evaluation(1, 13.5, {"macro_f1": 0.4}), _step(2, 14.0, None),
              _step(3, 15.0, None), Evaluation(3, 16.0, {"macro_f1": 0.5}), Finished(4, 17.0)]
    one, two = execution_goodput(first + second, [Execution(0.0, 5.0),
                                                  Execution(10.0, 20.0, finished=True)])
    assert {c: s for c, s in one.parts.items() if s} == {
        "steps": 3.0, "evaluation": 1.0, "lost": 1.0}
    # lost: step 1 again (1 s), its evaluation again (1.5 s), step 2 again (0.5 s)
    assert {c: s for c, s in two.parts.items() if s} == {
        "start_load": 0.5, "restore": 0.5, "lost": 3.0, "steps": 1.0, "evaluation": 1.0,
        "output": 1.0 + 3.0}


def test_a_first_row_that_covers_several_steps_starts_where_they_began():
    # a library logs every 3 steps: resumed from step-000004 (steps 0–3 done), its first
    # row is step 8's and states 0.25 s per step: steps 4–8 (5 of them) began 1.25 s before
    rows = [Restore(4, 2.0, source="step-000004", restore_s=1.0), _step(8, 6.0, step_s=0.25),
            _step(11, 7.0, step_s=0.25)]
    split = run_goodput(rows, [Execution(0.0, 7.0)])
    assert split.parts["restore"] == pytest.approx(1.0)
    assert split.parts["start_load"] == pytest.approx(1.0 + 4.0 - 1.25)
    assert split.parts["steps"] == pytest.approx(1.25 + 1.0)
    # a row without step_s cannot tell: its whole gap is steps
    plain = run_goodput([_step(0, 3.0, step_s=None)], [Execution(0.0, 3.0)])
    assert plain.parts["steps"] == pytest.approx(3.0)


def test_a_process_created_a_moment_before_its_window_belongs_to_it():
    # the process of the second execution was created 5 ms before its executor took the
    # time: it waited 0 s, and the first execution does not end with it
    rows = [ProcessStart(0, 0.2), _step(0, 1.0, step_s=None),
            ProcessStart(0, 9.995), _step(1, 11.0, step_s=None), Finished(2, 11.5)]
    first, second = execution_goodput(rows, [Execution(0.0, 2.0), Execution(10.0, 12.0, True)])
    assert (first.parts["waiting"], first.parts["lost"]) == (pytest.approx(0.2), pytest.approx(1.0))
    assert second.parts["waiting"] == 0.0 and second.parts["steps"] == pytest.approx(1.0)


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
    assert total.to_json()["parts_hours"]["steps"] == round(8.5 / 3600, 6)


# ---------------------------------------------------------------- a campaign's ledger
T0 = 1_700_000_000.0


def _run(run_id: str, name: str, status: str) -> RunRow:
    return RunRow(run_id, name, "essential", status, None, None, 0.0, None, None, None, None)


def _event(n: int, kind: str, at: float, run_id: str | None = None, **data) -> EventRow:
    return EventRow(n, run_id, kind, T0 + at, data or None)


RUNS = [_run("control-1", "control", "finished"), _run("lora-old", "lora", "superseded"),
        _run("lora-2", "lora", "finished")]
STAGE_TIMES = [StageTimeRow("data-check", "stage", T0, T0 + 2),
               StageTimeRow("pilot", "stage", T0 + 2, T0 + 10),
               StageTimeRow("control", "run", T0 + 10, T0 + 40),
               StageTimeRow("lora", "run", T0 + 12, T0 + 20),
               StageTimeRow("lora", "run", T0 + 25, T0 + 45)]
ONE_FLIGHT = [_event(1, "flight_started", 0, flight="local", started_at=T0,
                     ends_at=T0 + 72 * 3600, package_days=3, source="spec"),
              _event(2, "started", 10, "control-1"), _event(3, "started", 12, "lora-old"),
              _event(4, "superseded", 24, "lora-old"), _event(5, "started", 25, "lora-2")]


def _rows(run_id: str) -> list:
    t = T0
    return {
        # waiting 1, start and load 4, ten steps of 1 s, output 2 + 1, exit 12
        "control-1": [ProcessStart(0, t + 11), Measurement(0, t + 15, {"load_s": 3.5})]
        + [_step(i, t + 16 + i, step_s=None) for i in range(10)]
        + [Measurement(9, t + 27, {"output_s": 2.0}), Finished(10, t + 28)],
        # start and load 2, two steps, then superseded: 4 s lost
        "lora-old": [Measurement(0, t + 14, {"load_s": 2.0}), _step(0, t + 15, step_s=None),
                     _step(1, t + 16, step_s=None)],
        # start and load 2, five steps, finish 1 s, exit 12 s
        "lora-2": [Measurement(0, t + 27, {"load_s": 2.0})]
        + [_step(i, t + 28 + i, step_s=None) for i in range(5)] + [Finished(5, t + 33)],
    }[run_id]


def test_each_window_belongs_to_the_run_id_that_started_last_before_it_ended():
    placed = ledger_executions(RUNS, STAGE_TIMES, ONE_FLIGHT)
    assert placed == {"control-1": [(Execution(T0 + 10, T0 + 40, True), "local")],
                      "lora-old": [(Execution(T0 + 12, T0 + 20, False), "local")],
                      "lora-2": [(Execution(T0 + 25, T0 + 45, True), "local")]}


def test_per_flight_hours_by_hand():
    campaign = campaign_goodput(runs=RUNS, stage_times=STAGE_TIMES, events=ONE_FLIGHT,
                                rows_of=_rows, gpus_of={"lora": 2}, gpus_per_flight=1)
    control, old, lora = (campaign.runs[r].parts for r in ("control-1", "lora-old", "lora-2"))
    assert (control["waiting"], control["start_load"], control["steps"], control["output"]) == \
        (pytest.approx(1.0), pytest.approx(4.0), pytest.approx(10.0), pytest.approx(15.0))
    assert (old["start_load"], old["steps"], old["lost"]) == (2.0, 2.0, 4.0)
    assert (lora["start_load"], lora["steps"], lora["output"]) == (2.0, 5.0, 13.0)
    assert campaign.stages_s == {"data-check": 2.0, "pilot": 8.0}
    (flight,) = campaign.flights
    # slots: the offer has 1 GPU, but control (1) and a lora (2) ran at once: 3
    assert (flight.flight, flight.slots, flight.package_hours) == ("local", 3, 72.0)
    assert flight.bought_s == 72 * 3600 * 3
    # productive slot-seconds: 10 · 1 + 2 · 2 + 5 · 2
    assert flight.productive_s == pytest.approx(24.0)
    # overheads: control 20 · 1, lora-old 6 · 2, lora 15 · 2, the stages 2 + 8
    assert flight.overheads_s == pytest.approx({
        "waiting": 1.0, "start_load": 4.0 + 2 * 2 + 2 * 2, "data": 0.0, "restore": 0.0,
        "lost": 4 * 2, "checkpoint": 0.0, "evaluation": 0.0, "output": 15.0 + 13 * 2,
        "transfer": 0.0, STAGES: 10.0})
    assert flight.overhead_s == pytest.approx(72.0)
    assert flight.uncommitted_s == pytest.approx(72 * 3600 * 3 - 24 - 72)
    assert flight.runs == ("control-1", "lora-old", "lora-2")
    shown = flight.to_json()
    assert (shown["bought_hours"], shown["productive_hours"], shown["overhead_hours"]) == \
        (216.0, round(24 / 3600, 6), 0.02)
    assert campaign.total.wall_s == pytest.approx(30 + 8 + 20)


def test_a_run_stopped_by_its_rule_ends_in_output_and_a_failed_one_loses_its_tail():
    # both: start and load 2 s, one step of 1 s, the stop rule's row 1 s later, then the
    # process exits 6 s later; a stopped run ended by itself (its tail is finishing), a
    # failed one did not (its tail is lost)
    rows = [Measurement(0, T0 + 12, {"load_s": 2.0}), _step(0, T0 + 13, step_s=None),
            StopEvent(1, T0 + 14, rule="non_finite_loss", message="loss is nan")]
    for status, ended in (("stopped", True), ("failed", False)):
        runs = [_run("nan-1", "nan", status)]
        placed = ledger_executions(runs, [StageTimeRow("nan", "run", T0 + 10, T0 + 20)],
                                   [_event(1, "started", 10, "nan-1")])
        assert placed == {"nan-1": [(Execution(T0 + 10, T0 + 20, ended), None)]}
        parts = run_goodput(rows, [placed["nan-1"][0][0]]).parts
        assert (parts["start_load"], parts["steps"]) == (2.0, 1.0)
        assert (parts["output"], parts["lost"]) == ((7.0, 0.0) if ended else (1.0, 6.0))


def test_runs_on_two_flights_and_a_stage_on_no_known_one():
    # Ray: control is lost on flight a after 10 s, resumes on flight b; the stages ran
    # where no flight is named (several flights): they are on neither
    events = [_event(1, "flight_started", 0, flight="a", started_at=T0, ends_at=T0 + 86400,
                     package_days=1, source="first_run"),
              _event(2, "flight_started", 1, flight="b", started_at=T0 + 1, ends_at=T0 + 86401,
                     package_days=1, source="first_run"),
              _event(3, "started", 10, "control-1"),
              _event(4, "interrupted", 20, "control-1", node="a", cause="flight_lost"),
              _event(5, "resumed", 30, "control-1"),
              _event(6, "finished", 40, "control-1", node="b", exit_code=0)]
    stage_times = STAGE_TIMES[:2] + [StageTimeRow("control", "run", T0 + 10, T0 + 20),
                                     StageTimeRow("control", "run", T0 + 30, T0 + 40)]
    rows = [_step(0, T0 + 12, None), _step(1, T0 + 14, None),
            _step(1, T0 + 33, None), _step(2, T0 + 36, None), Finished(3, T0 + 37)]
    campaign = campaign_goodput(runs=RUNS[:1], stage_times=stage_times, events=events,
                                rows_of=lambda _: rows)
    a, b = campaign.flights
    # a: 12 s before step 0 (no load row: the step's gap), step 1 2 s, 6 s lost at the kill
    assert (a.productive_s, a.overheads_s["lost"], a.overheads_s[STAGES]) == (4.0, 6.0, 0.0)
    # b: step 1 redone (3 s lost), step 2 3 s, finish 1 s and exit 3 s
    assert (b.productive_s, b.overheads_s["lost"], b.overheads_s["output"]) == (3.0, 3.0, 4.0)
    assert (a.slots, a.package_hours, b.runs) == (1, 24.0, ("control-1",))
    assert campaign.to_json()["stages_hours"] == {"data-check": round(2 / 3600, 6),
                                                  "pilot": round(8 / 3600, 6)}


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


# ------------------------------------- executions a runner stopped by Ctrl-C left open
OPEN_SPEC = """\
[campaign]
name = "open"
question = "Does wide beat control?"
metric = "accuracy"
min_gain = 0.02

[rental]
offer = "RTX 4090"
package_days = 3

[[run]]
name = "control"
tier = "essential"
task = "train.py"
duration = "1m"

[[run]]
name = "wide"
tier = "essential"
reference = "control"
task = "train.py"
duration = "1m"
"""


def _write_rows(run_dir: RunDir, rows: list, *, last_write: float) -> None:
    run_dir.path.mkdir(parents=True)
    run_dir.measurements.write_bytes(b"".join(encode_row(row) for row in rows))
    os.utime(run_dir.measurements, (rows[-1].time, rows[-1].time))
    run_dir.log.write_text("killed\n")
    os.utime(run_dir.log, (last_write, last_write))


def _open_campaign(folder: Path) -> Path:
    """A campaign whose runner was stopped by Ctrl-C while control and wide trained side
    by side: the ledger still has both ``running`` (the next ``flightplan run`` would reset
    them), with no ``stage_times`` row for either execution.

    control: started at 10 s, its process at 11 s, loaded until 15 s, steps 0–7 each 1 s
    (16 → 23 s), its log written last at 25 s: waiting 1, start/load 4, steps 8, lost 2
    (the tail of an execution that did not end the run) = 15 s.
    wide: started at 12 s, its process at 13 s, loaded until 16 s, steps 0–4 (17 → 21 s),
    nothing written after: waiting 1, start/load 3, steps 5 = 9 s.
    """
    spec_path = folder / "campaign.toml"
    spec_path.write_text(OPEN_SPEC)
    with Ledger.open(folder) as ledger:
        ledger.add_event("flight_started", at=T0 + 10,
                         data={"flight": "local", "started_at": T0 + 10,
                               "ends_at": T0 + 10 + 72 * 3600, "package_days": 3,
                               "source": "first_run"})
        for run_id, name, at in (("control-1", "control", 10), ("wide-1", "wide", 12)):
            ledger.ensure_run(run_id=run_id, name=name, tier="essential", config_hash=None)
            ledger.record_run_start(run_id, resumed=False, at=T0 + at)
    _write_rows(RunDir.of(folder, "control-1"),
                [ProcessStart(0, T0 + 11), Measurement(0, T0 + 15, {"load_s": 3.5})]
                + [_step(i, T0 + 16 + i, step_s=None) for i in range(8)], last_write=T0 + 25)
    _write_rows(RunDir.of(folder, "wide-1"),
                [ProcessStart(0, T0 + 13), Measurement(0, T0 + 16, {"load_s": 2.5})]
                + [_step(i, T0 + 17 + i, step_s=None) for i in range(5)], last_write=T0 + 21)
    return spec_path


def test_status_counts_the_executions_a_stopped_runner_left_open(tmp_path, capsys):
    spec_path = _open_campaign(tmp_path)
    assert status_command(spec_path, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out)
    runs = {r["run_id"]: r for r in shown["runs"]}
    assert {r: runs[r]["status"] for r in runs} == {"control-1": "interrupted",
                                                   "wide-1": "interrupted"}
    control, wide = runs["control-1"]["goodput"], runs["wide-1"]["goodput"]
    assert control is not None and wide is not None    # both ran: not null
    assert control["wall_hours"] == round(15 / 3600, 6)
    assert (control["parts_hours"]["waiting"], control["parts_hours"]["start_load"],
            control["parts_hours"]["steps"], control["parts_hours"]["lost"]) == \
        (round(1 / 3600, 6), round(4 / 3600, 6), round(8 / 3600, 6), round(2 / 3600, 6))
    assert control["goodput"] == round(8 / 15, 4)
    assert wide["wall_hours"] == round(9 / 3600, 6) and wide["goodput"] == round(5 / 9, 4)
    (flight,) = shown["goodput"]["flights"]
    # both ran at once (10 → 25 s and 12 → 21 s): 2 slots × 72 h
    assert (flight["slots"], flight["bought_hours"]) == (2, 144.0)
    assert flight["productive_hours"] == round(13 / 3600, 6)
    # waiting 1 + 1, start/load 4 + 3, lost 2
    assert flight["overhead_hours"] == round(11 / 3600, 6)
    assert flight["runs"] == ["control-1", "wide-1"]
    assert shown["goodput"]["total"]["wall_hours"] == round(24 / 3600, 6)


def test_an_open_execution_counts_as_the_next_run_records_it(tmp_path):
    spec_path = _open_campaign(tmp_path)
    spec = load_spec(spec_path)
    with Ledger.open(tmp_path, create=False) as ledger:
        before = ledger_goodput(ledger, spec, gpus_per_flight=1, count_open=True)
        assert ledger_goodput(ledger, spec, gpus_per_flight=1).runs == {}   # the ledger's own
        # the next `flightplan run` closes each at its folder's last write
        ledger.reset_interrupted({r: RunDir.of(tmp_path, r).last_written() or 0.0
                                  for r in ("control-1", "wide-1")})
        after = ledger_goodput(ledger, spec, gpus_per_flight=1)
        assert ledger_goodput(ledger, spec, gpus_per_flight=1, count_open=True) == after
    assert before == after


def test_open_executions_by_hand():
    runs = [_run("a-1", "a", "running"), _run("b-1", "b", "running"),
            _run("c-1", "c", "running"), _run("d-1", "d", "finished")]
    events = [_event(1, "started", 10, "a-1"), _event(2, "interrupted", 20, "a-1"),
              _event(3, "resumed", 30, "a-1"), _event(4, "started", 12, "b-1"),
              _event(5, "started", 14, "c-1"), _event(6, "started", 1, "d-1")]
    seen = {"a-1": T0 + 40, "b-1": T0 + 18, "c-1": T0 + 9, "d-1": T0 + 50}
    out, rows = open_executions(runs, events, last_seen=seen, ended={"b-1": "finished"})
    # a: from its latest start (the resume) to its last write; b: its folder shows it
    # finished, so that execution ended it; c: nothing written since it started; d: closed
    assert rows == [StageTimeRow("a", "run", T0 + 30, T0 + 40),
                    StageTimeRow("b", "run", T0 + 12, T0 + 18)]
    assert [r.status for r in out] == ["running", "finished", "running", "finished"]
    placed = ledger_executions(out, rows, events)
    assert placed["b-1"] == [(Execution(T0 + 12, T0 + 18, True), None)]
    assert placed["a-1"] == [(Execution(T0 + 30, T0 + 40, False), None)]
