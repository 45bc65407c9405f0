"""The decision metric the recorder stores in the ledger, for any metric."""

from __future__ import annotations

import json
import os

from flightplan.run.ledger import Ledger
from flightplan.run.executors.contract import JobResult
from flightplan.run.records import RunRecorder


def test_metric_is_computed_from_the_predictions_as_close_does(tmp_path):
    run_dir = tmp_path / "runs" / "r-1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"macro_f1": 0.5, "abs_error": 9.0}))
    (run_dir / "predictions.csv").write_text("example_id,abs_error\na,1.0\nb,0.5\n")
    ledger = Ledger.open(tmp_path)
    try:
        def value(metric):
            return RunRecorder(ledger, tmp_path, metric=metric)._metric(run_dir)

        assert value("macro_f1") is None                   # not the task's own figure
        assert value("mean:abs_error") == 0.75             # (1.0 + 0.5) / 2 from predictions
        assert value("mean:loss") is None                  # no such column
        assert value("accuracy") is None                   # no labels to compute it from
    finally:
        ledger.close()


def _planned(tmp_path, run_id, name="lr"):
    from types import SimpleNamespace

    run_dir = tmp_path / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trial.json").write_text(json.dumps({"run_id": run_id, "resume": False}))
    return SimpleNamespace(run_id=run_id, run_dir=run_dir, name=name, replicate_of=None,
                           run=SimpleNamespace(name=name, tier="essential"))


def _finish(planned, *, at):
    (planned.run_dir / "done.json").write_text(json.dumps({
        "run_id": planned.run_id, "finished_at": "2026-11-29T17:00:00+00:00", "steps": 4,
        "wall_s": 31.0}))
    os.utime(planned.run_dir / "done.json", (at, at))


def test_a_run_id_back_in_use_after_a_revert_keeps_its_one_execution(tmp_path):
    """Edited (a new id supersedes it), then reverted: the first id is current again and
    its directory says finished; its 31 s execution counts once, in WALL and in plan vs
    execution, and no second `finished` event appears."""
    from flightplan.close.plan_vs_execution import plan_vs_execution

    ledger = Ledger.open(tmp_path)
    recorder = RunRecorder(ledger, tmp_path, metric="macro_f1")
    first = _planned(tmp_path, "lr-aaaa")
    ledger.ensure_run(run_id="lr-aaaa", name="lr", tier="essential", config_hash="a")
    ledger.freeze_original({"stages": []})
    recorder.start(first)
    _finish(first, at=1_000_031.0)
    recorder.end(first, JobResult("lr-aaaa", first.run_dir, 0, 1_000_000.0, 1_000_031.0))
    ledger.ensure_run(run_id="lr-bbbb", name="lr", tier="essential", config_hash="b")  # edited
    ledger.ensure_run(run_id="lr-aaaa", name="lr", tier="essential", config_hash="a")  # reverted
    assert ledger.run("lr-aaaa").status == "pending"
    assert recorder.settle(first) == "finished"
    run = ledger.run("lr-aaaa")
    assert (run.status, run.wall_s, run.ended_at) == ("finished", 31.0, 1_000_031.0)
    assert [e.kind for e in ledger.events("lr-aaaa")] == ["started", "finished",
                                                             "superseded"]
    [item] = [i for i in plan_vs_execution(ledger)["items"] if i["name"] == "lr"]
    assert (item["executions"], item["observed_hours"]) == (1, round(31.0 / 3600, 6))
    ledger.close()


def test_the_execution_a_killed_runner_left_counts_until_its_last_write(tmp_path):
    """The runner dies 12 s into a run (its last row written then); the next runner resumes
    it for 5 s: 17 s in all, two executions."""
    ledger = Ledger.open(tmp_path)
    recorder = RunRecorder(ledger, tmp_path, metric="macro_f1")
    planned = _planned(tmp_path, "lr-aaaa")
    ledger.ensure_run(run_id="lr-aaaa", name="lr", tier="essential", config_hash="a")
    ledger.record_run_start("lr-aaaa", resumed=False, at=2_000_000.0)
    rows = planned.run_dir / "measurements.jsonl"
    rows.write_text('{"step": 0, "time": 2000012.0, "loss": 1.0}\n')
    os.utime(rows, (2_000_011.996, 2_000_011.996))    # a file's clock lags the row's
    assert recorder.reset_interrupted() == ["lr-aaaa"]
    run = ledger.run("lr-aaaa")
    assert (run.status, run.wall_s, run.ended_at) == ("pending", 12.0, 2_000_012.0)
    ledger.record_run_start("lr-aaaa", resumed=True, at=2_000_100.0)
    ledger.record_run_end("lr-aaaa", status="finished", started_at=2_000_100.0,
                          ended_at=2_000_105.0)
    assert ledger.run("lr-aaaa").wall_s == 17.0
    assert [(t.started_at, t.ended_at) for t in ledger.stage_times()] == [
        (2_000_000.0, 2_000_012.0), (2_000_100.0, 2_000_105.0)]
    # the summary row's goodput covers both executions: 12 s to its one step row (no load
    # row, no step_s: the whole gap is the step), then 5 s without a row of a process that
    # finished: its end
    goodput = recorder.row(planned)["goodput"]
    assert goodput["wall_hours"] == round(17 / 3600, 6)
    assert {c: h for c, h in goodput["parts_hours"].items() if h} == {
        "steps": round(12 / 3600, 6), "output": round(5 / 3600, 6)}
    ledger.close()


def test_a_run_that_finished_after_its_runner_died_counts_once(tmp_path):
    """The worker wrote done.json 20 s in, after its runner was killed: the next runner
    records it finished, not interrupted, with those 20 s counted once; settling it then
    adds nothing."""
    ledger = Ledger.open(tmp_path)
    recorder = RunRecorder(ledger, tmp_path, metric="macro_f1")
    planned = _planned(tmp_path, "lr-aaaa")
    ledger.ensure_run(run_id="lr-aaaa", name="lr", tier="essential", config_hash="a")
    ledger.record_run_start("lr-aaaa", resumed=False, at=3_000_000.0)
    _finish(planned, at=3_000_020.0)
    assert recorder.reset_interrupted() == []         # nothing was interrupted
    assert recorder.settle(planned) == "finished"
    run = ledger.run("lr-aaaa")
    assert (run.status, run.wall_s) == ("finished", 20.0)
    events = ledger.events("lr-aaaa")
    assert [e.kind for e in events] == ["started", "finished"]
    assert events[-1].data == {"ended_as_runner_stopped": True, "wall_s": 20.0}
    assert events[-1].at == 3_000_020.0
    assert len(ledger.stage_times()) == 1
    ledger.close()


def test_an_interrupted_run_is_told_whether_it_resumes_or_starts_over(tmp_path):
    """What the next `flightplan run` says of a run a Ctrl-C interrupted: it resumes only
    from a checkpoint in its folder; one that saved none starts over from step 0; one whose
    saved checkpoint is gone stops with no_usable_resume."""
    ledger = Ledger.open(tmp_path)
    recorder = RunRecorder(ledger, tmp_path, metric="macro_f1")
    fresh, saved, gone = (_planned(tmp_path, f"{n}-aaaa", n) for n in ("fresh", "saved", "gone"))
    (saved.run_dir / "checkpoints" / "step-000004").mkdir(parents=True)
    (saved.run_dir / "checkpoints" / "step-000008.tmp").mkdir()     # unfinished: not counted
    (fresh.run_dir / "checkpoints" / "step-000002.tmp").mkdir(parents=True)
    (gone.run_dir / "measurements.jsonl").write_text(
        '{"step": 3, "time": 1.0, "event": "checkpoint", "path": "checkpoints/step-000004"}\n')
    assert recorder.resumes_how("saved-aaaa", on_flight=False) == \
        "it resumes from its last checkpoint"
    assert recorder.resumes_how("fresh-aaaa", on_flight=False) == \
        "it had saved no checkpoint: it starts over from step 0"
    assert recorder.resumes_how("gone-aaaa", on_flight=False) == (
        "the checkpoints it saved are gone: it stops with no_usable_resume "
        "(flightplan run --restart NAME starts it over)")
    ledger.close()
