"""The run outputs every integration writes the same way: ``predictions.csv`` and
``metrics.json`` (``artifact/`` is each library's own; :mod:`.transformers`, :mod:`.lightning`).

A task's ``reload_predictions`` hook writes its re-created predictions with
:func:`write_predictions` too, so ``close`` and ``verify`` compare files written alike.

Usage::

    write_predictions_and_metrics(trial.run_dir, predictions=rows, metrics={"accuracy": 0.97})
    write_predictions(out, rows)       # in a reload hook
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Mapping, Sequence

from flightplan.durable import write_atomic, write_json_atomic
from flightplan.errors import ArgumentError
from flightplan.rundir import RunDir

__all__ = ["write_predictions", "write_predictions_and_metrics"]


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
