"""The Trainer example of docs/tasks.md as a reader uses it: the first example's files plus
``trainer_train.py``, copied from the page, with ``task = "trainer_train.py"`` in both
runs, taken plan → run → close → verify --trust-code through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import run_cli
from docs_examples import docs_files

HANG_S = 900
"""A step that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=HANG_S)


def test_the_docs_trainer_task_runs_plan_to_verify(tmp_path: Path) -> None:
    for name, body in docs_files().items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    spec = tmp_path / "campaign.toml"
    text = spec.read_text(encoding="utf-8")
    assert text.count('task = "train.py"') == 2
    spec.write_text(text.replace('task = "train.py"', 'task = "trainer_train.py"'),
                    encoding="utf-8")
    subprocess.run([sys.executable, "make_data.py"], cwd=tmp_path, check=True, timeout=60)
    steps = {verb: _cli(*args, cwd=tmp_path) for verb, args in (
        ("plan", ("plan", "campaign.toml")), ("run", ("run", "campaign.toml", "--json")),
        ("close", ("close", "campaign.toml", "--json")),
        ("verify", ("verify", "results", "--json", "--trust-code")))}
    for verb, done in steps.items():
        assert done.returncode == 0, f"{verb}: {done.stderr[-3000:]}"
    outcome = json.loads(steps["run"].stdout)
    assert outcome["statuses"] == {"control": "finished", "lr-0.2": "finished"}
    assert outcome["pilot"]["ok"] is True, outcome["pilot"]["message"]
    assert outcome["pilot"]["compared_steps"] == list(range(1, 12))
    for run in outcome["runs"]:
        predictions = (tmp_path / "runs" / run["run_id"] / "predictions.csv").read_text()
        assert predictions.splitlines()[0] == "example_id,target,prediction,abs_error"
        assert len(predictions.splitlines()) == 51
        assert sorted(p.name for p in (tmp_path / "runs" / run["run_id"] / "artifact").iterdir()) \
            == ["artifact.json", "model.safetensors"]
    closed = json.loads(steps["close"].stdout)
    assert sorted(closed["accepted"]) == sorted(r["run_id"] for r in outcome["runs"])
    verified = json.loads(steps["verify"].stdout)
    assert verified["verified"] is True
    assert set(verified["reload"].values()) == {"reproduced"}
