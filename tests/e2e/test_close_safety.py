"""`close` beside `flightplan run`, and a campaign whose run was stopped, through the real CLI.

The campaign is the regression example of docs/tasks.md with one line added to its loop
(a sleep of ``params.step_sleep_s`` after each step), so that a test can act while a run
trains: a `close` while the runner holds the campaign is refused naming the runner; a
runner killed after a run's first checkpoint, whose checkpoints are then deleted, leaves
that run stopped by `no_usable_resume` on the next `flightplan run`, and the campaign still
closes and verifies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_run import ENV, FLIGHTPLAN, run_cli
from flightplan.campaign_lock import lock_holder
from flightplan.run.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
HANG_S = 600
"""A campaign that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=HANG_S)


def _paced_campaign(folder: Path, *, sleep_s: float) -> Path:
    """The docs' regression example in ``folder``; its ``lr-0.2`` run sleeps ``sleep_s``
    after each of its 130 steps."""
    text = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))
    train = files["train.py"].replace("import math\n", "import math\nimport time\n")
    train = train.replace("            trial.log(step, loss=loss.item())\n",
                          "            trial.log(step, loss=loss.item())\n"
                          "            time.sleep(params.get(\"step_sleep_s\", 0.0))\n")
    assert train.count("time.sleep") == 1
    files["train.py"] = train
    files["campaign.toml"] = files["campaign.toml"].replace(
        "params = { lr = 0.2 }", f"params = {{ lr = 0.2, step_sleep_s = {sleep_s} }}")
    for name, body in files.items():
        (folder / name).write_text(body, encoding="utf-8")
    subprocess.run([sys.executable, "make_data.py"], cwd=folder, check=True, timeout=60)
    return folder / "campaign.toml"


def _start_run(folder: Path) -> subprocess.Popen:
    return subprocess.Popen([str(FLIGHTPLAN), "run", "campaign.toml", "--json"], cwd=folder,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _run_id(folder: Path, name: str) -> str | None:
    try:
        with Ledger.open(folder, create=False) as ledger:
            return next((r.run_id for r in ledger.runs() if r.name == name), None)
    except Exception:       # the runner is creating the ledger
        return None


def _rows(folder: Path, run_id: str | None) -> list[dict]:
    path = folder / "runs" / str(run_id) / "measurements.jsonl"
    if run_id is None or not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _wait(runner: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not ready():
        assert runner.poll() is None, f"the runner ended before {what}: {runner.stderr.read()}"
        assert time.monotonic() < deadline, f"no {what} in {HANG_S} s"
        time.sleep(0.1)


def test_close_is_refused_while_a_run_goes_on_and_verifies_after(tmp_path):
    _paced_campaign(tmp_path, sleep_s=0.1)
    runner = _start_run(tmp_path)
    try:
        def training() -> bool:
            rows = _rows(tmp_path, _run_id(tmp_path, "lr-0.2"))
            return sum("loss" in r for r in rows) >= 3
        _wait(runner, training, "lr-0.2 training")
        assert lock_holder(tmp_path)["pid"] == runner.pid
        refused = _cli("close", "campaign.toml", cwd=tmp_path)
        assert runner.poll() is None                     # the run goes on
        out, err = runner.communicate(timeout=HANG_S)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.communicate()
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"the campaign is being run by process {runner.pid}; wait for it to finish" in lines[0]
    assert lines[0].endswith("then close again")
    assert refused.stdout == ""
    assert runner.returncode == 0, err[-3000:]
    outcome = json.loads(out)
    assert outcome["statuses"] == {"control": "finished", "lr-0.2": "finished"}
    closed = _cli("close", "campaign.toml", "--json", cwd=tmp_path)
    assert closed.returncode == 0, closed.stdout[-3000:] + closed.stderr[-3000:]
    report = json.loads(closed.stdout)
    assert report["verified"] is True and report["findings"] == []
    assert sorted(report["accepted"]) == sorted(r["run_id"] for r in outcome["runs"])


def test_a_run_stopped_for_want_of_its_checkpoints_closes_and_verifies(tmp_path):
    _paced_campaign(tmp_path, sleep_s=0.2)
    runner = _start_run(tmp_path)
    try:
        def saved() -> bool:
            control, paced = _run_id(tmp_path, "control"), _run_id(tmp_path, "lr-0.2")
            return bool(control and (tmp_path / "runs" / control / "done.json").is_file()
                        and any(r.get("event") == "checkpoint" for r in _rows(tmp_path, paced)))
        _wait(runner, saved, "a checkpoint of lr-0.2")
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.communicate()
    paced = _run_id(tmp_path, "lr-0.2")
    assert not (tmp_path / "runs" / paced / "done.json").exists()
    saved_at = next(r["time"] for r in _rows(tmp_path, paced) if r.get("event") == "checkpoint")
    shutil.rmtree(tmp_path / "runs" / paced / "checkpoints")       # its only checkpoints lost
    again = _cli("run", "campaign.toml", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    outcome = json.loads(again.stdout)
    assert outcome["statuses"] == {"control": "finished", "lr-0.2": "stopped"}
    stop = next(r["stop"] for r in outcome["runs"] if r["name"] == "lr-0.2")
    assert stop["rule"] == "no_usable_resume"
    assert "its checkpoints/ folder holds no finished one" in stop["message"]
    with Ledger.open(tmp_path, create=False) as ledger:   # each execution counts once
        wall_s = ledger.run(paced).wall_s
        executions = [t for t in ledger.stage_times() if t.name == "lr-0.2"]
    assert len(executions) == 2 and executions[0].ended_at >= saved_at
    assert wall_s == pytest.approx(sum(t.ended_at - t.started_at for t in executions))
    closed = _cli("close", "campaign.toml", "--json", cwd=tmp_path)
    assert closed.returncode == 0, closed.stdout[-3000:] + closed.stderr[-3000:]
    report = json.loads(closed.stdout)
    assert report["verified"] is True and report["findings"] == []
    stops = json.loads((tmp_path / "results" / "stops.json").read_text())
    assert [s["rule"] for s in stops] == ["no_usable_resume"]
    verified = _cli("verify", "results", "--json", cwd=tmp_path)
    assert verified.returncode == 0 and json.loads(verified.stdout)["verified"] is True
