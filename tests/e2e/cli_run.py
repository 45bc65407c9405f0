"""The installed ``flightplan`` command, run by the end-to-end tests as a user runs it
(the venv's entry point, offline: no model hub is reachable here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def run_cli(*args: str, cwd: Path | None = None, hang_s: float,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``flightplan ARGS`` in ``cwd``, output captured as text; ``hang_s`` seconds is a
    safety net against a hang, not a speed check; ``env`` defaults to :data:`ENV`."""
    return subprocess.run([str(FLIGHTPLAN), *args], capture_output=True, text=True,
                          env=dict(ENV if env is None else env), timeout=hang_s, cwd=cwd)
