"""Durable files: atomic writes (temp file, fsync, rename, fsync the folder) and hashing.

Every file flightplan writes goes through :func:`write_atomic`, so a reader (or a process
killed mid-write) sees the old file or the new one, never a torn write. :func:`hash_file`
is the one sha256 used by checkpoints, the results manifest and verify.

Usage::

    write_json_atomic(run_dir / "done.json", {"steps": 120})
    append_durable(run_dir / "log.txt", b"a line\n")
    size_bytes, sha256_hex = hash_file(path)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CHUNK_BYTES", "fsync_dir", "hash_file", "write_atomic", "write_json_atomic",
           "append_durable"]

CHUNK_BYTES = 1 << 20  # 1 MiB reads: close to hashlib's own throughput on large files


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
    """Append ``data`` to ``path`` (created) and fsync it; nothing for empty ``data``.

    One ``write(2)`` normally does it; a short one (cut by a signal, or a disk nearly
    full) is followed by writes of the rest until every byte is appended. For append-only
    logs with one writer: a reader sees whole appends only when each is one line or block.

    Raises:
        OSError: from the disk, or a write that appends nothing (ENOSPC-like).
    """
    if not data:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
