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
from flightplan.run.executors.contract import MeasurementTail, RunProgress
from flightplan.rundir import RunDir

__all__ = ["ProgressBoard", "RunActivity", "format_stop", "pilot_started", "PILOT_AGAIN"]

PILOT_AGAIN = "to start the pilot over"
"""What ``flightplan run`` again does for an interrupted pilot (the interruption line)."""


def pilot_started(control: str) -> None:
    """The runner's activity from the start of the pilot of run ``control`` until its first
    progress (:class:`RunActivity` names it from then on): an interruption then says that
    running again starts the pilot over, not the notice's words for runs."""
    doing(f"the pilot of {control}", again=lambda: PILOT_AGAIN)


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
    8 steps done"``, several joined by ``"; "``, not only the last to report. The line is
    written once the runner has stopped its workers, and reads their folders then
    (:meth:`settled`): a run whose folder shows it ended (``done.json``, ``stop.json``) is
    not named, and each other's steps are re-read from its rows, which are final by then.
    The line also says what running ``flightplan run`` again does for them (:meth:`again`):
    a run with a checkpoint resumes from it, one without starts over from step 0, an
    interrupted pilot starts over.

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
        is ``run_dir`` (None: not known, the line then says nothing of its checkpoint and
        names it with the steps last reported); ``pilot``: a process of the pilot."""
        self._runs[key] = Activity(what, progress.completed, progress.total, "steps")
        self._dirs[key] = (run_dir, pilot)
        self._show()

    def _unended(self) -> list[str]:
        """The runs named now whose folder does not show them ended (a folder not known
        counts as not ended)."""
        return [key for key in self._runs
                if (run_dir := self._dirs.get(key, (None, False))[0]) is None
                or RunDir(run_dir).status() is None]

    def settled(self) -> Activity | None:
        """The runs in progress as they stand now (asked after the runner stopped its
        workers): those whose folder shows them ended left out, each other's steps re-read
        from its measurement rows (the steps last reported where its folder is not known or
        holds no step row); None when none is left."""
        runs = []
        for key in self._unended():
            run, (run_dir, _) = self._runs[key], self._dirs.get(key, (None, False))
            seen = MeasurementTail(run_dir).read() if run_dir is not None else None
            if seen is not None and seen.step is not None:
                run = Activity(run.what, seen.completed,
                               seen.total if seen.total is not None else run.total, run.unit)
            runs.append(run)
        if not runs:
            return None
        if len(runs) == 1:
            return Activity(runs[0].what, runs[0].done, runs[0].total, runs[0].unit,
                            again=self.again)
        return Activity("; ".join(run.describe() for run in runs), again=self.again)

    def again(self) -> str | None:
        """What running ``flightplan run`` again does for the runs in progress now (those
        whose folder shows them ended left out): ``"to resume from the last checkpoint"``
        when each has a checkpoint in its folder, ``"to start lora-1 over from step 0 (it
        saved no checkpoint yet)"`` when it has none, both parts joined when some have one;
        ``"to start the pilot over"`` for the pilot; None when a run's folder is not known
        or none is in progress."""
        dirs = {key: self._dirs[key] for key in self._unended() if key in self._dirs}
        if any(pilot for _, pilot in dirs.values()):
            return PILOT_AGAIN
        if not dirs or any(run_dir is None for run_dir, _ in dirs.values()):
            return None
        saved = {key: run_dir is not None and RunDir(run_dir).has_checkpoint()
                 for key, (run_dir, _) in dirs.items()}
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
                  again=self.again, settled=self.settled)
        else:
            doing("; ".join(run.describe() for run in runs), again=self.again,
                  settled=self.settled)


def _short(value: Any) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f}"
    return str(value)


def format_stop(stop: dict[str, Any] | None) -> str:
    """``"rule at step N: message"`` or ``""``."""
    if not stop:
        return ""
    return f"{stop.get('rule')} at step {stop.get('step')}: {stop.get('message')}"
