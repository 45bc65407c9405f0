"""Goodput: where a run's wall time went, from its measurement rows alone.

A rented flight is bought by the hour; what the hours buy is productive training. Following
Google's ML Productivity Goodput (the share of wall time spent on productive steps, the rest
broken down by cause), every second of each execution of a run (one worker process, from
the executor starting it to the executor seeing it end: a ledger ``stage_times`` row) is
given to exactly one cause, so the parts add up to the wall time by construction:

==================  =============================================================================
``start_load``      process start, imports, and the task's own loading until its first step (the
                    corpus, the tokenizer, the model) — less the two causes below
``data``            data preparation the task timed (``encode_s``: the built-in task's frozen
                    embedding passes)
``restore``         restoring the checkpoint it resumed from (``restore_s``)
``steps``           productive steps: the time from one step row to the next, each optimizer
                    step's compute, data loading and logging, less checkpoint stalls
``lost``            steps redone after a resume (their index was logged by an earlier
                    execution), and the tail of an execution that ended without finishing
``checkpoint``      the loop's stalls for checkpoints (``stall_s`` of each ``checkpoint`` row)
``evaluation``      from the step row before an evaluation to its row
``output``          writing predictions, metrics and the artifact, finishing, the process exit,
                    and bringing the outputs home from a flight
``transfer``        at the end of an execution on a flight: waiting for its last checkpoint to be
                    durable at home (``fetch_s + commit_s`` of ``checkpoint_transfer`` rows
                    written after the worker's last row)
==================  =============================================================================

Rows without a duration of their own (a checkpoint becoming durable in the background, the
interval policy's choice, a truncation fraction) do not cut the timeline. A gap is given to
the row that ends it: a step row's gap to ``steps`` (or ``lost``), an evaluation row's to
``evaluation``, the output row's to ``output``, a row before the first step to
``start_load``; a checkpoint's stall is moved out of the gap it happened in (the one after
the step it saved) into ``checkpoint``; durations a row states (``encode_s``, ``restore_s``,
``output_s``, ``eval_s``) are taken up to the gap they fall in. Time stamps are the rows'
``time`` (unix seconds, one clock per machine); an execution's window is clipped to them.

Usage::

    split = run_goodput(rows, [(started_at, ended_at, finished), ...])
    split.productive_s, split.wall_s, split.parts["checkpoint"], split.goodput  # s, s, s, 0–1
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Finished,
                             ForcedCheckpoint, Measurement, Restore, Row, StopEvent)

__all__ = ["CAUSES", "OVERHEADS", "Execution", "GoodputSplit", "run_goodput", "total_goodput"]

CAUSES = ("start_load", "data", "restore", "steps", "lost", "checkpoint", "evaluation",
          "output", "transfer")
"""Every cause a second of a run's wall time is given to, in the order a run meets them."""

OVERHEADS = tuple(c for c in CAUSES if c != "steps")
"""The causes other than productive steps."""


@dataclass(frozen=True)
class Execution:
    """One worker process of a run: unix ``started_at`` and ``ended_at`` (seconds), and
    whether the run ``finished`` in it (its tail is then output, else lost work)."""

    started_at: float
    ended_at: float
    finished: bool = False


@dataclass
class GoodputSplit:
    """A run's wall time by cause (seconds; :data:`CAUSES`); ``parts`` adds up to ``wall_s``."""

    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    @property
    def wall_s(self) -> float:
        """Σ of the parts: the wall time of every execution."""
        return sum(self.parts.values())

    @property
    def productive_s(self) -> float:
        """Seconds of productive steps."""
        return self.parts["steps"]

    @property
    def overhead_s(self) -> float:
        """Seconds of every other cause."""
        return self.wall_s - self.productive_s

    @property
    def goodput(self) -> float | None:
        """Productive share of the wall time (0–1); None for a run with no wall time."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    def add(self, other: "GoodputSplit") -> None:
        """Add ``other``'s seconds to this split, cause by cause."""
        for cause, seconds in other.parts.items():
            self.parts[cause] += seconds

    def to_json(self) -> dict[str, object]:
        """``{wall_hours, productive_hours, overhead_hours, goodput, parts_hours {cause: h}}``
        (hours rounded to 6 places; goodput to 4)."""
        def hours(seconds: float) -> float:
            return round(seconds / 3600.0, 6)
        return {"wall_hours": hours(self.wall_s), "productive_hours": hours(self.productive_s),
                "overhead_hours": hours(self.overhead_s),
                "goodput": None if self.goodput is None else round(self.goodput, 4),
                "parts_hours": {c: hours(s) for c, s in self.parts.items()}}


def _is_step(row: Row) -> bool:
    return isinstance(row, Measurement) and row.is_step


def _stated(row: Row, name: str) -> float:
    """The non-negative duration ``name`` a row states (0 when it states none)."""
    value = row.number(name) if isinstance(row, (Measurement, Evaluation)) else None
    return max(0.0, value) if value is not None else 0.0


class _Timeline:
    """Seconds of one execution handed out cause by cause, never more than the window."""

    def __init__(self, split: GoodputSplit, start: float) -> None:
        self.split, self.at = split, start

    def give(self, cause: str, until: float) -> float:
        """Give ``[at, until)`` to ``cause``; returns the seconds given."""
        seconds = max(0.0, until - self.at)
        self.split.parts[cause] += seconds
        self.at = max(self.at, until)
        return seconds

    def take(self, frm: str, to: str, seconds: float, limit: float) -> None:
        """Move up to ``seconds`` (at most ``limit``) from cause ``frm`` to cause ``to``."""
        moved = max(0.0, min(seconds, limit, self.split.parts[frm]))
        self.split.parts[frm] -= moved
        self.split.parts[to] += moved


def _stalls(rows: Iterable[Row]) -> dict[int, float]:
    """Checkpoint stall seconds of one execution by the steps they hold (a save after step
    ``n - 1`` stalls the gap that ends at the next row after that step)."""
    stalls: dict[int, float] = {}
    for row in rows:
        if isinstance(row, CheckpointSaved):
            stalls[row.step] = stalls.get(row.step, 0.0) + max(0.0, row.stall_s)
    return stalls


def _execution(split: GoodputSplit, rows: Sequence[Row], window: Execution,
               done_before: int) -> int:
    """Give one execution's seconds to their causes; returns the steps logged by the end
    of it (the highest step index + 1, at least ``done_before``)."""
    stalls = _stalls(rows)
    timeline = _Timeline(split, window.started_at)
    end = max(window.ended_at, window.started_at)
    in_loop = False
    done = done_before
    pending_stall = 0.0
    last_marker = window.started_at
    for row in rows:
        at = min(max(row.time, timeline.at), end)
        if _is_step(row):
            cause = "lost" if row.step < done_before else "steps"
            gap = timeline.give(cause, at)
            timeline.take(cause, "checkpoint", pending_stall, gap)
            pending_stall = stalls.get(row.step + 1, 0.0)
            done = max(done, row.step + 1)
            in_loop = True
            last_marker = at
        elif isinstance(row, Evaluation):
            gap = timeline.give("evaluation", at)
            timeline.take("evaluation", "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif isinstance(row, Measurement) and "output_s" in row.values:
            gap = timeline.give("output", at)
            timeline.take("output", "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif not in_loop and isinstance(row, (Measurement, Restore)):
            gap = timeline.give("start_load", at)
            if isinstance(row, Restore):
                timeline.take("start_load", "restore", row.restore_s or 0.0, gap)
            else:
                timeline.take("start_load", "data", _stated(row, "encode_s"), gap)
            last_marker = at
        elif isinstance(row, (Finished, StopEvent, ForcedCheckpoint)):
            cause = "output" if in_loop else "start_load"
            gap = timeline.give(cause, at)
            timeline.take(cause, "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
    tail_transfer = sum(r.fetch_s + r.commit_s for r in rows
                        if isinstance(r, CheckpointTransfer) and r.time > last_marker)
    if window.finished:
        timeline.give("output", end)
        timeline.take("output", "transfer", tail_transfer, end - last_marker)
    else:
        timeline.give("lost" if in_loop else "start_load", end)
    return done


def run_goodput(rows: Sequence[Row], executions: Sequence[Execution]) -> GoodputSplit:
    """Split a run's wall time by cause (module docstring).

    Args:
        rows: every measurement row of the run (all executions, in file order).
        executions: its worker processes; each row belongs to the execution whose window
            holds its time stamp (a row between two windows, to the earlier one).

    Returns:
        The split; its ``wall_s`` is Σ (ended_at − started_at) of the executions.
    """
    split = GoodputSplit()
    ordered = sorted(executions, key=lambda e: e.started_at)
    done = 0
    for index, window in enumerate(ordered):
        upto = ordered[index + 1].started_at if index + 1 < len(ordered) else float("inf")
        mine = sorted((r for r in rows if window.started_at <= r.time < upto),
                      key=lambda r: r.time)
        done = _execution(split, mine, window, done)
    return split


def total_goodput(splits: Iterable[GoodputSplit]) -> GoodputSplit:
    """The sum of several runs' splits (a campaign's, or a flight's)."""
    total = GoodputSplit()
    for split in splits:
        total.add(split)
    return total
