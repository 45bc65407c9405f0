"""verify: every check fires on a tampered copy of a good results directory."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from close_fixture import CONTROL, VARIANT, make_campaign

from flightplan.close import commands
from flightplan.close.commands import close_campaign
from flightplan.publish.manifest import read_manifest, update_manifest
from flightplan.publish.results import publish_plan
from flightplan.durable import write_json_atomic
from flightplan.close.verify import (reload_processes, reproduce_run, reproduce_runs, run_files_digest,
                                    verify_results)



@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A closed campaign whose results verify cleanly (both runs finished)."""
    root = tmp_path_factory.mktemp("good")
    spec, ledger = make_campaign(root)
    assert close_campaign(spec, ledger)["verified"] is True
    return spec.campaign_dir


@pytest.fixture
def copy(good, tmp_path):
    target = tmp_path / "copy" / "results"
    shutil.copytree(good / "results", target, symlinks=True)
    return target


def checks(results, **kwargs):
    report = verify_results(results, **kwargs)
    assert report["verified"] is (not report["findings"])
    return sorted((f["check"], f["path"]) for f in report["findings"])


def relist(results, written):
    """List ``written`` in the manifest as a writer would, and record each run's files as
    judged (``judged_sha256``), as a close would: only the check under test then fires,
    not ``incomplete`` for runs changed since the close."""
    update_manifest(results, written=written)
    manifest = read_manifest(results)
    update_manifest(results, runs={run_id: {"judged_sha256": run_files_digest(manifest, run_id)}
                                   for run_id in manifest["runs"]})


def edit_json(results, rel, change):
    value = json.loads((results / rel).read_text())
    change(value)
    write_json_atomic(results / rel, value)
    relist(results, [rel])


def test_good_copy_verifies(copy):
    assert checks(copy) == []


def test_checksum(copy):
    with open(copy / f"measurements/{CONTROL}.jsonl", "a") as handle:
        handle.write('{"step": 9}\n')
    assert checks(copy, reload=False) == [("checksum", f"measurements/{CONTROL}.jsonl")]


def test_missing_file_and_missing_run(copy):
    (copy / "data_check.json").unlink()
    (copy / f"measurements/{VARIANT}.jsonl").unlink()
    assert checks(copy, reload=False) == [
        ("missing_file", "data_check.json"), ("missing_file", f"measurements/{VARIANT}.jsonl"),
        ("missing_run", f"measurements/{VARIANT}.jsonl")]


def test_a_run_that_never_finished_is_not_missing_its_product(copy):
    """A failed run (published ``incomplete``: no done.json, no stop.json) has no
    predictions or artifact to check; once it says ``finished`` they are missing."""
    shutil.rmtree(copy / "artifacts" / VARIANT)
    (copy / f"predictions/{VARIANT}.csv").unlink()
    gone = [f"artifacts/{VARIANT}/", f"predictions/{VARIANT}.csv"]
    update_manifest(copy, removed_prefixes=gone, runs={VARIANT: {"status": "incomplete"}})
    assert ("missing_run", f"predictions/{VARIANT}.csv") not in checks(copy, reload=False)
    update_manifest(copy, runs={VARIANT: {"status": "finished"}})
    assert ("missing_run", f"predictions/{VARIANT}.csv") in checks(copy, reload=False)


def test_missing_run_for_an_expected_id_without_files(copy):
    manifest = read_manifest(copy)
    update_manifest(copy, meta={"expected_run_ids": manifest["expected_run_ids"] + ["ghost-1"]})
    assert checks(copy, reload=False) == [("missing_run", "params/ghost-1.json")]


def test_unlisted_and_empty_file(copy):
    (copy / "notes.txt").write_text("hello\n")
    (copy / "empty.txt").write_text("")
    assert checks(copy, reload=False) == [("empty_file", "empty.txt"), ("unlisted_file", "empty.txt"),
                                          ("unlisted_file", "notes.txt")]


def test_empty_listed_file(copy):
    (copy / "data_check.json").write_text("")
    update_manifest(copy, written=["data_check.json"])
    assert checks(copy, reload=False) == [("empty_file", "data_check.json")]


def test_temp_path(copy):
    edit_json(copy, "data_check.json", lambda v: v.update(scratch="/var/tmp/fp-1234/x.csv"))
    assert checks(copy, reload=False) == [("temp_path", "data_check.json")]


def test_temp_path_in_a_file_url(copy):
    edit_json(copy, "data_check.json", lambda v: v.update(url="file:///tmp/report.html"))
    assert checks(copy, reload=False) == [("temp_path", "data_check.json")]


def test_temp_path_of_the_writers_tmpdir(copy):
    update_manifest(copy, meta={"writer": {"tmpdirs": ["/scratch/alice/tmp"],
                                           "absolute_roots": []}})
    edit_json(copy, "data_check.json", lambda v: v.update(scratch="/scratch/alice/tmp/x"))
    found = checks(copy, reload=False)
    assert found == [("temp_path", "data_check.json")]


def test_absolute_path(copy, good):
    edit_json(copy, f"params/{CONTROL}.json",
              lambda v: v.update(log=str(Path.home() / ".cache" / "log.txt")))
    assert checks(copy, reload=False) == [("absolute_path", f"params/{CONTROL}.json")]
    # the writer's campaign directory (here under /tmp, so it is a temp path as well)
    edit_json(copy, "data_check.json", lambda v: v.update(log=str(good / "runs" / "log.txt")))
    assert checks(copy, reload=False) == [("absolute_path", "data_check.json"),
                                          ("absolute_path", f"params/{CONTROL}.json"),
                                          ("temp_path", "data_check.json")]


def test_absolute_path_of_any_user_home(copy):
    edit_json(copy, "data_check.json", lambda v: v.update(a="/home/alice/camp/runs/x"))
    edit_json(copy, f"params/{CONTROL}.json", lambda v: v.update(a="C:\\Users\\bob\\x"))
    assert checks(copy, reload=False) == [("absolute_path", "data_check.json"),
                                          ("absolute_path", f"params/{CONTROL}.json")]


def test_relative_paths_that_mention_tmp_are_not_findings(copy):
    edit_json(copy, "data_check.json", lambda v: v.update(a="runs/tmp/x", b="my/var/tmp",
                                                          c="the/home/alice/x", d="/homework"))
    assert checks(copy, reload=False) == []


def test_base_revision(copy):
    rel = f"artifacts/{VARIANT}/artifact.json"
    edit_json(copy, rel, lambda v: v["base_revision"].pop("weights_sha256"))
    assert checks(copy, reload=False) == [("base_revision", rel)]


def test_base_revision_absent_for_a_run_whose_campaign_names_a_base_model(copy):
    rel = f"artifacts/{VARIANT}/artifact.json"
    edit_json(copy, rel, lambda v: v.pop("base_revision"))
    assert checks(copy, reload=False) == [("base_revision", rel)]
    [found] = verify_results(copy, reload=False)["findings"]
    assert found["message"].startswith("the run's campaign names a base model ([base_model]), "
                                       "but artifact.json records no base_revision")


def test_base_revision_absent_from_an_unreadable_artifact_json(copy):
    rel = f"artifacts/{VARIANT}/artifact.json"
    (copy / rel).write_text("{not json", encoding="utf-8")
    relist(copy, [rel])
    assert checks(copy, reload=False) == [("base_revision", rel)]


def test_base_revision_absent_from_an_adapter(copy):
    rel = f"artifacts/{VARIANT}/artifact.json"
    edit_json(copy, f"params/{VARIANT}.json", lambda v: v.update(base_model=None))
    edit_json(copy, rel, lambda v: v.pop("base_revision"))
    assert checks(copy, reload=False) == []              # no base model, no adapter: none owed
    (copy / f"artifacts/{VARIANT}/adapter_config.json").write_text('{"r": 4}\n')
    relist(copy, [f"artifacts/{VARIANT}/adapter_config.json"])
    assert checks(copy, reload=False) == [("base_revision", rel)]
    [found] = verify_results(copy, reload=False)["findings"]
    assert found["message"].startswith("the artifact holds an adapter")


def test_path_traversal_in_manifest(copy):
    (copy.parent / "outside.txt").write_text("secret\n")
    manifest = read_manifest(copy)
    manifest["files"].append({"path": "../outside.txt", "size_bytes": 7, "sha256": "0" * 64})
    manifest["files"].append({"path": "/etc/hostname", "size_bytes": 7, "sha256": "0" * 64})
    write_json_atomic(copy / "MANIFEST.json", manifest)
    assert checks(copy, reload=False) == [("path_traversal", "../outside.txt"),
                                          ("path_traversal", "/etc/hostname")]


def test_path_traversal_by_symlink(copy):
    (copy.parent / "outside.txt").write_text("secret\n")
    (copy / "link.txt").symlink_to(copy.parent / "outside.txt")
    update_manifest(copy, written=["link.txt"])
    assert checks(copy, reload=False) == [("path_traversal", "link.txt"),
                                          ("path_traversal", "link.txt")]


def test_reload(copy):
    (copy / f"artifacts/{CONTROL}/model.json").write_text("{not json")
    relist(copy, [f"artifacts/{CONTROL}/model.json"])
    assert checks(copy, trust_code=True) == [("reload", f"artifacts/{CONTROL}")]


def test_prediction_mismatch(copy):
    rel = f"predictions/{VARIANT}.csv"
    text = (copy / rel).read_text()
    # t1 is predicted "neu" (correct); store "pos" instead
    lines = text.splitlines(keepends=True)
    assert lines[2].startswith("t1,neu,neu,")
    lines[2] = lines[2].replace("t1,neu,neu,", "t1,neu,pos,", 1)
    (copy / rel).write_text("".join(lines))
    relist(copy, [rel])
    # the figures no longer follow from the file (the comparison's, and the verdict's seed
    # notice, which states its interval); a directory with findings runs none of its code,
    # trusted or not
    inconsistent = [("inconsistent", "MANIFEST.json"), ("inconsistent", "conclusion.json"),
                    ("inconsistent", "conclusion.json")]
    assert checks(copy, sample=5, trust_code=True) == sorted(
        inconsistent + [("reload", f"artifacts/{CONTROL}"), ("reload", f"artifacts/{VARIANT}")])
    # reloaded from a sound directory (the predictions of the run given as they were),
    # the stored prediction differs from the re-created one
    found = reproduce_runs(copy, [VARIANT], limit=5, trust_code=True)
    assert [(f.check, f.path) for f in found[VARIANT][1]] == [("prediction_mismatch", rel)]


NOT_CLOSED = ("not closed: MANIFEST.json lists no conclusion.json, budget.json, "
              "plan_vs_execution.json, plan_vs_execution.md, README.md, report.html (close "
              "lists them last); run `flightplan close CAMPAIGN_FILE` on its campaign")


def test_results_of_a_campaign_that_only_ran_are_not_closed(tmp_path):
    spec, ledger = make_campaign(tmp_path, publish=False)
    publish_plan(spec.campaign_dir, ledger.plan)     # what `flightplan run` writes first
    results = spec.campaign_dir / "results"
    assert sorted(p.name for p in results.iterdir()) == ["MANIFEST.json", "plan.json"]
    assert verify_results(results) == {"verified": False, "reload": {}, "findings": [
        {"check": "incomplete", "path": "conclusion.json", "message": NOT_CLOSED}]}


def test_a_close_stopped_part_way_is_not_closed(tmp_path, monkeypatch):
    spec, ledger = make_campaign(tmp_path)

    def ctrl_c(**_):
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "conclude", ctrl_c)    # stopped after the error analyses
    with pytest.raises(KeyboardInterrupt):
        close_campaign(spec, ledger)
    results = spec.campaign_dir / "results"
    assert not (results / "conclusion.json").exists()
    written = sorted(p.relative_to(results).as_posix() for p in (results / "errors").iterdir())
    assert checks(results, reload=False) == [("incomplete", "conclusion.json")] + [
        ("unlisted_file", rel) for rel in written]
    monkeypatch.undo()                                    # closed again: complete
    assert close_campaign(spec, ledger)["verified"] is True
    assert checks(results, reload=False) == []


def test_a_campaign_whose_runs_were_all_cut_verifies_once_closed(tmp_path):
    spec, ledger = make_campaign(tmp_path, publish=False)
    for row in ledger.run_rows:
        row["status"] = "cut"
    outcome = close_campaign(spec, ledger)
    assert (outcome["verified"], outcome["findings"], outcome["accepted"]) == (True, [], [])
    results = Path(outcome["results_dir"])
    assert read_manifest(results)["expected_run_ids"] == []
    assert verify_results(results) == {"verified": True, "findings": [], "reload": {}}


def test_no_manifest(copy):
    (copy / "MANIFEST.json").unlink()
    assert checks(copy) == [("missing_file", "MANIFEST.json")]


def test_reloads_take_one_process_per_core_or_gpu_and_share_the_cores_out():
    assert reload_processes(3, cores=2) == (2, 1)          # the main job: 3 reloads, 2 cores
    assert reload_processes(1, cores=2) == (1, 2)          # one process has both cores
    assert reload_processes(2, cores=16) == (2, 8)         # never more than there are
    assert reload_processes(40, cores=16) == (16, 1)
    assert reload_processes(3, gpus=1, cores=16) == (1, 16)   # one per GPU: cores / GPUs
    assert reload_processes(9, gpus=4, cores=16) == (4, 4)
    assert reload_processes(2, gpus=4, cores=2) == (2, 1)     # one thread at least
    assert reload_processes(0, cores=2) == (1, 2)


def _given(log: Path) -> dict[str, dict]:
    """Run id → what the fake task's reload of its artifact was given (fake's docstring)."""
    return {p.stem: json.loads(p.read_text()) for p in log.glob("*.json")}


def test_the_artifacts_of_a_task_share_a_process_one_per_core(copy, tmp_path, monkeypatch):
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setenv("CLOSEFAKE_RELOAD_LOG", str(log))
    for name in ("FLIGHTPLAN_TORCH_THREADS", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    finished: list[int] = []
    found = reproduce_runs(copy, [CONTROL, VARIANT], limit=5, trust_code=True, gpus=[],
                           cores=1, on_done=finished.append)
    assert found == {CONTROL: ("reproduced", []), VARIANT: ("reproduced", [])}
    assert finished == [1, 2]
    given = _given(log)
    assert given[CONTROL]["pid"] == given[VARIANT]["pid"]     # one process on one core
    assert given[CONTROL] | {"pid": 0} == {"pid": 0, "CUDA_VISIBLE_DEVICES": None,
                                           "FLIGHTPLAN_TORCH_THREADS": "1",
                                           "OMP_NUM_THREADS": "1", "CUBLAS_WORKSPACE_CONFIG": None}
    for path in log.iterdir():
        path.unlink()
    assert reproduce_runs(copy, [CONTROL, VARIANT], limit=5, trust_code=True, gpus=[],
                          cores=4) == found
    given = _given(log)                                       # two processes, 2 threads each
    assert given[CONTROL]["pid"] != given[VARIANT]["pid"]
    assert {r["FLIGHTPLAN_TORCH_THREADS"] for r in given.values()} == {"2"}


def test_with_gpus_each_process_is_given_one_of_them(copy, tmp_path, monkeypatch):
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setenv("CLOSEFAKE_RELOAD_LOG", str(log))
    for name in ("FLIGHTPLAN_TORCH_THREADS", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    found = reproduce_runs(copy, [CONTROL, VARIANT], limit=5, trust_code=True,
                           gpus=["3", "GPU-5"], cores=16)
    assert found == {CONTROL: ("reproduced", []), VARIANT: ("reproduced", [])}
    given = _given(log)
    assert given[CONTROL]["pid"] != given[VARIANT]["pid"]
    assert sorted(r["CUDA_VISIBLE_DEVICES"] for r in given.values()) == ["3", "GPU-5"]
    assert {(r["FLIGHTPLAN_TORCH_THREADS"], r["CUBLAS_WORKSPACE_CONFIG"])
            for r in given.values()} == {("8", ":4096:8")}           # 16 cores / 2 GPUs
    for path in log.iterdir():
        path.unlink()
    reproduce_runs(copy, [CONTROL, VARIANT], limit=5, trust_code=True, gpus=["1"], cores=16)
    given = _given(log)                                       # one GPU: one process on it
    assert given[CONTROL]["pid"] == given[VARIANT]["pid"]
    assert given[CONTROL]["CUDA_VISIBLE_DEVICES"] == "1"
    assert given[CONTROL]["FLIGHTPLAN_TORCH_THREADS"] == "16"


def test_reloads_side_by_side_report_each_run_as_one_at_a_time(copy):
    (copy / f"artifacts/{CONTROL}/model.json").write_text("{not json")
    rel = f"predictions/{VARIANT}.csv"
    lines = (copy / rel).read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace("t1,neu,neu,", "t1,neu,pos,", 1)
    (copy / rel).write_text("".join(lines))
    update_manifest(copy, written=[f"artifacts/{CONTROL}/model.json", rel])
    finished: list[int] = []
    both = reproduce_runs(copy, [VARIANT, CONTROL], limit=5, trust_code=True,
                          on_done=finished.append)
    assert list(both) == [VARIANT, CONTROL] and finished == [1, 2]
    one_at_a_time = {run_id: reproduce_run(copy, run_id, limit=5, trust_code=True)
                     for run_id in (VARIANT, CONTROL)}
    assert both == one_at_a_time
    # both in one process: the artifact refused stops nothing of the other's
    assert reproduce_runs(copy, [VARIANT, CONTROL], limit=5, trust_code=True, gpus=[],
                          cores=1) == both
    assert [(status, [f.check for f in found]) for status, found in both.values()] == [
        ("failed", ["prediction_mismatch"]), ("failed", ["reload"])]
    assert both[CONTROL][1][0].message.startswith(
        "failed to load in a fresh process (exit 1): the task's reload_predictions failed: "
        "JSONDecodeError: ")


def test_an_interrupted_caller_leaves_no_reload_running(copy, tmp_path, monkeypatch):
    import signal
    import threading
    import time

    wait = tmp_path / "reloads"
    wait.mkdir()
    monkeypatch.setenv("CLOSEFAKE_RELOAD_WAIT", str(wait))   # each reload sleeps 20 s

    def interrupt_once_started() -> None:
        for _ in range(600):
            if list(wait.glob("*.started")):
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)    # a Ctrl-C: KeyboardInterrupt in the main thread
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        reproduce_runs(copy, [CONTROL, VARIANT], limit=5, trust_code=True)
    started = list(wait.glob("*.started"))
    assert started and not list(wait.glob("*.ended"))      # killed, not waited for
    for marker in started:                 # and reaped: no such process any more
        with pytest.raises(ProcessLookupError):
            os.kill(int(marker.stem), 0)
