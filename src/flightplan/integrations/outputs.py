"""The run outputs every integration writes the same way: ``predictions.csv``,
``metrics.json``, and how ``artifact/`` is put in place (:func:`new_artifact`; what it holds
is each library's own: :mod:`.transformers`, :mod:`.lightning`).

A task's ``reload_predictions`` hook writes its re-created predictions with
:func:`write_predictions` too, so ``close`` and ``verify`` compare files written alike.

Usage::

    write_predictions_and_metrics(trial.run_dir, predictions=rows, metrics={"accuracy": 0.97})
    write_predictions(out, rows)       # in a reload hook
    with new_artifact(trial.run_dir) as folder:
        save_model(module, str(folder / "model.safetensors"))
"""

from __future__ import annotations

import csv
import io
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from flightplan.durable import fsync_tree, replace_path, write_atomic, write_json_atomic
from flightplan.errors import ArgumentError
from flightplan.rundir import RunDir

__all__ = ["write_predictions", "write_predictions_and_metrics", "new_artifact"]


def write_predictions(path: Path | str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write ``rows`` as a CSV file (columns: the first row's keys, in order; a float as
    ``str`` writes it, which round-trips) at ``path``, atomically.

    Raises:
        ArgumentError: no rows.
    """
    if not rows:
        raise ArgumentError("write_outputs: predictions is empty; give one row per test example")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(Path(path), buffer.getvalue().encode("utf-8"))


def write_predictions_and_metrics(run_dir: Path, *, predictions: Sequence[Mapping[str, Any]],
                                  metrics: Mapping[str, Any]) -> None:
    """``predictions.csv`` (one row per test example, ``example_id`` first; see
    docs/tasks.md) and ``metrics.json`` (JSON-able figures) in ``run_dir``.

    Raises:
        ArgumentError: no predictions.
    """
    write_predictions(RunDir(run_dir).predictions, predictions)
    write_json_atomic(RunDir(run_dir).metrics, dict(metrics))


@contextmanager
def new_artifact(run_dir: Path) -> Iterator[Path]:
    """The folder to write a run's next ``artifact/`` into: ``artifact.tmp/``, emptied and
    created. When the block ends without an error, every file in it is fsync'd and the
    folder is put in place of the previous artifact (:func:`flightplan.durable.replace_path`):
    a kill at any moment leaves the previous artifact whole or the new one, never a mix
    (between the two renames the previous one lies whole in ``artifact.deleting/``). On an
    error the previous artifact is left as it was.

    Yields:
        The staging folder.
    """
    run = RunDir(run_dir)
    staging = run.artifact_staging
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    yield staging
    fsync_tree(staging)
    replace_path(run.artifact, staging)
