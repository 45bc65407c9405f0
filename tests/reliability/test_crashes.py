"""SIGKILL at seeded moments, then run again: the result is bitwise identical to a run
that was never interrupted, no corrupt checkpoint is ever loaded, and the ledger holds.

Two levels. A training script on the trial API (seconds per process) is killed before,
during and after its checkpoint writes. The tiny campaign (``examples/tiny``) is killed
in the runner and in its trial processes — during checkpoint writes, ledger commits and
``close`` — and run again until it finishes. CI runs a few points; ``bench/faults.py``
draws 50 and more from the same harness.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest

from .crash_harness import CrashPoint, count_calls, draw_points, run_with_crash

SCRIPT = Path(__file__).with_name("trial_script.py")
SEED = 20261129


def _script_argv(run_dir: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), str(run_dir), "--steps", "6", "--checkpoint-at", "1,3,5"]


@pytest.fixture(scope="module")
def script_reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One uninterrupted run of the script in count mode: its digest and call counts."""
    folder = tmp_path_factory.mktemp("script-reference")
    code, counts = count_calls(_script_argv(folder / "run"), cwd=folder)
    assert code == 0
    clean = run_with_crash(_script_argv(folder / "again"), cwd=folder, point=None,
                           marker=folder / "fired")
    return {"digest": clean.stdout.strip(), "counts": counts}


def _script_points(counts: dict, n: int, seed: int) -> list[CrashPoint]:
    kinds = [("runner", "fsync", "checkpoints"), ("runner", "replace", "checkpoints"),
             ("runner", "replace", "")]
    return [CrashPoint("any", p.point, nth=p.nth, after=p.after, contains=p.contains, group=True)
            for p in draw_points(counts, n=n, seed=seed, kinds=kinds)]


def test_the_script_counts_what_a_checkpoint_does(script_reference: dict) -> None:
    counts = script_reference["counts"]
    # three saves: model, optimizer, state, manifest, the .tmp folder and checkpoints/ fsync'd
    assert counts[("runner", "fsync", "checkpoints")] == 3 * 6
    assert counts[("runner", "replace", "checkpoints")] == 3  # step-N.tmp -> step-N
    assert len(script_reference["digest"]) == 64


@pytest.mark.parametrize("index", range(3))
def test_a_script_killed_around_a_checkpoint_write_resumes_bitwise(
        script_reference: dict, tmp_path: Path, index: int) -> None:
    point = _script_points(script_reference["counts"], 3, SEED)[index]
    run_dir = tmp_path / "run"
    crashed = run_with_crash(_script_argv(run_dir), cwd=tmp_path, point=point, marker=tmp_path / "fired")
    assert crashed.fired and crashed.code == -signal.SIGKILL, (point.label(), crashed)
    again = run_with_crash(_script_argv(run_dir), cwd=tmp_path, point=None, marker=tmp_path / "fired")
    assert again.code == 0, again.stderr_tail
    assert again.stdout.strip() == script_reference["digest"], point.label()
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    assert not [r for r in rows if r.get("event") == "checkpoint_rejected"], point.label()
    restored = [r for r in rows if r.get("event") == "restore"][-1]
    assert restored["source"] is None or restored["source"].startswith("step-")
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000004", "step-000006"]
