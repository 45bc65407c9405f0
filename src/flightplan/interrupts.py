"""Stopping a verb by Ctrl-C (SIGINT) or SIGTERM: one plain line, a known exit code.

Every verb runs inside :class:`Stoppable`. The first SIGINT or SIGTERM raises
:class:`Interrupted` in the main thread; the verb's own clean-up runs on the way out (the
runner kills its worker, closes the ledger, releases the lock, stops its progress bars),
and then one line goes to stderr::

    interrupted: flightplan run stopped (run lora-r4-62e1d953a6, 5 of 8 steps done);
    nothing finished was lost: finished runs and saved checkpoints are kept; run
    `flightplan run campaign.toml` again to resume from the last checkpoint

(or ``again to start lora-r4-62e1d953a6 over from step 0 (it saved no checkpoint yet)``:
what running the command again does comes from the activity when it knows,
:attr:`flightplan.activity.Activity.again`).

A second signal while that clean-up runs stops at once (``os._exit``): the line says so,
and the worker processes die with the runner (``PR_SET_PDEATHSIG``, run/executors/contract.py).
Nothing finished is lost either way, since every file a verb finishes is written to a
temporary name and renamed, and every ledger write is one SQLite transaction.

Exit codes: 130 after SIGINT, 143 after SIGTERM (128 + the signal number, as a shell
reports a process killed by that signal). A process that starts with SIGINT ignored
(``cmd &`` in a non-interactive shell) keeps ignoring it, as the shell intended; SIGTERM
always stops it.

Usage::

    stop = Stoppable(StopNotice("flightplan run campaign.toml", kept="...", again="..."))
    with stop:
        code = verb()
    if stop.signum is not None:
        code = stop.exit_code
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from flightplan import activity

__all__ = ["Interrupted", "StopNotice", "Stoppable", "exit_code_for"]

_SHOW_CURSOR = "\x1b[?25h"
"""ANSI: show the cursor again (a progress display hides it; ``os._exit`` skips its
clean-up)."""


def exit_code_for(signum: int) -> int:
    """128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by the first SIGINT or SIGTERM a :class:`Stoppable` sees.

    A :class:`KeyboardInterrupt`, so code that lets Ctrl-C through lets this through.

    Attributes:
        signum: the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@dataclass(frozen=True)
class StopNotice:
    """What the interruption line says about one verb.

    Attributes:
        command: the command line that continues the work (``flightplan run x.toml``).
        kept: what "nothing finished was lost" means for this verb.
        again: what running ``command`` again does (``"to start it over"``), unless the
            current activity says it (:attr:`flightplan.activity.Activity.again`).
    """

    command: str
    kept: str = "it had changed nothing"
    again: str = "to start it over"

    def line(self, *, at_once: bool = False) -> str:
        """The one line for stderr; names the current :mod:`flightplan.activity` as it
        stands when the line is written, after the verb's clean-up
        (:attr:`flightplan.activity.Activity.settled`: a run that finished meanwhile is not
        named, step counts are re-read once the workers stopped), and says what running the
        command again does for it when the activity knows
        (:attr:`flightplan.activity.Activity.again`), else :attr:`again`."""
        verb = " ".join(self.command.split()[:2])
        now = activity.current()
        if now is not None and now.settled is not None:   # as it stands after the clean-up
            try:
                now = now.settled()
            except Exception:   # noqa: BLE001 - the line must be written whatever fails
                pass
        what = f"{verb} stopped" + (" at once" if at_once else "") + \
            (f" ({now.describe()})" if now is not None else "")
        again = self.again
        if now is not None and now.again is not None:
            try:
                again = now.again() or self.again
            except Exception:   # noqa: BLE001 - the line must be written whatever fails
                again = self.again
        return (f"interrupted: {what}; nothing finished was lost: {self.kept}; "
                f"run `{self.command}` again {again}")


class Stoppable:
    """Context manager: SIGINT/SIGTERM handlers for one verb (see the module docstring).

    On leaving after the first signal it writes :meth:`StopNotice.line` to stderr,
    swallows :class:`Interrupted` and sets :attr:`signum`; the caller exits with
    :attr:`exit_code`. Outside the main thread (where Python refuses handlers) it does
    nothing, and Ctrl-C keeps Python's default behaviour.

    Args:
        notice: what the line says.
    """

    def __init__(self, notice: StopNotice) -> None:
        self.notice = notice
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """130 after SIGINT, 143 after SIGTERM, 0 when not interrupted."""
        return 0 if self.signum is None else exit_code_for(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # a second signal while stopping: stop at once
            text = self.notice.line(at_once=True)
            show = _SHOW_CURSOR if sys.stdout.isatty() else ""
            os.write(2, f"{show}\n{text}\n".encode("utf-8", "replace"))
            os._exit(exit_code_for(self.signum))
        self.signum = signum
        raise Interrupted(signum)

    def __enter__(self) -> "Stoppable":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if signum == signal.SIGINT and current == signal.SIG_IGN:
                continue  # started in the background: the shell asked to ignore Ctrl-C
            self._previous[signum] = current
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        try:
            if isinstance(exc, KeyboardInterrupt):
                if self.signum is None:  # Python's own Ctrl-C (handlers not installed)
                    self.signum = signal.SIGINT
                sys.stdout.flush()
                print(self.notice.line(), file=sys.stderr, flush=True)
                return True
            return False
        finally:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous.clear()
            activity.clear()
