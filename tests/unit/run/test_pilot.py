"""The pilot: figures from measurement rows, bitwise loss comparison, and the two-process
procedure driven through a fake executor that writes what a worker would."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

from flightplan.run.executors.contract import Executor, JobResult
from flightplan.run.executors.local import LocalExecutor
from flightplan.rows import CheckpointSaved, Measurement, Restore, parse_row
from flightplan.rundir import RunDir
from flightplan.run.data_check import DataCheckReport, SplitReport
from flightplan.ids import pilot_id
from flightplan.run.pilot import compare_losses, run_pilot
from flightplan.spec import RESUME_TOLERANCE
from flightplan.tasks.estimate import figures_from_rows
from flightplan.tasks.loader import load_task

PILOT_WORKER = Path(__file__).with_name("pilot_worker.py")
TEXTCLF = load_task("textclf", ".")  # its pilot_examples hook: steps × batch_size (16)

DATA_CHECK = DataCheckReport("ok", 0.5, splits={"train": SplitReport(240), "test": SplitReport(80)},
                             task_figures={"lengths": {"mean": 131.5}})
SPLITS = {"n_train": 240, "n_test": 80, "setup_s": 0.5}   # what the data check gives

ROWS = [
    {"step": 0, "event": "truncation", "fraction": 0.2},
    {"step": 0, "encode_s": 0.30, "tokens": 32 * 40, "seq_len": 40},
    {"step": 0, "encode_s": 0.10, "tokens": 32 * 10, "seq_len": 10},
    {"step": 0, "encode_s": 0.50, "tokens": 32 * 64, "seq_len": 64},
    {"step": 0, "encode_s": 0.20, "tokens": 32 * 20, "seq_len": 20},
    {"step": 0, "load_s": 2.5, "planned_steps": 30},
    {"step": 0, "loss": 1.25, "step_s": 0.9, "seq_len": 64},
    {"step": 1, "event": "checkpoint", "name": "step-000001", "stall_s": 0.02, "persist_s": 0.3},
    {"step": 1, "loss": 1.0, "step_s": 0.01, "seq_len": 64},
    {"step": 2, "loss": 0.75, "step_s": 0.03, "seq_len": 64},
    {"step": 2, "event": "evaluation", "macro_f1": 0.5, "eval_s": 0.4},
    {"step": 2, "output_s": 0.6},
]
RESUMED = [{"step": 1, "event": "restore", "source": "step-000001", "restore_s": 0.7},
           {"step": 1, "loss": 1.0, "step_s": 0.02}, {"step": 2, "loss": 0.75, "step_s": 0.02}]


TIMED = [  # a task that logs only its loss and one evaluation; the process started at 100 s
    {"step": 0, "loss": 1.25, "planned_steps": 30, "time": 102.5},
    {"step": 1, "event": "checkpoint", "name": "step-000001", "stall_s": 0.02,
     "persist_s": 0.3, "time": 102.6},
    {"step": 1, "loss": 1.0, "time": 103.1},
    {"step": 2, "loss": 0.75, "time": 103.9},
    {"step": 2, "event": "evaluation", "r2": 0.5, "time": 104.3},
]


def _typed(rows):
    """The rows as the parser gives them (a row without a time stamp is stamped 0 s)."""
    return [parse_row({"time": 0.0, **row}) for row in rows]


def test_generic_figures_by_hand_from_time_stamps():
    figures = figures_from_rows(_typed(TIMED), _typed(RESUMED), **SPLITS, pilot_n_train=48, pilot_n_test=8,
                                started_at=100.0, ended_at=105.0)
    # load: first step row − process start; steps: each gap since the row before, the
    # first step (warm-up) left out: step 1 0.5 s after the checkpoint row (whose stall is
    # not step time), step 2 0.8 s → 0.65 s
    assert figures.load_s == pytest.approx(2.5) and figures.step_s == pytest.approx(0.65)
    # evaluation: the gap before its row; output: process end − last row
    assert figures.eval_s == pytest.approx(0.4) and figures.output_s == pytest.approx(0.7)
    assert (figures.save_stall_s, figures.persist_s, figures.restore_s) == (0.02, 0.3, 0.7)
    assert (figures.pilot_steps, figures.planned_steps) == (3, 30)
    assert (figures.n_train, figures.n_test, figures.setup_s) == (240, 80, 0.5)


PROCESS = [  # the executor started the pilot at 100 s; its process was created at 100.5 s
    {"step": 0, "event": "process_start", "time": 100.5},
    {"step": 0, "event": "restore", "time": 101.5},
    {"step": 0, "load_s": 2.0, "planned_steps": 30, "time": 104.0},
    {"step": 0, "loss": 1.25, "step_s": 0.6, "time": 105.0},
    {"step": 1, "loss": 1.0, "step_s": 0.5, "time": 106.0},
    {"step": 2, "event": "checkpoint", "name": "step-000002", "stall_s": 0.2,
     "persist_s": 0.3, "time": 106.1},
    {"step": 2, "loss": 0.75, "step_s": 0.5, "time": 107.2},
    {"step": 3, "loss": 0.5, "step_s": 0.5, "time": 108.2},
    {"step": 3, "event": "evaluation", "macro_f1": 0.5, "eval_s": 0.8, "time": 109.0},
    {"step": 3, "output_s": 1.0, "time": 110.5},
    {"step": 4, "event": "finished", "time": 111.0},
]


def test_the_process_figures_come_from_the_pilots_goodput_split():
    figures = figures_from_rows(_typed(PROCESS), _typed(RESUMED), **SPLITS, pilot_n_train=48,
                                pilot_n_test=8, started_at=100.0, ended_at=112.0)
    # waiting: executor start → process creation
    assert figures.waiting_s == pytest.approx(0.5)
    # before the first step began: 100.5 → 104 and the 0.4 s of step 0's gap beyond its
    # 0.6 s, less the task's own load_s (2 s): 1.9 s of interpreter and imports
    assert figures.load_s == 2.0 and figures.start_s == pytest.approx(1.9)
    # steady step 0.5 s; the first took 0.6 s: 0.1 s of warm-up
    assert figures.step_s == pytest.approx(0.5) and figures.warmup_s == pytest.approx(0.1)
    # step gaps less the stall: 0.6 + 1 + 1 + 1 = 3.6 s against 2.1 s logged, over the 3
    # steady steps: 0.5 s per step outside the step the task timed
    assert figures.loop_s == pytest.approx(0.5)
    # output 1.5 + 0.5 + 1 s (the output row's gap, finish, exit) less the logged 1 s
    assert figures.output_s == 1.0 and figures.exit_s == pytest.approx(2.0)


def test_logged_figures_win_over_time_stamps():
    figures = figures_from_rows(_typed(ROWS), _typed(RESUMED), **SPLITS, pilot_n_train=48,
                                pilot_n_test=8, started_at=0.0, ended_at=0.0)
    # steady steps leave out step 0: (0.01 + 0.03) / 2
    assert figures.step_s == pytest.approx(0.02)
    assert (figures.load_s, figures.eval_s, figures.output_s) == (2.5, 0.4, 0.6)
    # the pilot ran at home: no transfer
    assert (figures.transfer_s, figures.transfer_bytes_per_s) == (0.0, None)


def test_transfer_figures_from_both_pilot_processes():
    # on a flight: the executor's rows at home, one per checkpoint that came home
    sent = {"step": 1, "event": "checkpoint_transfer", "name": "step-000001",
            "bytes": 600_000, "wait_s": 0.25, "fetch_s": 0.5, "commit_s": 0.25, "node": "a"}
    again = {"step": 3, "event": "checkpoint_transfer", "name": "step-000003",
             "bytes": 200_000, "wait_s": 0.0, "fetch_s": 0.125, "commit_s": 0.125, "node": "b"}
    figures = figures_from_rows(_typed(ROWS[:8] + [sent] + ROWS[8:]), _typed(RESUMED + [again]),
                                **SPLITS, pilot_n_train=48, pilot_n_test=8, started_at=0.0,
                                ended_at=0.0)
    # durable there → durable home: (0.25 + 0.5 + 0.25 + 0 + 0.125 + 0.125) / 2 = 0.625 s;
    # 800 000 bytes moved in 0.75 + 0.25 = 1.0 s
    assert figures.transfer_s == 0.625 and figures.transfer_bytes_per_s == 800_000.0
    assert figures.to_json()["transfer_s"] == 0.625
    # every other figure as without the transfer rows
    assert figures.step_s == pytest.approx(0.02) and figures.output_s == 0.6


def test_a_missing_figure_is_named():
    with pytest.raises(ValueError, match="no restore_s"):
        figures_from_rows(_typed(ROWS), [], **SPLITS, pilot_n_train=48, pilot_n_test=8,
                          started_at=0.0, ended_at=0.0)


def test_losses_compare_bit_for_bit():
    assert compare_losses(_typed(ROWS), _typed(RESUMED)) == ([1, 2], [])
    off_by_one_ulp = math.nextafter(0.75, 1.0)
    resumed = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": off_by_one_ulp},
               {"step": 7, "loss": 0.1}]
    steps, mismatches = compare_losses(_typed(ROWS), _typed(resumed))
    assert steps == [1, 2, 7]
    assert mismatches == [{"step": 2, "uninterrupted": 0.75, "resumed": off_by_one_ulp},
                          {"step": 7, "uninterrupted": None, "resumed": 0.1}]
    # a stop-rule "nan" string equals itself
    assert compare_losses(_typed([{"step": 3, "loss": "nan"}]),
                          _typed([{"step": 3, "loss": "nan"}])) == ([3], [])


def test_a_control_marked_not_deterministic_is_compared_within_the_relative_tolerance():
    uninterrupted = _typed([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}, {"step": 3, "loss": 0.25}])
    # 1.0009 is within 1e-3 of 1.0 (0.0009 ≤ 0.001 × 1.0009); 0.5006 is not (0.0006 > 0.0005006)
    resumed = _typed([{"step": 1, "loss": 1.0009}, {"step": 2, "loss": 0.5006}, {"step": 3, "loss": 0.25}])
    assert compare_losses(uninterrupted, resumed, tolerance=RESUME_TOLERANCE) == (
        [1, 2, 3], [{"step": 2, "uninterrupted": 0.5, "resumed": 0.5006}])
    assert [m["step"] for m in compare_losses(uninterrupted, resumed)[1]] == [1, 2]   # bitwise


class FakeWorkers(Executor):
    """Writes what the control's worker would: rows, an early checkpoint, a restore."""

    def __init__(self, *, drift_at: int | None = None, save: bool = True, crash: bool = False,
                 log: str = "", loss_name: str = "loss", exit_code: int = 3):
        self.drift_at, self.save, self.crash, self.log = drift_at, save, crash, log
        self.exit_code = exit_code
        self.loss_name = loss_name
        self.trials: list[dict] = []

    def run(self, jobs, *, on_start=None, on_done=None, on_progress=None):
        results = []
        for job in jobs:
            trial = json.loads(job.trial_json.read_text())
            self.trials.append(trial)
            rows = []
            if not trial["resume"]:
                rows = [r for r in ROWS if r.get("step", 0) < trial["max_steps"]]
                if self.save:
                    (job.run_dir / "checkpoints" / "step-000001").mkdir(parents=True)
                    (job.run_dir / "checkpoints" / "step-000001" / "manifest.json").write_text("{}")
                    (job.run_dir / "checkpoints" / "step-000003").mkdir(parents=True)
                    (job.run_dir / "checkpoints" / "step-000003" / "manifest.json").write_text("{}")
            elif (job.run_dir / "no-checkpoint").exists():   # told none will come
                assert trial["await_checkpoint"] and not (job.run_dir / "checkpoints").exists()
            else:
                assert sorted(p.name for p in (job.run_dir / "checkpoints").iterdir()) == \
                    ["step-000001"]
                rows = [dict(r) for r in RESUMED]
                if self.drift_at is not None:
                    rows[self.drift_at]["loss"] = math.nextafter(rows[self.drift_at]["loss"], 9)
                rows = [{(self.loss_name if k == "loss" else k): v for k, v in r.items()}
                        for r in rows]
            with open(job.run_dir / "measurements.jsonl", "w") as out:
                out.writelines(json.dumps({"time": time.time(), **r}) + "\n" for r in rows)
            if self.log:
                (job.run_dir / "log.txt").write_text(self.log)
            now = time.time()
            results.append(JobResult(job.run_id, job.run_dir, self.exit_code if self.crash else 0,
                                     now, now))
            if on_done:
                on_done(results[-1])
        return results


CONTROL = {"run_id": "control-0123456789", "name": "control", "params": {"epochs": 2},
           "resume": False, "max_steps": None, "config_hash": "ab" * 32,
           "corpus": {"package": "p", "sha256": {"a.tsv": "0" * 64}, "train_limit": 240}}


def test_pilot_resumes_from_the_earliest_checkpoint_in_a_second_process(tmp_path):
    workers = FakeWorkers()
    result = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF, executor=workers, steps=3)
    assert result.ok, result.message
    assert result.compared_steps == [1, 2] and result.mismatches == []
    assert result.resumed_from == "runs/pilot-control-0123456789/checkpoints/step-000001"
    first, second = workers.trials
    assert first["run_id"] == second["run_id"] == pilot_id("control-0123456789")
    assert (first["resume"], second["resume"]) == (False, True)
    assert first["max_steps"] == second["max_steps"] == 3
    assert first["config_hash"] == CONTROL["config_hash"]
    # the first 3 batches of 16 training examples and 32 test examples, in both processes
    assert first["corpus"] == second["corpus"] == dict(CONTROL["corpus"], train_limit=48,
                                                       test_limit=32)
    assert (result.figures.pilot_n_train, result.figures.pilot_n_test) == (48, 32)
    assert result.figures.restore_s == 0.7
    assert result.message.startswith("resumed from step-000001 in a new process: 2 losses")


def test_a_loss_one_ulp_off_is_no_usable_resume(tmp_path):
    result = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF, executor=FakeWorkers(drift_at=2), steps=3)
    assert not result.ok
    assert result.mismatches[0]["step"] == 2
    assert "1 of 2 losses differ (first at step 2" in result.message
    assert result.message.endswith("no usable resume")
    assert result.cause == "losses_differ"


def test_no_checkpoint_or_a_crash_fails_the_pilot(tmp_path):
    result = run_pilot(CONTROL, tmp_path / "a", DATA_CHECK, task=TEXTCLF, executor=FakeWorkers(save=False),
                       steps=3)
    assert not result.ok and "saved no checkpoint" in result.message
    assert result.cause == "no_checkpoint"
    result = run_pilot(CONTROL, tmp_path / "b", DATA_CHECK, task=TEXTCLF, executor=FakeWorkers(crash=True),
                       steps=3)
    assert not result.ok and "crashed (exit code 3)" in result.message
    assert result.cause == "crashed"
    assert str(Path("runs") / "pilot-control-0123456789" / "log.txt") in result.message


def test_a_crash_summary_shows_the_whole_last_line_of_the_error(tmp_path):
    fix = ("ValueError: batch_size = 0 is not a batch size: give params.batch_size a positive "
           "number of examples per optimizer step, such as 16, in the run's params of the "
           "campaign file (the pilot reads it before its first step); see docs/tasks.md")
    assert len(fix) > 200
    log = f"Traceback (most recent call last):\n  File \"train.py\", line 3\n{fix}\n\n"
    result = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=FakeWorkers(crash=True, log=log), steps=3)
    assert result.cause == "crashed"
    assert f"crashed (exit code 3: {fix}); see " in result.message


def test_a_failed_pilots_folder_is_kept_aside_when_the_pilot_runs_again(tmp_path):
    failed = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=FakeWorkers(drift_at=2), steps=3)
    assert not failed.ok
    folder = tmp_path / "runs" / pilot_id("control-0123456789")
    rows = (folder / "resume" / "measurements.jsonl").read_bytes()
    again = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF, executor=FakeWorkers(), steps=3)
    assert again.ok, again.message
    kept = folder.with_name(folder.name + ".restarted-1")
    assert (kept / "resume" / "measurements.jsonl").read_bytes() == rows   # the evidence stays
    assert sorted(p.name for p in (kept / "checkpoints").iterdir()) == ["step-000001",
                                                                       "step-000003"]
    run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF, executor=FakeWorkers(), steps=3)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        folder.name, folder.name + ".restarted-1", folder.name + ".restarted-2"]


def test_a_resumed_process_that_logs_no_loss_is_told_what_it_logged(tmp_path):
    result = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=FakeWorkers(loss_name="train_loss"), steps=3)
    assert not result.ok and result.cause == "nothing_compared"
    assert "logged no loss to compare (its rows hold step_s, train_loss)" in result.message
    assert "trial.log(step, loss=...)" in result.message


def test_a_pilot_killed_by_a_signal_is_named_so_without_its_logs_last_line(tmp_path):
    """A SIGKILLed process's log ends wherever it was cut (here a library's warning naming a
    file of this machine): the message names the signal, and no path of the machine."""
    log = "/opt/venv/lib/python3.11/site-packages/lib/_pytree.py:21: `LeafSpec` is deprecated\n"
    result = run_pilot(CONTROL, tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=FakeWorkers(crash=True, log=log, exit_code=-9), steps=3)
    assert result.cause == "crashed"
    assert result.message.startswith("the pilot process was killed by SIGKILL (exit code -9); see ")
    assert "/opt/venv" not in result.message


def _script_executor(monkeypatch, mode: str) -> LocalExecutor:
    """A real LocalExecutor with two slots whose workers run ``pilot_worker.py``."""
    monkeypatch.setenv("PILOT_WORKER_MODE", mode)
    return LocalExecutor(slots=2, poll_s=0.05,
                         argv=lambda trial_json: [sys.executable, str(PILOT_WORKER),
                                                  str(trial_json)])


def test_the_resumed_pilot_starts_beside_the_first_and_waits_for_its_early_checkpoint(
        tmp_path, monkeypatch):
    result = run_pilot(dict(CONTROL, task="local"), tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=_script_executor(monkeypatch, "slow_start"), steps=6)
    assert result.ok, result.message
    assert result.compared_steps == [1, 2, 3, 4, 5] and result.mismatches == []
    folder = tmp_path / "runs" / pilot_id(CONTROL["run_id"])
    first, resumed = RunDir(folder).rows(), RunDir(folder / "resume").rows()
    ready = next(r.number("ready") for r in resumed
                 if isinstance(r, Measurement) and r.number("ready"))
    saved = next(r.time for r in first if isinstance(r, CheckpointSaved))
    restored = next(r for r in resumed if isinstance(r, Restore))
    # the resumed process had its model ready before the first saved (1.5 s of slow start),
    # waited, and then restored the copy of that early checkpoint
    assert ready < saved - 1.0 and restored.source == "step-000001"
    assert restored.restore_s < 1.0          # the wait is not counted as restore time
    assert not (folder / "resume" / "no-checkpoint").exists()
    assert sorted(p.name for p in (folder / "resume").iterdir() if p.is_dir()) == ["checkpoints"]


def test_a_first_pilot_that_dies_before_its_checkpoint_releases_the_waiting_one(
        tmp_path, monkeypatch):
    result = run_pilot(dict(CONTROL, task="local"), tmp_path, DATA_CHECK, task=TEXTCLF,
                       executor=_script_executor(monkeypatch, "crash"), steps=6)
    assert result.cause == "crashed" and "crashed (exit code 1" in result.message
    resume = tmp_path / "runs" / pilot_id(CONTROL["run_id"]) / "resume"
    assert (resume / "no-checkpoint").exists()          # told none will come, and so ended
    assert not (resume / "checkpoints").exists()
