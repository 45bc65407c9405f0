"""Fault injection for the child processes of the crash tests (no hook in product code).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``; the crash harness puts
this folder there and describes one fault in ``FLIGHTPLAN_FAULT`` (JSON)::

    {"role": "trial" | "runner" | "ray" | "any",  # which process fires (by its command line)
     "point": "replace" | "fsync" | "unlink" | "open" | "commit" | "insert",
     "nth": 3,                               # fire at the 3rd matching call in the process
     "after": false,                         # before the call (false) or right after it
     "contains": "checkpoints",              # path points: only paths containing this
     "group": true,                          # SIGKILL the whole process group, or only self
     "freeze": false,                        # SIGSTOP self instead: the harness kills its machine
     "marker": "/tmp/x/fired"}               # created when it fires (holding the pid); nothing
                                             # fires after

``replace`` counts ``os.replace``/``os.rename`` (the commit point of every atomic write),
``fsync`` counts ``os.fsync`` (data written, not yet renamed), ``unlink`` counts
``os.unlink``/``os.remove`` (a file deleted: ``shutil.rmtree`` deletes through them, so a
kill there leaves a folder half deleted; the path is resolved through ``dir_fd``),
``open`` counts files opened for writing by Python code (``open``/``io.open`` in a mode
that writes, ``os.open`` with a flag that writes: a library's own save, e.g. the Trainer's
``trainer_state.json`` or Lightning's ``.ckpt``, left half written), ``commit`` counts
SQLite ``COMMIT`` statements and ``Connection.commit()`` calls (SQLAlchemy's, MLflow's) and
``insert`` SQLite ``INSERT``s, through the connection or one of its cursors (a transaction
left open).

With ``FLIGHTPLAN_FAULT_COUNT=<file>`` instead, nothing fires: each process appends
``{"role", "point", "contains", "count"}`` lines at exit (one per substring listed in
``FLIGHTPLAN_FAULT_CONTAINS``, comma-separated, and ``""`` for all calls), so the harness
can draw crash points among calls that really happen.

Processes that outlive one attempt (the nodes of a Ray cluster, and the workers they
start) read their fault instead from the file ``FLIGHTPLAN_FAULT_FILE`` names, once, when
each process starts: the JSON above, ``{"count": <file>, "contains": "a,b"}`` for count
mode, or ``null``. With ``"freeze": true`` the process stops itself (SIGSTOP) where it would
have died, so that the harness can kill the whole machine it runs on at that moment.
"""

from __future__ import annotations

import atexit
import builtins
import io
import json
import os
import signal
import sqlite3



def _from_file() -> tuple[object, str | None, str]:
    """(fault config, count file, substrings) from ``FLIGHTPLAN_FAULT_FILE``."""
    try:
        with open(os.environ["FLIGHTPLAN_FAULT_FILE"], encoding="utf-8") as handle:
            value = json.loads(handle.read() or "null")
    except (OSError, ValueError):
        return None, None, ""
    if isinstance(value, dict) and "count" in value:
        return None, value["count"], value.get("contains", "")
    return value, None, ""


if "FLIGHTPLAN_FAULT_FILE" in os.environ:
    _CONFIG, _COUNT_FILE, _WATCH = _from_file()
else:
    _CONFIG = json.loads(os.environ.get("FLIGHTPLAN_FAULT", "null") or "null")
    _COUNT_FILE = os.environ.get("FLIGHTPLAN_FAULT_COUNT")
    _WATCH = os.environ.get("FLIGHTPLAN_FAULT_CONTAINS", "")
_counts: dict = {}  # point -> calls (fault mode); (point, substring) -> calls (count mode)
_PATH_POINTS = ("replace", "fsync", "unlink", "open")  # points whose calls name a path
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _role() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return "runner"
    if any(b"flightplan.run.worker" in a for a in argv):
        return "trial"
    if any(b"/site-packages/ray/" in a for a in argv):
        return "ray"   # Ray's own processes on a node (workers that host actors, agents)
    return "runner"


_ROLE = _role()
_CONTAINS = (_CONFIG or {}).get("contains", "")
# count mode: one counter per substring (comma-separated), "" counting every call
_COUNT_SUBSTRINGS = [""] + [s for s in _WATCH.split(",") if s]


def _fire() -> None:
    marker = _CONFIG.get("marker")
    if marker:
        try:
            fd = _os_open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
    if _CONFIG.get("freeze"):
        os.kill(os.getpid(), signal.SIGSTOP)
        return  # continued: the harness chose to let it live
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


_os_open, _io_open = os.open, io.open  # the originals, for the shim's own files


def _writes(mode: object) -> bool:
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def _wrap_open() -> None:
    """``open``/``io.open`` in a mode that writes, and ``os.open`` with a flag that writes."""
    original = io.open

    def wrapped(file, mode="r", *args, **kwargs):
        if not _writes(mode) or isinstance(file, int):
            return original(file, mode, *args, **kwargs)
        _tick("open", file, after=False)
        result = original(file, mode, *args, **kwargs)
        _tick("open", file, after=True)
        return result

    def wrapped_os(path, flags, *args, **kwargs):
        if not flags & _WRITE_FLAGS:
            return _os_open(path, flags, *args, **kwargs)
        _tick("open", path, after=False)
        result = _os_open(path, flags, *args, **kwargs)
        _tick("open", path, after=True)
        return result

    builtins.open = io.open = wrapped
    os.open = wrapped_os


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


def _statement(run, sql, *args, **kwargs):
    point = _statement_point(sql)
    if point:
        _tick(point, after=False)
    result = run(sql, *args, **kwargs)
    if point:
        _tick(point, after=True)
    return result


class _CountingCursor(sqlite3.Cursor):
    """A cursor that reports COMMIT and INSERT statements (SQLAlchemy executes through one)."""

    def execute(self, sql, *args, **kwargs):  # noqa: D102 - same as sqlite3
        return _statement(super().execute, sql, *args, **kwargs)

    def executemany(self, sql, *args, **kwargs):  # noqa: D102
        return _statement(super().executemany, sql, *args, **kwargs)


class _CountingConnection(sqlite3.Connection):
    """A connection that reports COMMIT and INSERT statements, and ``commit()`` calls, to
    the fault counter (``Connection.execute`` runs its cursor's statement in C: counted
    once, here)."""

    def execute(self, sql, *args, **kwargs):  # noqa: D102 - same as sqlite3
        return _statement(super().execute, sql, *args, **kwargs)

    def executemany(self, sql, *args, **kwargs):  # noqa: D102
        return _statement(super().executemany, sql, *args, **kwargs)

    def cursor(self, factory=_CountingCursor):  # noqa: D102
        return super().cursor(factory)

    def commit(self):  # noqa: D102
        _tick("commit", after=False)
        super().commit()
        _tick("commit", after=True)


def _statement_point(sql: str) -> str:
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return {"COMMIT": "commit", "END": "commit", "INSERT": "insert"}.get(head, "")


def _wrap_sqlite() -> None:
    """``sqlite3.connect`` and ``sqlite3.dbapi2.connect`` (what SQLAlchemy calls)."""
    import sqlite3.dbapi2

    original = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", _CountingConnection)
        return original(*args, **kwargs)

    sqlite3.connect = sqlite3.dbapi2.connect = connect


def _dump_counts() -> None:
    with _io_open(_COUNT_FILE, "a", encoding="utf-8") as handle:
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
    _wrap_open()
    _wrap_sqlite()
