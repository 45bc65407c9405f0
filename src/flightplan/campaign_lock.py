"""The campaign lock: one process at a time runs or closes a campaign directory.

An exclusive, non-blocking ``fcntl.flock`` on ``.flightplan/lock``. ``flightplan run``
holds it for the whole command, and ``flightplan close`` while it writes ``results/``:
only the holder writes there, which is what lets the results writer delete a temp file
it does not list (:mod:`flightplan.publish.manifest`). The kernel drops the lock when the
holder dies (even by SIGKILL), so a crashed runner never leaves a stale lock. The holder
writes its pid, start time and verb into the file (and empties it when it lets go), so
that a refusal can name it and :func:`lock_holder` can tell who holds the campaign
without touching the lock.

Usage::

    with CampaignLock(campaign_dir):               # flightplan run
        ...                                        # raises LockHeld when another holds it
    with CampaignLock(campaign_dir, verb="close"): # flightplan close
        ...
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from flightplan.errors import LockHeld

__all__ = ["CampaignLock", "LOCK_FILE", "lock_holder", "HOLDER_WRITE_S"]

LOCK_FILE = Path(".flightplan") / "lock"


HOLDER_WRITE_S = 1.0
"""Seconds a refused process waits for a holder that has just taken the lock to write its
pid, so that the refusal can name it."""

_DOING = {"run": "being run", "close": "being closed"}
"""What the campaign undergoes while a holder of each verb has it (for the refusal)."""


def lock_holder(campaign_dir: str | Path) -> dict[str, Any] | None:
    """The ``{pid, since, verb}`` of the process that holds the lock, or None when it is free.

    ``since`` is unix seconds; ``verb`` is ``"run"`` or ``"close"`` (absent in a lock
    written before holders recorded it: a runner). Reads the pid the holder wrote and
    checks that the process lives (a holder killed by SIGKILL leaves its pid behind, but no
    process); never takes the lock itself.
    """
    holder = _read_holder(Path(campaign_dir) / LOCK_FILE)
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return holder


def _read_holder(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class CampaignLock:
    """Exclusive lock on a campaign directory, held for the life of the context.

    Args:
        campaign_dir: the folder of the campaign file.
        verb: what the holder does (``"run"`` or ``"close"``): recorded for
            :func:`lock_holder`, and named in the line that refuses a second process.

    Raises:
        LockHeld: on enter, when another process holds the lock (one line naming its pid,
            what it does and what to do).
    """

    def __init__(self, campaign_dir: str | Path, *, verb: str = "run") -> None:
        self.path = Path(campaign_dir) / LOCK_FILE
        self.verb = verb
        self._handle: IO[str] | None = None

    def __enter__(self) -> "CampaignLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            holder = _read_holder(self.path)
            deadline = time.monotonic() + HOLDER_WRITE_S
            while not holder.get("pid") and time.monotonic() < deadline:
                time.sleep(0.02)  # it took the lock a moment ago and is writing its pid
                holder = _read_holder(self.path)
            who = f"process {holder['pid']}" if holder.get("pid") else "another process"
            doing = _DOING.get(str(holder.get("verb", "run")), "in use")
            raise LockHeld(f"{self.path}: the campaign is {doing} by {who}; wait for it to "
                           f"finish (flightplan status shows its progress) or stop that "
                           f"process, then {self.verb} again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "since": time.time(), "verb": self.verb}))
        handle.flush()
        self._handle = handle
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
