"""A command in a real pseudo-terminal, for tests that need what a person sees.

:class:`Terminal` starts a command with a pty as its controlling terminal (``pty.fork``:
the child is a session leader, so Ctrl-C typed into the pty reaches its whole foreground
process group, as in a shell), sets the window size the program reads, keeps draining
the output so the program never blocks on a full pty, and gives back what was written
with and without ANSI escape sequences.

Usage::

    term = Terminal([FLIGHTPLAN, "status", "campaign.toml"], cwd=folder, columns=80)
    code = term.wait(timeout=60)
    term.lines()                     # the text, escapes removed, split at \\r and \\n
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["Terminal", "strip_ansi"]

_REDRAW = re.compile(r"\r\n|\r|\n|\x1b\[2K|\x1b\[\d*A")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-B]")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI control sequences (colours, cursor moves, erases)."""
    return _ANSI.sub("", text)


class Terminal:
    """One command in a pty of ``columns`` × ``rows`` (see the module docstring).

    Args:
        argv: the command (``argv[0]`` a path).
        cwd: its working directory.
        env: its environment (``COLUMNS``/``LINES`` are removed, so the program reads the
            pty's size; ``TERM`` is ``xterm-256color``).
        columns, rows: the window size.
    """

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
                 columns: int = 80, rows: int = 40) -> None:
        environment = {k: v for k, v in (env or os.environ).items()
                       if k not in ("COLUMNS", "LINES")}
        environment["TERM"] = "xterm-256color"
        pid, fd = pty.fork()
        if pid == 0:  # the child: size the terminal, then become the command
            try:
                fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
                os.chdir(cwd)
                os.execve(argv[0], list(argv), environment)
            finally:
                os._exit(127)
        self.pid, self._fd = pid, fd
        self.output = bytearray()
        self.exit_code: int | None = None

    def _drain(self, timeout: float) -> bool:
        """Read what is there (waiting up to ``timeout`` s); False at end of output."""
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self._fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.output += data
        return bool(data)

    def wait_for(self, condition: Callable[[], bool], *, timeout: float) -> bool:
        """Keep reading until ``condition()`` holds (True) or ``timeout`` s pass or the
        output ends (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            if not self._drain(0.1):
                return condition()
        return False

    def type_ctrl_c(self) -> None:
        """Type Ctrl-C: the terminal sends SIGINT to its foreground process group."""
        os.write(self._fd, b"\x03")

    def wait(self, *, timeout: float) -> int:
        """Read to the end of the output and reap the command; its exit code (128 + n
        for a signal n). Kills the command's process group after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._drain(0.2):
            pass
        if time.monotonic() >= deadline:
            os.killpg(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self._fd)
        code = os.waitstatus_to_exitcode(status)
        self.exit_code = 128 - code if code < 0 else code
        return self.exit_code

    @property
    def text(self) -> str:
        """Everything written so far, escapes removed."""
        return strip_ansi(self.output.decode("utf-8", "replace"))

    def lines(self) -> list[str]:
        """What was written, split at ``\\r``, ``\\n`` and the sequences that erase a line
        or move the cursor up (each redraw of a line is a line), escapes removed."""
        raw = self.output.decode("utf-8", "replace")
        return [strip_ansi(part) for part in _REDRAW.split(raw)]
