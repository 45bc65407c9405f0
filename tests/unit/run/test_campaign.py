"""The runner's orchestration with fake workers (no training): decision overrides, cut
runs, a run stopped by its rule, a crashed run, a changed config that gets a new id.

The fake executor writes what a worker writes (measurement rows, an early checkpoint,
done.json or stop.json, metrics); the data check, planning, ledger and results are real.
"""

from __future__ import annotations

import json
import re
import shutil
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

    def __init__(self, *, lose: set[str] = frozenset(), leave: set[str] = frozenset()) -> None:
        self.started: list[str] = []
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
            out.writelines(json.dumps(r) + "\n" for r in rows)
        (job.run_dir / "checkpoints" / "step-000001").mkdir(parents=True)
        now = time.time()
        on_interrupted(job, Interruption(job.run_id, "n1 (10.0.0.1)", "ActorDiedError: gone",
                                         now - 30.0, now, 2, "step-000001", 1, 25.0, True,
                                         cause))
        job.trial_json.write_text(json.dumps(dict(trial, resume=True)))

    @staticmethod
    def _work(run_dir: Path, trial: dict) -> int:
        fake = trial["params"].get("fake")
        (run_dir / "log.txt").write_text("fake worker\n")
        steps = trial["max_steps"] or 8
        start = 1 if trial["resume"] else 0
        rows = [{"step": 0, "encode_s": 0.1, "tokens": 320}, {"step": 0, "encode_s": 0.3, "tokens": 960},
                {"step": 0, "load_s": 1.0, "planned_steps": 8}]
        if trial["resume"]:
            rows.append({"step": 1, "event": "restore", "source": "step-000001", "restore_s": 0.2})
        for step in range(start, steps):
            rows.append({"step": step, "loss": 1 / (step + 1), "step_s": 0.01, "seq_len": 64})
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
            out.writelines(json.dumps(r) + "\n" for r in rows)
        if fake == "stop":
            return 1
        if fake == "crash":
            return 3
        (run_dir / "metrics.json").write_text(json.dumps({"macro_f1": 0.9, "accuracy": 0.6}))
        # macro-F1 of these: a and b each TP 1, FP 1, FN 1 → F1 1/2 (not metrics.json's 0.9)
        (run_dir / "predictions.csv").write_text("example_id,gold,predicted\n"
                                                 "1,a,a\n2,b,b\n3,a,b\n4,b,a\n")
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


def test_overrides_cut_stop_crash_and_a_changed_config(tmp_path):
    fake = FakeExecutor()
    spec = load_spec(_spec(tmp_path))

    # 1. --decide cut where the plan fits: the exploratory run is cut; lora-r4 stops by its
    #    rule, the others go on; the campaign exits 0
    outcome = run_campaign(spec, decide="cut", executor=fake, quiet=True)
    assert outcome.exit_code == 0 and outcome.stopped_by is None
    assert outcome.decision["decision"] == "cut" and outcome.decision["computed"] == "continue"
    assert outcome.decision["dropped"] == ["wild"]
    assert outcome.to_json()["statuses"] == {"control": "finished", "lora-r4": "stopped",
                                             "lora-r4-len128": "finished", "wild": "cut"}
    rows = {r["name"]: r for r in outcome.runs}
    assert rows["lora-r4"]["stop"]["rule"] == "non_finite_loss"
    assert rows["lora-r4"]["stop"]["run_id"] == rows["lora-r4"]["run_id"]
    assert rows["control"]["metric"] == 0.5
    assert outcome.message == "2 finished, 1 stopped by a rule, 1 cut, 0 failed"
    pilot_runs = [r for r in fake.started if r.startswith("pilot-")]
    assert len(pilot_runs) == 2 and outcome.pilot["ok"] is True
    assert outcome.pilot["figures"]["restore_s"] == 0.2
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

    # 2. --decide continue: only the cut run executes now; it crashes: exit 1, the reason
    #    names its log; the stopped run is not retried. results/ lost meanwhile (as if the
    #    runner died before publishing) is published again from the run directories.
    shutil.rmtree(tmp_path / "results")
    fake.started.clear()
    outcome = run_campaign(spec, decide="continue", executor=fake, quiet=True)
    wild = next(r for r in outcome.runs if r["name"] == "wild")
    assert fake.started == [wild["run_id"]]
    assert outcome.exit_code == 1 and wild["status"] == "failed"
    assert wild["reason"] == (f"process exited with code 3 (fake worker); "
                              f"see runs/{wild['run_id']}/log.txt")    # the log's last line
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


def test_a_run_that_cannot_finish_before_the_package_ends_is_not_started(tmp_path, capsys,
                                                                         monkeypatch):
    import datetime as dt

    from flightplan.run.commands import status_command
    from flightplan.run.status import status_lines

    # the package started 71 h ago: 1 h of the 3 days is left. lora-r4-len128 with 2000
    # epochs needs 240 / 16 × 2000 = 30000 steps × 1.92 s (the fake pilot's step time at
    # 128 tokens) = 57600 s = 16 h of training alone (plus an evaluation per epoch); the
    # other runs need under a minute.
    started = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=71)
    path = _spec(tmp_path)
    text = path.read_text(encoding="utf-8").replace(
        "package_days = 3", f'package_days = 3\nstarted = "{started.isoformat()}"')
    last = text.index('name = "lora-r4-len128"')
    path.write_text(text[:last] + text[last:].replace("epochs = 2", "epochs = 2000", 1),
                    encoding="utf-8")
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    rows = {r["name"]: r for r in outcome.runs}
    waiting = rows["lora-r4-len128"]
    assert outcome.to_json()["statuses"] == {"control": "finished", "lora-r4": "stopped",
                                             "lora-r4-len128": "pending", "wild": "failed"}
    assert waiting["run_id"] not in fake.started
    ends = (started + dt.timedelta(hours=72)).strftime("%Y-%m-%d %H:%M UTC")
    assert re.fullmatch(r"not started: needs 1[6-9]\.\d\d h \+ 0\.25 h to leave before the "
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
    assert 16.0 < refused.data["needs_hours"] < 20.0
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
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('metric = "macro_f1"\ngoal = "max"',
                                 'metric = "mean:abs_error"\ngoal = "min"'), encoding="utf-8")
    fake = FakeExecutor()
    outcome = run_campaign(load_spec(path), executor=fake, quiet=True)
    assert outcome.exit_code == 1 and outcome.stopped_by == "pilot"
    assert outcome.pilot["cause"] == "metric_unavailable"
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


def test_the_decision_rule_frozen_with_the_plan_cannot_change_after_the_runs(tmp_path):
    from flightplan.close.commands import close_campaign
    from flightplan.errors import SpecError

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
    # the question's wording may change: it decides nothing
    path.write_text(text.replace('question = "', 'question = "Reworded: '), encoding="utf-8")
    assert "Reworded" in path.read_text(encoding="utf-8")
    run_campaign(load_spec(path), executor=FakeExecutor(), quiet=True)


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

        def run(self, jobs, **callbacks):
            if len(jobs) >= 2:
                callbacks["on_progress"](jobs[0], RunProgress(step=4, total=8))
                callbacks["on_progress"](jobs[1], RunProgress(step=1, total=8))
                self.seen.append(activity.current().describe())
            return super().run(jobs, **callbacks)

    fake = SideBySide()
    try:
        outcome = run_campaign(load_spec(_spec(tmp_path)), executor=fake, quiet=True)
    finally:
        activity.clear()
    first, second = [r["run_id"] for r in outcome.runs[:2]]
    assert fake.seen == [f"run {first}, 5 of 8 steps done; run {second}, 2 of 8 steps done"]
