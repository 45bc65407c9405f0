"""The live mirror on hand-written run directories, into a real MLflow SQLite store and
against a real closed port.

Rows are appended to ``runs/<id>/measurements.jsonl`` as a trial would; the mirror's
process must send each point once, wait for a torn last line, mark a stopped run FAILED
with its reason, a run left unfinished KILLED, and a resumed one RUNNING then FINISHED,
never duplicating a point across mirrors (a resumed ``flightplan run`` starts a new one).
When the store is down or cannot be created, it says so while training goes on, and the
runner's last line counts, from the files, exactly what the store lacks.
"""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest

from processes import wait_for  # tests/fixtures, put on the path by conftest.py
from flightplan.tracking.live import (
    LiveMirror, MirrorOutcome, left_line, mirror_runs, resolve_tracking_uri)

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
    run_a = wait_for(lambda: (r := _run(client, "a-1")) and len(_losses(client, r)) == 2 and r)
    run_a = client.get_run(run_a.info.run_id)
    assert run_a.info.status == "RUNNING" and run_a.info.start_time == T0 * 1000
    assert run_a.data.params == {"lr": "0.01", "adapter.rank": "4"}
    assert run_a.data.tags["flightplan.live"] == "true"
    run_b = wait_for(lambda: _run(client, "b-2"))
    _append(b, f'{T0 + 1}, "loss": "nan"}}\n')                        # the line completes
    wait_for(lambda: len(_losses(client, run_b)) == 2)
    # b stops by a rule: FAILED with the rule and the message
    (b / "stop.json").write_text(json.dumps({"run_id": "b-2", "rule": "non_finite_loss",
                                             "step": 1, "message": "loss is nan at step 1",
                                             "time": T0 + 1}))
    wait_for(lambda: client.get_run(run_b.info.run_id).info.status == "FAILED")
    left = mirror.stop()
    assert (left.sent, left.missing_points, left.missing_status, left.error, left.complete) == (
        4, {}, (), None, True)
    assert left.incomplete == ("a-1",) and left.cpu_s > 0
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
    wait_for(lambda: client.get_run(run_a.info.run_id).info.status == "RUNNING")
    assert len(_losses(client, run_a)) == 3   # the pass sends the points, then the status
    (a / "done.json").write_text(json.dumps({"run_id": "a-1", "steps": 3}))
    _append(a, json.dumps({"step": 3, "time": T0 + 3, "event": "finished"}) + "\n")
    wait_for(lambda: client.get_run(run_a.info.run_id).info.end_time == (T0 + 3) * 1000)
    assert resumed.stop().sent == 1
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
    run = wait_for(lambda: _run(client, "c-3", "locked"))
    # another process holds the database: every write of the mirror fails (sqlite's
    # busy timeout, then "database is locked"), rows keep arriving
    holder = sqlite3.connect(uri[len("sqlite:///"):], timeout=30, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    _append(run_dir, _row(1, loss=0.5) + _row(2, loss=0.25))
    wait_for(lambda: mirror.error is not None)
    assert "database is locked" in mirror.error
    holder.execute("ROLLBACK")
    holder.close()
    wait_for(lambda: len(_losses(client, run)) == 3)
    assert mirror.stop().error is None


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _three_runs(root: Path) -> None:
    """A pilot with 2 rows (2 + 1 points), a finished run with 1 row of 2 points and
    one evaluation row of 2 (4 points), and a run started without rows yet."""
    pilot, done, fresh = (root / "runs" / "pilot-p-1", root / "runs" / "d-2",
                          root / "runs" / "e-3")
    for folder, name in ((pilot, "pilot"), (done, "d"), (fresh, "e")):
        _trial(folder, name)
    _append(pilot, _row(0, loss=1.0, lr=0.1) + _row(1, loss="inf"))
    _append(done, _row(0, loss=1.0, step_s=0.5)
            + json.dumps({"step": 0, "time": T0 + 1, "event": "evaluation",
                          "macro_f1": 0.5, "n_test": 8}) + "\n")
    (done / "done.json").write_text(json.dumps({"run_id": "d-2", "steps": 1}))


def test_a_down_server_is_said_at_once_and_every_point_counted(tmp_path):
    _three_runs(tmp_path)
    uri = f"http://127.0.0.1:{_closed_port()}"
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with mirror_runs(tmp_path, uri, experiment="down", say=lines.append,
                         spec_file="camp/campaign.toml") as mirror:
            wait_for(lambda: lines)
            # the first line, while the runs go on: the store's state and that nothing stops
            assert lines == [f"live tracking: MLflow at {uri}: opening experiment 'down' failed "
                             f"(unreachable: [Errno 111] Connection refused); check that the "
                             f"tracking store is reachable and writable; training goes on: the "
                             f"rows are kept and sent when MLflow answers"]
            _append(tmp_path / "runs" / "pilot-p-1", _row(2, loss=0.5))
            assert mirror.sent == 0
            raise KeyboardInterrupt      # Ctrl-C: resuming is the next step, not export
    # 3 + 1 pilot points, 4 of d; e has no rows: nothing of it is missing
    assert lines[1:] == [f"live tracking: 8 metric point(s) of 2 run(s) and the final status of "
                         f"2 run(s) not sent to {uri} (unreachable: [Errno 111] Connection "
                         f"refused); running `flightplan run camp/campaign.toml` again sends "
                         f"them"]


def test_the_last_line_after_a_completed_campaign_names_export(tmp_path):
    _three_runs(tmp_path)
    uri = f"http://127.0.0.1:{_closed_port()}"
    mirror = LiveMirror(tmp_path, uri, experiment="down")
    mirror.start()
    outcome = mirror.stop(timeout_s=60)
    assert outcome == MirrorOutcome(0, {"d-2": 4, "pilot-p-1": 3}, ("d-2", "pilot-p-1"),
                                    ("pilot-p-1",), "unreachable: [Errno 111] Connection refused",
                                    outcome.cpu_s, True)
    finished = MirrorOutcome(0, {"d-2": 4, "pilot-p-1": 3}, ("d-2",), (), "database is locked",
                             1.0, True)
    assert left_line(finished, uri=uri, spec_file="campaign.toml", campaign_dir=tmp_path,
                     resume=False) == (
        f"live tracking: 7 metric point(s) of 2 run(s) and the final status of 1 run(s) not "
        f"sent to {uri} (database is locked); `flightplan export mlflow "
        f"{_shown_results(tmp_path)} "
        f"--tracking-uri {uri}` after `flightplan close campaign.toml` sends them")
    nothing = MirrorOutcome(5, {}, (), ("a-1",), None, 1.0, True)
    assert left_line(nothing, uri=uri, spec_file="campaign.toml", campaign_dir=tmp_path,
                     resume=True) is None


def _shown_results(campaign_dir: Path) -> str:
    import os

    absolute = str((campaign_dir / "results").resolve())
    relative = os.path.relpath(absolute)
    return relative if len(relative) < len(absolute) else absolute


def test_ctrl_c_after_everything_was_sent_says_nothing_and_marks_runs_killed(tmp_path, uri):
    run_dir = tmp_path / "runs" / "k-1"
    _trial(run_dir, "k")
    _trial(tmp_path / "runs" / "fresh-2", "fresh")          # started, no row yet
    _append(run_dir, _row(0, loss=1.0) + _row(1, loss=0.5))
    client = MlflowClient(tracking_uri=uri)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with mirror_runs(tmp_path, uri, experiment="ctrlc", say=lines.append) as mirror:
            wait_for(lambda: mirror.sent == 2)
            raise KeyboardInterrupt
    assert lines == []
    run = _run(client, "k-1", "ctrlc")
    assert (run.info.status, run.info.end_time) == ("KILLED", (T0 + 1) * 1000)
    assert _run(client, "fresh-2", "ctrlc") is None


def test_a_store_that_cannot_be_created_is_named_with_mlflow_and_its_uri(tmp_path):
    (tmp_path / "blocked").write_text("a file where the database's folder should be")
    uri = f"sqlite:///{tmp_path}/blocked/mlflow.db"
    lines: list[str] = []
    mirror = LiveMirror(tmp_path, uri, experiment="blocked", say=lines.append)
    mirror.start()
    wait_for(lambda: lines)
    mirror.stop()
    assert lines == [f"live tracking: MLflow at {uri}: opening the store failed ([Errno 17] "
                     f"File exists: '{tmp_path}/blocked'); check that the tracking store is "
                     f"reachable and writable; training goes on: the rows are kept and sent "
                     f"when MLflow answers"]
