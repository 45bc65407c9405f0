"""bench/gpu_check.py where torch sees no GPU: one line, exit 0 (its checks run on a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GPU_CHECK = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    done = subprocess.run([sys.executable, str(GPU_CHECK)], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_check: no CUDA device visible to torch here; nothing to check (exit 0)\n"
