"""Fault injection for the child processes of the crash tests (no hook in product code).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``; the crash harness puts
this folder there and describes one fault in ``FLIGHTPLAN_FAULT`` (JSON)::

    {"role": "trial" | "runner" | "any",   # which process fires (by its command line)
     "point": "replace" | "fsync" | "unlink" | "commit" | "insert",
     "nth": 3,                               # fire at the 3rd matching call in the process
     "after": false,                         # before the call (false) or right after it
     "contains": "checkpoints",              # replace/fsync/unlink: only paths containing this
     "group": true,                          # SIGKILL the whole process group, or only self
     "marker": "/tmp/x/fired"}               # created when it fires; nothing fires after

``replace`` counts ``os.replace``/``os.rename`` (the commit point of every atomic write),
``fsync`` counts ``os.fsync`` (data written, not yet renamed), ``unlink`` counts
``os.unlink``/``os.remove`` (a file deleted: ``shutil.rmtree`` deletes through them, so a
kill there leaves a folder half deleted; the path is resolved through ``dir_fd``),
``commit`` counts SQLite ``COMMIT`` statements and ``insert`` SQLite ``INSERT``s (a
transaction left open).

With ``FLIGHTPLAN_FAULT_COUNT=<file>`` instead, nothing fires: each process appends
``{"role", "point", "contains", "count"}`` lines at exit (one per substring listed in
``FLIGHTPLAN_FAULT_CONTAINS``, comma-separated, and ``""`` for all calls), so the harness
can draw crash points among calls that really happen.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sqlite3

_CONFIG = json.loads(os.environ.get("FLIGHTPLAN_FAULT", "null") or "null")
_COUNT_FILE = os.environ.get("FLIGHTPLAN_FAULT_COUNT")
_counts: dict = {}  # point -> calls (fault mode); (point, substring) -> calls (count mode)
_PATH_POINTS = ("replace", "fsync", "unlink")  # points whose calls name a path


def _role() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return "runner"
    return "trial" if any(b"flightplan.run.worker" in a for a in argv) else "runner"


_ROLE = _role()
_CONTAINS = (_CONFIG or {}).get("contains", "")
# count mode: one counter per substring (comma-separated), "" counting every call
_COUNT_SUBSTRINGS = [""] + [s for s in os.environ.get("FLIGHTPLAN_FAULT_CONTAINS", "").split(",") if s]


def _fire() -> None:
    marker = _CONFIG.get("marker")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    if _CONFIG.get("group"):
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _tick(point: str, path: object = "", *, after: bool) -> None:
    """Count one call of ``point`` and fire when it is the configured one."""
    if _COUNT_FILE is not None:
        if not after:
            for sub in _COUNT_SUBSTRINGS:
                if not sub or (point in _PATH_POINTS and sub in str(path)):
                    _counts[(point, sub)] = _counts.get((point, sub), 0) + 1
        return
    if _CONFIG.get("point") != point or _CONFIG.get("role", "any") not in ("any", _ROLE):
        return
    if point in _PATH_POINTS and _CONTAINS not in str(path):
        return
    if not after:
        _counts[point] = _counts.get(point, 0) + 1
    if bool(_CONFIG.get("after")) == after and _counts.get(point, 0) == int(_CONFIG["nth"]):
        _fire()


def _wrap_path_call(name: str, point: str) -> None:
    original = getattr(os, name)

    def wrapped(src, dst, *args, **kwargs):
        _tick(point, f"{src} {dst}", after=False)
        result = original(src, dst, *args, **kwargs)
        _tick(point, f"{src} {dst}", after=True)
        return result

    setattr(os, name, wrapped)


def _wrap_unlink(name: str) -> None:
    original = getattr(os, name)

    def wrapped(path, *args, dir_fd=None, **kwargs):
        where = str(path)
        if dir_fd is not None:
            try:
                where = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), where)
            except OSError:
                pass
        _tick("unlink", where, after=False)
        result = original(path, *args, dir_fd=dir_fd, **kwargs)
        _tick("unlink", where, after=True)
        return result

    setattr(os, name, wrapped)


def _wrap_fsync() -> None:
    original = os.fsync

    def wrapped(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
        except OSError:
            path = ""
        _tick("fsync", path, after=False)
        result = original(fd)
        _tick("fsync", path, after=True)
        return result

    os.fsync = wrapped


class _CountingConnection(sqlite3.Connection):
    """A connection that reports COMMIT and INSERT statements to the fault counter."""

    def execute(self, sql, *args, **kwargs):  # noqa: D102 - same as sqlite3
        point = _statement_point(sql)
        if point:
            _tick(point, after=False)
        result = super().execute(sql, *args, **kwargs)
        if point:
            _tick(point, after=True)
        return result

    def executemany(self, sql, *args, **kwargs):  # noqa: D102
        point = _statement_point(sql)
        if point:
            _tick(point, after=False)
        result = super().executemany(sql, *args, **kwargs)
        if point:
            _tick(point, after=True)
        return result


def _statement_point(sql: str) -> str:
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return {"COMMIT": "commit", "END": "commit", "INSERT": "insert"}.get(head, "")


def _wrap_sqlite() -> None:
    original = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", _CountingConnection)
        return original(*args, **kwargs)

    sqlite3.connect = connect


def _dump_counts() -> None:
    with open(_COUNT_FILE, "a", encoding="utf-8") as handle:
        for (point, contains), count in sorted(_counts.items()):
            handle.write(json.dumps({"role": _ROLE, "point": point, "contains": contains,
                                     "count": count, "pid": os.getpid()}) + "\n")


if _CONFIG is not None or _COUNT_FILE is not None:
    if _COUNT_FILE is not None:
        atexit.register(_dump_counts)
    _wrap_path_call("replace", "replace")
    _wrap_path_call("rename", "replace")
    _wrap_unlink("unlink")
    _wrap_unlink("remove")
    _wrap_fsync()
    _wrap_sqlite()
