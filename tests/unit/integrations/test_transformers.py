"""The Trainer integration: killed anywhere and rerun, it ends bitwise identical to an
uninterrupted run; it never resumes from a partial, corrupt or model-only checkpoint; its
stop rules end training with stop.json. A tiny random BERT on CPU (``trainer_script.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flightplan.errors import TaskError, TrialStopped
from flightplan.integrations.transformers import REQUIRED_FILES
from flightplan.trial.checkpoint_check import check_checkpoint, verify_checkpoint
from flightplan.trial.library_checkpoint import commit_library_checkpoint
from flightplan.trial.trial import Trial

import trainer_script  # pytest puts this folder on sys.path
from script_support import (SRC, artifact_hashes, assert_same_final_state,
                            measurement_rows as _rows, run_child, run_code)

SCRIPT = Path(trainer_script.__file__)


@pytest.mark.slow
def test_killed_after_a_step_mid_save_and_mid_commit_then_rerun_ends_bitwise_identical(
        tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    trainer_script.run(reference)  # 14 steps, the Trainer saves every 3 (user's save_steps)
    killed = tmp_path / "killed"
    # Inside the Trainer's save of step 6 (weights and optimizer written, no RNG state);
    # after flightplan's manifest of step 9 but before its last rename (the finished save
    # is put in place by the next restore: step 9 is not lost); right after step 11.
    for kill in ("save:6", "commit:9", "step:11"):
        assert run_child(SCRIPT, killed, kill) == -9
    assert run_child(SCRIPT, killed, None) == 0
    sources = [r["source"] for r in _rows(killed) if r.get("event") == "restore"]
    assert sources == [None, "step-000003", "step-000009", "step-000009"]
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == [
        "step-000012", "step-000014"]  # keep_last 2; nothing set aside
    assert_same_final_state(reference, killed)
    assert all(check_checkpoint(p)["verified"] for p in (killed / "checkpoints").iterdir())


def _fake_trainer_folder(folder: Path, step: int, *, full: bool = True) -> Path:
    folder.mkdir(parents=True)
    names = ["model.safetensors"] + (list(REQUIRED_FILES) if full else ["trainer_state.json"])
    for name in names:
        (folder / name).write_bytes(f"{name} after {step} steps".encode())
    return folder


def test_partial_and_corrupt_folders_are_never_resumed_from(tmp_path: Path) -> None:
    trial = Trial.local(tmp_path / "run", run_id="r-1")
    parent = trial.run_dir / "checkpoints"
    meta = {"kind": "transformers", "run_id": "r-1", "config_hash": None}
    for step in (5, 7):
        commit_library_checkpoint(_fake_trainer_folder(tmp_path / f"c{step}", step), parent, step,
                                  meta=meta)
    flipped = parent / "step-000007" / "optimizer.pt"
    flipped.write_bytes(flipped.read_bytes()[:-1] + b"X")
    _fake_trainer_folder(parent / "step-000009", 9)  # renamed without a manifest
    _fake_trainer_folder(parent / "step-000010.tmp", 10)  # flightplan's own partial save
    assert trial.restore_library(required=REQUIRED_FILES) == parent / "step-000005"
    assert sorted(p.name for p in parent.iterdir()) == [
        "step-000005", "step-000007.corrupt-sha256", "step-000009.corrupt-no-manifest"]
    report = check_checkpoint(parent / "step-000005")
    assert (report["verified"], report["files"], report["tensors"]) == (True, 5, 0)
    report = verify_checkpoint(parent / "step-000007.corrupt-sha256")  # in a fresh process
    assert not report["verified"]
    assert [(f["check"], f["path"]) for f in report["findings"]] == [("sha256", "optimizer.pt")]


def test_save_only_model_is_refused_before_training_while_require_resume_is_on(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(TaskError, match=r"^TrainingArguments.save_only_model: .*"
                                        r"set save_only_model=False$"):
        trainer_script.run(run_dir, steps=4, save_steps=2, save_only_model=True)
    assert not (run_dir / "checkpoints").exists()     # nothing trained, nothing saved
    assert not (run_dir / "measurements.jsonl").exists()


def test_a_model_only_checkpoint_is_refused_with_no_usable_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # saved model-only while require_resume was off, then resumed with it on
    trainer_script.run(run_dir, steps=4, save_steps=2, save_only_model=True,
                       stop={"require_resume": False})
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step-000002", "step-000004"]
    with pytest.raises(TrialStopped, match="no usable checkpoint"):
        trainer_script.run(run_dir, steps=6, save_steps=2)
    stop = json.loads((run_dir / "stop.json").read_text())
    assert stop["rule"] == "no_usable_resume"
    assert ("step-000004 lacks optimizer.pt (optimizer state), scheduler.pt (learning-rate "
            "schedule), rng_state.pth (RNG states)") in stop["message"]
    assert stop["message"].endswith("refusing to start over: save full checkpoints (the "
                                    "Trainer's save_only_model=False), then start this run "
                                    "over on purpose: flightplan run CAMPAIGN_FILE --restart "
                                    "bert-tiny")
    assert (run_dir / "checkpoints" / "step-000004").is_dir()  # refused, not renamed


def test_a_nan_loss_stops_with_stop_json_and_no_save_after_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(TrialStopped, match="loss is nan at step 5"):
        trainer_script.run(run_dir, steps=14, save_steps=3, nan_at=5)  # step 6 would save
    stop = json.loads((run_dir / "stop.json").read_text())
    assert (stop["rule"], stop["step"], stop["value"]) == ("non_finite_loss", 5, "nan")
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000003"]
    losses = [r["step"] for r in _rows(run_dir) if "loss" in r]
    assert losses == [0, 1, 2, 3, 4, 5]
    assert not (run_dir / "done.json").exists()


def test_min_quality_reads_the_evaluation_metrics_and_stops_before_the_save(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    rule = {"min_quality": {"metric": "accuracy", "below": 1.01, "after_fraction": 0.5}}
    with pytest.raises(TrialStopped, match="accuracy = .* is below 1.01 at step 8"):
        # evaluations after steps 3, 6 (before half of 14 steps: silent) and 9, also a save
        trainer_script.run(run_dir, steps=14, save_steps=3, eval_steps=3, stop=rule)
    stop = json.loads((run_dir / "stop.json").read_text())
    assert (stop["rule"], stop["step"], stop["threshold"]) == ("min_quality", 8, 1.01)
    evaluations = [r["step"] for r in _rows(run_dir) if r.get("event") == "evaluation"]
    assert evaluations == [2, 5, 8]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step-000003", "step-000006"]


def test_without_save_steps_the_interval_policy_decides_the_saves(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    trainer_script.run(run_dir, steps=6, save_steps=None,
                       checkpoint={"tolerated_loss": "1h", "keep_last": 2})
    rows = _rows(run_dir)
    saves = [r["name"] for r in rows if r.get("event") == "checkpoint"]
    assert saves == ["step-000001"]  # the first save measures C and D; T is then ~1 h
    (interval,) = [r for r in rows if r.get("event") == "checkpoint_interval"]
    assert interval["formula"] == "tolerated_loss"
    assert 3590 < interval["interval_s"] < 3600
    step_s = [r["step_s"] for r in rows if "loss" in r]
    assert len(step_s) == 6 and all(0 < s < 5 for s in step_s)


LORA_OUTPUTS = """
import json, sys
from pathlib import Path
from trainer_script import build_trainer
from flightplan.integrations.transformers import write_outputs
from flightplan.trial.trial import Trial

run_dir = Path(sys.argv[1])
trainer = build_trainer(run_dir, steps=1, save_steps=None,
                        lora_modules=["query", "key", "value", "dense"])
write_outputs(Trial.local(run_dir, name="lora", run_id="lora-0123456789"), trainer,
              predictions=[{"example_id": "e0", "gold": "a", "predicted": "a"}],
              metrics={"accuracy": 1.0}, base_revision={"package": "tiny-bert"})
print(json.dumps(list(trainer.model.peft_config["default"].target_modules)))
"""


def test_a_lora_artifact_is_the_same_bytes_whatever_the_hash_seed(tmp_path: Path) -> None:
    artifacts, orders = [], []
    for seed in ("1", "6"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join(
            [str(SRC), str(SCRIPT.parent), os.environ.get("PYTHONPATH", "")])}
        run_dir = tmp_path / f"seed-{seed}"
        done = subprocess.run([sys.executable, "-c", LORA_OUTPUTS, str(run_dir)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        orders.append(json.loads(done.stdout.splitlines()[-1]))
        artifacts.append(run_dir / "artifact")
    assert orders[0] != orders[1]           # PEFT's set iterates in another order in each
    names = sorted(p.name for p in artifacts[0].iterdir())
    assert names == ["adapter_config.json", "adapter_model.safetensors", "artifact.json"]
    for name in names:
        assert (artifacts[0] / name).read_bytes() == (artifacts[1] / name).read_bytes(), name
    config = json.loads((artifacts[0] / "adapter_config.json").read_text())
    assert config["target_modules"] == ["dense", "key", "query", "value"]
    assert json.loads((artifacts[0] / "artifact.json").read_text())["peft"] == config


KILLED_REWRITE = """
import json, sys
from pathlib import Path
import torch
from trainer_script import build_trainer
from script_support import artifact_hashes, die
from flightplan.integrations.transformers import write_outputs
from flightplan.trial.trial import Trial

run_dir = Path(sys.argv[1])
trainer = build_trainer(run_dir / "scratch", steps=1, save_steps=None)
trial = Trial.local(run_dir, name="bert", run_id="bert-0123456789")
rows = [{"example_id": "e0", "gold": "a", "predicted": "a"}]
write_outputs(trial, trainer, predictions=rows, metrics={"accuracy": 1.0}, extra={"write": 1})
print(json.dumps(artifact_hashes(run_dir / "artifact")), flush=True)
with torch.no_grad():
    for parameter in trainer.model.parameters():
        parameter.add_(1.0)
save_pretrained = trainer.model.save_pretrained

def save_then_die(*args, **kwargs):   # the new weights are written, artifact.json is not
    save_pretrained(*args, **kwargs)
    die()

trainer.model.save_pretrained = save_then_die
write_outputs(trial, trainer, predictions=rows, metrics={"accuracy": 1.0}, extra={"write": 2})
"""


def test_a_kill_after_the_trainer_saved_the_next_artifact_leaves_the_previous_one_whole(
        tmp_path: Path) -> None:
    done = run_code(KILLED_REWRITE, tmp_path)
    assert done.returncode == -9, done.stderr[-2000:]
    first = json.loads(done.stdout.splitlines()[-1])
    assert {"artifact.json", "config.json", "model.safetensors"} <= set(first)
    assert artifact_hashes(tmp_path / "artifact") == first
    assert json.loads((tmp_path / "artifact" / "artifact.json").read_text())["write"] == 1
