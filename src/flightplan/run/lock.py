"""The campaign lock: one ``flightplan run`` per campaign directory at a time.

An exclusive, non-blocking ``fcntl.flock`` on ``.flightplan/lock``. The kernel drops the
lock when the holder dies (even by SIGKILL), so a crashed runner never leaves a stale
lock. The holder writes its pid and start time into the file (and empties it when it
lets go), so that the message can name it and :func:`lock_holder` can tell who runs the
campaign without touching the lock.

Usage::

    with CampaignLock(campaign_dir):
        ...                      # raises LockHeld when another process holds it
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType

from flightplan.errors import LockHeld

__all__ = ["CampaignLock", "LOCK_FILE", "lock_holder", "HOLDER_WRITE_S"]

LOCK_FILE = Path(".flightplan") / "lock"


HOLDER_WRITE_S = 1.0
"""Seconds a refused runner waits for a holder that has just taken the lock to write its
pid, so that the refusal can name it."""


def lock_holder(campaign_dir: str | Path) -> dict | None:
    """The ``{pid, since}`` of the process that holds the lock, or None when it is free.

    Reads the pid the holder wrote and checks that the process lives (a runner killed by
    SIGKILL leaves its pid behind, but no process); never takes the lock itself.
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


def _read_holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


class CampaignLock:
    """Exclusive lock on a campaign directory, held for the life of the context.

    Args:
        campaign_dir: the folder of the campaign file.

    Raises:
        LockHeld: on enter, when another process holds the lock (names its pid).
    """

    def __init__(self, campaign_dir: str | Path) -> None:
        self.path = Path(campaign_dir) / LOCK_FILE
        self._handle = None

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
            raise LockHeld(f"{self.path}: the campaign is being run by {who}; wait for it to "
                           f"finish (flightplan status shows its progress) or stop that "
                           f"process, then run again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "since": time.time()}))
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
