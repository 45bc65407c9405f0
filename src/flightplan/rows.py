"""Measurement rows: the schema of ``runs/<id>/measurements.jsonl``, its writer and its parser.

A run's measurements are the one channel from a worker to the runner (with ``trial.json``
in the other direction). Each row is one JSON object on one line, appended by one
``write(2)`` so a killed writer leaves at most a torn last line, which the parser skips:

- ``{"step": int, "time": unix seconds, <name>: value, ...}`` without ``"event"``: a
  :class:`Measurement`, the numbers a training loop logs (``loss``, ``step_s``, ``lr``,
  ``load_s``, ``planned_steps``…; any name but ``step``, ``time`` and ``event``);
- ``{"step", "time", "event": <kind>, ...}``: one of the event rows below, each a
  dataclass whose fields are the row's keys (:data:`EVENTS`); an event this version does
  not know parses as :class:`UnknownEvent`, so an older reader skips a newer row's kind
  without losing the others.

``step`` is the optimizer steps the row refers to (for a step row, the 0-based index of the
step just done; for a checkpoint, the steps it holds). Non-finite numbers are written as the
strings ``"nan"``, ``"inf"`` and ``"-inf"`` (strict JSON; :func:`json_number`) and read back
as strings, so a resumed loss compares bitwise with the uninterrupted one (``repr`` of a
float round-trips through JSON); :func:`as_number` turns a value into a float.

Usage::

    line = encode_row(CheckpointSaved(step=4, time=t, name="step-000004", bytes=9000,
                                      stall_s=0.01, persist_s=0.2))
    rows, consumed = parse_rows(data)        # complete lines only
    saves = [r for r in rows if isinstance(r, CheckpointSaved)]
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["Row", "Measurement", "Evaluation", "ProcessStart", "Restore", "CheckpointSaving",
           "CheckpointSaved",
           "records_a_save", "CheckpointInterval",
           "CheckpointRejected", "PartialCheckpointRemoved", "CheckpointFailed",
           "CheckpointTransfer", "CheckpointTransferFailed", "Truncation", "StopEvent",
           "ForcedCheckpoint", "Finished", "UnknownEvent", "EVENTS", "RESERVED", "json_number",
           "as_number", "encode_row", "parse_row", "parse_rows"]

RESERVED = ("step", "time", "event")
"""Keys every row may carry and no measurement may use as its own name."""


def json_number(value: Any) -> Any:
    """``value`` for strict JSON: a non-finite float becomes ``"nan"``, ``"inf"`` or
    ``"-inf"``; anything else is returned unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def as_number(value: Any) -> float | None:
    """A row value as a float: numbers (not booleans) and the strings ``"nan"``, ``"inf"``,
    ``"-inf"``; None for anything else (text, lists, null)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


@dataclass(frozen=True)
class Row:
    """What every row holds: ``step`` (optimizer steps) and ``time`` (unix seconds)."""

    EVENT: ClassVar[str | None] = None

    step: int
    time: float

    def fields(self) -> dict[str, Any]:
        """The row's own keys and values as written (without ``step``, ``time``, ``event``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("step", "time")}


@dataclass(frozen=True)
class Measurement(Row):
    """What a loop logged at ``step`` (:meth:`flightplan.trial.Trial.log`): ``values`` maps
    each name to a JSON value (numbers, or ``"nan"``/``"inf"``/``"-inf"``; the task may log
    text too). Names textclf and the integrations log: ``loss``, ``step_s`` (seconds of
    the step), ``lr``, ``seq_len``, ``tokens``, ``batch_size``, ``encode_s``, ``load_s``
    (from the process start to the first step), ``planned_steps``, ``steps_per_epoch``,
    ``output_s``, ``grad_norm``."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.values)

    def number(self, name: str) -> float | None:
        """``values[name]`` as a float (:func:`as_number`), None when absent or not a number."""
        return as_number(self.values.get(name))

    @property
    def is_step(self) -> bool:
        """Whether this row is an optimizer step's (it carries ``loss``)."""
        return "loss" in self.values


@dataclass(frozen=True)
class Evaluation(Row):
    """An evaluation (:meth:`~flightplan.trial.Trial.evaluate`): ``metrics`` by name, e.g.
    ``macro_f1``, ``accuracy``, ``eval_s`` (seconds it took), ``n_test``; ``min_quality``
    reads them."""

    EVENT = "evaluation"
    metrics: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.metrics)

    def number(self, name: str) -> float | None:
        """``metrics[name]`` as a float, None when absent or not a number."""
        return as_number(self.metrics.get(name))


@dataclass(frozen=True)
class ProcessStart(Row):
    """The worker process of an execution began at ``time`` (unix seconds): when the kernel
    created it (``/proc/self/stat``), not when the row was written, which is later, once the
    interpreter runs the worker. The worker (:mod:`flightplan.run.worker`) writes it first,
    before it loads the task, so :mod:`flightplan.goodput` can tell the executor's start
    of an execution (``waiting``: on a flight, the checkpoint sent there and the process
    launched) from the process's own start and load. ``step`` is 0. A worker that cannot
    read its start time (not Linux) writes none; its start then counts as start and load."""

    EVENT = "process_start"


@dataclass(frozen=True)
class Restore(Row):
    """:meth:`~flightplan.trial.Trial.restore` ended: from checkpoint folder ``source`` (None:
    starting at step 0) in ``restore_s`` seconds; ``rejected`` folders set aside on the way;
    ``not_yet_registered`` state that waits for a component registered later; ``message``
    why none was used; ``resume_requested``: trial.json asked for a resume;
    ``resharded_from``: the number of ranks that saved ``source``, when another number
    restored it (``[[run]] reshard = true``: the run is not bitwise from here on)."""

    EVENT = "restore"
    source: str | None = None
    restore_s: float | None = None
    rejected: tuple[str, ...] = ()
    not_yet_registered: tuple[str, ...] = ()
    message: str | None = None
    resume_requested: bool | None = None
    resharded_from: int | None = None


@dataclass(frozen=True)
class CheckpointSaving(Row):
    """Checkpoint ``name`` (``step-NNNNNN``) is complete in its ``.tmp`` folder and about to
    be renamed into place: written and fsync'd before that rename, so the record that the
    run saved is durable no later than the checkpoint itself (a ``checkpoint`` row follows
    once it is in place). A run with such a row has saved: if its checkpoints are gone, it
    must stop with ``no_usable_resume`` rather than start again from step 0
    (:func:`records_a_save`)."""

    EVENT = "checkpoint_saving"
    name: str = ""


@dataclass(frozen=True)
class CheckpointSaved(Row):
    """Checkpoint ``name`` (``step-NNNNNN``) is durable: ``bytes`` written, the loop stalled
    ``stall_s`` (C) and it took ``persist_s`` (D) until durable (seconds). From a GPU also
    ``device_wait_s`` (the part of ``stall_s`` a training stream waited for the copies into
    pinned memory, timed with CUDA events) and ``copy_s`` (the copies' device seconds);
    written only when set."""

    EVENT = "checkpoint"
    name: str = ""
    bytes: int = 0
    stall_s: float = 0.0
    persist_s: float = 0.0
    device_wait_s: float | None = None
    copy_s: float | None = None

    def fields(self) -> dict[str, Any]:
        own = super().fields()
        return {k: v for k, v in own.items() if v is not None or k not in _DEVICE_ONLY}


_DEVICE_ONLY = frozenset({"device_wait_s", "copy_s"})


@dataclass(frozen=True)
class CheckpointInterval(Row):
    """The interval policy chose ``interval_s`` (:class:`flightplan.trial.interval.IntervalChoice`:
    C, D, R, the tolerated loss L, M, the optimum, the formula, what bound it, X)."""

    EVENT = "checkpoint_interval"
    interval_s: float = 0.0
    save_stall_s: float = 0.0
    persist_s: float = 0.0
    restore_s: float = 0.0
    restore_measured: bool = False
    tolerated_loss_s: float = 0.0
    mtbi_s: float | None = None
    optimum_s: float | None = None
    formula: str = ""
    bound: str = ""
    transfer_s: float = 0.0


@dataclass(frozen=True)
class CheckpointRejected(Row):
    """A checkpoint failed its checks at restore (``reason``: a ``.corrupt-<reason>``
    suffix) and was renamed ``renamed_to``."""

    EVENT = "checkpoint_rejected"
    name: str = ""
    reason: str = ""
    message: str = ""
    renamed_to: str | None = None


@dataclass(frozen=True)
class PartialCheckpointRemoved(Row):
    """A save that never finished (``step-NNNNNN.tmp``) was removed at restore."""

    EVENT = "partial_checkpoint_removed"
    name: str = ""


@dataclass(frozen=True)
class CheckpointFailed(Row):
    """A background save failed (``error``: the exception, one line)."""

    EVENT = "checkpoint_failed"
    error: str = ""


@dataclass(frozen=True)
class CheckpointTransfer(Row):
    """Checkpoint ``name`` came home from flight ``node`` (written at home by the Ray
    executor): ``bytes``; ``wait_s`` on the flight from durable to its last chunk cut,
    ``fetch_s`` and ``commit_s`` at home, ``stream_s`` from asking for its first chunk to
    durable at home (None in rows from before streaming), ``resent_bytes`` the flight sent
    more than once (a failed check, a dropped connection) (seconds, bytes;
    :mod:`flightplan.transfer_time`)."""

    EVENT = "checkpoint_transfer"
    name: str = ""
    bytes: int = 0
    wait_s: float = 0.0
    fetch_s: float = 0.0
    commit_s: float = 0.0
    stream_s: float | None = None
    resent_bytes: int | None = None
    node: str | None = None


@dataclass(frozen=True)
class CheckpointTransferFailed(Row):
    """Checkpoint ``name`` could not come home from ``node`` (``error``)."""

    EVENT = "checkpoint_transfer_failed"
    name: str = ""
    error: str = ""
    node: str | None = None


@dataclass(frozen=True)
class Truncation(Row):
    """The fraction (0–1) of essential inputs longer than ``max_length``."""

    EVENT = "truncation"
    fraction: float = 0.0


@dataclass(frozen=True)
class StopEvent(Row):
    """Stop rule ``rule`` fired (``stop.json`` holds the whole record)."""

    EVENT = "stop"
    rule: str = ""
    message: str = ""


@dataclass(frozen=True)
class ForcedCheckpoint(Row):
    """The checkpoint asked for before the flight's package ends is durable (``name``);
    ``then`` is ``"stop"`` or ``"continue"``."""

    EVENT = "forced_checkpoint"
    name: str = ""
    then: str = ""


@dataclass(frozen=True)
class Finished(Row):
    """:meth:`~flightplan.trial.Trial.finish` wrote ``done.json``."""

    EVENT = "finished"


@dataclass(frozen=True)
class UnknownEvent(Row):
    """An event row of a kind this version does not know: ``event`` and its other keys."""

    event: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.values)


def records_a_save(row: Row, *, on_flight: bool = False) -> bool:
    """Whether ``row`` shows that its run has a checkpoint at home to resume from, or had
    one: a ``checkpoint_saving`` row (durable before the checkpoint is in place) or a
    ``checkpoint`` row (after it; the only record of a save in rows written by older
    versions). With ``on_flight`` (the run executes on a flight away from home, Ray) only
    a ``checkpoint_transfer`` row counts: a checkpoint saved on the flight that never came
    home went with the flight, and the run can only start again from step 0."""
    if on_flight:
        return isinstance(row, CheckpointTransfer)
    return isinstance(row, (CheckpointSaving, CheckpointSaved))


EVENTS: Mapping[str, type[Row]] = {cls.EVENT: cls for cls in (
    Evaluation, ProcessStart, Restore, CheckpointSaving, CheckpointSaved, CheckpointInterval, CheckpointRejected,
    PartialCheckpointRemoved, CheckpointFailed, CheckpointTransfer, CheckpointTransferFailed,
    Truncation, StopEvent, ForcedCheckpoint, Finished) if cls.EVENT}
"""Event kind → row class."""

_TUPLES = {"rejected", "not_yet_registered"}
_RESERVED = frozenset(RESERVED)
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
"""Strict JSON, UTF-8 text; built once (a training loop writes a row per step)."""


def encode_row(row: Row) -> bytes:
    """One row as its line of ``measurements.jsonl`` (UTF-8, ``\\n``-terminated): ``step``,
    ``time``, ``event`` (event rows), then the row's fields, non-finite floats as strings.

    Raises:
        ValueError: a :class:`Measurement` uses a reserved name (:data:`RESERVED`).
    """
    own = row.fields()
    if isinstance(row, Measurement) and not _RESERVED.isdisjoint(own):
        clash = next(k for k in own if k in _RESERVED)
        raise ValueError(f"measurement name {clash!r} is reserved for the row itself "
                         f"(step, time, event); log it under another name")
    line: dict[str, Any] = {"step": row.step, "time": row.time}
    event = row.event if isinstance(row, UnknownEvent) else row.EVENT
    if event:
        line["event"] = event
    for key, value in own.items():
        line[key] = json_number(value)  # a tuple is written as a JSON array
    return (_ENCODER.encode(line) + "\n").encode()


def parse_row(obj: Any) -> Row | None:
    """The row a parsed JSON value stands for; None when it is not a row (not an object,
    or ``step`` not an integer, or ``time`` not a number). Keys a known event does not
    have are dropped; a missing one takes the field's default."""
    if not isinstance(obj, dict):
        return None
    step, at = obj.get("step"), as_number(obj.get("time"))
    if not isinstance(step, int) or isinstance(step, bool) or at is None:
        return None
    rest = {k: v for k, v in obj.items() if k not in RESERVED}
    event = obj.get("event")
    if event is None:
        return Measurement(step, at, rest)
    cls = EVENTS.get(event) if isinstance(event, str) else None
    if cls is None:
        return UnknownEvent(step, at, str(event), rest)
    if cls is Evaluation:
        return Evaluation(step, at, rest)
    names = {f.name for f in dataclasses.fields(cls)} - {"step", "time"}
    kwargs = {k: (tuple(v) if k in _TUPLES and isinstance(v, list) else v)
              for k, v in rest.items() if k in names}
    return cls(step, at, **kwargs)


def parse_rows(data: bytes) -> tuple[list[Row], int]:
    """The rows of a chunk of ``measurements.jsonl``: complete lines only.

    Returns:
        ``(rows, consumed)``: the rows and how many bytes of ``data`` they span (up to and
        including the last newline). A line that is not a JSON row (a torn write) is
        skipped.
    """
    consumed = data.rfind(b"\n") + 1
    rows = []
    for line in data[:consumed].splitlines():
        try:
            row = parse_row(json.loads(line))
        except ValueError:
            continue
        if row is not None:
            rows.append(row)
    return rows, consumed
