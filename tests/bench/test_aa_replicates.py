"""bench/aa_replicates.py at its defaults: 40 independent A/A comparisons of the digits
control, 3 replicates a side, under the two-level interval (about 30 s on one core)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "aa_replicates.py"

pytestmark = pytest.mark.slow


def test_the_two_level_interval_calls_a_model_better_or_worse_than_itself_at_most_5_percent():
    done = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rates = dict(re.findall(r"^  (meets|does_not_meet): \d+/40 = \S+ \(95% Clopper-Pearson \[\S+, (\S+)\]",
                            done.stdout, flags=re.M))
    assert set(rates) == {"meets", "does_not_meet"}, done.stdout
    assert all(float(high) < 0.15 for high in rates.values()), done.stdout   # told apart from 15 %
