"""A folder put in place of another (an artifact written again, a run's outputs come home)
by :func:`flightplan.durable.replace_path`, killed at every rename and inside the delete of
the old one: the place holds the old folder whole or the new one whole, never a mix; in the
one window where it holds neither (between the two renames) the old one lies whole in
``<name>.deleting`` and the new one whole under its staging name, and the next write of the
same folder settles it with nothing left beside it.

The child process is SIGKILLed by the fault shim at the n-th ``os.replace``/``os.rename``
or ``os.unlink`` of its second write, before or after the call.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from .crash_harness import CrashPoint, count_calls, run_with_crash

# Writes ``artifact/`` (two files holding argv[2]) into the folder argv[1] as an integration
# does: into ``artifact.tmp/`` first, then put in place.
CHILD = """
import shutil, sys
from pathlib import Path
from flightplan.durable import fsync_tree, replace_path, write_atomic

run_dir, payload = Path(sys.argv[1]), sys.argv[2]
staging = run_dir / "artifact.tmp"
shutil.rmtree(staging, ignore_errors=True)
for name in ("model.safetensors", "artifact.json"):
    write_atomic(staging / name, f"{name} {payload}".encode())
fsync_tree(staging)
replace_path(run_dir / "artifact", staging)
"""
NAMES = ["artifact.json", "model.safetensors"]


def _argv(folder: Path, payload: str) -> list[str]:
    return [sys.executable, "-c", CHILD, str(folder), payload]


def _payload(folder: Path) -> str | None:
    """The one payload every file of ``folder`` holds (None: missing or mixed)."""
    if not folder.is_dir() or sorted(p.name for p in folder.iterdir()) != NAMES:
        return None
    found = {p.read_text().removeprefix(f"{p.name} ") for p in folder.iterdir()}
    return found.pop() if len(found) == 1 else None


def test_a_folder_replaced_survives_a_kill_at_every_rename_and_inside_the_delete(
        tmp_path: Path) -> None:
    counted = tmp_path / "counted"
    assert run_with_crash(_argv(counted, "first"), cwd=tmp_path, point=None,
                          marker=tmp_path / "fired").code == 0
    code, counts = count_calls(_argv(counted, "again"), cwd=tmp_path)
    assert code == 0 and _payload(counted / "artifact") == "again"
    # two atomic files written, the old folder set aside, the new one renamed in; the old
    # folder's two files deleted
    assert (counts[("runner", "replace", "")], counts[("runner", "unlink", "")]) == (4, 2)
    points = [CrashPoint("any", kind, nth=n, after=after, contains="artifact", group=False)
              for kind, calls in (("replace", 4), ("unlink", 2))
              for n in range(1, calls + 1) for after in (False, True)]
    outcomes = set()
    for index, point in enumerate(points):
        folder = tmp_path / f"point-{index}"
        assert run_with_crash(_argv(folder, "first"), cwd=tmp_path, point=None,
                              marker=tmp_path / "fired").code == 0
        killed = run_with_crash(_argv(folder, "again"), cwd=tmp_path, point=point,
                                marker=tmp_path / "fired")
        assert killed.fired and killed.code == -signal.SIGKILL, (point.label(), killed)
        now = _payload(folder / "artifact")
        if now is None:   # between the two renames: both whole beside the place
            assert not (folder / "artifact").exists(), point.label()
            assert _payload(folder / "artifact.deleting") == "first", point.label()
            assert _payload(folder / "artifact.tmp") == "again", point.label()
        outcomes.add(now)
        assert run_with_crash(_argv(folder, "third"), cwd=tmp_path, point=None,
                              marker=tmp_path / "fired").code == 0
        assert sorted(p.name for p in folder.iterdir()) == ["artifact"], point.label()
        assert _payload(folder / "artifact") == "third", point.label()
    assert outcomes == {"first", "again", None}
