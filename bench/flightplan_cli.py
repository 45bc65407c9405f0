"""The ``flightplan`` command as the benches call it: the venv's entry point in a campaign
folder, timed (imported by ``gpu_campaign.py`` and ``gpu_check.py``, which run from
``bench/``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def flightplan(folder: Path, *args: str, env: dict[str, str] | None = None,
               timeout: float = 3600) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``flightplan ARGS`` run in ``folder`` with ``env`` (None: this process's), its output
    captured as text: (wall seconds, the finished process). Raises
    ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
    command = [str(Path(sys.executable).parent / "flightplan"), *args]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return time.perf_counter() - began, done
