"""The DDP example as a user runs it: ``examples/digits-ddp`` (plain PyTorch
DistributedDataParallel, ``[[run]] processes = 2``, gloo on the CPU) copied to a fresh
folder and taken plan → run → close → verify through the real CLI, by ``bench/gpu_check.py``'s
check 9 (:func:`check_ddp_example`, which a lent GPU runs with NCCL): one run of the example
in the suite tests both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from gpu_check import check_ddp_example  # noqa: E402  (bench/ is put on sys.path first)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The example's folder after check 9 at two gloo ranks, and each verb's stdout."""
    folder = tmp_path_factory.mktemp("ddp")
    outputs = check_ddp_example(folder, 2, gpu=False)
    assert outputs is not None, f"check 9 failed (its line above){_log_tails(folder / 'digits-ddp')}"
    return folder / "digits-ddp", outputs


def _log_tails(folder: Path) -> str:
    """The last lines of every run's log (what a rank printed before it ended)."""
    return "".join(f"\n--- {log.relative_to(folder)}:\n" + "\n".join(log.read_text().splitlines()[-15:])
                   for log in sorted((folder / "runs").rglob("log.txt")))


def test_the_ddp_example_runs_plan_to_verify(campaign: tuple[Path, dict[str, str]]) -> None:
    _, outputs = campaign
    outcome = json.loads(outputs["run"])
    assert outcome["statuses"] == {"control": "finished", "hidden-128": "finished"}
    assert outcome["pilot"]["ok"] is True, outcome["pilot"]["message"]
    for run in outcome["runs"]:
        assert 0.8 < run["metric"] <= 1.0
    closed = json.loads(outputs["close"])
    assert sorted(closed["accepted"]) == sorted(r["run_id"] for r in outcome["runs"])
    verified = json.loads(outputs["verify"])
    assert verified["verified"] is True and verified["findings"] == []
    assert set(verified["reload"].values()) == {"reproduced"}


def test_each_run_executed_as_two_ranks_with_one_set_of_rows(campaign: tuple[Path, dict[str, str]]) -> None:
    folder, outputs = campaign
    outcome = json.loads(outputs["run"])
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
