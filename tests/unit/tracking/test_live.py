"""The live mirror on hand-written run directories, into a real MLflow SQLite store.

Rows are appended to ``runs/<id>/measurements.jsonl`` as a trial would; the mirror's
thread must send each point once, wait for a torn last line, mark a stopped run FAILED
with its reason, a run left unfinished KILLED, and a resumed one RUNNING then FINISHED,
never duplicating a point across mirrors (a resumed ``flightplan run`` starts a new one).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from flightplan.tracking.live import LiveMirror, resolve_tracking_uri

mlflow = pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
from mlflow.tracking import MlflowClient  # noqa: E402

T0 = 1_800_000_000.0


def _trial(run_dir: Path, name: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "trial.json").write_text(json.dumps({
        "run_id": run_dir.name, "name": name, "tier": "essential", "task": "textclf",
        "config_hash": "c" * 64, "params": {"lr": 0.01, "adapter": {"rank": 4}}}))


def _append(run_dir: Path, text: str) -> None:
    with open(run_dir / "measurements.jsonl", "a") as handle:
        handle.write(text)


def _row(step: int, **values) -> str:
    return json.dumps({"step": step, "time": T0 + step} | values) + "\n"


def _wait_for(condition, timeout_s: float = 180.0):  # the mirror runs at nice 19
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _run(client, run_id, experiment_name="live"):
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    found = client.search_runs([experiment.experiment_id],
                               filter_string=f"tags.`flightplan.run_id` = '{run_id}'")
    return found[0] if found else None


def _losses(client, run) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp)
                  for m in client.get_metric_history(run.info.run_id, "loss"))


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """One SQLite store for the module (creating its tables takes seconds); each test
    uses its own experiment."""
    return resolve_tracking_uri("sqlite:///mlflow.db", tmp_path_factory.mktemp("store"))


def test_mirror_sends_rows_statuses_and_never_duplicates(tmp_path, uri):
    a, b = tmp_path / "runs" / "a-1", tmp_path / "runs" / "b-2"
    _trial(a, "a")
    _trial(b, "b")
    _append(a, _row(0, loss=1.0) + _row(1, loss=0.5))
    _append(b, _row(0, loss=2.0) + '{"step": 1, "time": ')           # torn last line
    client = MlflowClient(tracking_uri=uri)

    mirror = LiveMirror(tmp_path, uri, experiment="live", poll_s=0.1)
    mirror.start()
    run_a = _wait_for(lambda: (r := _run(client, "a-1")) and len(_losses(client, r)) == 2 and r)
    run_a = client.get_run(run_a.info.run_id)
    assert run_a.info.status == "RUNNING" and run_a.info.start_time == T0 * 1000
    assert run_a.data.params == {"lr": "0.01", "adapter.rank": "4"}
    assert run_a.data.tags["flightplan.live"] == "true"
    run_b = _wait_for(lambda: _run(client, "b-2"))
    _append(b, f'{T0 + 1}, "loss": "nan"}}\n')                        # the line completes
    _wait_for(lambda: len(_losses(client, run_b)) == 2)
    # b stops by a rule: FAILED with the rule and the message
    (b / "stop.json").write_text(json.dumps({"run_id": "b-2", "rule": "non_finite_loss",
                                             "step": 1, "message": "loss is nan at step 1",
                                             "time": T0 + 1}))
    _wait_for(lambda: client.get_run(run_b.info.run_id).info.status == "FAILED")
    left = mirror.stop()
    assert {k: left[k] for k in ("sent", "pending_points", "unsent_runs", "error")} == {
        "sent": 4, "pending_points": 0, "unsent_runs": [], "error": None}
    assert left["cpu_s"] > 0
    run_a, run_b = client.get_run(run_a.info.run_id), client.get_run(run_b.info.run_id)
    # a neither finished nor stopped when the runner ended: KILLED, end = its last row
    assert (run_a.info.status, run_a.info.end_time) == ("KILLED", (T0 + 1) * 1000)
    assert run_a.data.tags["flightplan.status"] == "incomplete"
    assert run_b.data.tags["flightplan.stop_reason"] == "loss is nan at step 1"
    nan = _losses(client, run_b)[1][1]
    assert _losses(client, run_b)[0] == (0, 2.0, T0 * 1000) and nan != nan

    # a later `flightplan run` resumes a: RUNNING again, then FINISHED; no point twice
    resumed = LiveMirror(tmp_path, uri, experiment="live", poll_s=0.1)
    _append(a, _row(2, loss=0.25))
    resumed.start()
    _wait_for(lambda: client.get_run(run_a.info.run_id).info.status == "RUNNING")
    assert len(_losses(client, run_a)) == 3   # the pass sends the points, then the status
    (a / "done.json").write_text(json.dumps({"run_id": "a-1", "steps": 3}))
    _append(a, json.dumps({"step": 3, "time": T0 + 3, "event": "finished"}) + "\n")
    _wait_for(lambda: client.get_run(run_a.info.run_id).info.end_time == (T0 + 3) * 1000)
    assert resumed.stop()["sent"] == 1
    assert client.get_run(run_a.info.run_id).info.status == "FINISHED"
    assert _losses(client, run_a) == [(0, 1.0, T0 * 1000), (1, 0.5, (T0 + 1) * 1000),
                                      (2, 0.25, (T0 + 2) * 1000)]
    experiment = client.get_experiment_by_name("live")
    assert len(client.search_runs([experiment.experiment_id])) == 2


def test_a_locked_store_keeps_the_rows_and_sends_them_later(tmp_path, uri):
    run_dir = tmp_path / "runs" / "c-3"
    _trial(run_dir, "c")
    _append(run_dir, _row(0, loss=1.0))
    client = MlflowClient(tracking_uri=uri)
    mirror = LiveMirror(tmp_path, uri, experiment="locked", poll_s=0.1)
    mirror.start()
    run = _wait_for(lambda: _run(client, "c-3", "locked"))
    # another process holds the database: every write of the mirror fails (sqlite's
    # busy timeout, then "database is locked"), rows keep arriving
    holder = sqlite3.connect(uri[len("sqlite:///"):], timeout=30, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    _append(run_dir, _row(1, loss=0.5) + _row(2, loss=0.25))
    _wait_for(lambda: mirror.error is not None)
    assert "database is locked" in mirror.error
    holder.execute("ROLLBACK")
    holder.close()
    _wait_for(lambda: len(_losses(client, run)) == 3)
    assert mirror.stop()["error"] is None
