"""What ``flightplan run`` shows: progress bars while runs execute, and the summary table.

Bars (run, step/total, loss, ETA) are drawn only on a terminal; with ``--json`` or a
redirected stdout nothing is drawn, so the JSON object stays the only thing on stdout.

Usage::

    with ProgressBoard(console, enabled=console.is_terminal) as board:
        board.update("control-1a2b", progress)     # from the executor's on_progress
    console.print(summary_table(rows, metric="macro_f1"))
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn,
                           TimeRemainingColumn)
from rich.table import Table

from flightplan.run.executor import RunProgress

__all__ = ["ProgressBoard", "summary_table", "format_stop"]


class ProgressBoard:
    """One rich progress bar per run; a no-op when ``enabled`` is false.

    Args:
        console: where to draw (the runner's stdout console).
        enabled: draw at all (False for ``--json``, pipes and tests).
    """

    def __init__(self, console: Console, *, enabled: bool) -> None:
        self.enabled = enabled
        self._tasks: dict[str, TaskID] = {}
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn(),
            console=console, transient=False, disable=not enabled)

    def __enter__(self) -> "ProgressBoard":
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.enabled:
            self._progress.stop()

    def add(self, key: str, label: str) -> None:
        """A new bar for ``key`` (a run id), shown as ``label``."""
        if self.enabled and key not in self._tasks:
            self._tasks[key] = self._progress.add_task(label, total=None, loss="-")

    def update(self, key: str, progress: RunProgress) -> None:
        """Move ``key``'s bar to the run's latest step, total and loss."""
        if not self.enabled or key not in self._tasks:
            return
        loss = "-" if progress.loss is None else _short(progress.loss)
        self._progress.update(self._tasks[key], completed=progress.completed,
                              total=progress.total, loss=loss)

    def note(self, text: str) -> None:
        """A line above the bars (a stage that started or ended)."""
        if self.enabled:
            self._progress.console.print(text, highlight=False, soft_wrap=True)


def _short(value: Any) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f}"
    return str(value)


def format_stop(stop: dict[str, Any] | None) -> str:
    """``"rule at step N: message"`` or ``""``."""
    if not stop:
        return ""
    return f"{stop.get('rule')} at step {stop.get('step')}: {stop.get('message')}"


def summary_table(rows: list[dict[str, Any]], *, metric: str) -> Table:
    """The end-of-run table: run, tier, status, metric, wall time, stop reason.

    Args:
        rows: ``{name, run_id, tier, status, metric, wall_s, stop}`` per run.
        metric: the campaign's decision metric (column header).
    """
    table = Table(title="campaign runs")
    for header, justify in (("RUN", "left"), ("TIER", "left"), ("STATUS", "left"),
                            (metric.upper(), "right"), ("WALL (s)", "right"),
                            ("STOP REASON", "left")):
        table.add_column(header, justify=justify)
    for row in rows:
        value = row.get("metric")
        table.add_row(f"{row['name']}\n[dim]{row['run_id']}[/dim]", row["tier"], row["status"],
                      "-" if value is None else f"{value:.4f}",
                      "-" if not row.get("wall_s") else f"{row['wall_s']:.1f}",
                      format_stop(row.get("stop")) or row.get("reason", ""))
    return table
