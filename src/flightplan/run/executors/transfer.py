"""Files between the machine with the campaign ("home") and a flight: sent with their
sha256, committed atomically only after every hash was checked on arrival; and the one
check of each path and checkpoint name that travels.

A run on a remote flight works in a scratch folder there. What it makes comes home as
:class:`Blob` lists (bytes + sha256 taken where the file was read) and is committed into
``runs/<id>/`` by :func:`commit_outputs`. Checkpoints travel in chunks instead, either way
(:mod:`flightplan.run.executors.stream`, :mod:`flightplan.run.executors.to_flight`), with
:func:`relative_path` and :func:`checkpoint_steps` below as their checks too.

- :func:`commit_outputs`: a finished or stopped run's outputs, only the names a run
  produces (:data:`OUTPUTS`: predictions, metrics, the artifact folder, the status
  markers; a flight that sends anything else, such as ``trial.json``, the measurements or
  ``checkpoints/``, is refused whole). All are written and checked in ``.incoming/``
  first, then each top-level entry is renamed into place, the status markers
  ``done.json``/``stop.json`` last, so the run counts as ended only once everything it
  made is home.

Usage::

    commit_outputs(run_dir, pack_tree(scratch, only=OUTPUTS))
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from flightplan.durable import fsync_dir, hash_file, replace_path
from flightplan.errors import TransferError
from flightplan.rundir import RunDir

__all__ = ["Blob", "STATUS_MARKERS", "OUTPUTS", "INCOMING", "pack", "pack_tree",
           "commit_outputs", "blob_bytes", "relative_path", "checkpoint_steps"]

STATUS_MARKERS = (RunDir.DONE, RunDir.STOP)
"""Files that say a run ended (``run/records.py`` reads them); committed last."""

OUTPUTS = (RunDir.PREDICTIONS, RunDir.METRICS, RunDir.ARTIFACT, *STATUS_MARKERS)
"""The top-level names of a run directory that a run produces (docs/tasks.md, "Leave
outputs"): all that comes home from a flight when it ends; the rest of its scratch folder
is home's own (``trial.json``, measurements, log, checkpoints) or the task's scratch."""

INCOMING = ".incoming"
"""The staging folder of :func:`commit_outputs` inside the run directory."""


@dataclass(frozen=True)
class Blob:
    """One file in transit: ``path`` relative (POSIX, no ``..``), its bytes and their
    sha256 (hex) taken where it was read."""

    path: str
    data: bytes
    sha256: str


def blob_bytes(blobs: Iterable[Blob]) -> int:
    """Total bytes of ``blobs``."""
    return sum(len(b.data) for b in blobs)


def relative_path(path: str) -> PurePosixPath:
    """``path`` as a relative POSIX path that stays inside its folder: the one check of
    every path that travels (files home here, checkpoint chunks either way in
    :mod:`.stream`).

    Raises:
        TransferError: absolute, empty, with a ``..``/``.`` part or a backslash.
    """
    parts = PurePosixPath(path)
    if not path or parts.is_absolute() or "\\" in path \
            or any(p in ("", ".", "..") for p in parts.parts):
        raise TransferError(f"{path[:200]!r}: a transferred path must be relative and stay "
                            f"inside its folder; refusing the transfer")
    return parts


def checkpoint_steps(name: str) -> int:
    """The step count of a checkpoint folder's name ``step-NNNNNN``: the one check of a
    checkpoint name that travels, either way.

    Raises:
        TransferError: any other name (only those travel).
    """
    digits = name[5:]
    if not (name.startswith("step-") and digits.isdigit() and digits.isascii()
            and len(digits) <= 12):
        raise TransferError(f"{name[:80]!r}: not a checkpoint name (step-NNNNNN); refusing "
                            f"the transfer")
    return int(digits)


def pack(root: Path, paths: Iterable[str]) -> list[Blob]:
    """Read ``root/<path>`` for each path into blobs (sha256 computed from the bytes read).

    Raises:
        OSError: a file is missing or unreadable (e.g. pruned meanwhile).
    """
    blobs = []
    for path in paths:
        data = (Path(root) / relative_path(path)).read_bytes()
        blobs.append(Blob(path, data, hashlib.sha256(data).hexdigest()))
    return blobs


def pack_tree(root: Path, *, only: Iterable[str]) -> list[Blob]:
    """Every file under ``root`` (sorted) whose top-level entry is named in ``only``
    (symbolic links are not followed)."""
    root, only = Path(root), set(only)
    names = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] not in only or not path.is_file() or path.is_symlink():
            continue
        names.append(relative.as_posix())
    return pack(root, names)


def _write_checked(folder: Path, blobs: Iterable[Blob]) -> None:
    """Write each blob under ``folder``, fsync it, re-hash what is on disk and compare.

    Raises:
        TransferError: a file on disk differs from its blob's size or sha256.
    """
    folders = {folder}
    for blob in blobs:
        target = folder / relative_path(blob.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        folders.add(target.parent)
        with open(target, "wb") as handle:
            handle.write(blob.data)
            handle.flush()
            os.fsync(handle.fileno())
        size, sha = hash_file(target)
        if size != len(blob.data) or sha != blob.sha256:
            raise TransferError(f"{blob.path}: arrived as {size} bytes with sha256 {sha[:12]}…, "
                                f"sent as {len(blob.data)} bytes with {blob.sha256[:12]}…; "
                                f"the transfer is discarded")
    for path in folders:
        fsync_dir(path)


def commit_outputs(run_dir: Path, blobs: list[Blob]) -> list[str]:
    """Commit a run's outputs into ``run_dir`` (see the module docstring).

    Returns:
        The top-level names committed, markers last.

    Raises:
        TransferError: a file that is not an output (:data:`OUTPUTS`), or one that fails
            its hash check (nothing is renamed into place).
    """
    strays = sorted({b.path for b in blobs if relative_path(b.path).parts[0] not in OUTPUTS})
    if strays:
        raise TransferError(f"{strays[0]}: not an output of a run (only "
                            f"{', '.join(OUTPUTS)} come home); refusing the outputs")
    run_dir = Path(run_dir)
    staging = run_dir / INCOMING
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        _write_checked(staging, blobs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    tops = sorted({relative_path(b.path).parts[0] for b in blobs})
    order = [n for n in tops if n not in STATUS_MARKERS] + [n for n in STATUS_MARKERS
                                                              if n in tops]
    for top in order:
        replace_path(run_dir / top, staging / top)
    shutil.rmtree(staging)
    return order
