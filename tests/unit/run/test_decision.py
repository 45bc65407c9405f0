"""Decision point: re-estimates and continue/cut/stop, with numbers worked out by hand."""

from __future__ import annotations

import pytest

from flightplan.run.decision import (PilotFigures, RunShape, choose, cut_steps,
                                     estimate_run_seconds, step_seconds)

FIGURES = PilotFigures(max_length=128, batch_size=16, n_train=600, load_s=5.0,
                       mean_tokens=2048.0, short_tokens=1024.0, short_step_s=0.5,
                       long_tokens=2048.0, long_step_s=0.9, eval_s=10.0, save_stall_s=0.2,
                       persist_s=1.0, restore_s=2.0, output_s=3.0)


def test_step_time_is_the_line_through_short_and_long_batches():
    assert step_seconds(1024, FIGURES) == pytest.approx(0.5)
    assert step_seconds(4096, FIGURES) == pytest.approx(1.7)     # 0.5 + 3072 · 0.4/1024
    flat = PilotFigures(**{**FIGURES.to_json(), "long_tokens": 1024.0, "long_step_s": 0.5})
    assert step_seconds(2048, flat) == pytest.approx(1.0)        # proportional: 0.5 · 2


def test_control_re_estimate_by_hand():
    est = estimate_run_seconds(RunShape("control", "essential", 128, 16, 3), FIGURES,
                               tolerated_loss_s=60)
    # steps = ceil(600/16) · 3 = 38 · 3 = 114; step 0.9 s; train 102.6 s
    assert est["steps"] == 114 and est["tokens_per_batch"] == 2048.0
    assert est["train_s"] == pytest.approx(102.6)
    # evals 3 · 10 s; interval L − D − R = 60 − 1 − 2 = 57 s;
    # saves 1 + floor(102.6 / 57) = 2 → 0.4 s
    assert est["eval_s"] == pytest.approx(30.0) and est["interval_s"] == 57.0
    assert est["checkpoints"] == 2
    # 5 + 102.6 + 30 + 0.4 + 3
    assert est["total_s"] == pytest.approx(141.0)


def test_mean_time_between_interruptions_shortens_the_interval():
    est = estimate_run_seconds(RunShape("control", "essential", 128, 16, 3), FIGURES,
                               tolerated_loss_s=60, mtbi_s=1000)
    # Young: √(2 · 0.2 · 1000) = 20 s; saves 1 + floor(102.6 / 20) = 6 → 1.2 s
    assert est["interval_s"] == pytest.approx(20.0) and est["checkpoints"] == 6
    assert est["total_s"] == pytest.approx(5 + 102.6 + 30 + 1.2 + 3)


def test_long_inputs_cost_more_tokens_steps_and_evaluation():
    est = estimate_run_seconds(RunShape("len256", "useful", 256, 16, 3), FIGURES,
                               tolerated_loss_s=60)
    # tokens 2048 · 2 = 4096 → 1.7 s/step; train 114 · 1.7 = 193.8; eval 3 · 10 · 2 = 60
    assert est["tokens_per_batch"] == 4096.0 and est["step_s"] == pytest.approx(1.7)
    assert est["checkpoints"] == 4                             # 1 + floor(193.8 / 57)
    assert est["total_s"] == pytest.approx(5 + 193.8 + 60 + 0.8 + 3)


def test_batch_size_changes_steps_and_tokens():
    est = estimate_run_seconds(RunShape("b32", "useful", 128, 32, 1), FIGURES,
                               tolerated_loss_s=60)
    # steps ceil(600/32) = 19; tokens 4096 → 1.7 s; train 32.3 s; only the first save
    assert est["steps"] == 19 and est["train_s"] == pytest.approx(32.3)
    assert est["checkpoints"] == 1
    assert est["total_s"] == pytest.approx(5 + 32.3 + 10 + 0.2 + 3)


RUNS = [("control", "essential"), ("lora", "essential"), ("len256", "useful"),
        ("wild", "exploratory"), ("wilder", "exploratory")]


def test_cut_steps_drop_exploratory_then_useful_never_essential_or_done():
    assert cut_steps(RUNS) == [[], ["wild", "wilder"], ["wild", "wilder", "len256"]]
    assert cut_steps(RUNS, done={"wild", "wilder"}) == [[], ["len256"]]
    assert cut_steps(RUNS[:2]) == [[]]


def _planner(fitting: dict[tuple[str, ...], bool], options=()):
    calls = []

    def replan(dropped):
        calls.append(list(dropped))
        return {"fits": fitting[tuple(dropped)], "reserved_hours": 80.0 - 10 * len(dropped),
                "window_hours": 72.0, "options": list(options)}
    return replan, calls


def test_continue_when_the_full_plan_fits():
    replan, calls = _planner({(): True})
    decision = choose(cut_steps(RUNS), replan)
    assert decision.decision == "continue" and decision.dropped == [] and calls == [[]]


def test_cut_takes_the_first_step_that_fits():
    replan, calls = _planner({(): False, ("wild", "wilder"): False,
                              ("wild", "wilder", "len256"): True})
    decision = choose(cut_steps(RUNS), replan)
    assert decision.decision == "cut" and decision.dropped == ["wild", "wilder", "len256"]
    assert len(calls) == 3
    assert decision.reason == ("80.00 h of 72.00 h does not fit; without wild, wilder, len256 "
                               "50.00 h of 72.00 h fits")


def test_stop_names_the_cheapest_package_that_fits_the_full_campaign():
    options = [{"offer": "RTX 4090", "package_days": 3, "flights": 1, "total_price": "47.14",
                "currency": "USD", "fits": False, "dropped": []},
               {"offer": "RTX 4090", "package_days": 3, "flights": 1, "total_price": "47.14",
                "currency": "USD", "fits": True, "dropped": ["len256"]},
               {"offer": "RTX 4090", "package_days": 7, "flights": 1, "total_price": "110.00",
                "currency": "USD", "fits": True, "dropped": []}]
    replan, _ = _planner({(): False, ("wild", "wilder"): False,
                          ("wild", "wilder", "len256"): False}, options)
    decision = choose(cut_steps(RUNS), replan)
    assert decision.decision == "stop" and decision.fitting_option == options[2]
    assert decision.reason.endswith("the cheapest package that fits is RTX 4090 7-day × 1: "
                                    "110.00 USD")
