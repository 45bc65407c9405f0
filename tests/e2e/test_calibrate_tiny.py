"""`flightplan plan --from` on the tiny campaign, through the real CLI.

The tiny campaign runs and is closed once; planned again from its own results directory,
the plan must list fewer uncertainties than from the campaign file alone, re-plan each run
within 20 % of the duration close observed, and compute each comparison's resolution from
the disagreement measured in the stored predictions (the same figure the power module
gives for those predictions, and the half-width close measured, within 25 %). A copy of the
results with one stored prediction changed must be refused with exit 2 and one line
naming the finding.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_run import run_cli
from flightplan.metrics import read_predictions
from flightplan.plan.power import comparison_power, model_from_predictions

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=1200)


@pytest.fixture(scope="module")
def closed(closed_tiny):
    """The tiny campaign, run and closed (the session's shared, read-only one): (campaign
    dir, plan --json from the file, plan --json from its results)."""
    folder = closed_tiny.folder
    plans = []
    for extra in ((), ("--from", "results")):
        done = _cli("plan", "campaign.toml", "--json", *extra, cwd=folder)
        assert done.returncode == 0, done.stderr
        plans.append(json.loads(done.stdout))
    return folder, plans[0], plans[1]


def test_fewer_and_narrower_uncertainties_from_the_results(closed):
    _, guessed, calibrated = closed
    assert calibrated["calibration"]["campaign"] == "tiny"
    assert len(calibrated["uncertainties"]) < len(guessed["uncertainties"])
    assert {u["subject"] for u in guessed["uncertainties"]} == {
        "data-check", "pilot", "control", "lora-r4", "lora-r4-len128",
        "lora-r4 − control", "lora-r4-len128 − lora-r4"}
    assert all(u["source"] == "guess" for u in guessed["uncertainties"])
    widths = {u["subject"]: u["high"] - u["low"] for u in guessed["uncertainties"]}
    for entry in calibrated["uncertainties"] + calibrated["measured"]:
        assert entry["high"] - entry["low"] < widths[entry["subject"]], entry


def test_replanned_runs_are_within_20_percent_of_what_close_observed(closed):
    folder, _, calibrated = closed
    observed = {i["name"]: i["observed_hours"] for i in json.loads(
        (folder / "results" / "plan_vs_execution.json").read_text())["items"]
        if i["kind"] == "run"}
    planned = {s["name"]: s["duration_hours"] for s in calibrated["stages"]
               if s["kind"] == "run"}
    assert set(planned) == set(observed) == {"control", "lora-r4", "lora-r4-len128"}
    for name, hours in observed.items():
        assert abs(planned[name] - hours) <= 0.2 * hours, (name, planned[name], hours)


def test_resolution_comes_from_the_measured_disagreement(closed):
    folder, guessed, calibrated = closed
    results = folder / "results"
    conclusion = json.loads((results / "conclusion.json").read_text())
    before = {c["variant"]: c for c in guessed["power"]["comparisons"]}
    for comparison, measured in zip(conclusion["comparisons"],
                                    calibrated["power"]["comparisons"]):
        assert measured["variant"] == comparison["variant"]
        assert measured["model"]["disagreement_source"].startswith("measured in campaign tiny")
        assert before[measured["variant"]]["model"]["disagreement"] == 0.25
        model = model_from_predictions(
            "macro_f1", read_predictions(results / "predictions" /
                                         f"{comparison['reference_run_id']}.csv"),
            read_predictions(results / "predictions" / f"{comparison['variant_run_id']}.csv"),
            goal="max", source="test")
        alone = comparison_power(model, model.moments(80, upto=0.1), variant="v",
                                 reference="r", metric="macro_f1", goal="max", min_gain=0.05,
                                 expected_gain=0.1, expected_gain_source="default")
        assert measured["model"]["disagreement"] == model.inputs["disagreement"]
        # the plan adds the default seed spread of both sides (one seed) to the test
        # sampling's, 1.96 · √(σ_ex² + 2 · 0.025²), unless the runs measured never
        # disagree (then no seed makes a gain either)
        seed_sd = 0.0 if model.inputs["disagreement"] == 0 else 0.025
        assert measured["seed_sd"] == seed_sd and measured["seeds"] == 1
        assert measured["resolution"] == pytest.approx(
            1.959964 * math.sqrt((alone.resolution / 1.959964) ** 2 + 2 * seed_sd ** 2),
            abs=1e-4)
        # the test sampling's part is what close's interval measured
        half_width = (comparison["ci_high"] - comparison["ci_low"]) / 2
        assert abs(alone.resolution - half_width) <= 0.25 * half_width + 1e-9


def test_results_that_do_not_verify_are_refused(closed, tmp_path):
    folder, _, _ = closed
    copy = tmp_path / "copy"
    shutil.copytree(folder / "results", copy)
    rel = sorted((copy / "predictions").iterdir())[0]
    lines = rel.read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[2] = "negative" if fields[2] != "negative" else "positive"   # one prediction
    lines[1] = ",".join(fields)
    rel.write_text("".join(lines))
    done = _cli("plan", "campaign.toml", "--from", str(copy), cwd=folder)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: --from {copy}: does not verify: checksum: "
                                  f"predictions/{rel.name}: ")


def test_run_freezes_the_plan_that_plan_showed_from_calibrate_from(closed, tmp_path):
    """A campaign file with ``[calibrate] from``: `flightplan run` freezes the plan that
    `flightplan plan` prints for it (durations measured by the earlier campaign), not
    the file's guesses."""
    folder, guessed, _ = closed
    spec = (REPO / "examples" / "tiny" / "campaign.toml").read_text()
    (tmp_path / "campaign.toml").write_text(
        spec + f'\n[calibrate]\nfrom = "{folder / "results"}"\n')
    shown = _cli("plan", "campaign.toml", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    done = _cli("run", "campaign.toml", "--decide", "stop", cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    frozen = json.loads((tmp_path / "results" / "plan.json").read_text())

    def runs(plan):
        return {s["name"]: s["duration_hours"] for s in plan["stages"] if s["kind"] == "run"}

    assert runs(frozen) == runs(json.loads(shown.stdout)) != runs(guessed)
