"""Live MLflow tracking of the tiny campaign, its store made unwritable mid-run, then
`flightplan close` and `flightplan export mlflow` completing the record.

The tiny campaign (control and lora-r4; the useful 128-token run is left out to save a
minute) runs with ``[tracking] mlflow = "sqlite:///mlflow.db"``. Once the mirror has
written the pilot, this test takes an exclusive lock on the SQLite file (another
process holding the database: every write of the mirror fails after sqlite's busy
timeout) and holds it until `flightplan run` exits. Training must still finish (exit 0,
every run finished); the runner says what it could not send. After the lock is released,
close and export must leave exactly one MLflow run per flightplan run (the pilot's and
the ones the mirror created are reused) holding every metric point of the measurements
exactly once, with FINISHED statuses.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
from mlflow.tracking import MlflowClient  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
           MLFLOW_DISABLE_TELEMETRY="true",
           PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))

pytestmark = pytest.mark.slow


def _expected_points(results: Path, run_id: str) -> int:
    """Metric points by the export's rule, counted by hand: every number (and "nan",
    "inf", "-inf") of every measurement row except step and time, then the numbers of
    metrics.json and of its per-class scores."""
    count = 0
    for line in (results / "measurements" / f"{run_id}.jsonl").read_text().splitlines():
        row = json.loads(line)
        count += sum(1 for k, v in row.items() if k not in ("step", "time", "event") and (
            (isinstance(v, (int, float)) and not isinstance(v, bool))
            or v in ("nan", "inf", "-inf")))
    metrics = json.loads((results / "metrics" / f"{run_id}.json").read_text())
    count += sum(1 for v in metrics.values() if isinstance(v, (int, float)))
    count += sum(len(scores) for scores in metrics["per_class"].values())
    return count


def _runs_by_id(client: MlflowClient) -> dict[str, list]:
    experiment = client.get_experiment_by_name("tiny")
    out: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id]):
        out.setdefault(run.data.tags["flightplan.run_id"], []).append(run)
    return out


def test_live_tracking_survives_a_locked_store_and_export_completes_it(tmp_path):
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text()
    text = "[[run]]".join(text.split("[[run]]")[:3])          # control and lora-r4
    (tmp_path / "campaign.toml").write_text(text + '\n[tracking]\nmlflow = "sqlite:///mlflow.db"\n')
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    # the store exists before the runner starts, so that locking it below does not wait on
    # the niced mirror thread, which a busy machine may starve until the campaign ends
    MlflowClient(tracking_uri=uri).create_experiment(
        "tiny", artifact_location=(tmp_path / "mlartifacts").as_uri())
    runner = subprocess.Popen([str(FLIGHTPLAN), "run", "campaign.toml"], cwd=tmp_path, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and runner.poll() is None:
            # the campaign reached its pilot: from now on nothing can be sent
            if any((tmp_path / "runs").glob("pilot-*")):
                break
            time.sleep(0.5)
        assert runner.poll() is None, "the campaign ended before its pilot started"
        live_pilot = _has_pilot(uri)      # whether the mirror created it before the lock
        holder = sqlite3.connect(db, timeout=60, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            out, err = runner.communicate(timeout=900)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, out[-3000:] + err[-3000:]
    assert "2 finished, 0 stopped by a rule, 0 cut, 0 failed" in out
    # the runner's last word on the mirror (whether the niced mirror thread got to report
    # its first "database is locked" before depends on the machine's load)
    assert "live tracking: " in err and "not sent to" in err, err[-3000:]

    closed = subprocess.run([str(FLIGHTPLAN), "close", "campaign.toml"], cwd=tmp_path, env=ENV,
                            capture_output=True, text=True, timeout=900)
    assert closed.returncode == 0, closed.stdout[-3000:] + closed.stderr[-3000:]
    exported = subprocess.run([str(FLIGHTPLAN), "export", "mlflow", "results", "--tracking-uri",
                               uri, "--json"], cwd=tmp_path, env=ENV, capture_output=True,
                              text=True, timeout=900)
    assert exported.returncode == 0, exported.stderr[-3000:]
    outcome = json.loads(exported.stdout)
    results = tmp_path / "results"
    manifest = json.loads((results / "MANIFEST.json").read_text())
    assert sum(r["sent"] for r in outcome["runs"]) > 0      # what the lock held back

    client = MlflowClient(tracking_uri=uri)
    runs = _runs_by_id(client)
    control_id = next(i for i in manifest["expected_run_ids"] if i.startswith("control-"))
    assert sorted(runs) == sorted(manifest["expected_run_ids"]
                                  + [f"pilot-{control_id}", "summary"])
    assert all(len(found) == 1 for found in runs.values())
    pilot = runs[f"pilot-{control_id}"][0]
    if live_pilot:                                            # created live, completed by export
        assert pilot.data.tags["flightplan.live"] == "true"
    assert pilot.data.tags["flightplan.pilot"] == "true"
    for run_id in manifest["expected_run_ids"]:
        run = runs[run_id][0]
        stored = sum(len(client.get_metric_history(run.info.run_id, key))
                     for key in run.data.metrics)
        assert stored == _expected_points(results, run_id), run_id
        assert run.info.status == "FINISHED"
        rows = [json.loads(line) for line in
                (results / "measurements" / f"{run_id}.jsonl").read_text().splitlines()]
        assert run.info.start_time == round(rows[0]["time"] * 1000)
        assert run.info.end_time == round(rows[-1]["time"] * 1000)


def _has_pilot(uri: str) -> bool:
    try:
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name("tiny")
        return experiment is not None and bool(client.search_runs(
            [experiment.experiment_id], filter_string="tags.`flightplan.pilot` = 'true'"))
    except Exception:  # the runner's mirror may be creating the tables right now
        return False
