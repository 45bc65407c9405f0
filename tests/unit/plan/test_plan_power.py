"""Resolution, power, decision value: against closed forms, hand-worked figures, and the
verdicts ``close`` actually gives on simulated test sets."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from flightplan.close.conclusion import compare
from flightplan.metrics import LABEL_METRICS, Predictions, confusion, from_confusion
from flightplan.plan import power as P
from flightplan.spec import parse_spec

Z = norm.ppf(0.975)          # close's 95 % interval
ZP = norm.ppf(0.8)           # the 80 % target


def _labels(gold, predicted) -> Predictions:
    ids = [str(i) for i in range(len(gold))]
    return Predictions(ids=ids, labels=["a", "b"], gold=np.asarray(gold),
                       predicted=np.asarray(predicted), probs=None)


def _column(values) -> Predictions:
    ids = [f"e{i}" for i in range(len(values))]
    return Predictions(ids=ids, labels=[], gold=None, predicted=None, probs=None,
                       columns={"abs_error": np.asarray(values, dtype=np.float64)})


def _power(model, n, *, min_gain, expected_gain, source="campaign file"):
    return P.comparison_power(model, model.moments(n, upto=2 * expected_gain), variant="v",
                              reference="r", min_gain=min_gain, expected_gain=expected_gain,
                              expected_gain_source=source)


def test_accuracy_from_paired_predictions_matches_the_closed_form():
    # 400 examples; the reference is right on 300, the variant on 290; they differ on 60:
    # 25 only the variant right, 35 only the reference right. Per-example accuracy
    # differences are +1 (25), −1 (35), 0 (340). Symmetrised, the decisive share is
    # q = 60/400 = 0.15; at true gain g the differences are ±1 with P = (q ± g)/2, so
    # σ(g) = √((q − g²)/n) and the interval's half-width is 1.96 σ.
    gold = np.zeros(400, dtype=int)
    reference = np.r_[np.zeros(300), np.ones(100)].astype(int)
    variant = reference.copy()
    variant[:35] = 1                 # the reference alone right
    variant[300:325] = 0             # the variant alone right
    model = P.model_from_predictions("accuracy", _labels(gold, reference), _labels(gold, variant),
                                     goal="max", source="test")
    assert model.inputs["disagreement"] == 0.15
    n, q, t, g = 379, 0.15, 0.05, 0.1
    power = _power(model, n, min_gain=t, expected_gain=g)
    sigma = lambda gain: math.sqrt((q - gain ** 2) / n)            # noqa: E731
    assert power.resolution == pytest.approx(Z * sigma(t), abs=1e-4)      # 0.0376
    expected = power.scenario("expected gain")
    assert expected.meets == pytest.approx(norm.cdf((g - t) / sigma(g) - Z), abs=1e-3)  # 0.574
    assert expected.does_not_meet == pytest.approx(norm.cdf((t - g) / sigma(g) - Z), abs=1e-3)
    zero = power.scenario("no gain")
    assert zero.does_not_meet == pytest.approx(norm.cdf(t / sigma(0) - Z), abs=1e-3)  # 0.725
    # at the threshold each conclusive verdict has the interval's tail, 2.5 %
    threshold = power.scenario("threshold")
    assert (threshold.meets, threshold.does_not_meet) == pytest.approx((0.025, 0.025), abs=1e-3)
    detectable = brentq(lambda x: x - t - (Z + ZP) * sigma(x), t, math.sqrt(q) - 1e-9)
    assert power.minimum_detectable_gain == pytest.approx(detectable, abs=1e-3)     # 0.1098
    assert power.examples_needed == math.ceil((q - g ** 2) * ((Z + ZP) / (g - t)) ** 2)  # 393
    # the largest gain: every disagreement going the variant's way
    assert model.moments(n).max_gain == pytest.approx(q)


def test_a_column_metric_with_goal_min_matches_the_closed_form():
    # 200 examples; the variant's abs_error is the reference's minus 0.1 on 180 of them and
    # plus 0.1 on 20: per-example differences with sd √(0.9·0.1)·0.2 = 0.06. Lower is
    # better, so the measured gain of +0.08 plays no part: the power curve varies the true
    # gain; σ = 0.06/√n, the gain's interval ±1.96 σ.
    base = np.linspace(0.5, 2.5, 200)
    change = np.r_[np.full(180, -0.1), np.full(20, 0.1)]
    model = P.model_from_predictions("mean:abs_error", _column(base), _column(base + change),
                                     goal="min", source="test")
    assert model.sd == pytest.approx(0.06)
    n, t, g = 500, 0.01, 0.02
    power = _power(model, n, min_gain=t, expected_gain=g)
    sigma = 0.06 / math.sqrt(n)
    assert power.resolution == pytest.approx(Z * sigma, abs=1e-4)              # 0.00526
    assert power.confirm_probability == pytest.approx(norm.cdf((g - t) / sigma - Z), abs=1e-3)
    assert power.minimum_detectable_gain == pytest.approx(t + (Z + ZP) * sigma, abs=1e-4)
    assert power.examples_needed == math.ceil(n * ((Z + ZP) * sigma / (g - t)) ** 2)   # 283
    # the same figures from the campaign file's expected_difference_sd, goal "min"
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "metric": "mean:abs_error", "goal": "min",
                     "min_gain": t, "expected_difference_sd": 0.06},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h"},
                {"name": "wide", "tier": "essential", "duration": "1h", "reference": "control",
                 "expected_gain": g}]})
    (planned,) = P.campaign_power(spec, P.TestSplit(n, None, "test")).comparisons
    assert (planned.resolution, planned.confirm_probability) == \
        pytest.approx((power.resolution, power.confirm_probability), abs=1e-6)
    assert planned.expected_gain_source == "campaign file (run[1].expected_gain)"
    assert planned.goal == "min"


def test_a_column_metric_without_a_spread_is_not_computed_and_says_why():
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "metric": "mean:abs_error", "goal": "min",
                     "min_gain": 0.01},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h"},
                {"name": "wide", "tier": "essential", "duration": "1h", "reference": "control"}]})
    power = P.campaign_power(spec, P.TestSplit(500, None, "test"))
    assert power.comparisons == ()
    ((variant, reference, why),) = power.not_computed
    assert (variant, reference) == ("wide", "control")
    assert "set [campaign] expected_difference_sd" in why


def test_the_default_model_of_accuracy_is_the_closed_form_of_its_disagreement():
    # the default model: every disagreement has one run right, so q = d
    model = P.default_model("accuracy", goal="max", label_counts={"x": 50, "y": 30, "z": 20},
                            disagreement=0.2)
    assert model.disagreement == pytest.approx(0.2)
    power = _power(model, 1000, min_gain=0.02, expected_gain=0.04, source="default: 2 × min_gain")
    assert power.resolution == pytest.approx(Z * math.sqrt((0.2 - 0.02 ** 2) / 1000), abs=1e-4)
    # the default expected gain is 2 t: the threshold t' whose 2 t' is confirmed with 80 %
    kind, lowest = power.threshold_for_target
    sigma = lambda gain: math.sqrt((0.2 - gain ** 2) / 1000)       # noqa: E731
    assert kind == "at least"
    assert lowest == pytest.approx(brentq(lambda x: x - (Z + ZP) * sigma(2 * x), 1e-6, 0.2),
                                   abs=1e-3)


def test_many_classes_are_simulated_plainly_and_still_match_the_closed_form():
    # 40 classes: 4720 cells, too many to linearise (LINEAR_BUDGET); 1000 plain draws at
    # 4 tilts leave σ a noise of about 2 %
    model = P.default_model("accuracy", goal="max",
                            label_counts={f"c{i}": 5 for i in range(40)}, disagreement=0.2)
    assert (2 * len(model.table) + 1) * 41 ** 2 > P.LINEAR_BUDGET
    power = _power(model, 2000, min_gain=0.02, expected_gain=0.04)
    assert power.resolution == pytest.approx(Z * math.sqrt((0.2 - 0.02 ** 2) / 2000), rel=0.08)


def test_every_classification_metric_has_increasing_gains_and_repeats_bitwise():
    counts = {"negative": 95, "neutral": 36, "positive": 248}
    for name, goal in LABEL_METRICS.items():
        model = P.default_model(name, goal=goal, label_counts=counts, disagreement=0.25)
        moments = model.moments(379)
        assert len(moments.gains) == len(P.LAMBDAS), name          # none left out
        assert np.all(np.diff(moments.gains) > 0), name
        assert moments.gains[0] < 0 < moments.gains[-1], name
        # gain 0 at λ = 0: the symmetric table makes the two runs equally good
        assert float(model.gains(model.table)[0]) == pytest.approx(0.0, abs=1e-12), name
    again = P.default_model("macro_f1", goal="max", label_counts=counts, disagreement=0.25)
    first, second = again.moments(379), again.moments(379)
    assert np.array_equal(first.sds, second.sds) and np.array_equal(first.means, second.means)


def test_predicted_verdicts_match_close_on_simulated_test_sets():
    # draw 80 test sets of 300 examples from the default macro-F1 model at a true gain, run
    # close's own paired bootstrap on each, and count its verdicts: they must agree with
    # the predicted probabilities (a share of 80 has a standard error under 0.056)
    model = P.default_model("macro_f1", goal="max", label_counts={"a": 60, "b": 25, "c": 15},
                            disagreement=0.3)
    moments = model.moments(300)
    rng = np.random.default_rng(7)

    def statistic(gold, predicted, axis=-1):
        return from_confusion("macro_f1", confusion(gold, predicted, model.n_labels))

    for gain in (0.0, 0.12):
        lam = float(np.interp(gain, moments.gains, P.LAMBDAS))
        table = model.tilted(lam)
        counted = {"meets": 0, "does_not_meet": 0, "inconclusive": 0}
        for _ in range(80):
            gold, ref, var = model.cells[rng.choice(len(table), size=300,
                                                    p=table / table.sum())].T
            counted[compare(statistic, (gold, ref), (gold, var), goal="max",
                            min_gain=0.05)["verdict"]] += 1
        predicted = P.verdict_probabilities(*moments.at(gain), 0.05)
        for verdict, probability in zip(("meets", "does_not_meet", "inconclusive"), predicted):
            assert counted[verdict] / 80 == pytest.approx(float(probability), abs=0.17), \
                (gain, verdict, counted)


def test_paired_predictions_give_the_half_width_close_measures_on_them():
    # two runs on 379 examples of 3 unbalanced classes (248/95/36), predictions drawn at
    # random around 65 % and 70 % right: the model built from their pairs predicts the
    # interval close then computes on the same pairs (what plan --from will rely on)
    rng = np.random.default_rng(3)
    gold = np.repeat([0, 1, 2], [248, 95, 36])
    ref = np.where(rng.random(379) < 0.65, gold, rng.integers(0, 3, 379))
    var = np.where(rng.random(379) < 0.5, ref, np.where(rng.random(379) < 0.7, gold,
                                                          rng.integers(0, 3, 379)))
    labels = ["negative", "neutral", "positive"]
    ids = [str(i) for i in range(379)]
    reference = Predictions(ids=ids, labels=labels, gold=gold, predicted=ref, probs=None)
    variant = Predictions(ids=ids, labels=labels, gold=gold, predicted=var, probs=None)

    def statistic(g, predicted, axis=-1):
        return from_confusion("macro_f1", confusion(g, predicted, 3))

    measured = compare(statistic, (gold, ref), (gold, var), goal="max", min_gain=0.05)
    model = P.model_from_predictions("macro_f1", reference, variant, goal="max", source="test")
    assert model.inputs["disagreement"] == round(float(np.mean(ref != var)), 4)
    predicted = P.Z_INTERVAL * float(model.moments(379).at(measured["gain"])[1])
    assert predicted == pytest.approx((measured["ci_high"] - measured["ci_low"]) / 2, rel=0.1)


def test_model_from_a_single_run_keeps_its_accuracy_and_takes_the_disagreement():
    gold = np.r_[np.zeros(60), np.ones(40)].astype(int)
    predicted = gold.copy()
    predicted[:15] = 1               # 85 % right
    model = P.model_from_reference("accuracy", _labels(gold, predicted), goal="max",
                                   disagreement=0.2, source="pilot of control")
    assert model.inputs["reference_accuracy"] == 0.85
    assert model.disagreement == pytest.approx(0.2)
    # a disagreement the reference cannot have at equal accuracy is lowered, and said so
    wide = P.model_from_reference("accuracy", _labels(gold, predicted), goal="max",
                                  disagreement=0.5, source="pilot of control")
    assert wide.disagreement == pytest.approx(0.3)
    assert "lowered from 0.500 to 0.300" in wide.inputs["notes"][0]


def test_examples_to_settle_the_main_jobs_inconclusive_comparisons():
    # n · (σ (z + z_p) / |gain − t|)², σ = half-width / z, on the main job's intervals:
    # lora-r8 − control +0.0586 [+0.0034, +0.1169]: σ = 0.028955, gap 0.0086 → 33,720;
    # lora-r8-len256 − lora-r8 +0.0203 [−0.0435, +0.0837]: σ = 0.032450, gap 0.0297 → 3,552
    assert P.examples_to_settle(gain=0.0586, gain_low=0.0034, gain_high=0.1169, n_examples=379,
                                min_gain=0.05) == 33720
    assert P.examples_to_settle(gain=0.0203, gain_low=-0.0435, gain_high=0.0837,
                                n_examples=379, min_gain=0.05) == 3552
    assert P.examples_to_settle(gain=0.05, gain_low=0.0, gain_high=0.1, n_examples=379,
                                min_gain=0.05) is None
    assert (P.rounded_count(33720), P.rounded_count(3552), P.rounded_count(904),
            P.rounded_count(57)) == (34000, 3600, 900, 57)


def test_the_main_job_before_any_run_cannot_confirm_its_threshold():
    spec = parse_spec({
        "campaign": {"name": "drug-reviews", "question": "q?", "metric": "macro_f1",
                     "min_gain": 0.05},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h"},
                {"name": "lora-r8", "tier": "essential", "duration": "1h",
                 "reference": "control"}]})
    test = P.TestSplit(379, {"negative": 95, "neutral": 36, "positive": 248}, "drugsComTest.tsv")
    (power,) = P.campaign_power(spec, test).comparisons
    assert power.warn and power.confirm_probability < 0.5
    assert power.expected_gain == 0.1 and power.expected_gain_source == "default: 2 × min_gain"
    assert power.inputs["disagreement"] == P.DEFAULT_DISAGREEMENT
    # test sampling alone (no seeds): the measured half-width was 0.057 ((0.1169 − 0.0034) / 2)
    model = P.default_model("macro_f1", goal="max", label_counts=test.label_counts)
    alone = P.comparison_power(model, model.moments(379, upto=0.1), variant="lora-r8",
                               reference="control", min_gain=0.05, expected_gain=0.1,
                               expected_gain_source="default: 2 × min_gain")
    assert 0.045 < alone.resolution < 0.065 and alone.examples_needed > 379
    # with the default seed spread s = 0.025 of both sides, K = 1: 1.96 √(σ_ex² + 2 s²)
    assert power.seeds.sd == P.DEFAULT_SEED_SD and power.seeds.replicates == 1
    assert power.resolution == pytest.approx(
        Z * math.sqrt((alone.resolution / Z) ** 2 + 2 * 0.025 ** 2), rel=1e-9)
    assert power.minimum_detectable_gain > 0.1
    # a campaign that says its runs disagree less gets a finer resolution
    calmer = parse_spec(dict(spec.model_dump(exclude={"source", "campaign_dir"}) | {
        "campaign": spec.campaign.model_dump() | {"expected_disagreement": 0.1},
        "rental": {"offer": "RTX 4090", "package_days": 3}}))
    (finer,) = P.campaign_power(calmer, test).comparisons
    assert finer.resolution < power.resolution
    assert finer.inputs["disagreement_source"] == "campaign file ([campaign] expected_disagreement)"


def _with(power: P.ComparisonPower, meets: float, does_not_meet: float) -> P.ComparisonPower:
    """``power`` with its expected-gain probabilities replaced (for the value formulas)."""
    scenarios = tuple(dataclasses.replace(s, meets=meets, does_not_meet=does_not_meet,
                                          inconclusive=1 - meets - does_not_meet)
                      if s.case == "expected gain" else s for s in power.scenarios)
    return dataclasses.replace(power, scenarios=scenarios)


def test_decision_value_by_hand():
    base = _power(P.ColumnModel(sd=0.1, inputs={}), 400, min_gain=0.01, expected_gain=0.02)
    a, b = _with(base, 0.6, 0.1), _with(base, 0.3, 0.1)
    # DV(a) = 0.6 · (1 − 0.3), DV(b) = 0.3 · (1 − 0.6)
    assert P.decision_values({"a": a, "b": b}) == pytest.approx({"a": 0.42, "b": 0.12})
    # once a concluded comparison meets, nothing changes the choice
    assert P.decision_values({"a": a, "b": b}, {"c": "meets"}) == {"a": 0.0, "b": 0.0}
    assert P.decision_values({"a": a}, {"c": "inconclusive"}) == pytest.approx({"a": 0.6})


def test_ranking_puts_the_variant_that_can_decide_first_and_proposes_cutting_the_others():
    counts = {"neg": 40, "pos": 60}
    n, t = 1000, 0.05
    # nearly identical to its reference: they disagree on 2 % of examples, so the gain
    # cannot pass +0.02 — it would not meet +0.05 whatever happens
    twin = _power(P.default_model("accuracy", goal="max", label_counts=counts,
                                  disagreement=0.02), n, min_gain=t, expected_gain=0.1)
    # expected to land on the threshold: its interval straddles it almost surely
    unsure = _power(P.default_model("accuracy", goal="max", label_counts=counts,
                                    disagreement=0.3), n, min_gain=t, expected_gain=t)
    # expected well past it on a test set that resolves ±0.03
    able = _power(P.default_model("accuracy", goal="max", label_counts=counts,
                                  disagreement=0.3), n, min_gain=t, expected_gain=0.15)
    ranked = P.rank_by_value({"twin": twin, "unsure": unsure, "able": able},
                             {"twin": 2.0, "unsure": 2.0, "able": 4.0})
    first, *others = ranked
    assert first.variant == "able" and not first.cut and first.decision_value > 0.9
    assert first.value_per_gpu_hour == pytest.approx(first.decision_value / 4.0)
    reasons = {r.variant: r.reason for r in others if r.cut}
    assert reasons["twin"].startswith("every outcome leads to the same choice")
    assert reasons["unsure"].startswith("cannot reach a conclusive verdict")
    assert "beyond the largest gain the disagreement allows" in twin.notes[0]


def test_the_power_plot_is_a_png():
    model = P.default_model("accuracy", goal="max", label_counts=None, disagreement=0.2)
    power = P.CampaignPower(P.TestSplit(300, None, "t"),
                            (_power(model, 300, min_gain=0.05, expected_gain=0.1),))
    assert P.power_png(power, title="t").startswith(b"\x89PNG")
    assert "two balanced classes assumed" in power.comparisons[0].notes[0]
    with pytest.raises(ValueError, match="no comparison"):
        P.power_png(P.CampaignPower(None, ()))


def test_a_measured_disagreement_of_zero_says_no_gain_can_be_confirmed_and_why():
    """Two runs that predicted the same on every test example: the warning names the
    measurement and the disagreement 0 instead of percentages and a test size."""
    from flightplan.plan.commands import _warning

    gold = np.r_[np.zeros(60), np.ones(40)].astype(int)
    predicted = gold.copy()
    predicted[:15] = 1
    model = P.model_from_predictions("accuracy", _labels(gold, predicted),
                                     _labels(gold, predicted.copy()), goal="max",
                                     source="results of tiny")
    power = dataclasses.replace(_power(model, 100, min_gain=0.05, expected_gain=0.1),
                                metric="accuracy")
    assert power.minimum_detectable_gain is None
    assert _warning(power) == (
        "v − r: the runs measured (results of tiny) predicted the same on all 100 test "
        "examples they share (disagreement 0). A variant that never disagrees with its "
        "reference cannot differ from it on accuracy, so no test size confirms any gain: "
        "this comparison can only end without meeting the threshold. Fixes: a bolder variant "
        "(its settings, as measured, change no prediction); or cut it and spend its hours on "
        "the other comparisons.")


def _main_job(min_gain: float, **campaign):
    return parse_spec({
        "campaign": {"name": "drug-reviews", "question": "q?", "metric": "macro_f1",
                     "min_gain": min_gain, **campaign},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h"},
                {"name": "lora-r8", "tier": "essential", "duration": "1h",
                 "reference": "control"}]})


MAIN_TEST = P.TestSplit(379, {"negative": 95, "neutral": 36, "positive": 248},
                        "drugsComTest.tsv")


def test_the_assumed_disagreement_grows_with_the_gain_it_must_explain():
    # accuracy, two balanced classes, a gain of +0.5 to explain: the assumed reference
    # leaves room for it (1 − a = 0.5, a = 0.5) and d grows until the table tilted by ½
    # reaches it: accuracy gains d/2 there, so d = 2 · 0.5 = 1. The differences are ±1 with
    # P = (d ± g)/2, so σ(g) = √((d − g²)/n): at g = 0.5 on 379 examples √(0.75/379)
    model = P.default_model("accuracy", goal="max", label_counts={"a": 1, "b": 1},
                            explain=0.5)
    assert model.inputs["reference_accuracy"] == 0.5
    assert model.disagreement == pytest.approx(1.0, abs=1e-9)
    assert model.headroom == pytest.approx(0.5)
    assert any("raised from 0.250 to 1.000" in note for note in model.inputs["notes"])
    moments = model.moments(379)
    assert float(moments.at(0.5)[1]) == pytest.approx(math.sqrt(0.75 / 379), rel=1e-3)
    # nothing to explain past what the default allows: the default stays
    plain = P.default_model("accuracy", goal="max", label_counts={"a": 1, "b": 1},
                            explain=0.1)
    assert plain.disagreement == pytest.approx(P.DEFAULT_DISAGREEMENT)
    assert plain.inputs["reference_accuracy"] == P.DEFAULT_REFERENCE_ACCURACY


def test_a_threshold_of_a_quarter_on_the_main_job_is_not_called_underpowered():
    # min_gain 0.25, expected gain 0.5: the assumed model explains +0.5 instead of capping
    # it at the default disagreement, so 379 reviews confirm it; no figure is of a gain the
    # model made up, and no warning is raised
    (power,) = P.campaign_power(_main_job(0.25), MAIN_TEST).comparisons
    assert power.expected_gain == 0.5 and not power.past_headroom
    assert not power.warn and power.confirm_probability > 0.99
    assert not any("beyond" in note for note in power.notes)
    assert power.scenario("expected gain").true_gain == 0.5
    assert power.examples_needed is not None and power.examples_needed < 379


def test_a_gain_past_the_references_headroom_is_named_and_never_cut():
    from flightplan.plan.commands import _warning

    # a reference right on 90 % of the examples: no variant gains more than +0.1 accuracy
    gold = np.zeros(100, dtype=int)
    predicted = np.r_[np.zeros(90), np.ones(10)].astype(int)
    model = P.model_from_reference("accuracy", _labels(gold, predicted), goal="max",
                                   disagreement=0.1, source="pilot of control")
    assert model.headroom == pytest.approx(0.1)
    power = dataclasses.replace(_power(model, 379, min_gain=0.05, expected_gain=0.5),
                                metric="accuracy")
    assert power.past_headroom and power.warn
    assert any("past the reference's headroom (+0.1" in note for note in power.notes)
    text = _warning(power)
    assert "past the reference's headroom (+0.1" in text and "at most +0.1" in text
    assert "test examples would" not in text and "min_gain at least" not in text
    (ranked,) = P.rank_by_value({"v": power}, {"v": 1.0})
    assert not ranked.cut and ranked.reason is None


def test_a_warning_offers_only_fixes_that_help():
    from flightplan.plan.commands import _warning

    for min_gain, n in ((0.05, 379), (0.05, 30), (0.25, 30), (0.25, 379)):
        test = dataclasses.replace(MAIN_TEST, n_examples=n)
        (power,) = P.campaign_power(_main_job(min_gain), test).comparisons
        if not power.warn:
            continue
        text = _warning(power)
        for bound in re.findall(r"min_gain at least ([+-][\d.]+)", text):
            assert float(bound) > min_gain                  # never the threshold it has
            assert 2 * float(bound) <= power.headroom       # and a gain the metric allows
        for bound in re.findall(r"min_gain at most ([+-][\d.]+)", text):
            assert 0 <= float(bound) < min_gain
        for count in re.findall(r"about ([\d,]+) test examples", text):
            assert n < int(count.replace(",", "")) <= 100 * n
    # the main job at +0.05: a larger threshold helps, and is offered
    (power,) = P.campaign_power(_main_job(0.05), MAIN_TEST).comparisons
    assert re.search(r"min_gain at least \+0\.\d+", _warning(power))


def test_a_gain_near_its_threshold_has_no_test_size_and_no_count_over_seven_digits():
    from flightplan.close.conclusion import conclude

    # the main job on the GPU: +0.0502 against 0.05, half-width 0.057: the gap 0.0002 is
    # under a tenth of the resolution (0.0057), so no count (it would be 379 · (0.057 /
    # 1.96 · 2.8016 / 0.0002)² ≈ 6.6e10)
    assert P.examples_to_settle(gain=0.0502, gain_low=0.0502 - 0.057,
                                gain_high=0.0502 + 0.057, n_examples=379, min_gain=0.05) is None
    # a gap of 1e-6
    assert P.examples_to_settle(gain=0.05 + 1e-6, gain_low=0.0, gain_high=0.1 + 2e-6,
                                n_examples=379, min_gain=0.05) is None
    # a gap past a tenth of the resolution but a size past 100 × 379 = 37,900:
    # 379 · (0.057 / 1.959964 · 2.801585 / 0.006)² ≈ 69,887
    sd = 0.057 / Z
    assert 379 * (sd * (Z + ZP) / 0.006) ** 2 == pytest.approx(69887, abs=1)
    assert P.examples_to_settle(gain=0.056, gain_low=0.056 - 0.057, gain_high=0.056 + 0.057,
                                n_examples=379, min_gain=0.05) is None
    # … and one within it: 0.0086 → 33,720 (the main job's lora-r8 − control)
    assert P.examples_to_settle(gain=0.0586, gain_low=0.0034, gain_high=0.1169,
                                n_examples=379, min_gain=0.05) == 33720
    # a huge test split still prints no more than 7 digits
    assert P.practical_size(50_000_000, 1_000_000) is None
    assert P.practical_size(9_999_999, 1_000_000) == 9_999_999
    near = {"variant": "lora-r8", "reference": "control", "verdict": "inconclusive",
            "gain": 0.0502, "ci_low": -0.0068, "ci_high": 0.1072, "n_examples": 379,
            "examples_to_settle": None}
    verdict = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                       comparisons=[near])["verdict"]
    assert ("its interval straddles the threshold and no test set of practical size "
            "settles it (its gain is +0.0002 from the threshold)") in verdict
    assert not re.search(r"\d{1,3}(,\d{3}){2,}|\d{8,}", verdict)      # no 8+ digit count


def test_an_expected_gain_at_its_threshold_plus_a_hair_has_no_test_size():
    model = P.default_model("accuracy", goal="max", label_counts={"a": 1, "b": 1})
    power = _power(model, 379, min_gain=0.05, expected_gain=0.0502)
    assert power.examples_needed is None
    assert power.examples_needed_reason.startswith(
        "no test set of practical size settles it (gap +0.0002 to the threshold")
    assert power.to_json()["examples_needed"] is None


def test_seeds_add_their_spread_over_k_to_the_resolution_and_power_closed_form():
    # a column metric: per-example difference sd 0.6 on 400 examples → σ_ex = 0.03; seed
    # spread s = 0.025 a side; Holm over m = 3 comparisons: meets at z_m = Φ⁻¹(1 − 0.025/3).
    # σ(K) = √(σ_ex² + 2 s²/K); with K ≥ 2 the interval is ±z σ(K), so
    # P(meets) = Φ((g − t)/σ(K) − z_m); with K = 1 it is ±z σ_ex, so
    # P(meets) = Φ((g − t − z_m σ_ex)/σ(1))
    model = P.ColumnModel(sd=0.6, inputs={"kind": "column"})
    seeds = P.Seeds(sd=0.025, source="test", replicates=3, comparisons=3, gpu_hours=0.5)
    power = P.comparison_power(model, model.moments(400, upto=0.3), variant="v",
                               reference="r", min_gain=0.05, expected_gain=0.163, seeds=seeds)
    z_m = norm.ppf(1 - 0.025 / 3)
    assert P.z_meets(3) == pytest.approx(z_m) and P.z_meets(1) == pytest.approx(Z)
    sigma = {k: math.sqrt(0.03 ** 2 + 2 * 0.025 ** 2 / k) for k in (1, 3, 5)}
    by = {r.seeds: r for r in power.by_seeds}
    assert sorted(by) == [1, 3, 5]
    assert by[1].confirm_probability == pytest.approx(
        norm.cdf((0.113 - z_m * 0.03) / sigma[1]), abs=1e-9)
    for k in (3, 5):
        assert by[k].resolution == pytest.approx(Z * sigma[k], rel=1e-9)
        assert by[k].confirm_probability == pytest.approx(norm.cdf(0.113 / sigma[k] - z_m),
                                                          abs=1e-9)
        assert by[k].gpu_hours == pytest.approx(k * 0.5)
    # the campaign's K = 3 is the main figure; K = 5 is the fewest that confirms +0.163
    assert power.resolution == pytest.approx(by[3].resolution)
    assert power.confirm_probability == pytest.approx(by[3].confirm_probability)
    assert by[3].confirm_probability < 0.8 <= by[5].confirm_probability
    # one seed "meets" more often (0.81) only because its interval leaves the seed spread
    # out: at a true gain of exactly t it meets with Φ(−z_m σ_ex/σ(1)), not 0.025/3
    assert by[1].confirm_probability > 0.8
    assert by[1].false_meets == pytest.approx(norm.cdf(-z_m * 0.03 / sigma[1]), abs=1e-9)
    assert by[5].false_meets == pytest.approx(0.025 / 3, abs=1e-9)
    assert power.confirmable_with is by[5]
    # the test size: σ_ex² n/n' + 2 s²/K ≤ ((g − t)/(z_m + z_p))² → n' = n σ_ex²/room
    room = (0.113 / (z_m + ZP)) ** 2 - 2 * 0.025 ** 2 / 3
    assert power.examples_needed == math.ceil(400 * 0.03 ** 2 / room)
    assert power.to_json()["by_seeds"][2] == {
        "seeds": 5, "resolution": round(Z * sigma[5], 4),
        "confirm_probability": round(by[5].confirm_probability, 3),
        "false_meets": round(0.025 / 3, 4),
        "minimum_detectable_gain": round(by[5].minimum_detectable_gain, 4), "gpu_hours": 2.5}


def test_seed_power_matches_a_simulation_of_the_verdicts():
    # simulated apart from the code: each draw a test-sampling error (sd σ_ex) and the
    # mean seed effect of each side over K replicates (sd s/√K each); the interval is
    # ±z σ_ex with one seed (it resamples examples only) and ±z σ(K) with K ≥ 2
    rng = np.random.default_rng(7)
    sd_ex, s, g, t, draws = 0.03, 0.025, 0.1, 0.05, 200_000
    model = P.ColumnModel(sd=sd_ex * 20, inputs={"kind": "column"})
    for k in (1, 3, 5):
        seeds = P.Seeds(sd=s, source="test", replicates=k)
        power = P.comparison_power(model, model.moments(400, upto=0.3), variant="v",
                                   reference="r", min_gain=t, expected_gain=g, seeds=seeds)
        measured = (g + rng.normal(0, sd_ex, draws) + rng.normal(0, s / math.sqrt(k), draws)
                    - rng.normal(0, s / math.sqrt(k), draws))
        half = Z * (sd_ex if k == 1 else math.sqrt(sd_ex ** 2 + 2 * s ** 2 / k))
        assert np.mean(measured - half >= t) == pytest.approx(power.confirm_probability,
                                                              abs=0.005)
        assert np.mean(measured + half < t) == pytest.approx(
            power.scenario("expected gain").does_not_meet, abs=0.005)


def test_the_campaigns_seeds_holm_and_hours_reach_the_power():
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "metric": "macro_f1", "min_gain": 0.05,
                     "seeds": 3, "multiple": "holm"},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h",
                 "params": {"seed": 0}},
                {"name": "a", "tier": "useful", "duration": "30m", "gpus": 2,
                 "reference": "control", "params": {"seed": 0}},
                {"name": "b", "tier": "useful", "duration": "1h", "seeds": 5,
                 "reference": "control", "params": {"seed": 0}}]})
    a, b = (P.campaign_seeds(spec, spec.item(name)) for name in ("a", "b"))
    assert (a.replicates, a.comparisons, a.gpu_hours, a.sd) == (3, 2, 1.0, 0.025)
    assert b.replicates == 3                  # the control runs 3: the fewer side's
    measured = P.campaign_seeds(spec, spec.item("a"), {"a": (0.01, "results of c0")})
    assert (measured.sd, measured.source) == (0.01, "results of c0")
    alone = parse_spec(spec.model_dump(exclude={"source", "campaign_dir"})
                       | {"campaign": spec.campaign.model_dump() | {"multiple": "none"}})
    assert P.campaign_seeds(alone, alone.item("a")).comparisons == 1
    (first, _) = P.campaign_power(spec, MAIN_TEST).comparisons
    assert first.seeds.replicates == 3 and [r.seeds for r in first.by_seeds] == [1, 3, 5]
    assert [r.gpu_hours for r in first.by_seeds] == [1.0, 3.0, 5.0]
