"""Stop rules: each rule alone, and through the trial (stop.json, TrialStopped, saved work intact)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from flightplan.errors import TrialStopped
from flightplan.trial.stop_rules import (MaxTruncatedFraction, MinQuality, NonFiniteLoss,
                                       NoUsableResume, build_rules, stop_record)
from flightplan.trial.trial import Trial
from flightplan.spec import StopRules


@pytest.mark.parametrize("value, text", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_non_finite_loss_fires_at_that_step(value, text):
    rule = NonFiniteLoss()
    assert rule.on_log(3, {"loss": 0.5, "lr": math.nan}) is None  # lr is not a loss
    stop = rule.on_log(4, {"eval_loss": value})
    assert (stop.rule, stop.step, stop.threshold) == ("non_finite_loss", 4, None)
    assert stop.message == f"eval_loss is {text} at step 4"


def test_min_quality_waits_for_after_fraction_of_planned_steps():
    rule = MinQuality("macro_f1", below=0.4, after_fraction=0.5)
    assert rule.on_evaluate(49, {"macro_f1": 0.1}, planned_steps=100) is None  # 49 < 50
    assert rule.on_evaluate(50, {"macro_f1": 0.4}, planned_steps=100) is None  # not below
    assert rule.on_evaluate(80, {"macro_f1": 0.1}, planned_steps=None) is None  # unknown plan
    stop = rule.on_evaluate(50, {"macro_f1": 0.39}, planned_steps=100)
    assert (stop.rule, stop.step, stop.value, stop.threshold) == ("min_quality", 50, 0.39, 0.4)


def test_max_truncated_fraction():
    rule = MaxTruncatedFraction(0.05)
    assert rule.on_truncation(0.05) is None
    stop = rule.on_truncation(0.125)
    assert (stop.value, stop.threshold) == (0.125, 0.05)
    assert stop.message == "12.5% of essential inputs would be truncated at max_length, more than the 5.0% allowed"


def test_build_rules_follows_the_spec():
    names = [r.name for r in build_rules(StopRules.model_validate(
        {"non_finite_loss": False, "max_truncated_fraction": 0.1,
         "min_quality": {"metric": "macro_f1", "below": 0.3, "after_fraction": 0.5}}))]
    assert names == ["min_quality", "max_truncated_fraction"]


def test_stop_record_shape_and_strict_json():
    record = stop_record("run-1", NoUsableResume().verdict(["step-000004: no manifest"], rejected=1), now_s=12.5)
    assert record["rule"] == "no_usable_resume" and record["time"] == 12.5
    assert set(record) == {"run_id", "rule", "step", "value", "threshold", "message", "time"}
    nan = stop_record("r", NonFiniteLoss().on_log(0, {"loss": math.nan}), now_s=0.0)
    assert json.loads(json.dumps(nan, allow_nan=False))["value"] == "nan"


def _trial(tmp_path, **stop):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trial = Trial.local(tmp_path, params={"p": 1}, planned_steps=10, stop=stop)
    trial.register(model, optimizer)
    trial.restore()
    return trial


def test_nan_loss_stops_the_trial_and_keeps_saved_checkpoints(tmp_path):
    trial = _trial(tmp_path)
    trial.log(0, loss=0.7)
    trial.checkpoint(0)
    with pytest.raises(TrialStopped, match="non_finite_loss") as caught:
        trial.log(1, loss=torch.tensor(float("nan")))
    record = json.loads((tmp_path / "stop.json").read_text())
    assert record == caught.value.record
    assert {k: record[k] for k in ("rule", "step", "value", "threshold")} == \
        {"rule": "non_finite_loss", "step": 1, "value": "nan", "threshold": None}
    assert record["run_id"] == trial.run_id
    assert (tmp_path / "checkpoints" / "step-000001" / "manifest.json").is_file()
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows if "loss" in r] == [(0, 0.7), (1, "nan")]
    assert rows[-1]["event"] == "stop"


def test_min_quality_through_evaluate(tmp_path):
    trial = _trial(tmp_path, min_quality={"metric": "macro_f1", "below": 0.5, "after_fraction": 0.5})
    trial.evaluate(4, macro_f1=0.2)  # before 50 % of 10 planned steps
    with pytest.raises(TrialStopped) as caught:
        trial.evaluate(5, macro_f1=0.2)
    assert {k: caught.value.record[k] for k in ("rule", "step", "value", "threshold")} == \
        {"rule": "min_quality", "step": 5, "value": 0.2, "threshold": 0.5}


def test_truncation_check_before_training(tmp_path):
    trial = _trial(tmp_path, max_truncated_fraction=0.1)
    trial.check_truncation(0.1)
    with pytest.raises(TrialStopped, match="max_truncated_fraction"):
        trial.check_truncation(0.3)
    assert json.loads((tmp_path / "stop.json").read_text())["value"] == 0.3
