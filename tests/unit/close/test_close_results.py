"""Publishing into results/ during the campaign (flightplan.publish.results)."""

from __future__ import annotations

import hashlib
import json

from close_fixture import CONTROL, FAKES, VARIANT, make_campaign

from flightplan.publish.manifest import read_manifest
from flightplan.publish.results import publish_plan, publish_run


def test_publish_writes_every_run_file_with_a_matching_manifest(tmp_path):
    spec, ledger = make_campaign(tmp_path, stopped=("variant",))
    results = spec.campaign_dir / "results"
    manifest = read_manifest(results)
    paths = [e["path"] for e in manifest["files"]]
    # the module task closefake.textclf (a package) kept with its parent package's __init__
    version = json.loads((spec.campaign_dir / f"runs/{CONTROL}/trial.json").read_text())[
        "code_version"]
    kept = "tasks/" + hashlib.sha256(version.encode()).hexdigest()[:12]
    assert paths == sorted([
        f"artifacts/{CONTROL}/artifact.json", f"artifacts/{CONTROL}/model.json",
        "data_check.json", f"measurements/{CONTROL}.jsonl",
        f"measurements/{VARIANT}.jsonl", f"metrics/{CONTROL}.json",
        f"params/{CONTROL}.json", f"params/{VARIANT}.json", "plan.json",
        f"predictions/{CONTROL}.csv", "stops.json", f"{kept}/closefake/__init__.py",
        f"{kept}/closefake/textclf/__init__.py"])
    assert manifest["runs"][f"{VARIANT}"]["task"] == {
        "kind": "module", "ref": "closefake.textclf", "entry": "closefake.textclf",
        "code_version": version, "source": kept,
        "files": [f"{kept}/closefake/__init__.py", f"{kept}/closefake/textclf/__init__.py"],
        "code_root": "closefake/textclf", "code_files": ["__init__.py"], "package": True}
    assert (results / kept / "closefake/textclf/__init__.py").read_bytes() == \
        (FAKES / "closefake/textclf/__init__.py").read_bytes()
    for entry in manifest["files"]:
        data = (results / entry["path"]).read_bytes()
        assert entry["size_bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    # raw measurements, byte for byte
    run_dir = spec.campaign_dir / "runs" / f"{CONTROL}"
    assert (results / f"measurements/{CONTROL}.jsonl").read_bytes() == \
        (run_dir / "measurements.jsonl").read_bytes()
    # params carry no machine path
    params = json.loads((results / f"params/{CONTROL}.json").read_text())
    assert "campaign_dir" not in params and "root" not in params["corpus"]
    assert params["params"] == {"shift": 0, "max_length": 64}
    assert json.loads((results / "data_check.json").read_text()) == \
        {"ok": True, "corpus_root": "../corpus"}
    stops = json.loads((results / "stops.json").read_text())
    assert [(s["run_id"], s["rule"]) for s in stops] == [(f"{VARIANT}", "non_finite_loss")]
    assert manifest["expected_run_ids"] == [f"{CONTROL}", f"{VARIANT}"]
    assert manifest["runs"][f"{VARIANT}"]["status"] == "stopped"
    assert manifest["runs"][f"{CONTROL}"]["status"] == "finished"
    assert manifest["plan_sha256"] == ledger.original_plan().plan_sha256
    assert manifest["base_model_revision"]["weights_sha256"] == "ab" * 32


def test_original_plan_is_never_rewritten(tmp_path):
    spec, ledger = make_campaign(tmp_path)
    results = spec.campaign_dir / "results"
    before = (results / "plan.json").read_bytes()
    publish_plan(spec.campaign_dir, {"campaign": "changed", "reserved_hours": 99.0})
    assert (results / "plan.json").read_bytes() == before


def test_republishing_a_run_replaces_its_artifact_files(tmp_path):
    spec, _ = make_campaign(tmp_path)
    run_dir = spec.campaign_dir / "runs" / f"{CONTROL}"
    (run_dir / "artifact" / "model.json").rename(run_dir / "artifact" / "weights.json")
    publish_run(spec.campaign_dir, f"{CONTROL}")
    results = spec.campaign_dir / "results"
    paths = [e["path"] for e in read_manifest(results)["files"]]
    assert f"artifacts/{CONTROL}/model.json" not in paths
    assert f"artifacts/{CONTROL}/weights.json" in paths
    assert not (results / f"artifacts/{CONTROL}/model.json").exists()


def test_portable_turns_campaign_paths_relative(tmp_path):
    from flightplan.publish.results import portable
    camp = (tmp_path / "camp").resolve()
    value = {"campaign_dir": str(camp), "corpus": {"root": "/x", "path": "corpus"},
             "message": f"see {camp}/runs/a/log.txt; dir {camp}, other {camp}2/x",
             "list": [str(camp)]}
    assert portable(value, camp) == {"corpus": {"path": "corpus"},
                                     "message": f"see ../runs/a/log.txt; dir .., other {camp}2/x",
                                     "list": [".."]}


def test_copied_files_name_no_path_of_the_machine(tmp_path):
    """A stop's message with the run's absolute checkpoints path, logged into the rows: the
    copy in results/ says it relative to results/, and verify finds nothing but that
    close has not completed the directory yet; a file
    without such a path (the predictions) is copied byte for byte."""
    from flightplan.close.verify import verify_results

    spec, _ = make_campaign(tmp_path, stopped=("variant",), publish=False)
    camp = spec.campaign_dir.resolve()
    run_dir = camp / "runs" / f"{VARIANT}"
    message = f"no usable checkpoint to resume from ({run_dir}/checkpoints holds none)"
    with open(run_dir / "measurements.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps({"step": 0, "event": "stop", "rule": "no_usable_resume",
                              "message": message}) + "\n")
    publish_plan(spec.campaign_dir, {"campaign": "fixture"})
    for run_id in (f"{CONTROL}", f"{VARIANT}"):
        publish_run(spec.campaign_dir, run_id)
    results = spec.campaign_dir / "results"
    rows = (results / f"measurements/{VARIANT}.jsonl").read_text().splitlines()
    assert json.loads(rows[-1])["message"] == (
        f"no usable checkpoint to resume from (../runs/{VARIANT}/checkpoints holds none)")
    assert rows[:-1] == (run_dir / "measurements.jsonl").read_text().splitlines()[:-1]
    assert (results / f"predictions/{CONTROL}.csv").read_bytes() == \
        (camp / f"runs/{CONTROL}/predictions.csv").read_bytes()
    report = verify_results(results, reload=False)   # published by the runner, not closed:
    assert [f["check"] for f in report["findings"]] == ["incomplete"]   # no other finding
