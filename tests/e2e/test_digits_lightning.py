"""The Lightning example as a user runs it: ``examples/digits-lightning`` (a file task on
``flightplan.integrations.lightning``: ``fit``, ``write_outputs``, a reload hook) copied to a
fresh folder and taken plan → run → close → verify through the real CLI. Its module logs
its loss as ``train_loss``; the pilot's resume check still compares every resumed step."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_run import run_cli

REPO = Path(__file__).resolve().parents[2]
HANG_S = 900
"""A step that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=HANG_S)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("lightning") / "digits-lightning"
    shutil.copytree(REPO / "examples" / "digits-lightning", folder,
                    ignore=shutil.ignore_patterns("runs", "results", ".flightplan"))
    steps = {verb: _cli(*args, cwd=folder) for verb, args in (
        ("plan", ("plan", "campaign.toml")), ("run", ("run", "campaign.toml", "--json")),
        ("close", ("close", "campaign.toml", "--json")),
        ("verify", ("verify", "results", "--json", "--trust-code")))}
    return folder, steps


def test_the_lightning_example_runs_plan_to_verify(campaign: tuple[Path, dict]) -> None:
    folder, steps = campaign
    for verb, done in steps.items():
        assert done.returncode == 0, f"{verb}: {done.stderr[-3000:]}"
    outcome = json.loads(steps["run"].stdout)
    assert outcome["statuses"] == {"control": "finished", "hidden-128": "finished"}
    pilot = outcome["pilot"]
    assert pilot["ok"] is True, pilot["message"]
    assert pilot["compared_steps"] == list(range(1, 12))   # resumed from step-000001, cap 12
    for run in outcome["runs"]:
        assert 0.8 < run["metric"] <= 1.0
    closed = json.loads(steps["close"].stdout)
    assert sorted(closed["accepted"]) == sorted(r["run_id"] for r in outcome["runs"])
    verified = json.loads(steps["verify"].stdout)
    assert verified["verified"] is True and verified["findings"] == []
    assert set(verified["reload"].values()) == {"reproduced"}


def test_every_step_row_carries_the_returned_loss_and_the_artifact_is_safetensors(
        campaign: tuple[Path, dict]) -> None:
    folder, steps = campaign
    outcome = json.loads(steps["run"].stdout)
    control = next(r["run_id"] for r in outcome["runs"] if r["name"] == "control")
    run_dir = folder / "runs" / control
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    losses = [r for r in rows if "loss" in r]
    assert [r["step"] for r in losses] == list(range(len(losses))) and len(losses) == 4 * 45
    assert sorted(p.name for p in (run_dir / "artifact").iterdir()) == [
        "artifact.json", "model.safetensors"]
    header = (run_dir / "predictions.csv").read_text().splitlines()[0]
    assert header == "example_id,gold,predicted,loss," + ",".join(f"prob_{d}" for d in range(10))
