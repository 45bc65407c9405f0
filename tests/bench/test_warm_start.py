"""bench/warm_start.py in small mode (2 runs of 2 steps each way): it runs, warm and cold
runs' weights are bitwise equal, and it prints both figures with their ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "warm_start.py"

pytestmark = pytest.mark.slow


def test_the_warm_start_bench_runs_and_warm_runs_equal_cold_ones():
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "2", "--steps", "2"],
                          capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "weights: warm and cold runs bitwise equal" in done.stdout
    assert done.stdout.count("ratio cold/warm") == 2, done.stdout
