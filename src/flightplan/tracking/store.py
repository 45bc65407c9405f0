"""Writing flightplan runs into an MLflow tracking store: the part export and live share.

A flightplan run becomes one MLflow run, found again by its tag ``flightplan.run_id``, so
writing it twice updates it and never duplicates it. Metric points are compared with
what the store already holds (key, step, timestamp, value, counted) and only the missing
ones are sent; params already present are not sent again. That makes every write here
safe to repeat: the live mirror and a later ``flightplan export mlflow`` complete each
other.

How a row of ``measurements.jsonl`` becomes metric points (:func:`metric_points`):

- a training row ``{"step": 3, "time": 1.7e9, "loss": 0.5, "step_s": 0.01}`` gives
  ``loss`` and ``step_s`` at step 3, timestamp ``round(time * 1000)`` ms;
- an event row ``{"event": "checkpoint", "step": 4, "bytes": 9000, ...}`` gives
  ``checkpoint/bytes`` …; ``evaluation`` rows give their metrics under their own names
  (``macro_f1``, ``accuracy``, ``eval_s``, ``n_test``);
- numbers only: ``"nan"``/``"inf"``/``"-inf"`` strings are the non-finite floats
  (``Trial.log`` writes them so), booleans, other strings, lists and objects are skipped.

MLflow's SQL stores keep ±inf as ±1.7976931348623157e308 (the largest float), so a point
is compared with the store under that value (:meth:`MetricPoint.identity`).

Talking to MLflow: its HTTP client retries a failed request 7 times with a backoff factor
of 2 and waits 120 s for an answer by default (minutes against a server that is down);
:data:`HTTP_SETTINGS` shortens that unless the environment sets MLflow's variables. MLflow's
own INFO lines are kept off the terminal (its logger at WARNING) unless
``MLFLOW_LOGGING_LEVEL`` is set.

Usage::

    store = MlflowStore("sqlite:////abs/mlflow.db")
    experiment_id = store.experiment("tiny", tags={...})
    run = store.run(experiment_id, "control-1a2b3c4d5e", name="control", start_ms=..., tags={})
    store.log_points(run, points)          # only the points the store lacks
    store.finish(run, "FINISHED", end_ms)
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from flightplan.durable import fsync_dir
from flightplan.errors import ArgumentError, TrackingFailed
from flightplan.rows import Row, UnknownEvent, as_number

__all__ = [
    "RUN_ID_TAG",
    "HTTP_SETTINGS",
    "QUIET_SETTINGS",
    "MetricPoint",
    "MlflowRun",
    "MlflowStore",
    "default_tracking_uri",
    "flatten",
    "metric_points",
    "require_mlflow",
]

RUN_ID_TAG = "flightplan.run_id"

#: what a flightplan run id may hold (``slug-hex``, :func:`flightplan.ids.run_id`): it is
#: written into an MLflow search filter, which binds no parameters
_RUN_ID_CHARS = re.compile(r"[a-z0-9][a-z0-9-]*")
# the plain measurement keys of a row: not metrics
# event rows whose numbers keep their own names (the task's evaluation metrics)
_PLAIN_EVENTS = ("evaluation",)
_BAD_KEY_CHARS = re.compile(r"[^\w\-./ ]")
# MLflow's log_batch limits (per request): 1000 metrics, 100 params, 100 tags
_BATCH_METRICS, _BATCH_PARAMS, _BATCH_TAGS = 1000, 100, 100
_PARAM_VALUE_MAX = 6000  # characters MLflow keeps of a param value
_ERRNO = re.compile(r"\[Errno -?\d+\][^'\"()]*")

HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""MLflow's HTTP client settings (the names of mlflow 3.17.2's ``environment_variables``)
that :class:`MlflowStore` sets where the environment does not: 2 retries, 1 s backoff factor
(waits of about 1–3 s, jitter included), 20 s for an answer. A request to a server that is
down fails within seconds; one that stops answering, within 3 × 20 s."""

QUIET_SETTINGS = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
"""Set by :class:`MlflowStore` whatever the environment says: MLflow's client otherwise
writes "View run … at: URL" lines to stdout for an HTTP store when a run ends, the URL
with the store's user and password in it, breaking ``--json``'s one object."""


@dataclass(frozen=True)
class MetricPoint:
    """One metric value: ``key`` at optimizer ``step``, ``timestamp_ms`` (unix ms)."""

    key: str
    value: float
    step: int
    timestamp_ms: int

    def identity(self) -> tuple[str, int, int, str]:
        """What makes two points the same: NaN equals NaN, and ±inf equals ±1.797e308, the
        value MLflow's SQL stores keep for it (``SqlAlchemyStore.sanitize_metric_value``)."""
        value = math.copysign(sys.float_info.max, self.value) if math.isinf(self.value) \
            else self.value
        return self.key, self.step, self.timestamp_ms, repr(value)


@dataclass
class MlflowRun:
    """An MLflow run standing for one flightplan run, with what the store already holds."""

    mlflow_run_id: str
    flightplan_run_id: str
    sent: Counter[Any] = field(default_factory=Counter)   # identities of points in the store
    params: dict[str, str] = field(default_factory=dict)


def require_mlflow() -> Any:
    """Import and return the ``mlflow`` module, its INFO lines (``Creating initial MLflow
    database tables...``) kept off the terminal unless ``MLFLOW_LOGGING_LEVEL`` is set.

    Raises:
        ArgumentError: MLflow is not installed (the fix: the ``mlflow`` extra).
    """
    try:
        import mlflow
    except ImportError:
        raise ArgumentError("MLflow is not installed; install the extra with "
                            "`pip install 'flightplan[mlflow]'` (mlflow 3.17.2)") from None
    if not os.environ.get("MLFLOW_LOGGING_LEVEL"):
        logging.getLogger("mlflow").setLevel(logging.WARNING)
    return mlflow


def failure_reason(exc: BaseException) -> str:
    """The cause of an MLflow failure in one line: a connection error as ``unreachable:
    [Errno 111] Connection refused``, a database error as the driver's message (SQLAlchemy
    keeps it in ``orig``), anything else as the first line of its message."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip()
    first = text.splitlines()[0] if text else type(cause).__name__
    if first.startswith("API request to "):          # MLflow's REST client, retries spent
        errno = _ERRNO.search(first)
        if errno:
            return f"unreachable: {errno.group(0).strip()}"
    return first


def default_tracking_uri(given: str | None) -> str:
    """The tracking URI to use: ``given``, else ``$MLFLOW_TRACKING_URI``, else a SQLite
    store ``mlflow.db`` in the current directory (as an absolute ``sqlite:////`` URI)."""
    if given:
        return given
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return "sqlite:///" + str(Path.cwd().resolve() / "mlflow.db")


def artifact_location_for(tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go: ``mlartifacts/`` beside a SQLite database
    (else MLflow puts them in ``./mlruns`` of whatever folder the process runs in); None
    (the server decides) for any other store."""
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri[len("sqlite:///"):])
        return (database.resolve().parent / "mlartifacts").as_uri()
    return None


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as MLflow params: ``{"adapter": {"rank": 4}}`` → ``{"adapter.rank": "4"}``.

    Lists and scalars become their JSON-like text (``["query", "value"]``, ``0.01``,
    ``true``, ``null``); values are cut to 6000 characters (MLflow's limit).
    """
    out: dict[str, str] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(flatten(item, prefix=name + "."))
        else:
            text = item if isinstance(item, str) else json.dumps(item, sort_keys=True)
            out[name] = text[:_PARAM_VALUE_MAX]
    return out


def metric_key(name: str) -> str:
    """``name`` with characters MLflow refuses in a metric key replaced by ``_``."""
    return _BAD_KEY_CHARS.sub("_", name)


def metric_points(row: Row) -> list[MetricPoint]:
    """The metric points of one ``measurements.jsonl`` row (see the module docstring).

    Returns:
        Points in the row's key order; empty for a row without numbers.
    """
    event = row.event if isinstance(row, UnknownEvent) else row.EVENT
    prefix = "" if event is None or event in _PLAIN_EVENTS else f"{event}/"
    stamp = int(round(row.time * 1000))
    points = []
    for key, value in row.fields().items():
        number = as_number(value)
        if number is not None:
            points.append(MetricPoint(metric_key(prefix + key), number, row.step, stamp))
    return points


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def create_sqlite_store(tracking_uri: str) -> None:
    """Create the SQLite store of ``tracking_uri`` (``sqlite:///PATH``) whole or not at all,
    when PATH does not exist yet or is empty; any other URI or an existing store is left
    as it is.

    MLflow creates its tables through a chain of migrations, each its own transaction, so
    a process killed among them leaves a database that MLflow cannot open again ("table
    _alembic_tmp_experiments already exists"; found by ``bench/faults.py``'s ``export``
    kind). Here MLflow creates the tables (and its ``Default`` experiment, with the artifact
    root it would give it) in ``.PATH.creating`` beside PATH, which is then fsync'd and
    renamed into place; a leftover from a killed attempt is removed first.

    Raises:
        Exception: whatever MLflow or the file system raises (the caller names the store).
    """
    if not tracking_uri.startswith("sqlite:///"):
        return
    path = Path(tracking_uri[len("sqlite:///"):])
    if path.exists() and path.stat().st_size > 0:
        return
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.creating")
    for leftover in (staging, staging.with_name(f"{staging.name}-journal")):
        leftover.unlink(missing_ok=True)
    # MLflow leaves the store constructor unannotated
    store = SqlAlchemyStore(f"sqlite:///{staging}",  # type: ignore[no-untyped-call]
                            DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    store.engine.dispose()
    with open(staging, "rb+") as created:
        os.fsync(created.fileno())
    os.replace(staging, path)
    fsync_dir(path.parent)


class MlflowStore:
    """One MLflow tracking store, written through ``MlflowClient``.

    Args:
        tracking_uri: e.g. ``sqlite:////abs/mlflow.db`` or ``http://127.0.0.1:5000``.

    Raises:
        ArgumentError: MLflow is not installed.
        TrackingFailed: the store cannot be opened (a SQLite path that cannot be created).

    Every method raises :class:`TrackingFailed` (with the URI and MLflow's message) when
    the store cannot be reached or refuses a write.
    """

    def __init__(self, tracking_uri: str) -> None:
        require_mlflow()
        from mlflow.tracking import MlflowClient

        for name, value in HTTP_SETTINGS.items():
            os.environ.setdefault(name, value)
        os.environ.update(QUIET_SETTINGS)
        self.uri = tracking_uri
        try:   # the client opens the store (a new SQLite one is created whole first)
            create_sqlite_store(tracking_uri)
            self.client = MlflowClient(tracking_uri=tracking_uri)
        except Exception as exc:
            raise self._fail("opening the store", exc) from exc

    def _fail(self, action: str, exc: Exception) -> TrackingFailed:
        reason = failure_reason(exc)
        return TrackingFailed(f"MLflow at {self.uri}: {action} failed ({reason}); check that "
                              f"the tracking store is reachable and writable", uri=self.uri,
                              reason=reason)

    def experiment(self, name: str, *, tags: Mapping[str, str]) -> str:
        """The id of experiment ``name`` (created when missing, with an explicit artifact
        location next to a SQLite store); ``tags`` are set on it (again) each call."""
        try:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                experiment_id = self.client.create_experiment(
                    name, artifact_location=artifact_location_for(self.uri))
            else:
                experiment_id = found.experiment_id
            for key, value in tags.items():
                self.client.set_experiment_tag(experiment_id, key, value)
            return experiment_id
        except Exception as exc:  # MLflow raises many types (REST, SQLAlchemy, OS)
            raise self._fail(f"opening experiment {name!r}", exc) from exc

    def run(self, experiment_id: str, flightplan_run_id: str, *, name: str, start_ms: int,
            tags: Mapping[str, str]) -> MlflowRun:
        """The MLflow run tagged ``flightplan.run_id = flightplan_run_id`` (created when
        missing, RUNNING, started at ``start_ms``), with the points and params it holds.

        Raises:
            TrackingFailed: the store fails, or ``flightplan_run_id`` is not a run id
                (lower-case letters, digits and hyphens): it goes into a search filter.
        """
        from mlflow.entities import RunTag

        if not _RUN_ID_CHARS.fullmatch(flightplan_run_id):
            raise TrackingFailed(f"MLflow at {self.uri}: {flightplan_run_id!r} is not a flightplan "
                                 f"run id (lower-case letters, digits and hyphens); nothing sent "
                                 f"for it", uri=self.uri)

        try:
            found = self.client.search_runs(
                [experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{flightplan_run_id}'",
                max_results=2)
            if found:
                mlflow_run = found[0]
            else:
                mlflow_run = self.client.create_run(
                    experiment_id, start_time=start_ms, run_name=name,
                    tags={RUN_ID_TAG: flightplan_run_id})
            run = MlflowRun(mlflow_run.info.run_id, flightplan_run_id,
                            params=dict(mlflow_run.data.params))
            for key in mlflow_run.data.metrics:
                for metric in self.client.get_metric_history(run.mlflow_run_id, key):
                    run.sent[MetricPoint(key, metric.value, metric.step,
                                         metric.timestamp).identity()] += 1
            new_tags = [RunTag(k, v) for k, v in tags.items()
                        if mlflow_run.data.tags.get(k) != v]
            for chunk in _chunks(new_tags, _BATCH_TAGS):
                self.client.log_batch(run.mlflow_run_id, tags=chunk)
            return run
        except Exception as exc:
            raise self._fail(f"finding or creating the run of {flightplan_run_id}", exc) from exc

    def log_params(self, run: MlflowRun, params: Mapping[str, str]) -> None:
        """Send the params the run does not hold yet (MLflow params never change)."""
        from mlflow.entities import Param

        missing = [Param(k, v) for k, v in params.items() if k not in run.params]
        try:
            for chunk in _chunks(missing, _BATCH_PARAMS):
                self.client.log_batch(run.mlflow_run_id, params=chunk)
        except Exception as exc:
            raise self._fail(f"logging params of {run.flightplan_run_id}", exc) from exc
        run.params.update({p.key: p.value for p in missing})

    def log_points(self, run: MlflowRun, points: Iterable[MetricPoint]) -> int:
        """Send the points the store does not hold yet (counted: a point logged twice in
        the measurements is sent twice). Returns how many were sent."""
        from mlflow.entities import Metric

        wanted = Counter(p.identity() for p in points)
        by_identity = {p.identity(): p for p in points}
        missing = []
        for identity, count in wanted.items():
            point = by_identity[identity]
            missing += [point] * max(0, count - run.sent[identity])
        try:
            for chunk in _chunks(missing, _BATCH_METRICS):
                self.client.log_batch(run.mlflow_run_id, metrics=[
                    Metric(p.key, p.value, p.timestamp_ms, p.step) for p in chunk])
                for p in chunk:
                    run.sent[p.identity()] += 1
        except Exception as exc:
            raise self._fail(f"logging metrics of {run.flightplan_run_id}", exc) from exc
        return len(missing)

    def set_tags(self, run: MlflowRun, tags: Mapping[str, str]) -> None:
        """Set (overwrite) tags on the run."""
        from mlflow.entities import RunTag

        try:
            for chunk in _chunks([RunTag(k, v) for k, v in tags.items()], _BATCH_TAGS):
                self.client.log_batch(run.mlflow_run_id, tags=chunk)
        except Exception as exc:
            raise self._fail(f"tagging {run.flightplan_run_id}", exc) from exc

    def finish(self, run: MlflowRun, status: str, end_ms: int | None) -> None:
        """Set the run's status (``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED``) and, for a
        terminal status, its end time (unix ms)."""
        try:
            if status == "RUNNING":
                self.client.update_run(run.mlflow_run_id, status=status)
            else:
                self.client.set_terminated(run.mlflow_run_id, status=status, end_time=end_ms)
        except Exception as exc:
            raise self._fail(f"setting the status of {run.flightplan_run_id}", exc) from exc

    def log_datasets(self, run: MlflowRun, datasets: Iterable[Any]) -> None:
        """Record ``mlflow.entities.DatasetInput``s as the run's inputs (MLflow dedups them)."""
        try:
            self.client.log_inputs(run.mlflow_run_id, datasets=list(datasets))
        except Exception as exc:
            raise self._fail(f"logging the corpus of {run.flightplan_run_id}", exc) from exc

    def log_artifact(self, run: MlflowRun, path: Path, artifact_path: str | None) -> None:
        """Upload a file or folder under ``artifact_path`` of the run (same name, replaced)."""
        try:
            if path.is_dir():
                self.client.log_artifacts(run.mlflow_run_id, str(path), artifact_path)
            else:
                self.client.log_artifact(run.mlflow_run_id, str(path), artifact_path)
        except Exception as exc:
            raise self._fail(f"uploading {path.name} of {run.flightplan_run_id}", exc) from exc
