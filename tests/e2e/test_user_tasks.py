"""User tasks end to end through the real CLI: the regression example of docs/tasks.md,
copied from the page as a new user would, and the digits example (a plain PyTorch
script) killed at random points and run again to a bitwise-identical end."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_run import ENV, FLIGHTPLAN, run_cli
from docs_examples import docs_files
from flightplan.run.planned import plan_runs
from flightplan.run.ledger import Ledger
from flightplan.rundir import RunDir
from flightplan.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
HANG_S = 900
"""A campaign that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=HANG_S)


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    """The docs' regression example, run plan → run → close → verify in a fresh folder."""
    folder = tmp_path_factory.mktemp("line")
    for name, body in docs_files().items():
        (folder / name).write_text(body, encoding="utf-8")
    subprocess.run([sys.executable, "make_data.py"], cwd=folder, check=True, timeout=60)
    steps = {verb: _cli(*args, cwd=folder) for verb, args in (
        ("plan", ("plan", "campaign.toml")), ("run", ("run", "campaign.toml", "--json")),
        ("close", ("close", "campaign.toml", "--json")),
        ("verify", ("verify", "results", "--json")))}
    return folder, steps


def test_the_docs_example_has_the_hashes_its_data_script_makes(regression):
    folder, _ = regression
    spec = load_spec(folder / "campaign.toml")
    for name, digest in spec.corpus.sha256.items():
        assert hashlib.sha256((folder / "data" / name).read_bytes()).hexdigest() == digest


def test_a_user_regression_task_runs_the_whole_pipeline(regression):
    folder, steps = regression
    for verb, done in steps.items():
        assert done.returncode == 0, f"{verb}: {done.stderr[-3000:]}"
    outcome = json.loads(steps["run"].stdout)
    assert outcome["statuses"] == {"control": "finished", "lr-0.2": "finished"}
    assert outcome["pilot"]["ok"] is True and outcome["pilot"]["cause"] is None
    # the generic re-estimate: the control's planned steps (10 epochs of 13 batches)
    estimates = outcome["decision"]
    assert estimates["decision"] == "continue"
    with Ledger.open(folder, create=False) as ledger:
        figures = ledger.decisions()[0].figures
    assert figures["estimates"]["control"]["steps"] == 130
    assert figures["estimates"]["control"]["model"] == "generic"
    for name in ("control", "lr-0.2"):
        run_id = next(r["run_id"] for r in outcome["runs"] if r["name"] == name)
        rows = (folder / "runs" / run_id / "predictions.csv").read_text().splitlines()
        assert rows[0] == "example_id,target,prediction,abs_error" and len(rows) == 51
        errors = [float(line.rsplit(",", 1)[1]) for line in rows[1:]]
        metrics = json.loads((folder / "runs" / run_id / "metrics.json").read_text())
        assert metrics["abs_error"] == pytest.approx(sum(errors) / 50, rel=1e-6)   # float32 mean
    verified = json.loads(steps["verify"].stdout)
    assert verified["verified"] is True


def test_editing_the_task_file_changes_the_run_ids_and_an_unchanged_one_resumes(regression,
                                                                               tmp_path):
    folder, _ = regression
    before = {p.run.name: p.run_id for p in plan_runs(load_spec(folder / "campaign.toml"))}
    again = _cli("run", "campaign.toml", "--json", cwd=folder)
    assert again.returncode == 0, again.stderr[-2000:]
    with Ledger.open(folder, create=False) as ledger:
        assert len(ledger.events(kind="started")) == 2        # nothing ran a second time
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("runs", "results", ".flightplan"))
    with open(copy / "train.py", "a", encoding="utf-8") as handle:
        handle.write("\n# an edit that changes nothing the loop computes\n")
    after = {p.run.name: p.run_id for p in plan_runs(load_spec(copy / "campaign.toml"))}
    assert set(after) == set(before)
    assert all(after[name] != before[name] for name in before)
    assert all(after[name].split("-")[0] == before[name].split("-")[0] for name in before)


# -- digits: killed at random points -----------------------------------------------------

def _digits(folder: Path) -> Path:
    shutil.copytree(REPO / "examples" / "digits", folder, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("runs", "results", ".flightplan"))
    return folder / "campaign.toml"


def _products(folder: Path) -> dict[str, bytes]:
    out = {}
    for run_dir in sorted((folder / "runs").iterdir()):
        if run_dir.name.startswith("pilot-") or not (run_dir / "done.json").is_file():
            continue
        for rel in ("predictions.csv", "metrics.json", "artifact/model.safetensors"):
            out[f"{run_dir.name}/{rel}"] = (run_dir / rel).read_bytes()
    return out


@pytest.fixture(scope="module")
def digits_reference(tmp_path_factory):
    spec = _digits(tmp_path_factory.mktemp("digits-reference"))
    done = _cli("run", str(spec), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return spec.parent, done


def test_digits_reaches_a_conclusion_that_closes_and_verifies(digits_reference):
    folder, done = digits_reference
    outcome = json.loads(done.stdout)
    assert outcome["statuses"] == {"control": "finished", "hidden-128": "finished",
                                   "lr-3e-3": "finished"}
    closed = _cli("close", str(folder / "campaign.toml"), "--json")
    assert closed.returncode == 0, closed.stderr[-3000:]
    verified = _cli("verify", str(folder / "results"), "--json")
    assert verified.returncode == 0, verified.stderr[-3000:]
    for run in outcome["runs"]:
        assert 0.8 < run["metric"] <= 1.0


def _loss_rows(folder: Path) -> int:
    """Loss rows the campaign's runs (not the pilot) have logged so far."""
    runs = folder / "runs"
    if not runs.is_dir():
        return 0
    return sum(path.read_text(errors="replace").count('"loss"')
               for path in runs.glob("*/measurements.jsonl")
               if not path.parent.name.startswith("pilot-"))


def _killed_runs(folder: Path) -> list[str]:
    """Run ids the ledger shows as running (their runner was killed) that had finished a
    checkpoint save (a ``checkpoint`` row: a kill during the first save leaves only a
    partial ``.tmp``, and such a run rightly starts afresh)."""
    with Ledger.open(folder, create=False) as ledger:
        running = [r.run_id for r in ledger.runs() if r.status == "running"]
    return [r for r in running if RunDir.of(folder, r).saved_checkpoint()
            and RunDir.of(folder, r).status() is None]          # not finished meanwhile


def test_digits_killed_at_random_points_ends_bitwise_identical(digits_reference, tmp_path):
    reference, _ = digits_reference
    spec = _digits(tmp_path / "killed")
    folder = spec.parent
    rng = random.Random(11)
    lost_all = None
    for kill in range(4):
        runner = subprocess.Popen([str(FLIGHTPLAN), "run", str(spec)], env=ENV,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        if kill == 0:                      # somewhere in the data check or the pilot
            time.sleep(rng.uniform(2.0, 8.0))
        else:                              # after a random number of training steps
            target = _loss_rows(folder) + rng.randint(3, 150)
            deadline = time.monotonic() + HANG_S
            while runner.poll() is None and _loss_rows(folder) < target \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)     # the runner and its workers
        runner.wait()
        if lost_all is None and (folder / ".flightplan" / "ledger.sqlite").exists():
            killed = _killed_runs(folder)
            if killed:
                copy = tmp_path / "lost-all"
                shutil.copytree(folder, copy)
                shutil.rmtree(copy / "runs" / killed[0] / "checkpoints")
                lost_all = (copy, killed[0])
    final = _cli("run", str(spec), "--json")
    assert final.returncode == 0, final.stderr[-3000:]
    assert _products(folder) == _products(reference)
    verified = _cli("close", str(spec))
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert lost_all is not None, "no kill landed while a run had checkpoints"
    copy, run_id = lost_all
    measurements = copy / "runs" / run_id / "measurements.jsonl"
    losses_before = measurements.read_text().count('"loss"')
    again = _cli("run", str(copy / "campaign.toml"), "--json")
    stopped = next(r for r in json.loads(again.stdout)["runs"] if r["run_id"] == run_id)
    assert stopped["status"] == "stopped"
    assert stopped["stop"]["rule"] == "no_usable_resume"
    assert "--restart" in stopped["stop"]["message"]
    assert measurements.read_text().count('"loss"') == losses_before   # nothing trained anew
    assert not (copy / "runs" / run_id / "done.json").exists()
