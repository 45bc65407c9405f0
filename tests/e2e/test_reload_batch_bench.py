"""bench/reload_batch.py at its smallest on the CPU, so that it cannot rot: exit 0, each
line in its place, both ways timed, their ratio the quotient of the two printed times (to
the printed rounding). It reloads the session's closed tiny campaign (``closed_tiny``,
conftest.py) rather than training one of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_reload_batch_on_the_cpu_prints_its_figures(tmp_path, closed_tiny):
    done = subprocess.run([sys.executable, str(BENCH / "reload_batch.py"), "--cpu",
                           "--results", str(closed_tiny.folder / "results"), "--limit", "16",
                           "--copies", "1", "--repeat", "1", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4, lines
    # the tiny campaign's 3 runs, each artifact copied once more: 6 artifacts
    assert re.fullmatch(r"reload_batch: 6 artifacts \(1 copies added to each run's\), limit "
                        r"16, the CPU, \d+ cores", lines[0]), lines[0]
    old = re.fullmatch(r"one process per artifact \(\d+ at once, 1 thread\): (\d+\.\d) s "
                       r"\(median of 1\)", lines[1])
    new = re.fullmatch(r"several per process \(\d+ process\(es\), \d+ thread\(s\) each\): "
                       r"(\d+\.\d) s \(median of 1\)", lines[2])
    assert old and new, lines
    old_s, new_s = float(old.group(1)), float(new.group(1))
    assert old_s > 0 and new_s > 0
    ratio = float(re.fullmatch(r"-> several per process / one per artifact = (\d+\.\d\d)",
                               lines[3]).group(1))
    assert (new_s - 0.05) / (old_s + 0.05) - 0.005 <= ratio <= \
        (new_s + 0.05) / (old_s - 0.05) + 0.005
