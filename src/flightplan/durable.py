"""Durable files: atomic writes (temp file, fsync, rename, fsync the folder), folders put
in place whole, and hashing.

Every file flightplan writes goes through :func:`write_atomic`, so a reader (or a process
killed mid-write) sees the old file or the new one, never a torn write; a folder written
beside its place (a checkpoint, an artifact, a run's outputs come home) goes in with
:func:`replace_path`, which deletes what it replaces only once the new one is durable.
:func:`hash_file` is the one sha256 used by checkpoints, the results manifest and verify.

Usage::

    write_json_atomic(run_dir / "done.json", {"steps": 120})
    append_durable(run_dir / "log.txt", b"a line\n")
    fsync_tree(staging); replace_path(run_dir / "artifact", staging)
    size_bytes, sha256_hex = hash_file(path)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CHUNK_BYTES", "DELETING", "fsync_dir", "fsync_tree", "hash_file", "write_atomic",
           "write_json_atomic", "append_durable", "replace_path"]

CHUNK_BYTES = 1 << 20  # 1 MiB reads: close to hashlib's own throughput on large files
DELETING = ".deleting"
"""Suffix of what :func:`replace_path` sets aside: never read, removed by whoever finds it."""


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and new entries in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every regular file under ``folder`` and every folder (``folder`` last), so that
    what a library wrote there with plain writes is durable before it is renamed into place.
    Symbolic links are not followed.

    Raises:
        OSError: from the disk.
    """
    for root, _dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(Path(root))


def _is_folder(path: Path) -> bool:
    """A folder itself, not a link to one."""
    return path.is_dir() and not path.is_symlink()


def _remove(path: Path) -> None:
    """Delete a folder, file or link (nothing when it is gone)."""
    if _is_folder(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink(missing_ok=True)


def replace_path(final: Path, new: Path | None = None) -> None:
    """Put the finished, durable ``new`` (a folder or a file, on the same file system) in
    place of ``final`` (or, without ``new``, delete ``final``) so that a kill at any moment
    leaves ``final`` whole, old or new, or the new one whole under its own name; never half
    of either:

    1. a file replacing a file (or a link, or nothing) is one ``rename(2)``; otherwise an
       existing ``final`` is renamed ``<final>.deleting`` (one atomic step; a ``.deleting``
       left by an earlier kill is removed first);
    2. ``new`` is renamed ``final`` and the parent folder fsync'd;
    3. the ``.deleting`` one is deleted: only now, once the new one is durable.

    A kill between 1 and 2 leaves ``new`` whole under its own name (a checkpoint's finished
    ``.tmp``, which :func:`flightplan.trial.checkpoint.recover_checkpoints` renames into
    place) and the old one whole as ``.deleting``; a kill during 3 leaves part of a
    ``.deleting``, never read and removed by the next call or recovery. The caller makes
    ``new`` durable first (:func:`write_atomic`, :func:`fsync_tree`).

    Raises:
        OSError: from the disk (when the rename of ``new`` fails, ``final`` is put back).
    """
    aside = final.with_name(final.name + DELETING)
    if new is not None and not _is_folder(new) and not _is_folder(final):
        os.replace(new, final)
        fsync_dir(final.parent)
        return
    if final.exists() or final.is_symlink():
        _remove(aside)
        os.rename(final, aside)
    if new is not None:
        try:
            os.rename(new, final)
        except BaseException:
            if (aside.exists() or aside.is_symlink()) and not final.exists():
                os.rename(aside, final)  # the rename failed: the old one counts again
            raise
        fsync_dir(final.parent)
    _remove(aside)


def hash_file(path: Path) -> tuple[int, str]:
    """Size in bytes and sha256 hex digest of ``path``, read in 1 MiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            size += count
    return size, digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file beside it, fsync, rename.

    A reader sees either the old file or the new one, never a torn write.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are for anyone
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, value: Any) -> None:
    """Write ``value`` as indented, key-sorted UTF-8 JSON (trailing newline), atomically."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_atomic(path, text.encode("utf-8"))


def append_durable(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and fsync it; nothing for empty ``data``. A file this
    call creates has its folder fsync'd too, so its name is as durable as its bytes.

    One ``write(2)`` normally does it; a short one (cut by a signal, or a disk nearly
    full) is followed by writes of the rest until every byte is appended. For append-only
    logs with one writer: a reader sees whole appends only when each is one line or block.

    Raises:
        OSError: from the disk, or a write that appends nothing (ENOSPC-like).
    """
    if not data:
        return
    try:
        fd, created = os.open(path, os.O_WRONLY | os.O_APPEND), False
    except FileNotFoundError:
        fd, created = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), True
    try:
        rest = memoryview(data)
        while rest:
            written = os.write(fd, rest)
            if written <= 0:
                raise OSError(errno.EIO, f"{path}: a write appended nothing "
                                         f"({len(rest)} of {len(data)} bytes left)")
            rest = rest[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)  # the new name itself survives a power loss
