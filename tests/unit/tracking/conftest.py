"""Fixtures of the MLflow tests: telemetry off, the close fixture campaign and tests/fixtures
importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# MLflow's usage telemetry stays off in tests (documented switch of mlflow 3.x)
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "close"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))   # processes.wait_for
