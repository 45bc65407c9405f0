"""Verdicts over seeds and examples (close/replicates.py) and the budget's one product per
replicated run, against references written here: an independent simulation of campaigns
with a known seed variance (coverage), a draw-by-draw loop with scikit-learn's macro-F1
(the two-level mechanics), ``statistics.stdev`` (the seed spread)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from sklearn.metrics import f1_score

from flightplan.close.acceptance import Verdict, accepted_product_count
from flightplan.close.replicates import (compare_replicated_runs, compare_replicates,
                                         run_seed_spreads, seed_spread, two_level_draws,
                                         with_run_seed_spreads)
from flightplan.metrics import Predictions
from flightplan.spec import parse_spec


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.mean(values, axis=axis))


def _campaigns(rng: np.random.Generator, *, count: int, k: int, n: int, sd_seed: float,
               truth: float) -> tuple[np.ndarray, np.ndarray]:
    """``count`` simulated campaigns, written apart from the code: per-example scores of
    ``k`` replicates a side on ``n`` test examples. An example's score is its difficulty
    (shared by both sides, sd 0.3) plus the side's own effect on it (sd 0.2), plus the
    replicate's offset (sd ``sd_seed``, the seed variance); the variant is ``truth``
    higher in expectation. Shapes (count, k, n)."""
    shared = rng.normal(0.0, 0.3, (count, 1, n))
    def side(mean: float) -> np.ndarray:
        return (mean + shared + rng.normal(0.0, 0.2, (count, 1, n))
                + rng.normal(0.0, sd_seed, (count, k, 1)))
    return side(0.5), side(0.5 + truth)


def _coverage(reference: np.ndarray, variant: np.ndarray, truth: float, draws: int) -> float:
    hits = 0
    for ref, var in zip(reference, variant):
        result = compare_replicates(_mean, [(r,) for r in ref], [(v,) for v in var],
                                    goal="max", min_gain=0.0, n_resamples=draws, seed=7)
        hits += result["ci_low"] <= truth <= result["ci_high"]
    return hits / len(reference)


def test_the_two_level_interval_covers_the_true_difference_95_percent():
    # 600 campaigns of 10 replicates a side on 200 examples, seed sd 0.03: the seed part of
    # the difference's standard error (0.03·√(2/10) = 0.013) is two thirds of the examples'
    # (0.2·√(2/200) = 0.020). Measured: 0.945
    truth = 0.03
    reference, variant = _campaigns(np.random.default_rng(30), count=600, k=10, n=200,
                                    sd_seed=0.03, truth=truth)
    coverage = _coverage(reference, variant, truth, draws=300)
    assert coverage == pytest.approx(0.95, abs=0.02)
    # one replicate a side (the interval over examples alone, as with seeds = 1): the seed
    # error of the difference (0.03·√2 = 0.042) is outside it, so it covers about
    # P(|Z| < 1.96·0.020/0.047) = 59 % (measured 0.56)
    alone = _coverage(reference[:, :1], variant[:, :1], truth, draws=300)
    assert alone == pytest.approx(0.59, abs=0.06)


def test_the_draws_are_the_metric_of_each_drawn_replicate_on_the_drawn_examples():
    # a loop over draws with scikit-learn's macro-F1, on the same index draws
    rng = np.random.default_rng(3)
    n, labels = 40, 3
    gold = rng.integers(0, labels, n)
    ref = [np.where(rng.random(n) < 0.6, gold, rng.integers(0, labels, n)) for _ in range(2)]
    var = [np.where(rng.random(n) < 0.7, gold, rng.integers(0, labels, n)) for _ in range(3)]
    ids = [f"e{i}" for i in range(n)]
    names = ["a", "b", "c"]

    def predictions(predicted: np.ndarray) -> Predictions:
        return Predictions(ids=list(ids), labels=names, gold=gold.copy(),
                           predicted=predicted.copy(), probs=None, columns={})

    from flightplan.metrics import aligned
    statistic, arrays = aligned("macro_f1", [predictions(p) for p in [*ref, *var]])
    draws = two_level_draws(statistic, arrays[:2], arrays[2:], n_resamples=25,
                            rng=np.random.default_rng(11))
    again = np.random.default_rng(11)               # the documented order of the draws
    examples = again.integers(0, n, size=(25, n))
    ref_pick = again.integers(0, 2, size=(25, 2))
    var_pick = again.integers(0, 3, size=(25, 3))

    def f1(predicted: np.ndarray, index: np.ndarray) -> float:
        return float(f1_score(gold[index], predicted[index], average="macro",
                              labels=list(range(labels)), zero_division=0))
    expected = [np.mean([f1(var[j], examples[b]) for j in var_pick[b]])
                - np.mean([f1(ref[j], examples[b]) for j in ref_pick[b]]) for b in range(25)]
    np.testing.assert_allclose(draws, expected, atol=1e-12)
    # the point is the mean over replicates of each side's macro-F1 on every example
    result = compare_replicated_runs([predictions(p) for p in ref],
                                     [predictions(p) for p in var], metric="macro_f1",
                                     goal="max", min_gain=0.05)
    everything = np.arange(n)
    assert result["difference"] == pytest.approx(
        np.mean([f1(p, everything) for p in var]) - np.mean([f1(p, everything) for p in ref]),
        abs=1e-6)
    assert result["interval"] == "replicates and examples"
    assert result["seed_spread"]["variant"]["replicates"] == 3
    assert result["ci_low"] <= result["difference"] <= result["ci_high"]


def test_seed_spread_is_the_sample_sd_and_range():
    # the main job's lora-r8 over seeds 0-4 (issue 30)
    values = [0.4930, 0.4544, 0.4217, 0.4328, 0.4322]
    spread = seed_spread(values)
    assert spread["sd"] == pytest.approx(statistics.stdev(values), abs=1e-6)
    assert spread["sd"] == pytest.approx(0.02845, abs=1e-4)
    assert (spread["min"], spread["max"], spread["replicates"]) == (0.4217, 0.4930, 5)
    assert seed_spread([0.5])["sd"] is None
    assert run_seed_spreads({"a": [(f"a{i}", v) for i, v in enumerate(values)],
                             "b": [("b0", 0.4)]}) == {
        "a": spread | {"run_ids": ["a0", "a1", "a2", "a3", "a4"]}}
    assert with_run_seed_spreads({"metric": "m", "verdict": "V."}, {}) == {"metric": "m",
                                                                    "verdict": "V."}
    conclusion = with_run_seed_spreads({"metric": "macro_f1", "verdict": "No variant meets it."},
                                  {"lora-r8": spread})
    assert conclusion["verdict"] == ("No variant meets it. Seed spread of macro_f1: lora-r8 "
                                     "sd 0.0284, range [0.4217, 0.4930] over 5 replicates.")
    assert conclusion["seed_spread"] == {"lora-r8": spread}


def _verdict(name: str, accepted: bool, config: str) -> Verdict:
    return Verdict(f"{config}-id", name, "essential", "finished", config, 0.5, accepted,
                   accepted, [] if accepted else ["reload: differs"], [])


def test_a_replicated_run_is_one_product_when_all_its_replicates_are_accepted():
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "min_gain": 0.05},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "control", "tier": "essential", "duration": "1h", "seeds": 3,
                 "params": {"seed": 0}},
                {"name": "lora", "tier": "essential", "duration": "1h", "reference": "control",
                 "seeds": 2, "params": {"seed": 0}},
                {"name": "len", "tier": "useful", "duration": "1h", "reference": "control",
                 "params": {"seed": 0}}]})
    verdicts = [_verdict("control seed=0", True, "h0"), _verdict("control seed=1", True, "h1"),
                _verdict("control seed=2", True, "h2"),
                _verdict("lora seed=0", True, "h3"), _verdict("lora seed=1", False, "h4"),
                _verdict("len", True, "h5")]
    # control (3 replicates accepted) + len; lora has a replicate not accepted
    assert accepted_product_count(verdicts, spec) == 2
    # without the spec, every accepted configuration is a product (as before)
    assert accepted_product_count(verdicts) == 5
    # a replicate that has not run (not among the verdicts) keeps its run from counting
    assert accepted_product_count(verdicts[1:], spec) == 1


def _outcomes(rng: np.random.Generator, *, count: int, k: int, n: int, sd_seed: float,
              truth: float) -> tuple[np.ndarray, np.ndarray]:
    """Simulated 0/1 outcomes (right or wrong on each example): an example's chance of
    being right is its difficulty (0.15 + 0.7 · Beta(2, 2), shared by both sides) plus the
    replicate's offset (sd ``sd_seed``), the variant's ``truth`` higher (the chances stay
    inside (0, 1) but with odds under 10^-5, so the true difference is ``truth``); each
    replicate then draws its own outcome on every example, so replicates also disagree
    example by example."""
    difficulty = 0.15 + 0.7 * rng.beta(2.0, 2.0, (count, 1, n))
    def side(shift: float) -> np.ndarray:
        chance = np.clip(difficulty + shift + rng.normal(0.0, sd_seed, (count, k, 1)), 0, 1)
        return (rng.random((count, k, n)) < chance).astype(float)
    return side(0.0), side(truth)


def test_the_limits_stated_in_the_docs():
    # few replicates and a seed spread as large as the test sampling's: short
    reference, variant = _campaigns(np.random.default_rng(31), count=400, k=5, n=200,
                                    sd_seed=0.05, truth=0.03)
    short = _coverage(reference, variant, 0.03, draws=300)
    # replicates that disagree example by example: that noise counts at both levels
    reference, variant = _outcomes(np.random.default_rng(32), count=400, k=5, n=200,
                                   sd_seed=0.025, truth=0.03)
    wide = _coverage(reference, variant, 0.03, draws=300)
    # measured: 0.8875 and 0.995
    assert short == pytest.approx(0.89, abs=0.03)
    assert wide >= 0.98
