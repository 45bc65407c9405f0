"""The ledger: frozen original plan, run bookkeeping, read API, survival of kill -9."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from flightplan.canonical import plan_sha256
from flightplan.ledger_rows import ExpenseRow, StageTimeRow
from flightplan.run.ledger import Ledger

PLAN = {"campaign": "tiny", "reserved_hours": 48.0, "window_hours": 72.0,
        "uncommitted_hours": 24.0, "fits": True, "note": "é"}


def test_plan_hash_is_sha256_of_canonical_json():
    expected = hashlib.sha256('{"a":[1,"é"],"b":1}'.encode("utf-8")).hexdigest()
    assert plan_sha256({"b": 1, "a": [1, "é"]}) == expected


def test_original_plan_is_frozen_and_never_rewritten(tmp_path):
    ledger = Ledger.open(tmp_path)
    entry, written = ledger.freeze_original(PLAN)
    assert written is True
    assert entry.version == 1 and entry.kind == "original"
    assert entry.plan == PLAN and entry.plan_sha256 == plan_sha256(PLAN)
    # a second freeze keeps the first one
    entry2, written2 = ledger.freeze_original(dict(PLAN, reserved_hours=60.0))
    assert written2 is False and entry2.plan["reserved_hours"] == 48.0
    # the database itself refuses to rewrite or delete a version
    raw = sqlite3.connect(ledger.path)
    with pytest.raises(sqlite3.IntegrityError, match="never rewritten"):
        raw.execute("UPDATE plan_versions SET plan_json = '{}' WHERE version = 1")
    with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
        raw.execute("DELETE FROM plan_versions")
    raw.close()
    assert ledger.add_plan_version(dict(PLAN, reserved_hours=50.0), reason="pilot") == 2
    versions = ledger.plan_versions()
    assert [(v.version, v.kind) for v in versions] == [(1, "original"), (2, "re-estimate")]
    assert versions[1].plan["reserved_hours"] == 50.0 and versions[1].reason == "pilot"
    assert ledger.verify_original() is True


def test_re_estimate_needs_an_original(tmp_path):
    ledger = Ledger.open(tmp_path)
    with pytest.raises(ValueError, match="freeze the original"):
        ledger.add_plan_version(PLAN, reason="pilot")


def test_runs_events_stop_record_and_superseded_ids(tmp_path):
    ledger = Ledger.open(tmp_path)
    assert ledger.ensure_run(run_id="control-aaaa", name="control", tier="essential",
                             config_hash="h1") == "pending"
    ledger.record_run_start("control-aaaa", resumed=False, at=100.0)
    stop = {"run_id": "control-aaaa", "rule": "non_finite_loss", "step": 3, "value": "nan",
            "threshold": None, "message": "loss is nan at step 3", "time": 130.0}
    ledger.record_run_end("control-aaaa", status="stopped", started_at=100.0, ended_at=130.5,
                          stop=stop, extra_events=[{"kind": "checkpoint_saved", "at": 110.0,
                                                    "data": {"step": 2}}])
    run = ledger.run("control-aaaa")
    assert run.status == "stopped" and run.stop == stop
    assert run.started_at == 100.0 and run.ended_at == 130.5 and run.wall_s == 30.5
    kinds = [e.kind for e in ledger.events("control-aaaa")]
    assert kinds == ["started", "checkpoint_saved", "stopped"]
    assert ledger.stage_times() == [StageTimeRow(name="control", kind="run", started_at=100.0,
                                                 ended_at=130.5)]
    # the config changed: a new id supersedes the old one, which stays in the ledger
    assert ledger.ensure_run(run_id="control-bbbb", name="control", tier="essential",
                             config_hash="h2") == "pending"
    old = ledger.run("control-aaaa")
    assert old.status == "superseded" and old.superseded_by == "control-bbbb"
    assert old.stop == stop
    # changed back: the first id is current again, the second superseded
    assert ledger.ensure_run(run_id="control-aaaa", name="control", tier="essential",
                             config_hash="h1") == "pending"
    assert ledger.run("control-aaaa").superseded_by is None
    assert ledger.run("control-bbbb").superseded_by == "control-aaaa"


def test_resumed_run_adds_wall_time_and_keeps_first_start(tmp_path):
    ledger = Ledger.open(tmp_path)
    ledger.ensure_run(run_id="r-1", name="r", tier="useful", config_hash=None)
    ledger.record_run_start("r-1", resumed=False, at=10.0)
    assert ledger.reset_interrupted() == ["r-1"]          # the runner was killed
    assert ledger.run("r-1").status == "pending"
    ledger.record_run_start("r-1", resumed=True, at=50.0)
    ledger.record_run_end("r-1", status="finished", started_at=50.0, ended_at=62.25, metric=0.5)
    run = ledger.run("r-1")
    assert (run.started_at, run.wall_s, run.metric) == (10.0, 12.25, 0.5)
    assert [e.kind for e in ledger.events("r-1")] == ["started", "interrupted", "resumed",
                                                      "finished"]


def test_a_restart_clears_the_set_aside_executions_result_and_keeps_its_hours(tmp_path):
    ledger = Ledger.open(tmp_path)
    ledger.ensure_run(run_id="r-1", name="r", tier="useful", config_hash=None)
    ledger.record_run_start("r-1", resumed=False, at=10.0)
    ledger.record_run_end("r-1", status="finished", started_at=10.0, ended_at=114.0, metric=0.97)
    ledger.record_restart("r-1", data={"name": "r"})
    run = ledger.run("r-1")
    assert (run.status, run.metric, run.stop, run.ended_at) == ("pending", None, None, None)
    assert (run.started_at, run.wall_s) == (10.0, 104.0)
    assert [(e.kind, e.data) for e in ledger.events("r-1")][-1] == ("restarted", {"name": "r"})


def test_expenses_decisions_notes_and_snapshot(tmp_path):
    ledger = Ledger.open(tmp_path)
    ledger.ensure_campaign(name="tiny", spec_path="campaign.toml", spec_sha256="ab" * 32)
    ledger.freeze_original(PLAN)
    ledger.sync_expenses([
        ExpenseRow(kind="package", label="RTX 4090 3-day × 2", offer="RTX 4090",
                   package_days=3, flights=2, amount="94.28", currency="USD"),
        ExpenseRow(kind="external", label="annotation", offer=None, package_days=None,
                   flights=None, amount="12.50", currency="USD")])
    ledger.sync_expenses(ledger.expenses())        # idempotent
    ledger.add_decision(decision="continue", computed="cut", figures={"step_s": 0.25},
                        dropped=[])
    ledger.add_note("control", "the pilot ran twice")
    snap = ledger.snapshot()
    assert snap["campaign"]["name"] == "tiny"
    assert snap["expenses"][0]["amount"] == "94.28" and snap["expenses"][1]["offer"] is None
    assert len(snap["expenses"]) == 2
    assert snap["decisions"][0]["overridden"] is True
    assert snap["decisions"][0]["figures"] == {"step_s": 0.25}
    assert snap["notes"][0]["name"] == "control"
    assert snap["plan_versions"][0]["reserved_hours"] == 48.0
    assert snap["original_plan_intact"] is True
    assert [e["kind"] for e in snap["events"]] == ["decision"]


_WRITER = """
import sys
from flightplan.ledger_rows import ExpenseRow, StageTimeRow
from flightplan.run.ledger import Ledger
ledger = Ledger.open(sys.argv[1])
ledger.freeze_original({"fits": True})
i = 0
while True:
    run_id = f"r-{i}"
    ledger.ensure_run(run_id=run_id, name=f"r{i}", tier="useful", config_hash=None)
    ledger.record_run_start(run_id, resumed=False)
    ledger.record_run_end(run_id, status="finished", started_at=1.0, ended_at=2.0,
                          extra_events=[{"kind": "checkpoint_saved", "data": {"i": i}}] * 3)
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.45])
def test_kill_9_while_writing_leaves_a_consistent_ledger(tmp_path, delay):
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ledger = Ledger.open(tmp_path)
    assert ledger.integrity_check() == "ok"
    runs = ledger.runs()
    finished = [r for r in runs if r.status == "finished"]
    assert len(finished) >= 1
    # every finished run has all of its transaction: 3 checkpoint events, 1 finish, 1 time row
    for run in finished:
        kinds = [e.kind for e in ledger.events(run.run_id)]
        assert kinds == ["started", "checkpoint_saved", "checkpoint_saved",
                         "checkpoint_saved", "finished"]
    assert len(ledger.stage_times()) == len(finished)
    # at most the last run was caught between its two transactions
    assert len(runs) - len(finished) <= 1
    assert ledger.verify_original() is True


def test_snapshot_is_one_state_of_the_ledger_while_another_process_writes(tmp_path,
                                                                         monkeypatch):
    """A runner (another connection) starts a run between the snapshot's reads of the runs
    and of the events: the snapshot shows neither the run nor its event."""
    ledger = Ledger.open(tmp_path)
    runner = Ledger.open(tmp_path)
    ledger.ensure_run(run_id="r-1", name="a", tier="essential", config_hash=None)
    read_runs = Ledger.runs

    def runs_then_a_runner_writes(self):
        rows = read_runs(self)
        if self is ledger:
            runner.ensure_run(run_id="r-2", name="b", tier="essential", config_hash=None)
            runner.record_run_start("r-2", resumed=False, at=5.0)
        return rows

    monkeypatch.setattr(Ledger, "runs", runs_then_a_runner_writes)
    snapshot = ledger.snapshot()
    assert [r["run_id"] for r in snapshot["runs"]] == ["r-1"]
    assert [e["run_id"] for e in snapshot["events"]] == []
    monkeypatch.undo()
    assert [r["run_id"] for r in ledger.snapshot()["runs"]] == ["r-1", "r-2"]  # then it shows
    assert [e["kind"] for e in ledger.snapshot()["events"]] == ["started"]
    runner.close()
    ledger.close()
