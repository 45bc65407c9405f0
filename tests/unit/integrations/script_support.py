"""What the integration test scripts (``lightning_script.py``, ``trainer_script.py``) and
their tests share: the command line of a script that may SIGKILL itself, running it as a
child, its final state and its measurement rows.

Usage (a script)::

    def main() -> int:
        return script_main(run, schedule="--every", default_schedule=3)

Usage (a test)::

    assert run_child(SCRIPT, run_dir, "save:6") == -9
    assert_same_final_state(reference, run_dir)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from flightplan.errors import TrialStopped

__all__ = ["SRC", "FINAL", "parse_kill", "die", "script_main", "run_child", "run_code",
           "artifact_hashes", "save_final", "assert_same_final_state", "measurement_rows"]

SRC = Path(__file__).resolve().parents[3] / "src"
FINAL = "final.pt"
"""The file a script writes at a normal end: ``{"model": state_dict, "optimizer": state_dict}``."""


def parse_kill(kill: str | None) -> tuple[str, int] | None:
    """``"save:6"`` → ``("save", 6)``; None for None or ``""``."""
    if not kill:
        return None
    where, _, at = kill.partition(":")
    return where, int(at)


def die() -> None:
    """SIGKILL this process (a crash: no handler, no atexit)."""
    os.kill(os.getpid(), signal.SIGKILL)


def script_main(run: Callable[..., Any], *, schedule: str, default_schedule: int,
                default_steps: int) -> int:
    """A script's command line: ``RUN_DIR [--steps N] [<schedule> N] [--kill WHERE:N]``;
    calls ``run(run_dir, steps=, <schedule without dashes>=, kill=)``. Exit codes: 0
    finished, 1 stopped by a rule (the stop on stderr)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument(schedule, type=int, default=default_schedule)
    parser.add_argument("--kill", default=None)
    args = parser.parse_args()
    key = schedule.removeprefix("--").replace("-", "_")
    try:
        run(args.run_dir, steps=args.steps, kill=args.kill, **{key: getattr(args, key)})
    except TrialStopped as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 1
    return 0


def run_child(script: Path, run_dir: Path, kill: str | None) -> int:
    """Run ``script RUN_DIR [--kill WHERE:N]`` in a child process; its exit code (-9: killed)."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, str(script), str(run_dir)] + (["--kill", kill] if kill else [])
    return subprocess.run(command, env=env, capture_output=True, timeout=300).returncode


def run_code(code: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code RUN_DIR`` in a child that imports flightplan from this tree and
    the scripts of this folder; its result (``returncode`` -9: killed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=300)


def artifact_hashes(artifact: Path) -> dict[str, str]:
    """sha256 of each file of an artifact folder, by name (what a test compares before and
    after a kill)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(artifact.iterdir())}


def save_final(run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write the weights and optimizer state at the end of a run to ``RUN_DIR/final.pt``."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               run_dir / FINAL)


def assert_same_final_state(a: Path, b: Path) -> None:
    """The two runs' ``final.pt`` hold bitwise the same weights and optimizer state."""
    left = torch.load(a / FINAL, weights_only=True)
    right = torch.load(b / FINAL, weights_only=True)
    assert left["model"].keys() == right["model"].keys()
    for name, tensor in left["model"].items():
        assert torch.equal(tensor, right["model"][name]), (b.name, name)
    assert left["optimizer"]["param_groups"] == right["optimizer"]["param_groups"]
    for index, state in left["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, right["optimizer"]["state"][index][key]), (b.name, index, key)


def measurement_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every row of ``RUN_DIR/measurements.jsonl`` as written (a dict per line)."""
    text = (run_dir / "measurements.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]
