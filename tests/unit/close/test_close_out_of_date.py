"""Results changed after ``close``, and results whose recorded inputs were rewritten.

1. A run fixed and run again after the close publishes a new run id into results/: the
   close's conclusion no longer covers it, so ``verify`` reports ``incomplete`` (out of
   date) and ``status`` says the results are out of date and to close again.
2. A task file swapped in a results/ copy, with its code hash rewritten in params/,
   MANIFEST.json (task record and file hashes) and calibration.json: the run's config
   hash no longer follows from its recorded inputs, nor its id's suffix: ``config_hash``,
   and ``--trust-code`` runs no code of such a directory.

On the fixture campaign (tests/unit/close/close_fixture.py, ids as the runner makes them).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from close_fixture import TASK_FILE, _write_run, make_campaign

from flightplan.close.commands import close_command, close_campaign, verify_command
from flightplan.close.verify import run_files_digest, verify_results
from flightplan.durable import hash_file
from flightplan.ids import HASH_CHARS, config_hash, corpus_view, run_config
from flightplan.publish.manifest import MANIFEST_NAME
from flightplan.publish.results import publish_run
from flightplan.run.commands import status_command
from flightplan.run.ledger import Ledger


def _rerun_variant(spec) -> str:
    """The variant fixed (shift 2) and run again: its new run folder written and published
    as the runner does; returns the new id."""
    variant = spec.runs[1].model_copy(update={"params": {"shift": 2, "max_length": 64}})
    doc = json.loads((Path(spec.campaign_dir) / "results" / MANIFEST_NAME).read_text())
    code_version = next(iter(doc["runs"].values()))["task"]["code_version"]
    digest = config_hash(run_config(variant.task, variant.params, dict(spec.corpus.sha256),
                                    None, code_version,
                                    corpus_view(spec.corpus.model_dump(mode="json"))))
    run_id = f"variant-{digest[:HASH_CHARS]}"
    _write_run(Path(spec.campaign_dir), spec, variant, run_id, digest, stopped=False)
    publish_run(Path(spec.campaign_dir), run_id)
    return run_id


def test_runs_published_after_close_make_verify_and_status_say_out_of_date(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "500")
    spec, ledger = make_campaign(tmp_path)
    campaign = Path(spec.campaign_dir)
    results = campaign / "results"
    with Ledger.open(campaign) as real:
        real.ensure_campaign(name="fixture", spec_path=str(spec.source), spec_sha256="0" * 64)
    assert close_command(spec.source, as_json=True, open_ledger=lambda _: ledger) == 0
    capsys.readouterr()
    closed_at = json.loads((campaign / ".flightplan" / "closed.json").read_text())["closed_at"]
    status_command(spec.source, as_json=False)
    assert capsys.readouterr().out.splitlines()[1].startswith("closed ")

    new_id = _rerun_variant(spec)
    report = verify_results(results, reload=False)
    assert report["verified"] is False
    assert report["findings"] == [{
        "check": "incomplete", "path": "conclusion.json",
        "message": f"out of date: MANIFEST.json lists runs the last close did not judge "
                   f"(published after it): {new_id}; conclusion.json does not cover them; "
                   f"run `flightplan close CAMPAIGN_FILE` again on its campaign"}]
    assert verify_command(results, as_json=False) == 1
    assert capsys.readouterr().out.startswith("NOT verified: 1 finding(s)\n")

    status_command(spec.source, as_json=False)
    at = time.strftime("%H:%M:%S", time.localtime(closed_at))
    assert capsys.readouterr().out.splitlines()[1] == (
        f"results: out of date in {results}: the runs changed since the close at {at} "
        f"(answer then: no); run `flightplan close {spec.source}` again")

    # closing again (the ledger knows the new run) covers it: verified, status as closed
    ledger.run_rows[1] |= {"run_id": new_id, "config_hash": json.loads(
        (results / "params" / f"{new_id}.json").read_text())["config_hash"]}
    assert close_command(spec.source, as_json=True, open_ledger=lambda _: ledger) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True
    assert verify_results(results, reload=False)["findings"] == []
    status_command(spec.source, as_json=False)
    assert capsys.readouterr().out.splitlines()[1].startswith("closed ")


def test_a_run_published_again_under_its_id_after_close_is_out_of_date(tmp_path):
    spec, ledger = make_campaign(tmp_path)
    outcome = close_campaign(spec, ledger)
    results = Path(outcome["results_dir"])
    control = ledger.run_rows[0]["run_id"]
    # the run made again (--restart): other predictions, published under the same id
    run_dir = Path(spec.campaign_dir) / "runs" / control
    text = (run_dir / "predictions.csv").read_text()
    (run_dir / "predictions.csv").write_text(text.replace("\n", "\n", 1) + "")
    with open(run_dir / "measurements.jsonl", "a") as handle:
        handle.write('{"step": 4, "time": 1700000009.0, "loss": 0.1}\n')
    publish_run(Path(spec.campaign_dir), control)
    found = [(f["check"], f["path"], f["message"])
             for f in verify_results(results, reload=False)["findings"]]
    assert found == [("incomplete", "conclusion.json",
                      f"out of date: the files of {control} changed after the last close "
                      f"judged them (published again); conclusion.json is older than the runs; "
                      f"run `flightplan close CAMPAIGN_FILE` again on its campaign")]


def _swap_task(copy: Path, run_ids: list[str], marker: Path) -> str:
    """The kept task file replaced by code that writes ``marker``, and its code hash
    rewritten everywhere it is recorded (params/, MANIFEST.json's task records and file
    hashes, calibration.json); returns the forged code_version."""
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    record = manifest["runs"][run_ids[0]]["task"]
    kept = copy / record["source"] / TASK_FILE
    # the marker's path comes from the environment (a /tmp path in the file is a finding)
    code = kept.read_text() + "\nimport os\nopen(os.environ['FP_TEST_MARKER'], 'w').write('ran')\n"
    kept.write_text(code)
    forged = "sha256:" + hashlib.sha256(code.encode()).hexdigest()
    old = record["code_version"]
    for rel in [f"params/{r}.json" for r in run_ids] + ["calibration.json"]:
        (copy / rel).write_text((copy / rel).read_text().replace(old, forged))
    for run_id in run_ids:
        manifest["runs"][run_id]["task"]["code_version"] = forged
    for entry in manifest["files"]:
        size, digest = hash_file(copy / entry["path"])
        entry.update(size_bytes=size, sha256=digest)
    for run_id in run_ids:          # and what close recorded of the files it judged
        manifest["runs"][run_id]["judged_sha256"] = run_files_digest(manifest, run_id)
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    return forged


def test_a_swapped_task_with_its_hash_rewritten_is_a_config_hash_finding(tmp_path, capsys,
                                                                         monkeypatch):
    spec, ledger = make_campaign(tmp_path, task="file")
    outcome = close_campaign(spec, ledger)
    assert outcome["verified"] is True
    run_ids = [r["run_id"] for r in ledger.run_rows]
    copy = tmp_path / "received" / "results"
    shutil.copytree(outcome["results_dir"], copy)
    marker = tmp_path / "code-ran"
    monkeypatch.setenv("FP_TEST_MARKER", str(marker))
    _swap_task(copy, run_ids, marker)

    report = verify_results(copy, reload=False)
    assert [(f["check"], f["path"]) for f in report["findings"]] == [
        ("config_hash", f"params/{r}.json") for r in run_ids]
    stated = json.loads((copy / "params" / f"{run_ids[0]}.json").read_text())["config_hash"]
    message = report["findings"][0]["message"]
    assert message.startswith(f"run {run_ids[0]}: its recorded inputs (task, params, corpus, "
                              f"code_version, base revision) hash to ")
    assert message.endswith(f", not to the recorded config_hash {stated[:12]}…; its recorded "
                            f"inputs were changed after it ran, so its files are not the run's")

    # --trust-code runs no code of a directory with findings: the marker is never written
    assert verify_command(copy, as_json=True, trust_code=True) == 1
    trusted = json.loads(capsys.readouterr().out)
    assert trusted["reload"] == {r: "failed" for r in run_ids}
    refused = [f["message"] for f in trusted["findings"] if f["check"] == "reload"]
    assert refused == [f"not run: task '{TASK_FILE}': this results directory has findings "
                       f"(config_hash above), so --trust-code runs none of the code it "
                       f"holds; get the directory again from its sender"] * 2
    assert not marker.exists()
    # untrusted, the line does not suggest --trust-code
    assert verify_command(copy, as_json=False) == 1
    out = capsys.readouterr().out
    assert "--trust-code to reload" not in out
    assert "files of this copy were changed after close wrote them (config_hash above)" in out


def test_a_rewritten_config_hash_must_still_be_the_run_ids_suffix(tmp_path):
    spec, ledger = make_campaign(tmp_path)
    outcome = close_campaign(spec, ledger)
    results = Path(outcome["results_dir"])
    control = ledger.run_rows[0]["run_id"]
    # the params changed and the config hash recomputed to match: the id no longer does
    rel = f"params/{control}.json"
    doc = json.loads((results / rel).read_text())
    doc["params"]["shift"] = 5
    doc["config_hash"] = config_hash(run_config(doc["task"], doc["params"],
                                                doc["corpus"]["sha256"], None,
                                                doc["code_version"], corpus_view(doc["corpus"])))
    (results / rel).write_text(json.dumps(doc))
    manifest = json.loads((results / MANIFEST_NAME).read_text())
    manifest["runs"][control]["config_hash"] = doc["config_hash"]
    for entry in manifest["files"]:
        size, digest = hash_file(results / entry["path"])
        entry.update(size_bytes=size, sha256=digest)
    (results / MANIFEST_NAME).write_text(json.dumps(manifest))
    found = [f for f in verify_results(results, reload=False)["findings"]
             if f["check"] == "config_hash"]
    assert found == [{"check": "config_hash", "path": rel, "message": (
        f"run {control}: the run id's suffix {control.rsplit('-', 1)[1]!r} is not the first "
        f"10 hex of its config_hash ({doc['config_hash'][:10]}); its recorded inputs were "
        f"changed after it ran, so its files are not the run's")}]
