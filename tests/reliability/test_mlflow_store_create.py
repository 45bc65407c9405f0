"""A new SQLite MLflow store is created whole or not at all.

MLflow creates its tables through a chain of migrations, each its own transaction; a
process killed among them used to leave a database that MLflow could not open again
("table _alembic_tmp_experiments already exists"), so every later ``export`` and live
mirror into that store failed. Here the process that creates the store is killed at
SQLite commits spread over the whole creation, by the fault shim; creating it again must
then give the store an uninterrupted creation gives, and leave nothing beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from reliability.crash_harness import shim_path  # noqa: E402
from reliability.cli_harness import child_env  # noqa: E402

CREATE = ("import sys; from flightplan.tracking.store import MlflowStore; "
          "MlflowStore('sqlite:///' + sys.argv[1])")
pytestmark = pytest.mark.slow


def _experiments(store: Path, folder: Path) -> list[tuple[str, str, str]]:
    """(id, name, artifact location with ``folder`` cut out) of every experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    return [(e.experiment_id, e.name, e.artifact_location.replace(str(folder), ""))
            for e in client.search_experiments()]


def _python(code: str, store: Path, *, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = child_env(MLFLOW_DISABLE_TELEMETRY="true", **env)
    environment["PYTHONPATH"] = shim_path(environment.get("PYTHONPATH"))
    return subprocess.run([sys.executable, "-c", code, str(store)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def _commits(tmp_path: Path) -> int:
    """SQLite commits an uninterrupted creation makes (the shim's counting mode)."""
    counts = tmp_path / "counts.jsonl"
    done = _python(CREATE, tmp_path / "counted.db", cwd=tmp_path,
                   FLIGHTPLAN_FAULT_COUNT=str(counts))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in counts.read_text().splitlines()]
    return sum(r["count"] for r in rows if r["point"] == "commit" and r["contains"] == "")


def test_a_store_killed_while_it_is_created_is_created_again_whole(tmp_path: Path) -> None:
    commits = _commits(tmp_path)
    assert commits >= 5        # the migrations commit one by one
    reference = tmp_path / "reference"
    reference.mkdir()
    assert _python(CREATE, reference / "mlflow.db", cwd=reference).returncode == 0
    expected = _experiments(reference / "mlflow.db", reference)
    for nth in (1, commits // 2):
        folder = tmp_path / f"killed-{nth}"
        folder.mkdir()
        store, marker = folder / "mlflow.db", folder / "fired"
        fault = {"role": "any", "point": "commit", "nth": nth, "after": True,
                 "group": False, "marker": str(marker)}
        killed = _python(CREATE, store, cwd=folder, FLIGHTPLAN_FAULT=json.dumps(fault))
        assert killed.returncode == -9 and marker.exists(), (nth, killed.stderr[-2000:])
        if nth == 1:
            assert not store.exists()          # nothing half made where MLflow looks
        again = _python(CREATE, store, cwd=folder)
        assert again.returncode == 0, (nth, again.stderr[-2000:])
        # the same experiments, the Default one's artifact root in its own folder
        assert _experiments(store, folder) == expected
        assert sorted(p.name for p in folder.iterdir()) == ["fired", "mlflow.db"]
