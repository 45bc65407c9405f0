"""A tiny campaign with ``[campaign] seeds = 2``, through the real CLI: plan, run, close,
verify. Each run executes twice (``<run> seed=0``, ``<run> seed=1``), each replicate with
its own id, folder and predictions; close compares lora-r4 with the control over both
replicates and the test examples, states each run's seed spread, counts each replicated
run as one product, and the results directory verifies (the consistency check computes the
two-level interval and the seed spreads again from the predictions)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from cli_run import run_cli
from flightplan.metrics import metric_value, read_predictions

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=1200)


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict]:
    """The tiny campaign on 64 train / 16 test reviews without its useful run, with
    ``seeds = 2``: (folder, plan --json, run --json, close --json)."""
    folder = tmp_path_factory.mktemp("tiny-seeds")
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    for old, new in (("train_limit = 240", "train_limit = 64"), ("test_limit = 80", "test_limit = 16"),
                     ("accept_at_least = 0.0\n", "accept_at_least = 0.0\nseeds = 2\n")):
        assert old in text
        text = text.replace(old, new)
    text = text[:text.rindex("[[run]]")]                  # without lora-r4-len128
    (folder / "campaign.toml").write_text(text, encoding="utf-8")
    outputs = []
    for verb in ("plan", "run", "close"):
        done = _cli(verb, "campaign.toml", "--json", cwd=folder)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs.append(json.loads(done.stdout))
    return folder, outputs[0], outputs[1], outputs[2]


NAMES = ["control seed=0", "control seed=1", "lora-r4 seed=0", "lora-r4 seed=1"]


def test_the_plan_schedules_and_the_run_executes_each_replicate(replicated):
    folder, plan, run, _ = replicated
    runs = sorted(s["name"] for s in plan["stages"] if s["kind"] == "run")
    assert runs == NAMES
    # 2 × (15 + 20) s of runs and 2 stages of 10 s
    assert plan["gpu_hours"] == pytest.approx((2 * 35 + 20) / 3600, abs=1e-4)
    assert run["status"] == "completed"
    assert sorted(run["statuses"]) == NAMES
    assert set(run["statuses"].values()) == {"finished"}
    ids = {r["name"]: r["run_id"] for r in run["runs"]}
    assert len(set(ids.values())) == 4
    assert ids["lora-r4 seed=1"].startswith("lora-r4-seed-1-")
    for name, run_id in ids.items():
        trial = json.loads((folder / "runs" / run_id / "trial.json").read_text())
        assert (trial["name"], trial["params"]["seed"], trial["replicate_of"]) == \
            (name, int(name[-1]), name.split(" ")[0])
        assert (folder / "runs" / run_id / "predictions.csv").is_file()


def test_close_compares_over_replicates_and_counts_one_product_per_run(replicated):
    folder, _, run, closed = replicated
    assert closed["verified"] is True and closed["findings"] == []
    ids = {r["name"]: r["run_id"] for r in run["runs"]}
    conclusion = json.loads((folder / "results" / "conclusion.json").read_text())
    [comparison] = conclusion["comparisons"]
    assert comparison["interval"] == "replicates and examples"
    assert comparison["reference_run_ids"] == [ids["control seed=0"], ids["control seed=1"]]
    assert comparison["variant_run_ids"] == [ids["lora-r4 seed=0"], ids["lora-r4 seed=1"]]
    assert comparison["replicates_used"] == {"reference": "2 of 2", "variant": "2 of 2"}
    values = {name: round(metric_value("macro_f1", read_predictions(
        folder / "results" / "predictions" / f"{run_id}.csv")), 6) for name, run_id in ids.items()}
    for run_name in ("control", "lora-r4"):
        mine = [values[f"{run_name} seed={i}"] for i in (0, 1)]
        spread = conclusion["seed_spread"][run_name]
        assert spread["sd"] == pytest.approx(statistics.stdev(mine), abs=1e-6)
        assert (spread["min"], spread["max"]) == (min(mine), max(mine))
        assert f"{run_name} sd {spread['sd']:.4f}" in conclusion["verdict"]
    assert comparison["difference"] == pytest.approx(
        (values["lora-r4 seed=0"] + values["lora-r4 seed=1"]) / 2
        - (values["control seed=0"] + values["control seed=1"]) / 2, abs=2e-6)
    assert comparison["ci_low"] <= comparison["difference"] <= comparison["ci_high"]
    # four accepted executions, two products: 47.14 / 2
    assert len(closed["accepted"]) == 4
    assert (closed["budget"]["accepted_products"], closed["budget"]["rental_per_accepted"]) \
        == (2, "23.57")
    verified = _cli("verify", "results", "--json", cwd=folder)
    assert verified.returncode == 0, verified.stdout
