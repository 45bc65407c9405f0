"""The DDP example as a user runs it: ``examples/digits-ddp`` (plain PyTorch
DistributedDataParallel, ``[[run]] processes = 2``, gloo on the CPU) copied to a fresh
folder and taken plan → run → close → verify through the real CLI."""

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


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("ddp") / "digits-ddp"
    shutil.copytree(REPO / "examples" / "digits-ddp", folder,
                    ignore=shutil.ignore_patterns("runs", "results", ".flightplan"))
    steps: dict[str, subprocess.CompletedProcess[str]] = {}
    for verb, args in (("plan", ("plan", "campaign.toml")),
                       ("run", ("run", "campaign.toml", "--json")),
                       ("close", ("close", "campaign.toml", "--json")),
                       ("verify", ("verify", "results", "--json", "--trust-code"))):
        steps[verb] = run_cli(*args, cwd=folder, hang_s=HANG_S)
    return folder, steps


def _log_tails(folder: Path) -> str:
    """The last lines of every run's log (what a rank printed before it ended)."""
    return "".join(f"\n--- {log.relative_to(folder)}:\n" + "\n".join(log.read_text().splitlines()[-15:])
                   for log in sorted((folder / "runs").rglob("log.txt")))


def test_the_ddp_example_runs_plan_to_verify(campaign: tuple[Path, dict]) -> None:
    folder, steps = campaign
    for verb, done in steps.items():
        assert done.returncode == 0, f"{verb}: {done.stderr[-3000:]}{_log_tails(folder)}"
    outcome = json.loads(steps["run"].stdout)
    assert outcome["statuses"] == {"control": "finished", "hidden-128": "finished"}
    assert outcome["pilot"]["ok"] is True, outcome["pilot"]["message"]
    for run in outcome["runs"]:
        assert 0.8 < run["metric"] <= 1.0
    closed = json.loads(steps["close"].stdout)
    assert sorted(closed["accepted"]) == sorted(r["run_id"] for r in outcome["runs"])
    verified = json.loads(steps["verify"].stdout)
    assert verified["verified"] is True and verified["findings"] == []
    assert set(verified["reload"].values()) == {"reproduced"}


def test_each_run_executed_as_two_ranks_with_one_set_of_rows(campaign: tuple[Path, dict]) -> None:
    folder, steps = campaign
    outcome = json.loads(steps["run"].stdout)
    for run in outcome["runs"]:
        run_dir = folder / "runs" / run["run_id"]
        log = (run_dir / "log.txt").read_text()
        assert "2 processes" in log.splitlines()[0]
        rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
        losses = [r["step"] for r in rows if "loss" in r]
        assert losses == list(range(len(losses))) and len(losses) == 3 * 23  # 718 rows a rank, 32 a batch
        checkpoints = sorted((run_dir / "checkpoints").iterdir())
        manifest = json.loads((checkpoints[-1] / "manifest.json").read_text())
        assert manifest["world_size"] == 2
    control = next(r["run_id"] for r in outcome["runs"] if r["name"] == "control")
    pilot = folder / "runs" / f"pilot-{control}"
    for run_dir in (pilot, pilot / "resume"):       # the resume check at the run's world size
        assert "2 processes" in (run_dir / "log.txt").read_text().splitlines()[0]
