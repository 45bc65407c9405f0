"""Goodput: where a run's wall time went, each second of each execution given to one cause.

A rented flight is bought by the hour; what the hours buy is productive training. Following
Google's ML Productivity Goodput (the share of wall time spent on productive steps, the rest
broken down by cause), every second of each execution of a run (one worker process, from
the executor starting it to the executor seeing it end: a ledger ``stage_times`` row) is
given to exactly one cause, so the parts add up to the wall time by construction:

==================  =============================================================================
``waiting``         from the executor starting the execution to the worker process's creation
                    (its ``process_start`` row): on a Ray flight the checkpoint sent there to
                    resume from and the launch; for the local executor the fork
``start_load``      the interpreter, imports, and the task's own loading until its first step
                    began (the corpus, the tokenizer, the model) — less the two causes below
``data``            data preparation the task timed before its first step: ``data_s`` (the
                    built-in task: reading the corpus, the tokenizer, tokenizing) and
                    ``encode_s`` (the built-in task's frozen embedding passes)
``restore``         restoring the checkpoint it resumed from (``restore_s``)
``steps``           productive steps: the time from one step row to the next, each optimizer
                    step's compute, data loading and logging, less checkpoint stalls
``lost``            steps redone after a resume (their index was logged by an earlier
                    execution), evaluations redone (one at the same step was logged by an
                    earlier execution), and the tail of an execution that did not end the
                    run
``checkpoint``      the loop's stalls for checkpoints (``stall_s`` of each ``checkpoint`` row)
``evaluation``      from the step row before an evaluation to its row
``output``          writing predictions, metrics and the artifact, finishing, the process exit,
                    and bringing the outputs home from a flight
``transfer``        at the end of an execution on a flight: waiting for its last checkpoint to be
                    durable at home (``fetch_s + commit_s`` of ``checkpoint_transfer`` rows
                    written after the worker's last row)
==================  =============================================================================

Reloading an artifact (``flightplan close``, ``verify``) happens after the campaign, in
processes of its own, and is no part of any run's wall time.

Rows without a duration of their own (a checkpoint becoming durable in the background, the
interval policy's choice, a truncation fraction) do not cut the timeline. A gap is given to
the row that ends it: a step row's gap to ``steps`` (or ``lost``), an evaluation row's to
``evaluation`` (or ``lost``), the output row's to ``output``, a row before the first step to
``start_load``; a checkpoint's stall is moved out of the gap it happened in (the one after
the step it saved) into ``checkpoint``; durations a row states (``restore_s``, ``output_s``,
``eval_s``) are taken up to the gap they fall in, and ``data_s`` and ``encode_s`` (stated in
rows before the first step) up to the execution's start and load so far. The first step row of an
execution covers ``k`` steps (its index + 1 less the step the execution restored to) and, when
it states ``step_s``, only ``k · step_s`` of its gap are steps: the rest came before the first
step began (warm-up, the loader's first batch) and is ``start_load``. Time stamps are the rows'
``time`` (unix seconds, one clock per machine); an execution's window is clipped to them.

A campaign's executions, read from its ledger, and each flight's hours are
:mod:`flightplan.campaign_goodput`'s.

Usage::

    split = run_goodput(rows, [Execution(started_at, ended_at, finished), ...])
    split.productive_s, split.wall_s, split.parts["checkpoint"], split.goodput  # s, s, s, 0–1
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from flightplan.rows import (CheckpointSaved, CheckpointTransfer, Evaluation, Finished,
                             ForcedCheckpoint, Measurement, ProcessStart, Restore, Row, StopEvent)
from flightplan.units import hours

__all__ = ["CAUSES", "OVERHEADS", "STAGES", "LABELS", "Execution", "GoodputSplit",
           "run_goodput", "execution_goodput", "total_goodput"]

CAUSES = ("waiting", "start_load", "data", "restore", "steps", "lost", "checkpoint",
          "evaluation", "output", "transfer")
"""Every cause a second of a run's wall time is given to, in the order a run meets them."""

OVERHEADS = tuple(c for c in CAUSES if c != "steps")
"""The causes other than productive steps."""

STAGES = "stages"
"""A flight's overhead besides its runs' causes: the stages executed on it (data check,
pilot, stages marked by hand)."""

LABELS = {**{cause: cause for cause in CAUSES}, "start_load": "start/load", STAGES: STAGES}
"""How each cause (and :data:`STAGES`) reads in a line or a table heading."""

@dataclass(frozen=True)
class Execution:
    """One worker process of a run: unix ``started_at`` and ``ended_at`` (seconds), and
    whether the run ended by itself in it, ``finished`` or stopped by its own rule (its tail
    is then output, else lost work)."""

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

    def add(self, other: "GoodputSplit", *, times: float = 1.0) -> None:
        """Add ``other``'s seconds (× ``times``: slots held) to this split, cause by cause."""
        for cause, seconds in other.parts.items():
            self.parts[cause] += seconds * times

    def to_json(self) -> dict[str, object]:
        """``{wall_hours, productive_hours, overhead_hours, goodput, parts_hours {cause: h}}``
        (hours rounded to 6 places; goodput to 4)."""
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
    """Seconds of one execution charged to causes in time order, never more than the window:
    a cursor ``at`` that only moves forward, and the split it fills."""

    def __init__(self, split: GoodputSplit, start: float) -> None:
        self.split, self.at = split, start

    def charge_until(self, cause: str, until: float) -> float:
        """Charge ``[at, until)`` to ``cause`` and move the cursor to ``until``; returns the
        seconds charged (0 when ``until`` is not after the cursor)."""
        seconds = max(0.0, until - self.at)
        self.split.parts[cause] += seconds
        self.at = max(self.at, until)
        return seconds

    def reassign(self, source: str, target: str, seconds: float, limit: float) -> None:
        """Move up to ``seconds`` (at most ``limit``, at most what ``source`` holds) already
        charged to cause ``source`` over to cause ``target`` (a stall a row states inside a
        gap charged to another cause); the cursor does not move."""
        moved = max(0.0, min(seconds, limit, self.split.parts[source]))
        self.split.parts[source] -= moved
        self.split.parts[target] += moved


def _stalls(rows: Iterable[Row]) -> dict[int, float]:
    """Checkpoint stall seconds of one execution by the steps they hold (a save after step
    ``n - 1`` stalls the gap that ends at the next row after that step)."""
    stalls: dict[int, float] = {}
    for row in rows:
        if isinstance(row, CheckpointSaved):
            stalls[row.step] = stalls.get(row.step, 0.0) + max(0.0, row.stall_s)
    return stalls


def _execution(split: GoodputSplit, rows: Sequence[Row], window: Execution,
               done_before: int, evaluated_before: frozenset[int]) -> tuple[int, frozenset[int]]:
    """Give one execution's seconds to their causes; returns the steps logged by the end
    of it (the highest step index + 1, at least ``done_before``) and the steps evaluated
    by then (``evaluated_before`` and this execution's evaluation rows)."""
    stalls = _stalls(rows)
    timeline = _Timeline(split, window.started_at)
    end = max(window.ended_at, window.started_at)
    in_loop = False
    done = done_before
    resumed_at: int | None = None           # the steps its restore row holds
    pending_stall = 0.0
    last_marker = window.started_at
    for row in rows:
        at = min(max(row.time, timeline.at), end)
        if isinstance(row, ProcessStart):
            timeline.charge_until("waiting", at)
            last_marker = at
        elif _is_step(row):
            cause = "lost" if row.step < done_before else "steps"
            stated = _stated(row, "step_s")
            if not in_loop and stated > 0:      # its gap before the first step began
                covered = max(1, row.step + 1 - (row.step if resumed_at is None else resumed_at))
                timeline.charge_until("start_load", at - covered * stated)
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = stalls.get(row.step + 1, 0.0)
            done = max(done, row.step + 1)
            in_loop = True
            last_marker = at
        elif isinstance(row, Evaluation):
            cause = "lost" if row.step in evaluated_before else "evaluation"
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif isinstance(row, Measurement) and "output_s" in row.values:
            gap = timeline.charge_until("output", at)
            timeline.reassign("output", "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
        elif not in_loop and isinstance(row, (Measurement, Restore)):
            gap = timeline.charge_until("start_load", at)
            if isinstance(row, Restore):
                timeline.reassign("start_load", "restore", row.restore_s or 0.0, gap)
                resumed_at = row.step
            else:
                # data_s and encode_s state work done anywhere since the process began (the
                # built-in task tokenizes and embeds before it restores, and a task may log
                # such a figure after the work): up to this execution's start and load so far
                for name in ("encode_s", "data_s"):
                    timeline.reassign("start_load", "data", _stated(row, name), float("inf"))
            last_marker = at
        elif isinstance(row, (Finished, StopEvent, ForcedCheckpoint)):
            cause = "output" if in_loop else "start_load"
            gap = timeline.charge_until(cause, at)
            timeline.reassign(cause, "checkpoint", pending_stall, gap)
            pending_stall = 0.0
            last_marker = at
    tail_transfer = sum(r.fetch_s + r.commit_s for r in rows
                        if isinstance(r, CheckpointTransfer) and r.time > last_marker)
    if window.finished:
        timeline.charge_until("output", end)
        timeline.reassign("output", "transfer", tail_transfer, end - last_marker)
    else:
        timeline.charge_until("lost" if in_loop else "start_load", end)
    return done, evaluated_before | {r.step for r in rows if isinstance(r, Evaluation)}


def execution_goodput(rows: Sequence[Row], executions: Sequence[Execution]
                      ) -> list[GoodputSplit]:
    """One split per execution, in the order given (module docstring).

    Args:
        rows: every measurement row of the run (all executions, in file order).
        executions: its worker processes; each row belongs to the execution whose window
            holds its time stamp (a row between two windows, to the earlier one), and a
            ``process_start`` row to the execution whose start is nearest to it (a process
            created a moment before its executor took the time still belongs to it).

    Returns:
        The splits; each one's ``wall_s`` is its execution's ``ended_at − started_at``.
    """
    order = sorted(range(len(executions)), key=lambda i: executions[i].started_at)
    starts = [executions[i].started_at for i in order]
    splits = [GoodputSplit() for _ in executions]
    done, evaluated = 0, frozenset[int]()
    for position, index in enumerate(order):
        window = executions[index]
        upto = starts[position + 1] if position + 1 < len(order) else float("inf")
        mine = [r for r in rows if not isinstance(r, ProcessStart)
                and window.started_at <= r.time < upto]
        mine += [r for r in rows if isinstance(r, ProcessStart) and min(
            range(len(starts)), key=lambda p: abs(starts[p] - r.time)) == position]
        done, evaluated = _execution(splits[index], sorted(mine, key=lambda r: r.time), window,
                                     done, evaluated)
    return splits


def run_goodput(rows: Sequence[Row], executions: Sequence[Execution]) -> GoodputSplit:
    """Split a run's wall time by cause (module docstring): the sum of
    :func:`execution_goodput`.

    Returns:
        The split; its ``wall_s`` is Σ (ended_at − started_at) of the executions.
    """
    return total_goodput(execution_goodput(rows, executions))


def total_goodput(splits: Iterable[GoodputSplit]) -> GoodputSplit:
    """The sum of several runs' splits (a campaign's, or a flight's)."""
    total = GoodputSplit()
    for split in splits:
        total.add(split)
    return total
