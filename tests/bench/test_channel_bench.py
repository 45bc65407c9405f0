"""bench/channel.py in its smallest run: a 4 MiB checkpoint over the direct connection,
quiet and beside 100 hostile connections, one round each (its figures are not checked:
only that it runs to the end and that the hostile connections delivered nothing, which
the bench itself asserts before it prints)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHANNEL = Path(__file__).resolve().parents[2] / "bench" / "channel.py"


def test_a_small_run_prints_its_ratio_and_that_the_attack_delivered_nothing() -> None:
    done = subprocess.run([sys.executable, str(CHANNEL), "--mib", "4", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    [summary, attack] = done.stdout.splitlines()
    assert summary.startswith("channel   4 MB checkpoint over the direct connection, best of "
                              "1: quiet ")
    assert "(target >= 0.9); delivered by them: nothing (home holds the checkpoint alone, " \
           "byte for byte, no frame refused)" in summary
    assert attack.startswith("attack    all 100 open ")
