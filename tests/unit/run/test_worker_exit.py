"""How a worker process ends: a rank of a run of several processes leaves with ``os._exit``
(no interpreter finalization, which let gloo's threads abort a finished rank) even when
its task deleted ``WORLD_SIZE`` on the way out, as Lightning's teardown does; a process of
one rank finalizes normally; a fatal signal leaves the Python stack in the log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

FINALIZED = "finalized"
"""What the task's ``atexit`` handler prints: only an interpreter that finalizes runs it."""

TASK = f"""import atexit, os

def train(trial):
    atexit.register(lambda: print({FINALIZED!r}, flush=True))
    os.environ.pop("WORLD_SIZE", None)      # what Lightning's LightningEnvironment.teardown does
    if trial.params.get("abort"):
        os.abort()                          # a crash below Python
    raise RuntimeError("the task failed")   # exit 3 with no collective
"""


def _worker(tmp_path: Path, env: dict[str, str], **params: object) -> subprocess.CompletedProcess[str]:
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "trial.json").write_text(json.dumps({
        "run_id": "exit-0123456789", "name": "exit", "task": "task.py",
        "campaign_dir": str(tmp_path), "resume": False, "params": params}))
    clean = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    return subprocess.run([sys.executable, "-m", "flightplan.run.worker",
                           str(tmp_path / "trial.json")], env={**clean, **env}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_a_rank_ends_without_finalizing_even_when_its_task_deleted_world_size(tmp_path):
    child = _worker(tmp_path, {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})
    assert child.returncode == 3, child.stderr
    assert "[rank 1] RuntimeError: the task failed" in child.stderr
    assert FINALIZED not in child.stdout      # os._exit: the atexit handler never ran


def test_a_process_of_one_rank_finalizes(tmp_path):
    child = _worker(tmp_path, {})
    assert child.returncode == 3, child.stderr
    assert child.stdout == f"{FINALIZED}\n"


def test_a_fatal_signal_leaves_the_python_stack_in_the_log(tmp_path):
    child = _worker(tmp_path, {}, abort=True)
    assert child.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in child.stderr
    frame = next(line for line in child.stderr.splitlines() if "task.py" in line)
    assert frame.strip().startswith(f'File "{tmp_path / "task.py"}", line 7 in train')
