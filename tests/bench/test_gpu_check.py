"""bench/gpu_check.py where torch sees no GPU: one line, exit 0 (its checks run on a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GPU_CHECK = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    done = subprocess.run([sys.executable, str(GPU_CHECK)], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_check: no CUDA device visible to torch here; nothing to check (exit 0)\n"


@pytest.mark.slow
def test_its_checks_pass_on_the_cpu(tmp_path):
    """``--cpu`` runs the checks' logic where no GPU is: bf16 resume bitwise, goodput of
    those processes adding up, textclf killed and resumed bitwise, a checkpoint streamed
    home bitwise, rows logged as tensors equal to .item()'s and a NaN stopping at its step;
    one line each, exit 0 (check 9, the DDP example, is tests/e2e/test_digits_ddp.py)."""
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--cpu", "--dir", str(tmp_path),
                           "--steps", "12"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["gpu_check", "AMP", "goodput", "textclf",
                                                      "checkpoint", "rows"]
    assert all(line.endswith("-> ok") for line in lines[1:]), done.stdout
