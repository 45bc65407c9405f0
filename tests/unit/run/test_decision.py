"""Decision point: re-estimates and continue/cut/stop, with numbers worked out by hand."""

from __future__ import annotations

import pytest

from flightplan.run.decision import choose, cut_steps, replan_from_options
from flightplan.tasks.estimate import PilotFigures, control_steps, estimate_run_seconds

# generic figures: load 10 s, step 0.5 s, one evaluation of 32 test examples 2 s
FIGURES = PilotFigures(n_train=600, n_test=320, pilot_n_train=192, pilot_n_test=32,
                       setup_s=1.0, load_s=10.0, step_s=0.5, eval_s=2.0, save_stall_s=0.2,
                       persist_s=1.0, restore_s=2.0, output_s=3.0, pilot_steps=12,
                       planned_steps=36)


def test_generic_re_estimate_by_hand():
    est = estimate_run_seconds(FIGURES, steps=100, tolerated_loss_s=20)
    # train 100 · 0.5 = 50 s; one evaluation scaled 2 · 320/32 = 20 s
    assert est["train_s"] == 50.0 and est["eval_s"] == 20.0 and est["evaluations"] == 1
    # interval L − D − R = 20 − 1 − 2 = 17 s; saves 1 + floor(50 / 17) = 3 → 0.6 s
    assert est["interval_s"] == 17.0 and est["checkpoints"] == 3
    assert est["total_s"] == pytest.approx(10 + 50 + 20 + 0.6 + 3)
    assert est["transfer_s"] == 0.0                     # the pilot ran at home


def test_the_transfer_home_shortens_the_interval_and_is_reported_beside_the_total():
    remote = PilotFigures(**{**FIGURES.to_json(), "transfer_s": 5.0,
                             "transfer_bytes_per_s": 2e6})
    est = estimate_run_seconds(remote, steps=100, tolerated_loss_s=20)
    # L − D − X − R = 20 − 1 − 5 − 2 = 12 s; saves 1 + floor(50 / 12) = 5 → 1.0 s of stalls
    assert est["interval_s"] == 12.0 and est["checkpoints"] == 5
    # the last of the 5 transfers (5 s) holds the run's end: in the total
    assert est["total_s"] == pytest.approx(10 + 50 + 20 + 1.0 + 3 + 5)
    # 5 transfers of 5 s in all, the others beside the training loop
    assert est["transfer_s"] == 25.0


def test_the_re_estimate_includes_every_overhead_the_pilot_measured_by_cause():
    measured = PilotFigures(**{**FIGURES.to_json(), "waiting_s": 0.5, "start_s": 2.0,
                               "warmup_s": 0.4, "loop_s": 0.1, "exit_s": 0.25})
    est = estimate_run_seconds(measured, steps=100, tolerated_loss_s=20, mtbi_s=600)
    # steps 100 · (0.5 + 0.1) = 60 s; Young √(2 · 0.2 · 600) = 15.49 s, under L − D − R = 17
    interval = (2 * 0.2 * 600) ** 0.5
    assert est["train_s"] == pytest.approx(60.0) and est["interval_s"] == pytest.approx(interval)
    # 60 / 600 = 0.1 interruptions: 1.1 processes start, wait and load; 0.1 restores and
    # 0.1 half-intervals redone; saves 1 + floor(60 / 15.49) = 4
    assert est["checkpoints"] == 4 and est["interruptions"] == pytest.approx(0.1)
    assert est["parts"] == pytest.approx({
        "waiting": 1.1 * 0.5, "start_load": 1.1 * (2.0 + 0.4 + 10.0), "data": 0.0,
        "restore": 0.1 * 2.0, "steps": 60.0, "lost": 0.1 * interval / 2,
        "checkpoint": 4 * 0.2, "evaluation": 20.0, "output": 3.0 + 0.25, "transfer": 0.0})
    assert est["total_s"] == pytest.approx(sum(est["parts"].values()))


def test_figures_recorded_before_the_transfer_figures_still_load():
    old = {k: v for k, v in FIGURES.to_json().items()
           if k not in ("transfer_s", "transfer_bytes_per_s")}
    assert PilotFigures(**old) == FIGURES


def test_control_steps_scale_with_the_pilots_share_of_the_training_set():
    # the task planned 36 steps on 192 examples; the campaign has 600: ceil(36 · 600/192)
    assert control_steps(FIGURES) == 113
    whole = PilotFigures(**{**FIGURES.to_json(), "pilot_n_train": 0})
    assert control_steps(whole) == 36
    unknown = PilotFigures(**{**FIGURES.to_json(), "planned_steps": None})
    assert control_steps(unknown) is None


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


def test_cut_read_off_the_planners_reduced_protocol():
    def option(days, price, fits, reserved, dropped=()):
        return {"offer": "RTX 4090", "package_days": days, "flights": 1, "total_price": price,
                "currency": "USD", "fits": fits, "reserved_hours": reserved,
                "dropped": list(dropped)}
    plan = {"offer": "RTX 4090", "package_days": 3, "flights": 1, "fits": False,
            "reserved_hours": 80.0, "window_hours": 72.0,
            "options": [option(7, "110.00", True, 80.0),
                        option(3, "47.14", True, 60.0, ["len256", "wild", "wilder", "review"]),
                        option(3, "47.14", False, 80.0),
                        option(3, "47.14", False, 75.0, ["wild", "wilder"])]}
    replan = replan_from_options(plan, {name for name, _ in RUNS})
    decision = choose(cut_steps(RUNS), replan)
    # the stage "review" that only the dropped runs needed is not a run: it does not count
    assert decision.decision == "cut" and decision.dropped == ["wild", "wilder", "len256"]
    assert decision.reason == ("80.00 h of 72.00 h does not fit; without wild, wilder, len256 "
                               "60.00 h of 72.00 h fits")


def test_value_cuts_join_the_window_and_never_cut_what_a_kept_run_is_compared_against():
    from flightplan.plan.power import Ranked
    from flightplan.run.decision import Choice, ValueRanking, with_value_cuts

    runs = [("control", "essential", None), ("lora", "essential", "control"),
            ("len256", "useful", "lora"), ("wild", "exploratory", "control"),
            ("wilder", "exploratory", "control"), ("shy", "useful", "wild")]
    value = ValueRanking((Ranked("len256", 0.6, 1.0, 0.6, False, None),
                          Ranked("lora", 0.01, 1.0, 0.01, True, "cannot reach a verdict"),
                          Ranked("wilder", 0.0, 2.0, 0.0, True, "same choice"),
                          Ranked("shy", 0.0, 2.0, 0.0, True, "same choice")))
    fits = Choice("continue", [], "10.00 h of 72.00 h fits")
    # lora is essential and len256, which stays, is compared against it: both stay
    cut = with_value_cuts(fits, value, runs)
    assert (cut.decision, cut.dropped) == ("cut", ["wilder", "shy"])
    assert cut.reason == ("10.00 h of 72.00 h fits; its result cannot change the answer, so "
                          "cut wilder: same choice; shy: same choice")
    # beside a cut of the window, in campaign order; a stop stays a stop
    window = Choice("cut", ["wild"], "80.00 h of 72.00 h does not fit; without wild fits")
    assert with_value_cuts(window, value, runs).dropped == ["wild", "wilder", "shy"]
    stop = Choice("stop", [], "does not fit")
    assert with_value_cuts(stop, value, runs) is stop
    assert with_value_cuts(fits, ValueRanking(), runs) is fits
    # when no variant can change the answer, cutting focuses nothing: it says so instead
    hopeless = ValueRanking(tuple(Ranked(r.variant, 0.0, 1.0, 0.0, True, "cannot reach a "
                                         "verdict") for r in value.ranked), answerable=False)
    kept = with_value_cuts(fits, hopeless, runs)
    assert (kept.decision, kept.dropped) == ("continue", [])
    assert kept.reason.endswith("; no variant's result can change the answer on these test "
                                "examples, so none is cut for it: the campaign cannot settle "
                                "its question as asked (--decide stop to change it)")
    # the ranking reads back from its JSON as it was written
    assert ValueRanking.from_json(value.to_json()) == value


def test_a_test_set_too_small_for_any_comparison_is_not_answerable():
    from pathlib import Path

    from flightplan.metrics import Predictions
    from flightplan.plan.power import TestSplit
    from flightplan.run.decision import rank_variants
    from flightplan.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[3] / "examples" / "tiny" / "campaign.toml")
    pairs = ["aa", "bb", "ab", "ba", "aa", "bb", "aa", "bb"]    # (gold, predicted): 6 of 8 right
    pilot = Predictions.from_rows([{"example_id": str(i), "gold": g, "predicted": p}
                                   for i, (g, p) in enumerate(pairs)],
                                  ["example_id", "gold", "predicted"])
    hours = {"lora-r4": 0.01, "lora-r4-len128": 0.02}

    def ranking(n: int):
        return rank_variants(spec, pending=list(hours), gpu_hours=hours,
                             test=TestSplit(n, None, "by hand"), reference=pilot,
                             reference_source="pilot of control")

    # 8 examples: both comparisons (alike: same model, same expected gain) come out
    # inconclusive, whichever runs; on 379 each may meet
    small, large = ranking(8), ranking(379)
    assert [r.cut for r in small.ranked] == [True, True] and not small.answerable
    assert [r.cut for r in large.ranked] == [False, False] and large.answerable
    # 6 right of 8 update the assumed 0.7 worth 100 examples: (6 + 70) / 108
    assert small.model["reference_accuracy"] == round(76 / 108, 4) and small.model["examples"] == 8
    # cheaper first: the same value per fewer GPU-hours
    assert [r.variant for r in large.ranked] == ["lora-r4", "lora-r4-len128"]


def test_the_decision_point_takes_the_disagreement_an_earlier_campaign_measured():
    """``[calibrate] from``: a comparison the earlier campaign measured keeps the pilot as
    its reference with the measured disagreement (3 of 8 examples: 0.375, not the default
    0.25; its source named);
    one measured never to disagree cannot change the answer and is proposed for cut."""
    from pathlib import Path

    from flightplan.metrics import Predictions
    from flightplan.plan.power import TestSplit, model_from_predictions
    from flightplan.run.decision import rank_variants
    from flightplan.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[3] / "examples" / "tiny" / "campaign.toml")

    def predictions(pairs: list[str]) -> Predictions:
        return Predictions.from_rows([{"example_id": str(i), "gold": g, "predicted": p}
                                      for i, (g, p) in enumerate(pairs)],
                                     ["example_id", "gold", "predicted"])

    pilot = predictions(["aa", "bb", "ab", "ba", "aa", "bb", "aa", "bb"])
    earlier = predictions(["aa", "bb", "ab", "ba", "aa", "bb", "aa", "bb"])
    other = predictions(["ab", "bb", "aa", "bb", "aa", "bb", "aa", "bb"])   # differs on 3
    metric, goal = spec.campaign.metric, spec.campaign.goal
    measured = {"lora-r4": model_from_predictions(metric, earlier, other, goal=goal,
                                                  source="results of tiny-earlier")}
    hours = {"lora-r4": 0.01, "lora-r4-len128": 0.02}

    def ranking(models):
        return rank_variants(spec, pending=list(hours), gpu_hours=hours,
                             test=TestSplit(379, None, "by hand"), reference=pilot,
                             reference_source="pilot of control", measured=models)

    value = ranking(measured)
    assert (value.model["disagreement"], value.model["disagreement_source"]) == (
        0.375, "results of tiny-earlier")
    assert value.model["reference_accuracy"] == round(76 / 108, 4)   # the pilot's, as before
    unmeasured = ranking({})
    assert unmeasured.model["disagreement_source"].startswith("default")
    by_variant = {r.variant: r.decision_value for r in value.ranked}
    assert by_variant["lora-r4"] != {r.variant: r.decision_value
                                     for r in unmeasured.ranked}["lora-r4"]
    same = {"lora-r4": model_from_predictions(metric, earlier, earlier, goal=goal,
                                              source="results of tiny-earlier")}
    never = {r.variant: r for r in ranking(same).ranked}["lora-r4"]
    assert never.cut and never.decision_value == 0.0


def _tiny_spec(seeds: int = 1):
    import tomllib
    from pathlib import Path

    from flightplan.spec import parse_spec

    path = Path(__file__).resolve().parents[3] / "examples" / "tiny" / "campaign.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data["campaign"]["seeds"] = seeds
    return parse_spec(data, campaign_dir=path.parent)


def _pairs(pairs: list[str]):
    from flightplan.metrics import Predictions

    return Predictions.from_rows([{"example_id": str(i), "gold": g, "predicted": p}
                                  for i, (g, p) in enumerate(pairs)],
                                 ["example_id", "gold", "predicted"])


def test_a_lucky_32_prediction_pilot_does_not_cut():
    """The pilot's control right on all 32 predictions it made. Taken as the whole truth
    (the old model), a reference right on everything leaves no disagreement (2 · min(1, 0)
    = 0), so no gain at all; as evidence against a prior worth 100
    examples it is a reference right on (32 + 70) / 132 = 0.773, and nothing is cut."""
    from flightplan.plan.power import TestSplit, model_from_reference
    from flightplan.run.decision import rank_variants

    spec = _tiny_spec()
    pilot = _pairs(["aa", "bb"] * 16)
    test = TestSplit(379, {"a": 248, "b": 131}, "by hand")
    hours = {"lora-r4": 0.01, "lora-r4-len128": 0.02}
    value = rank_variants(spec, pending=list(hours), gpu_hours=hours, test=test,
                          reference=pilot, reference_source="pilot of control")
    assert value.model["reference_accuracy"] == round(102 / 132, 4)
    assert value.model["examples"] == 32
    assert value.model["class_shares"] == {"a": round(248 / 379, 4), "b": round(131 / 379, 4)}
    assert not value.proposed_cuts and value.answerable
    # the old model: the 32 predictions as the whole truth leave no disagreement and no
    # headroom, no gain at all
    whole_truth = model_from_reference(spec.campaign.metric, pilot, goal="max", disagreement=0.25,
                                       source="pilot of control")
    assert whole_truth.disagreement == 0.0 and whole_truth.headroom == 0.0


def test_a_cut_needs_the_favourable_end_of_the_measured_disagreement_too():
    """A comparison an earlier campaign measured to disagree on 2.5 % of the examples: that
    leaves a gain of +0.1 out of reach, and even the threshold +0.05 (cut at the point).
    Measured on 40 examples (1 differs), the 95 % Wilson interval of 1/40 reaches 0.129,
    where +0.1 is reachable: not cut. Measured on 4,000 (100 differ) it reaches only
    0.0303: cut, with the evidence in the reason. Three seeds a side: with one, the seed
    spread alone (s = 0.025 on each side, an interval that leaves it out) would let a
    variant short of the threshold "meet" often enough not to be cut."""
    from scipy.stats import binomtest

    from flightplan.plan.power import TestSplit, model_from_predictions
    from flightplan.run.decision import _plausible, rank_variants

    for k, n in ((1, 40), (100, 4000)):
        wilson = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert _plausible(k / n, n) == pytest.approx((wilson.low, wilson.high), rel=1e-6)
    spec = _tiny_spec(seeds=3)
    pilot = _pairs(["aa", "bb", "ab", "ba", "aa", "bb", "aa", "bb"])
    hours = {"lora-r4": 0.01, "lora-r4-len128": 0.02}

    def measured(n: int):
        gold = ["a", "b"] * (n // 2)
        reference = [g + g for g in gold]
        other = list(reference)
        for i in range(n // 40):                   # 2.5 %: the variant wrong on an "a"
            other[2 * i] = gold[2 * i] + "b"
        return model_from_predictions(spec.campaign.metric, _pairs(reference), _pairs(other),
                                      goal="max", source=f"results of earlier-{n}")

    def ranking(n: int):
        return rank_variants(spec, pending=list(hours), gpu_hours=hours,
                             test=TestSplit(379, {"a": 190, "b": 189}, "by hand"),
                             reference=pilot, reference_source="pilot of control",
                             measured={name: measured(n) for name in hours})

    few = ranking(40)
    assert not few.proposed_cuts
    many = ranking(4000)
    assert set(many.proposed_cuts) == set(hours)
    reason = many.proposed_cuts["lora-r4"]
    assert ("evidence: 8 predictions of pilot of control and the test split's class shares; "
            "disagreement 0.025 measured on 4000 examples (results of earlier-4000), cut at "
            "every plausible value from 0.0206 to 0.0303") in reason


def test_the_decision_point_takes_the_seed_spread_an_earlier_campaign_measured():
    """A seed spread measured over replicates (``plan --from``'s) replaces the default
    0.025 in that variant's power (a spread of 0: the test sampling alone), and so moves
    both variants' decision values; the other comparison keeps the default."""
    from flightplan.plan.power import TestSplit, campaign_power
    from flightplan.run.decision import rank_variants

    spec = _tiny_spec()
    pilot = _pairs(["aa", "bb", "ab", "ba", "aa", "bb", "aa", "bb"])
    hours = {"lora-r4": 0.01, "lora-r4-len128": 0.02}
    test = TestSplit(379, {"a": 190, "b": 189}, "by hand")

    def values(spread):
        ranked = rank_variants(spec, pending=list(hours), gpu_hours=hours, test=test,
                               reference=pilot, reference_source="pilot of control",
                               seed_spread=spread).ranked
        return {r.variant: r.decision_value for r in ranked}

    default, measured = values(None), values({"lora-r4": (0.0, "results of earlier")})
    assert measured["lora-r4"] != default["lora-r4"]
    assert measured["lora-r4-len128"] != default["lora-r4-len128"]  # its P(not other) moved
    power = campaign_power(spec, test, seed_spread={"lora-r4": (0.0, "results of earlier")})
    assert {c.variant: c.seeds.sd for c in power.comparisons} == {"lora-r4": 0.0,
                                                                  "lora-r4-len128": 0.025}
