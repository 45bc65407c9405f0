"""What ``flightplan run`` shows while runs execute: progress bars (the table at the end is
:func:`flightplan.run.status.run_lines`).

Bars (run, step/total, loss, ETA) are drawn only on a terminal; with ``--json`` or a
redirected stdout nothing is drawn, so the JSON object stays the only thing on stdout.

Usage::

    with ProgressBoard(console, enabled=console.is_terminal) as board:
        board.update("control-1a2b", progress)     # from the executor's on_progress
"""

from __future__ import annotations

import math
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn,
                           TimeRemainingColumn)

from flightplan.activity import Activity, clear, doing
from flightplan.run.executors.contract import RunProgress
from flightplan.rundir import RunDir

__all__ = ["ProgressBoard", "RunActivity", "format_stop"]


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
            self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)


class RunActivity:
    """Every run in progress, as the activity that the interruption line names
    (:mod:`flightplan.activity`, :mod:`flightplan.interrupts`): one run as ``"run <id>, 5 of
    8 steps done"``, several joined by ``"; "``, not only the last to report. The line also
    says what running ``flightplan run`` again does for them (:meth:`again`), read from
    their folders once the runner has stopped: a run with a checkpoint resumes from it, one
    without starts over from step 0, an interrupted pilot starts over.

    Usage::

        running.update("lora-1", "run lora-1", progress, run_dir)  # from on_progress
        running.ended("lora-1")                            # when its execution ends
    """

    def __init__(self) -> None:
        self._runs: dict[str, Activity] = {}
        self._dirs: dict[str, tuple[Path | None, bool]] = {}

    def update(self, key: str, what: str, progress: RunProgress, run_dir: Path | None = None,
               *, pilot: bool = False) -> None:
        """``key``'s run (a run id) is ``what`` and has done ``progress`` steps; its folder
        is ``run_dir`` (None: not known, the line then says nothing of its checkpoint);
        ``pilot``: a process of the pilot."""
        self._runs[key] = Activity(what, progress.completed, progress.total, "steps")
        self._dirs[key] = (run_dir, pilot)
        self._show()

    def again(self) -> str | None:
        """What running ``flightplan run`` again does for the runs in progress now:
        ``"to resume from the last checkpoint"`` when each has a checkpoint in its folder,
        ``"to start lora-1 over from step 0 (it saved no checkpoint yet)"`` when it has none,
        both parts joined when some have one; ``"to start the pilot over"`` for the pilot;
        None when a run's folder is not known."""
        if any(pilot for _, pilot in self._dirs.values()):
            return "to start the pilot over"
        if not self._dirs or any(run_dir is None for run_dir, _ in self._dirs.values()):
            return None
        saved = {key: run_dir is not None and RunDir(run_dir).has_checkpoint()
                 for key, (run_dir, _) in self._dirs.items()}
        fresh = [key for key, has in saved.items() if not has]
        if not fresh:
            return "to resume from the last checkpoint"
        start = (f"start {fresh[0]} over from step 0 (it saved no checkpoint yet)"
                 if len(fresh) == 1 else
                 f"start {', '.join(fresh)} over from step 0 (they saved no checkpoint yet)")
        resumed = [key for key, has in saved.items() if has]
        if not resumed:
            return f"to {start}"
        return (f"to resume {', '.join(resumed)} from "
                + ("its last checkpoint" if len(resumed) == 1 else "their last checkpoints")
                + f" and {start}")

    def ended(self, key: str) -> None:
        """``key``'s execution ended: it is named no more (and when it was the last one in
        progress, no run is: the activity is cleared until the runner names its next step)."""
        self._dirs.pop(key, None)
        if self._runs.pop(key, None) is None:
            return
        if self._runs:
            self._show()
        else:
            clear()

    def _show(self) -> None:
        runs = list(self._runs.values())
        if len(runs) == 1:
            doing(runs[0].what, done=runs[0].done, total=runs[0].total, unit=runs[0].unit,
                  again=self.again)
        else:
            doing("; ".join(run.describe() for run in runs), again=self.again)


def _short(value: Any) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f}"
    return str(value)


def format_stop(stop: dict[str, Any] | None) -> str:
    """``"rule at step N: message"`` or ``""``."""
    if not stop:
        return ""
    return f"{stop.get('rule')} at step {stop.get('step')}: {stop.get('message')}"
