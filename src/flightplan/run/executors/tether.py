"""Tie a worker's life to the process that started it, before the worker runs:
``python -m flightplan.run.executors.tether PARENT_PID COMMAND [ARG ...]``.

A worker must die with its runner (the local executor, or the Ray flight's host): a
runner killed with ``kill -9`` must not leave a process writing into a run directory that
the next runner resumes. Linux kills a process when its parent dies if it asked to be
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and it must ask itself. Asking between ``fork`` and
``exec`` (``subprocess``'s ``preexec_fn``) runs Python code, ``dlopen`` and ``prctl`` in the
child of a multi-threaded runner, where a lock another thread held at the fork (the
loader's, the allocator's) is never released: the child can hang before it starts. So
the runner starts this small program instead (a new, single-threaded process), which:

1. ignores SIGINT (kept across ``exec``): a Ctrl-C in the terminal reaches the whole
   foreground process group, and the runner alone decides how its workers stop;
2. asks for SIGKILL at its parent's death;
3. checks that its parent is still ``PARENT_PID`` (a parent that died before step 2 left
   it orphaned, re-parented to another process: it then exits with :data:`EXIT_ORPHANED`
   without starting the command);
4. replaces itself with ``COMMAND`` (``execvp``: same pid, and the death signal stays).

Elsewhere than Linux it only does 1 and 4. Usage (the executors)::

    subprocess.Popen(tethered(["python", "-m", "flightplan.run.worker", "trial.json"]), ...)
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["tethered", "main", "EXIT_ORPHANED"]

EXIT_ORPHANED = 70
"""Exit code when the parent was gone before the worker could tie itself to it."""

_PR_SET_PDEATHSIG = 1


def tethered(argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` tied to this process (module docstring)."""
    return [sys.executable, "-m", __name__, str(os.getpid()), *argv]


def main(args: list[str]) -> int:
    """Tie this process to ``args[0]`` (the parent's pid) and exec ``args[1:]``; returns
    only when it cannot (an exit code: 2 bad arguments, :data:`EXIT_ORPHANED`)."""
    if len(args) < 2 or not args[0].isdigit():
        print("usage: python -m flightplan.run.executors.tether PARENT_PID COMMAND [ARG ...]",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            print(f"flightplan: prctl(PR_SET_PDEATHSIG) failed: "
                  f"{os.strerror(ctypes.get_errno())}", file=sys.stderr)
            return EXIT_ORPHANED
    if os.getppid() != int(args[0]):
        print(f"flightplan: the runner (pid {args[0]}) ended before this worker started; "
              f"not starting it", file=sys.stderr)
        return EXIT_ORPHANED
    try:
        os.execvp(args[1], args[1:])
    except OSError as exc:
        print(f"flightplan: cannot start {args[1]}: {exc}", file=sys.stderr)
        return 127
    return 127  # not reached: execvp returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
