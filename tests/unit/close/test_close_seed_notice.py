"""The seed notice of one-seed comparisons: the interval widened by the seed spread.

References: the main job's figures worked by hand, and a simulation written here of
comparisons with a known seed variance (the widened interval must cover the true
difference 95 % of the time; the test-sampling interval alone does not).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flightplan.close.conclusion import conclude
from flightplan.close.seed_notice import seed_notice, with_seed_spread
from flightplan.plan.power import DEFAULT_SEED_SD
from flightplan.spec import load_spec

MAIN_JOB = Path(__file__).resolve().parents[3] / "examples" / "drug-reviews" / "campaign.toml"
DEFAULT_SOURCE = ("default, measured on another task (the main job's lora-r8 macro-F1 over "
                  "seeds 0-4: 0.4930, 0.4544, 0.4217, 0.4328, 0.4322); run seeds >= 2 once "
                  "and plan --from its results to measure this task's own")


def _main_job_lora() -> dict:
    # lora-r8 − control as the main job measured it (docs/decisions.md, section 1)
    return {"variant": "lora-r8", "reference": "control", "verdict": "inconclusive",
            "difference": 0.0705, "gain": 0.0705, "ci_low": 0.0101, "ci_high": 0.1303,
            "n_examples": 379, "examples_to_settle": 6700, "p_value": 0.0},


def test_the_main_jobs_interval_widened_by_the_default_seed_spread():
    (entry,) = _main_job_lora()
    entry["seed_notice"] = {"seed_sd": 0.025, "seed_sd_source": DEFAULT_SOURCE}
    notice = seed_notice(entry, goal="max", min_gain=0.05)
    # z s √2 = 1.959964 · 0.025 · 1.414214 = 0.069295;
    # low:  0.0705 − √(0.0604² + 0.069295²) = 0.0705 − 0.091924 = −0.021424
    # high: 0.0705 + √(0.0598² + 0.069295²) = 0.0705 + 0.091531 = +0.162031
    assert notice["ci_low"] == pytest.approx(-0.021424, abs=2e-6)
    assert notice["ci_high"] == pytest.approx(0.162031, abs=2e-6)
    assert notice["verdict"] == "inconclusive" and notice["seeds_measured"] is False
    # goal min: the same difference is a loss; the interval is that of the difference
    loss = seed_notice(entry, goal="min", min_gain=0.0)
    assert (loss["ci_low"], loss["ci_high"]) == (notice["ci_low"], notice["ci_high"])
    assert loss["verdict"] == "inconclusive"
    # no spread known (a column metric): said, not widened
    entry["seed_notice"] = {"seed_sd": 0.0, "seed_sd_source": "not included"}
    assert seed_notice(entry, goal="max", min_gain=0.05)["ci_low"] is None


def test_the_widened_interval_covers_the_true_difference_95_percent_of_the_time():
    # each comparison: true difference 0.03; the test sampling moves it by N(0, 0.03²) and
    # each side's seed by N(0, 0.025²); the bootstrap interval is d̂ ± 1.96 · 0.03
    rng = np.random.default_rng(11)
    true, sd_examples, sd_seed, n = 0.03, 0.03, 0.025, 4000
    measured = true + rng.normal(0, sd_examples, n) + rng.normal(0, sd_seed, n) \
        - rng.normal(0, sd_seed, n)
    covered = narrow = 0
    for d in measured:
        half = 1.959964 * sd_examples
        entry = {"difference": d, "ci_low": d - half, "ci_high": d + half,
                 "seed_notice": {"seed_sd": sd_seed, "seed_sd_source": "simulated"}}
        notice = seed_notice(entry, goal="max", min_gain=0.05)
        covered += notice["ci_low"] <= true <= notice["ci_high"]
        narrow += d - half <= true <= d + half
    # binomial sd of a 95 % share over 4000: 0.0034; 3 of them
    assert abs(covered / n - 0.95) < 0.011
    # the test-sampling interval alone: 2 Φ(1.96 · 0.03 / √(0.03² + 2 · 0.025²)) − 1 = 0.79
    assert abs(narrow / n - 0.793) < 0.02


def test_a_one_seed_campaign_takes_the_best_source():
    spec = load_spec(MAIN_JOB)
    made = [{"variant": "lora-r8", "reference": "control", "verdict": "inconclusive"},
            {"variant": "lora-r8-len256", "reference": "lora-r8", "verdict": "not_available"}]
    default = with_seed_spread(spec, made, {})
    assert default[0]["seed_notice"] == {"seed_sd": DEFAULT_SEED_SD,
                                         "seed_sd_source": DEFAULT_SOURCE}
    assert "seed_notice" not in default[1]          # not made: nothing to widen
    measured = with_seed_spread(spec, made, {"lora-r8": (0.011, "measured in campaign x")})
    assert measured[0]["seed_notice"] == {"seed_sd": 0.011,
                                          "seed_sd_source": "measured in campaign x"}
    replicated = spec.model_copy(update={"campaign": spec.campaign.model_copy(
        update={"seeds": 3})})
    assert "seed_notice" not in with_seed_spread(replicated, made, {})[0]


def test_the_conclusion_states_the_notice_and_keeps_its_verdict():
    (lora,) = _main_job_lora()
    longer = {"variant": "lora-r8-len256", "reference": "lora-r8", "verdict": "inconclusive",
              "difference": 0.0344, "gain": 0.0344, "ci_low": -0.0281, "ci_high": 0.1012,
              "n_examples": 379, "examples_to_settle": 13000, "p_value": 0.7}
    spread = {"seed_sd": 0.025, "seed_sd_source": DEFAULT_SOURCE}
    result = conclude(question="q?", metric="macro_f1", goal="max", min_gain=0.05,
                      comparisons=[lora | {"seed_notice": spread},
                                   longer | {"seed_notice": spread}], multiple="holm")
    assert result["answer"] == "inconclusive"
    assert [c["verdict"] for c in result["comparisons"]] == ["inconclusive"] * 2
    # len256: low 0.0344 − √(0.0625² + 0.069295²) = −0.058917; high 0.0344 +
    # √(0.0668² + 0.069295²) = +0.130650 (z = 1.9599640, so z s √2 = 0.0692952)
    assert result["verdict"].endswith(
        "Seed variance was not measured: each side of these comparisons ran one seed, so the "
        "interval covers the sampling of test examples only. With a seed spread of sd 0.025 "
        f"per run ({DEFAULT_SOURCE}), the 95% interval of the difference would be lora-r8 − "
        "control [-0.0214, +0.1620] (inconclusive); lora-r8-len256 − lora-r8 [-0.0589, "
        "+0.1306] (inconclusive).")
