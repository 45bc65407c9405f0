"""The Lightning integration: killed mid-save or after a step and rerun, it ends bitwise
identical to an uninterrupted run (weights and optimizer); a plain DataLoader is refused
before the first batch; a NaN loss stops the run with stop.json. A tiny MLP on CPU
(``lightning_script.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import lightning_script  # pytest puts this folder on sys.path
from script_support import (artifact_hashes, assert_same_final_state, measurement_rows as _rows,
                            run_child, run_code)

from flightplan.errors import ArgumentError, TrialPreempted, TrialStopped
from flightplan.rundir import RunDir
from flightplan.run.pilot import compare_losses
from flightplan.trial.checkpoint_check import check_checkpoint

SCRIPT = Path(lightning_script.__file__)


@pytest.mark.slow
def test_killed_mid_save_and_after_a_step_then_rerun_ends_bitwise_identical(
        tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    lightning_script.run(reference)  # 12 steps, a save every 3
    killed = tmp_path / "killed"
    assert run_child(SCRIPT, killed, "save:6") == -9  # half of checkpoint.ckpt written, then SIGKILL
    assert run_child(SCRIPT, killed, "step:10") == -9
    assert run_child(SCRIPT, killed, None) == 0
    sources = [r["source"] for r in _rows(killed) if r.get("event") == "restore"]
    assert sources == [None, "step-000003", "step-000009"]
    assert_same_final_state(reference, killed)
    committed = sorted((killed / "checkpoints").iterdir())
    assert [p.name for p in committed] == ["step-000009", "step-000012"]
    assert all(check_checkpoint(p)["verified"] for p in committed)


def test_asked_to_leave_it_saves_at_that_step_and_resumes_bitwise(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    lightning_script.run(reference)  # 12 steps, a save every 3
    left = tmp_path / "left"
    with pytest.raises(TrialPreempted) as caught:   # asked at step 4: saved there at once
        lightning_script.run(left, leave_at=4)
    assert caught.value.checkpoint == "step-000004"          # not on the every-3 schedule
    assert [(r["name"], r["then"]) for r in _rows(left)
            if r.get("event") == "forced_checkpoint"] == [("step-000004", "stop")]
    assert check_checkpoint(left / "checkpoints" / "step-000004")["verified"]
    lightning_script.run(left)
    # asked at step 5, an epoch's last batch (40 examples / 8): saved one step later
    later = tmp_path / "later"
    with pytest.raises(TrialPreempted) as caught:
        lightning_script.run(later, leave_at=5)
    assert caught.value.checkpoint == "step-000006"
    lightning_script.run(later)
    assert [r["source"] for r in _rows(left) if r.get("event") == "restore"] == [
        None, "step-000004"]
    for resumed in (left, later):
        assert_same_final_state(reference, resumed)


def test_the_loss_training_step_returns_is_logged_as_loss_and_a_resume_compares_on_it(
        tmp_path: Path) -> None:
    """The module logs its loss as ``train_loss`` only; every step's row carries it as
    ``loss``, so the pilot's bitwise resume check (which reads ``loss``) has steps to
    compare; the logged ``train_loss`` joins the rows of Lightning's logging steps (every 4)."""
    reference = tmp_path / "reference"
    lightning_script.run(reference)  # 12 steps, a save every 3: step-000009, step-000012 kept
    steps = [r for r in _rows(reference) if "loss" in r]
    assert [r["step"] for r in steps] == list(range(12))
    logged = [r for r in steps if "train_loss" in r]
    assert [r["step"] for r in logged] == [3, 7, 11]
    assert all(r["loss"] == r["train_loss"] for r in logged)
    resumed = tmp_path / "resumed"
    shutil.copytree(reference / "checkpoints" / "step-000009",
                    resumed / "checkpoints" / "step-000009")
    lightning_script.run(resumed)    # a new trial in the same process: steps 9, 10, 11
    compared, mismatches = compare_losses(RunDir(reference).rows(), RunDir(resumed).rows())
    assert (compared, mismatches) == ([9, 10, 11], [])


def test_a_plain_dataloader_is_refused_before_the_first_batch(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="a DataLoader cannot resume mid-epoch .*"
                                            "StatefulDataLoader"):
        lightning_script.run(tmp_path / "run", stateful=False)
    assert not [r for r in _rows(tmp_path / "run") if "loss" in r]


def test_a_trainer_spanning_fewer_processes_than_the_run_is_refused_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch as pl

    from flightplan.integrations.lightning import fit
    from flightplan.trial.trial import Trial

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    trial = Trial.local(tmp_path / "run")
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    with pytest.raises(ArgumentError) as refused:
        fit(trainer, object(), trial)  # type: ignore[arg-type]  # refused before it is read
    assert str(refused.value) == (
        'the Trainer spans 1 process (devices × num_nodes) but this run has 2 ([[run]] '
        'processes); build it with strategy="ddp", devices=trial.world_size')
    assert not (tmp_path / "run" / "measurements.jsonl").exists()


def test_a_nan_loss_stops_with_stop_json_and_no_save_after_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(TrialStopped, match="'non_finite_loss': loss is nan at step 5"):
        lightning_script.run(run_dir, nan_at=5)  # step 6 would save
    stop = json.loads((run_dir / "stop.json").read_text())
    assert (stop["rule"], stop["step"], stop["value"]) == ("non_finite_loss", 5, "nan")
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000003"]
    assert not (run_dir / "done.json").exists()


def test_min_quality_reads_the_validation_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    rule = {"min_quality": {"metric": "val_accuracy", "below": 1.01, "after_fraction": 0.5}}
    with pytest.raises(TrialStopped, match="val_accuracy = .* is below 1.01 at step 8"):
        # validations after steps 3, 6 (before half of 12 steps: silent) and 9
        lightning_script.run(run_dir, val_every=3, stop=rule)
    stop = json.loads((run_dir / "stop.json").read_text())
    assert (stop["rule"], stop["step"], stop["threshold"]) == ("min_quality", 8, 1.01)
    evaluations = [r["step"] for r in _rows(run_dir) if r.get("event") == "evaluation"]
    assert evaluations == [2, 5, 8]
    # Lightning validates after the step's save: the judged state was saved, nothing after it
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step-000006", "step-000009"]


def test_the_trials_max_steps_caps_the_trainer(tmp_path: Path) -> None:
    lightning_script.run(tmp_path / "run", cap=4)  # the Trainer asks for 12
    assert json.loads((tmp_path / "run" / "done.json").read_text())["steps"] == 4
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-000003"]


def test_docs_tasks_shows_the_lightning_example_as_it_is() -> None:
    """docs/tasks.md copies examples/digits-lightning/train.py (which the e2e suite runs)."""
    docs = (SCRIPT.parents[3] / "docs" / "tasks.md").read_text(encoding="utf-8")
    marker = "<!-- example: examples/digits-lightning/train.py -->\n```python\n"
    assert docs.count(marker) == 1
    shown = docs.split(marker, 1)[1].split("```", 1)[0]
    assert shown == (SCRIPT.parents[3] / "examples" / "digits-lightning" / "train.py").read_text()


KILLED_REWRITE = """
import json, sys
from pathlib import Path
import torch
from lightning_script import Module
from script_support import artifact_hashes, die
from flightplan.integrations.lightning import write_outputs
from flightplan.trial.trial import Trial

run_dir = Path(sys.argv[1])
trial = Trial.local(run_dir, name="mlp", run_id="mlp-0123456789")
module = Module(steps=1)
rows = [{"example_id": "e0", "gold": "a", "predicted": "a"}]
write_outputs(trial, module, predictions=rows, metrics={"accuracy": 1.0}, extra={"write": 1})
print(json.dumps(artifact_hashes(run_dir / "artifact")), flush=True)
with torch.no_grad():
    for parameter in module.parameters():
        parameter.add_(1.0)
module.state_dict = lambda *args, **kwargs: die()   # inside safetensors' save of the new one
write_outputs(trial, module, predictions=rows, metrics={"accuracy": 1.0}, extra={"write": 2})
"""


def test_a_kill_while_the_next_artifact_is_saved_leaves_the_previous_one_whole(
        tmp_path: Path) -> None:
    done = run_code(KILLED_REWRITE, tmp_path)
    assert done.returncode == -9, done.stderr[-2000:]
    first = json.loads(done.stdout.splitlines()[0])
    assert sorted(first) == ["artifact.json", "model.safetensors"]
    assert artifact_hashes(tmp_path / "artifact") == first
    assert json.loads((tmp_path / "artifact" / "artifact.json").read_text())["write"] == 1
