"""What the running verb is doing now: shown as progress on a terminal, named on Ctrl-C.

A verb's long steps (hashing files, reloading artifacts in fresh processes, bootstrap
intervals) call :func:`doing` with what they do and how far along they are. That costs a
dictionary update; it draws only while a :class:`WaitDisplay` is open on a terminal
(``close``, ``verify``, ``checkpoint verify``), and :mod:`flightplan.interrupts` names
the last activity in its "interrupted: …" line. With stderr not a terminal (a pipe, a
file, ``--json`` captured by a tool) nothing is drawn.

Usage::

    with WaitDisplay():                       # in the verb
        for i, run_id in enumerate(ids):
            doing(f"reloading artifact {run_id}", done=i, total=len(ids))
            ...
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Callable

from rich.console import Console
from rich.progress import (BarColumn, Progress, SpinnerColumn, TaskID, TextColumn,
                           TimeElapsedColumn)

__all__ = ["Activity", "doing", "current", "clear", "WaitDisplay"]


@dataclass(frozen=True)
class Activity:
    """One step of a verb: ``what`` (present participle and object), ``done`` of
    ``total`` ``unit`` when countable (None otherwise); ``again``, when given, says what
    running the verb again does for this step (``"to start lora-1 over from step 0"``),
    asked only when the interruption line is written, after the verb's clean-up (None
    returned: what the verb's notice says); ``settled``, when given, says what the step
    is once the verb's clean-up has run (its workers stopped, their files final), asked
    when the interruption line is written: the activity then (re-read counts), or None
    when nothing of it is in progress any more (the line then names no activity)."""

    what: str
    done: int | None = None
    total: int | None = None
    unit: str = ""
    again: Callable[[], str | None] | None = None
    settled: Callable[[], "Activity | None"] | None = None

    def describe(self) -> str:
        """``"reloading artifacts, 1 of 3 done"`` or just ``what``."""
        if self.total is None:
            return self.what
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.what}, {self.done or 0} of {self.total}{unit} done"


_now: list[Activity | None] = [None]
_listeners: list[Callable[[Activity], None]] = []


def doing(what: str, *, done: int | None = None, total: int | None = None,
          unit: str = "", again: Callable[[], str | None] | None = None,
          settled: Callable[[], Activity | None] | None = None) -> None:
    """Record (and show, while a display is open) what the verb is doing now.

    Args:
        what: e.g. ``"reloading artifact lora-r4-62e1d953a6"``.
        done: units finished so far (artifacts, files); None when not countable.
        total: units in this step; None when not countable.
        unit: what is counted, plural (``"steps"``), for the interruption line.
        again: what running the verb again does for this step, for the interruption line
            (None: what the verb's notice says).
        settled: what this step is once the verb's clean-up has run, for the
            interruption line (:attr:`Activity.settled`).
    """
    step = Activity(what, done, total, unit, again, settled)
    _now[0] = step
    for listener in list(_listeners):
        listener(step)


def current() -> Activity | None:
    """The last :func:`doing` of this process since :func:`clear`, or None."""
    return _now[0]


def clear() -> None:
    """Forget the current activity (a verb ended)."""
    _now[0] = None


class WaitDisplay:
    """A one-line progress display of :func:`doing` on stderr, erased when it closes.

    Shows a spinner, what is being done, a bar and ``done/total`` when countable, and the
    time elapsed in this step. Draws only when ``console`` is a terminal.

    Args:
        console: where to draw; default a stderr console.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                  BarColumn(bar_width=20), TextColumn("{task.fields[count]}"),
                                  TimeElapsedColumn(), console=self.console, transient=True,
                                  redirect_stdout=False, redirect_stderr=False)
        self._task: TaskID | None = None
        self._what: str | None = None

    def _show(self, step: Activity) -> None:
        if self._task is None or step.what != self._what:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(step.what, total=step.total, count="")
            self._what = step.what
        count = "" if step.total is None else f"{step.done or 0}/{step.total}"
        self._progress.update(self._task, completed=step.done or 0, total=step.total,
                              count=count)

    def __enter__(self) -> "WaitDisplay":
        if self.enabled:
            self._progress.start()
            _listeners.append(self._show)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.enabled:
            _listeners.remove(self._show)
            self._progress.stop()
