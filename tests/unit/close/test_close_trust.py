"""A file task's results: close (the campaign's own code) reloads it; verify checks its
kept source and never runs it without trust; a replaced task file is found, never run,
and writes no marker; a task without a reload_predictions hook runs but delivers no accepted product.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from close_fixture import TASK_FILE, _ids, make_campaign

from flightplan.close.commands import close_campaign, verify_command
from flightplan.publish.manifest import read_manifest, update_manifest
from flightplan.close.verify import verify_results
from flightplan.tasks.reload import NO_RELOAD_HOOK

CONTROL, VARIANT = _ids(task="file")
"""The run ids of the fixture campaign with the file task (its code is in the id)."""
BARE_CONTROL, BARE_VARIANT = _ids(task="file-no-reload")
"""... and with the same file without its reload_predictions hook."""


@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    """The fixture campaign with the file task fake_task.py, closed: (results, outcome)."""
    spec, ledger = make_campaign(tmp_path_factory.mktemp("trust"), task="file")
    outcome = close_campaign(spec, ledger)
    return Path(outcome["results_dir"]), outcome


@pytest.fixture
def copy(closed, tmp_path):
    """A copy of the closed results, as someone else receives it (no campaign around it)."""
    target = tmp_path / "received" / "results"
    shutil.copytree(closed[0], target)
    return target


def _checks(report: dict) -> set[tuple[str, str]]:
    """(check, path) of the findings, but for temp_path and absolute_path (the planted
    marker's path is in the test's temporary folder)."""
    return {(f["check"], f["path"]) for f in report["findings"]
            if f["check"] not in ("temp_path", "absolute_path")}


def _kept_file(results: Path) -> str:
    source = read_manifest(results)["runs"][CONTROL]["task"]["source"]
    return f"{source}/{TASK_FILE}"


def _plant(results: Path, marker: Path) -> str:
    """Replace the kept task by one that writes ``marker`` when imported (and still has
    train and reload_predictions, so a reload would otherwise succeed). Returns its path."""
    rel = _kept_file(results)
    code = (results / rel).read_text()
    (results / rel).write_text(f"open({str(marker)!r}, 'w').close()\n" + code)
    return rel


def test_close_reloads_the_campaign_s_own_file_task(closed):
    results, outcome = closed
    assert outcome["verified"] is True, outcome["findings"]
    assert outcome["accepted"] == [CONTROL, VARIANT]
    assert outcome["reload"] == {CONTROL: "reproduced", VARIANT: "reproduced"}
    task = read_manifest(results)["runs"][VARIANT]["task"]
    assert (task["kind"], task["ref"], task["entry"]) == ("file", TASK_FILE, TASK_FILE)
    kept = results / task["source"] / TASK_FILE
    assert kept.read_bytes() == (results.parent / TASK_FILE).read_bytes()
    params = json.loads((results / "params" / f"{VARIANT}.json").read_text())
    assert params["task_source"]["code_version"] == task["code_version"]
    assert "root" not in params["task_source"]      # no machine path in results
    readme = (results / "README.md").read_text()
    assert (f"python -P -m flightplan.tasks.reload {TASK_FILE} artifacts/{CONTROL} --out "
            f"../reproduced-{CONTROL}.csv --task-root {task['source']}") in readme
    assert "from flightplan" not in readme          # no load_artifact example for a file task


def test_verify_without_trust_checks_the_files_and_runs_nothing(copy):
    assert verify_results(copy) == {"verified": True, "findings": [],
                                    "reload": {CONTROL: "not_run", VARIANT: "not_run"}}


def test_verify_with_trust_reloads_the_untampered_copy(copy, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    for _ in range(2):  # the reload leaves nothing behind (no __pycache__/ in tasks/)
        assert verify_results(copy, trust_code=True) == {
            "verified": True, "findings": [],
            "reload": {CONTROL: "reproduced", VARIANT: "reproduced"}}


def test_a_replaced_task_file_is_found_and_never_run(copy, capsys):
    marker = copy.parent / "code-ran"
    rel = _plant(copy, marker)
    folder = rel.rsplit("/", 1)[0]
    report = verify_results(copy)
    assert _checks(report) == {("checksum", rel), ("task_source", folder)}
    assert report["reload"] == {CONTROL: "not_run", VARIANT: "not_run"}
    assert not marker.exists()
    # trusting the code does not run a copy that fails its hashes
    report = verify_results(copy, trust_code=True)
    assert _checks(report) == {("checksum", rel), ("task_source", folder),
                               ("reload", f"artifacts/{CONTROL}"), ("reload", f"artifacts/{VARIANT}")}
    assert report["reload"] == {CONTROL: "failed", VARIANT: "failed"}
    assert verify_command(copy, as_json=False, trust_code=True) == 1
    assert (f"reload: artifacts/{CONTROL}: not run: task 'fake_task.py': {rel} differs from its "
            f"manifest entry") in capsys.readouterr().out
    assert not marker.exists()
    # the sender rewrote the manifest too: the file no longer hashes to the run's code_version
    update_manifest(copy, written=[rel])
    report = verify_results(copy, trust_code=True)
    assert {f["message"] for f in report["findings"] if f["check"] == "reload"} == {
        f"not run: task 'fake_task.py': the kept source hashes to sha256:"
        f"{hashlib.sha256((copy / rel).read_bytes()).hexdigest()}, not the run's code_version "
        f"{read_manifest(copy)['runs'][CONTROL]['task']['code_version']}: it is not the code the "
        f"runs were made from"}
    assert _checks(report) == {
        ("task_source", folder), ("reload", f"artifacts/{CONTROL}"),
        ("reload", f"artifacts/{VARIANT}")}
    assert not marker.exists()


def test_a_file_planted_beside_the_kept_task_blocks_its_reload(copy):
    marker = copy.parent / "code-ran"
    folder = _kept_file(copy).rsplit("/", 1)[0]
    (copy / folder / "csv.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    report = verify_results(copy, trust_code=True)
    assert _checks(report) == {
        ("unlisted_file", f"{folder}/csv.py"), ("task_source", folder),
        ("reload", f"artifacts/{CONTROL}"),
        ("reload", f"artifacts/{VARIANT}")}
    assert not marker.exists()


def test_a_task_without_reload_hook_is_not_accepted(tmp_path):
    spec, ledger = make_campaign(tmp_path, task="file-no-reload")
    outcome = close_campaign(spec, ledger)
    reason = (f"reload: {NO_RELOAD_HOOK}: task '{TASK_FILE}' does not define "
              f"reload_predictions(artifact_dir, out, *, campaign_dir, limit) -> rows written")
    manifest = read_manifest(Path(outcome["results_dir"]))
    assert outcome["accepted"] == [] and manifest["accepted_run_ids"] == []
    assert manifest["runs"][BARE_CONTROL]["reasons"] == [reason]
    budget = outcome["budget"]
    assert budget["committed_total"] == "47.14" and budget["rental_per_accepted"] is None
    assert f"{BARE_CONTROL}: {reason}" in budget["undefined_reason"]
    (comparison,) = outcome["conclusion"]["comparisons"]
    assert comparison["verdict"] == "not_available"
    assert comparison["reason"] == (f"no usable predictions for variant and control "
                                    f"(variant: {reason}; control: {reason})")
    assert comparison["unusable"] == ["variant", "control"]
    assert outcome["conclusion"]["verdict"].endswith(
        "Not compared: variant against control (no usable predictions for variant and control).")
    # verify says the same: the artifacts cannot be reloaded
    assert outcome["verified"] is False
    assert {(f["check"], f["path"], f["message"]) for f in outcome["findings"]} == {
        ("reload", f"artifacts/{run_id}", reason.removeprefix("reload: "))
        for run_id in (BARE_CONTROL, BARE_VARIANT)}


def test_the_verify_verb_runs_kept_code_only_with_trust_code(copy):
    from typer.testing import CliRunner

    from flightplan.cli import app

    untrusted = CliRunner().invoke(app, ["verify", str(copy), "--json"])
    assert untrusted.exit_code == 0, untrusted.output
    assert json.loads(untrusted.stdout)["reload"] == {CONTROL: "not_run", VARIANT: "not_run"}
    trusted = CliRunner().invoke(app, ["verify", str(copy), "--trust-code", "--json"])
    assert trusted.exit_code == 0, trusted.output
    assert json.loads(trusted.stdout) == {
        "verified": True, "findings": [], "reload": {CONTROL: "reproduced", VARIANT: "reproduced"}}


def test_untrusted_verify_suggests_trust_code_only_where_it_would_reload(copy, capsys):
    assert verify_command(copy, as_json=False) == 0
    out = capsys.readouterr().out
    assert f"reload: not run (untrusted code) for {CONTROL}, {VARIANT}; run flightplan " \
           f"verify {copy} --trust-code to reload" in out
    marker = copy.parent / "code-ran"
    _plant(copy, marker)                                  # the kept task replaced
    assert verify_command(copy, as_json=False) == 1
    out = capsys.readouterr().out
    assert "--trust-code to reload" not in out
    assert out.rstrip().endswith(
        f"reload: not run for {CONTROL}, {VARIANT}: the task source kept for them fails its "
        f"checks (task_source above), so --trust-code would not run it either; only the code "
        f"the runs were made from, every file as the manifest lists it, is run")
    assert verify_command(copy, as_json=False, trust_code=True) == 1   # as said: refused
    assert not marker.exists()


def test_verify_and_close_agree_that_a_task_without_reload_hook_cannot_reload(tmp_path, capsys):
    spec, ledger = make_campaign(tmp_path, task="file-no-reload")
    outcome = close_campaign(spec, ledger)
    copy = tmp_path / "received" / "results"
    shutil.copytree(outcome["results_dir"], copy)
    # without trust the kept file is read, not run: it visibly defines no hook
    report = verify_results(copy)
    assert (report["verified"], report["findings"]) == (False, outcome["findings"])
    assert report["reload"] == {BARE_CONTROL: "failed", BARE_VARIANT: "failed"}
    assert verify_command(copy, as_json=False) == 1
    out = capsys.readouterr().out
    assert out.startswith("NOT verified: 2 finding(s)\n") and "--trust-code" not in out
    assert verify_command(copy, as_json=True, trust_code=True) == 1
    assert json.loads(capsys.readouterr().out)["findings"] == outcome["findings"]


def test_no_trust_code_is_suggested_for_a_directory_whose_files_were_changed(copy, capsys):
    with open(copy / f"measurements/{CONTROL}.jsonl", "a") as handle:
        handle.write('{"step": 9}\n')
    (copy / "notes.txt").write_text("added\n")
    assert verify_command(copy, as_json=False) == 1
    out = capsys.readouterr().out
    assert "--trust-code" not in out
    assert out.splitlines()[-1] == (
        f"reload: not run (untrusted code) for {CONTROL}, {VARIANT}; files of this copy were "
        f"changed after close wrote them (checksum, unlisted_file above), so do not trust its "
        f"code: get the directory again from its sender")
