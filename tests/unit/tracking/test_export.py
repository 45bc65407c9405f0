"""`flightplan export mlflow` on the closed fixture campaign, read back from a real MLflow
SQLite store with ``MlflowClient``.

The fixture campaign (tests/unit/close/close_fixture.py) has two runs: ``control``
finished (4 rows ``loss = 1/(s+1)`` at ``time = T0 + s``, macro-F1 1.0 on 20 examples) and
``variant`` stopped by ``non_finite_loss`` at step 3 (stop record time T0 + 40).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from close_fixture import CONTROL, VARIANT, FAKES, T0, make_campaign
from closefake.textclf import REVISION

from flightplan.close.commands import close_campaign
from flightplan.errors import VerificationFailed
from flightplan.tracking.export import export_results

mlflow = pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
from mlflow.tracking import MlflowClient  # noqa: E402

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The fixture campaign closed (variant stopped), exported once: (results, uri, outcome)."""
    root = tmp_path_factory.mktemp("mlflow-export")
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(FAKES) + (os.pathsep + path if path else "")
    try:
        spec, ledger = make_campaign(root, stopped=("variant",))
        closed = close_campaign(spec, ledger)
        assert closed["verified"], closed["findings"]
        results = Path(closed["results_dir"])
        uri = f"sqlite:///{root / 'mlflow.db'}"
        outcome = export_results(results, tracking_uri=uri)
    finally:
        os.environ["PYTHONPATH"] = path
    return results, uri, outcome


def _runs(uri: str) -> dict[str, object]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fixture")
    return {r.data.tags["flightplan.run_id"]: r
            for r in client.search_runs([experiment.experiment_id])}


def _snapshot(uri: str) -> dict[str, object]:
    """Everything a user sees of the experiment, as plain values."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fixture")
    out = {"experiment_tags": experiment.tags, "runs": {}}
    for run_id, run in _runs(uri).items():
        history = {key: sorted((m.step, m.timestamp, repr(m.value))
                               for m in client.get_metric_history(run.info.run_id, key))
                   for key in run.data.metrics}
        artifacts = sorted(_artifact_paths(client, run.info.run_id, None))
        inputs = sorted((d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs)
        out["runs"][run_id] = {"params": run.data.params, "tags": run.data.tags,
                               "status": run.info.status, "start": run.info.start_time,
                               "end": run.info.end_time, "history": history,
                               "artifacts": artifacts, "inputs": inputs}
    return out


def _artifact_paths(client, run_id: str, path: str | None) -> list[str]:
    out = []
    for item in client.list_artifacts(run_id, path):
        out += _artifact_paths(client, run_id, item.path) if item.is_dir else [item.path]
    return out


def test_experiment_holds_the_question_verdict_and_budget(exported):
    results, uri, outcome = exported
    manifest = json.loads((results / "MANIFEST.json").read_text())
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name("fixture")
    tags = experiment.tags
    assert tags["flightplan.question"] == ("Does shifting predictions beat the control by "
                                           "0.05 macro-F1?")
    assert tags["flightplan.metric"] == "macro_f1"
    assert tags["flightplan.threshold"] == "max gain >= 0.05"
    # one 3-day RTX 4090 flight, one accepted product (the variant stopped): 47.14 / 1
    assert tags["flightplan.committed_budget"] == "47.14 USD"
    assert tags["flightplan.rental_per_accepted"] == "47.14 USD"
    assert tags["flightplan.accepted_products"] == "1"
    assert tags["flightplan.order_number"] == "ITG-0042"
    assert tags["flightplan.plan_sha256"] == manifest["plan_sha256"]
    # the variant stopped: it could not be compared, so the answer is not "no"
    assert tags["flightplan.verdict"].startswith("Inconclusive: no variant could be compared, "
                                                 "so none meets the threshold of +0.05")
    # the experiment's artifacts live beside the SQLite file, not in ./mlruns
    assert experiment.artifact_location == (Path(uri[len("sqlite:///"):]).parent
                                            / "mlartifacts").as_uri()
    assert outcome["experiment"] == "fixture"


def test_one_run_per_flightplan_run_with_exact_params_points_and_times(exported):
    _, uri, _ = exported
    runs = _runs(uri)
    assert sorted(runs) == sorted([CONTROL, VARIANT, "pilot", "summary"])
    client = MlflowClient(tracking_uri=uri)
    control = runs[CONTROL]
    control_hash = json.loads((exported[0] / "params" / f"{CONTROL}.json").read_text())[
        "config_hash"]
    assert control.info.run_name == "control"
    assert control.data.params == {"shift": "0", "max_length": "64"}
    loss = client.get_metric_history(control.info.run_id, "loss")
    assert [(m.step, m.value, m.timestamp) for m in sorted(loss, key=lambda m: m.step)] == [
        (0, 1.0, T0 * 1000), (1, 0.5, (T0 + 1) * 1000), (2, 1 / 3, (T0 + 2) * 1000),
        (3, 0.25, (T0 + 3) * 1000)]
    # shift 0 predicts every gold label: macro-F1 1.0 on the 20 test examples, at the last step
    final = client.get_metric_history(control.info.run_id, "final/macro_f1")
    assert [(m.step, m.value) for m in final] == [(3, 1.0)]
    assert control.data.metrics["final/n_test"] == 20.0
    assert set(control.data.metrics) == {"loss", "final/macro_f1", "final/n_test"}
    assert (control.info.status, control.info.start_time, control.info.end_time) == (
        "FINISHED", T0 * 1000, (T0 + 3) * 1000)
    tags = control.data.tags
    assert (tags["flightplan.tier"], tags["flightplan.config_hash"], tags["flightplan.accepted"],
            tags["flightplan.task"]) == ("essential", control_hash, "true", "closefake.textclf")
    assert tags["flightplan.base_model.weights_sha256"] == REVISION["weights_sha256"]
    assert tags["flightplan.base_model.version"] == "0.1.0"
    assert "flightplan.reference" not in tags


def test_a_stopped_run_is_failed_with_its_rule_and_reason(exported):
    _, uri, _ = exported
    variant = _runs(uri)[VARIANT]
    assert variant.info.status == "FAILED"
    assert (variant.info.start_time, variant.info.end_time) == (T0 * 1000, (T0 + 40) * 1000)
    tags = variant.data.tags
    assert tags["flightplan.stop_rule"] == "non_finite_loss"
    assert tags["flightplan.stop_reason"] == "loss is nan at step 3"
    assert tags["flightplan.status_reason"] == ("stopped by rule non_finite_loss at step 3: "
                                                "loss is nan at step 3")
    assert tags["flightplan.accepted"] == "false"
    assert tags["flightplan.reasons"] == "stopped by rule non_finite_loss"
    assert tags["flightplan.reference"] == "control"
    assert set(variant.data.metrics) == {"loss"}


def test_corpus_is_a_dataset_input_with_its_sha256(exported):
    results, uri, _ = exported
    hashes = json.loads((results / "MANIFEST.json").read_text())["corpus_sha256"]
    control = _runs(uri)[CONTROL]
    inputs = {d.dataset.name: d for d in control.inputs.dataset_inputs}
    assert sorted(inputs) == ["corpus/test.tsv", "corpus/train.tsv"]
    for name, sha in hashes.items():
        dataset = inputs[f"corpus/{name}"]
        assert dataset.dataset.digest == sha[:36]          # MLflow keeps 36 characters
        assert json.loads(dataset.dataset.profile)["sha256"] == sha
        assert {t.key: t.value for t in dataset.tags}["flightplan.sha256"] == sha


def test_artifacts_of_each_run_and_of_the_summary(exported):
    _, uri, _ = exported
    client = MlflowClient(tracking_uri=uri)
    runs = _runs(uri)
    assert sorted(_artifact_paths(client, runs[CONTROL].info.run_id, None)) == [
        "artifact/artifact.json", "artifact/model.json", f"errors/{CONTROL}.json",
        f"errors/{CONTROL}.md", f"measurements/{CONTROL}.jsonl", f"metrics/{CONTROL}.json",
        f"params/{CONTROL}.json", f"predictions/{CONTROL}.csv"]
    assert sorted(_artifact_paths(client, runs[VARIANT].info.run_id, None)) == [
        f"measurements/{VARIANT}.jsonl", f"params/{VARIANT}.json"]
    summary = runs["summary"]
    assert summary.data.tags["flightplan.summary"] == "true"
    assert {"README.md", "report.html", "conclusion.json", "budget.json", "MANIFEST.json"} <= \
        set(_artifact_paths(client, summary.info.run_id, None))
    local = Path(client.download_artifacts(runs[CONTROL].info.run_id,
                                           f"predictions/{CONTROL}.csv"))
    assert local.read_text().splitlines()[0].startswith("example_id,gold,predicted")


def test_the_pilot_is_a_run_marked_as_such(exported):
    _, uri, _ = exported
    pilot = _runs(uri)["pilot"]
    assert pilot.data.tags["flightplan.pilot"] == "true"
    assert pilot.info.status == "FINISHED"
    # the fixture's pilot check: ok, at T0 + 11
    assert pilot.info.end_time == (T0 + 11) * 1000


def test_exporting_again_changes_nothing(exported):
    results, uri, _ = exported
    before = _snapshot(uri)
    again = export_results(results, tracking_uri=uri)
    assert [r["sent"] for r in again["runs"]] == [0, 0, 0]
    assert _snapshot(uri) == before


def test_a_directory_that_does_not_verify_is_refused(exported, tmp_path):
    results, uri, _ = exported
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    (copy / f"predictions/{CONTROL}.csv").write_text("example_id,gold,predicted\n")
    with pytest.raises(VerificationFailed, match=rf"checksum: predictions/{CONTROL}.csv"):
        export_results(copy, tracking_uri=f"sqlite:///{tmp_path / 'other.db'}")
    assert not (tmp_path / "other.db").exists()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([str(FLIGHTPLAN), "export", "mlflow", str(copy), "--tracking-uri",
                           f"sqlite:///{tmp_path / 'other.db'}"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and "does not verify" in done.stderr
    assert f"checksum: predictions/{CONTROL}.csv" in done.stderr


def _export_cli(results: Path, uri: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # MLflow's own HTTP retries used to hold an export to a down server for minutes
    return subprocess.run([str(FLIGHTPLAN), "export", "mlflow", str(results), "--tracking-uri",
                           uri], capture_output=True, text=True, env=env, timeout=300)


def test_an_export_to_a_down_server_fails_at_once_naming_it(exported):
    results, _, _ = exported
    with socket.socket() as probe:                 # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{probe.getsockname()[1]}"
    done = _export_cli(results, uri)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"error: MLflow at {uri}: opening experiment 'fixture' failed "
                           f"(unreachable: [Errno 111] Connection refused); check that the "
                           f"tracking store is reachable and writable\n")


def test_an_export_prints_no_mlflow_log_lines_and_names_a_blocked_path(exported, tmp_path):
    results, _, _ = exported
    done = _export_cli(results, f"sqlite:///{tmp_path / 'new.db'}")   # tables created here
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"exported to sqlite:///{tmp_path / 'new.db'}")
    (tmp_path / "blocked").write_text("")
    uri = f"sqlite:///{tmp_path}/blocked/mlflow.db"
    done = _export_cli(results, uri)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"error: MLflow at {uri}: opening the store failed ([Errno 17] File "
                           f"exists: '{tmp_path}/blocked'); check that the tracking store is "
                           f"reachable and writable\n")


def test_the_pilots_rows_are_published_by_close_and_exported(tmp_path, monkeypatch):
    """The pilot's rows (3 of its first process, 2 of the process resumed at step 1) are in
    results/pilot/ as logged, and the export sends the first process's loss history."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), *sys.path]))
    spec, ledger = make_campaign(tmp_path)
    pilot_id = f"pilot-{CONTROL}"
    pilot = tmp_path / "camp" / "runs" / pilot_id
    (pilot / "resume").mkdir(parents=True)
    first = [{"step": s, "time": T0 + 5 + s, "loss": 2.0 / (s + 1)} for s in range(3)]
    resumed = [{"step": s, "time": T0 + 9 + s, "loss": 2.0 / (s + 1)} for s in (1, 2)]
    (pilot / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    (pilot / "resume" / "measurements.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in resumed))
    ledger.event_rows[0]["data"]["control_id"] = CONTROL       # the runner's pilot event
    closed = close_campaign(spec, ledger)
    assert closed["verified"], closed["findings"]
    results = Path(closed["results_dir"])
    assert (results / "pilot" / f"{pilot_id}.jsonl").read_bytes() == \
        (pilot / "measurements.jsonl").read_bytes()
    assert (results / "pilot" / f"{pilot_id}.resume.jsonl").read_bytes() == \
        (pilot / "resume" / "measurements.jsonl").read_bytes()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = export_results(results, tracking_uri=uri)
    exported = next(r for r in outcome["runs"] if r["run_id"] == pilot_id)
    assert (exported["points"], exported["sent"]) == (3, 3)     # the fixture's pilot: no figures
    client = MlflowClient(tracking_uri=uri)
    run = _runs(uri)[pilot_id]
    assert run.data.tags["flightplan.pilot"] == "true"
    assert sorted((m.step, m.value, m.timestamp)
                  for m in client.get_metric_history(run.info.run_id, "loss")) == [
        (0, 2.0, (T0 + 5) * 1000), (1, 1.0, (T0 + 6) * 1000), (2, 2 / 3, (T0 + 7) * 1000)]
