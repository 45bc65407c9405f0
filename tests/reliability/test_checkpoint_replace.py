"""A checkpoint saved again over one of the same step, killed at every rename and inside the
delete: the next restore finds that step whole, and nothing half deleted or partial is left.

Both writers are tried (flightplan's own ``write_checkpoint`` and the commit of a folder a
training library wrote), each in a child process that the fault shim SIGKILLs at the n-th
``os.rename`` or ``os.unlink`` under ``checkpoints/``, before or after the call; the points
are drawn from a counting run of the same child, so they are calls that really happen.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from flightplan.trial.checkpoint import select_checkpoint
from flightplan.trial.checkpoint_io import load_checkpoint
from flightplan.trial.library_checkpoint import load_library_checkpoint

from .crash_harness import CrashPoint, count_calls, run_with_crash

RUN_ID = "replace-0123456789"

# Writes step 4 (flightplan's format) or step 5 (a library's folder) into ``argv[1]`` with
# the payload ``argv[3]``; the test writes it once and then kills the child as it writes
# the same step again.
CHILD = """
import sys
from pathlib import Path
import torch
from flightplan.trial.checkpoint_io import write_checkpoint
from flightplan.trial.library_checkpoint import commit_library_checkpoint

parent, kind, payload = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
meta = {"run_id": %r, "config_hash": None}
if kind == "flightplan":
    value = float(len(payload))
    write_checkpoint(parent, 4, model={"w": torch.full((64,), value)}, optimizer=None,
                     state={"counters": {"step": 4}, "note": payload}, meta=meta)
else:
    source = parent.parent / "staging" / "step-5"
    source.mkdir(parents=True)
    for name in ("model.safetensors", "optimizer.pt", "trainer_state.json"):
        (source / name).write_text(f"{name} {payload}")
    commit_library_checkpoint(source, parent, 5, meta=dict(meta, kind="transformers"))
""" % RUN_ID

STEPS = {"flightplan": "step-000004", "library": "step-000005"}
LOADERS = {"flightplan": load_checkpoint, "library": load_library_checkpoint}


def _argv(folder: Path, kind: str, payload: str) -> list[str]:
    return [sys.executable, "-c", CHILD, str(folder / "checkpoints"), kind, payload]


def _points(counts: dict) -> list[CrashPoint]:
    """Before and after every rename under checkpoints/, and inside the delete (the first
    file deleted, before and after)."""
    renames = counts.get(("runner", "replace", "checkpoints"), 0)
    points = [CrashPoint("any", "replace", nth=n, after=after, contains="checkpoints", group=False)
              for n in range(1, renames + 1) for after in (False, True)]
    if counts.get(("runner", "unlink", "checkpoints"), 0):
        points += [CrashPoint("any", "unlink", nth=1, after=after, contains="checkpoints",
                              group=False) for after in (False, True)]
    return points


@pytest.mark.parametrize("kind", ["flightplan", "library"])
def test_a_step_saved_again_survives_a_kill_at_every_rename_and_inside_the_delete(
        tmp_path: Path, kind: str) -> None:
    counted = tmp_path / "counted"
    first = run_with_crash(_argv(counted, kind, "first"), cwd=tmp_path, point=None,
                           marker=tmp_path / "fired")
    assert first.code == 0, first.stderr_tail
    code, counts = count_calls(_argv(counted, kind, "again"), cwd=tmp_path)
    assert code == 0
    points = _points(counts)
    assert points and counts[("runner", "unlink", "checkpoints")] >= 3, counts  # the old files
    for index, point in enumerate(points):
        folder = tmp_path / f"point-{index}"
        assert run_with_crash(_argv(folder, kind, "first"), cwd=tmp_path, point=None,
                              marker=tmp_path / "fired").code == 0
        killed = run_with_crash(_argv(folder, kind, "again"), cwd=tmp_path, point=point,
                                marker=tmp_path / "fired")
        assert killed.fired and killed.code == -signal.SIGKILL, (point.label(), killed)
        parent = folder / "checkpoints"
        files, path, rejected, _ = select_checkpoint(parent, RUN_ID, None, load=LOADERS[kind])
        assert rejected == [], (point.label(), rejected)
        assert files is not None and path == parent / STEPS[kind], point.label()
        assert sorted(p.name for p in parent.iterdir()) == [STEPS[kind]], point.label()
        payloads = {"first", "again"}
        if kind == "flightplan":
            assert files.state["note"] in payloads, point.label()
        else:
            text = (path / "optimizer.pt").read_text()
            assert text.removeprefix("optimizer.pt ") in payloads, point.label()
