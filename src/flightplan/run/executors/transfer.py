"""Files between the machine with the campaign ("home") and a flight: sent with their
sha256, committed atomically only after every hash was checked on arrival.

A run on a remote flight works in a scratch folder there. What it makes comes home as
:class:`Blob` lists (bytes + sha256 taken where the file was read) and is committed into
``runs/<id>/`` by the two functions below; the same functions put a checkpoint sent *to* a
flight into its scratch folder, so both directions check the same way.

- :func:`commit_checkpoint`: a ``step-NNNNNN`` folder. Every file must match both its blob's
  sha256 and the checkpoint's own ``manifest.json`` (size and sha256), and no file may be
  unlisted. Files go into ``step-NNNNNN.tmp/`` (which ``restore()`` never loads and
  removes), the manifest last, each fsync'd; then one rename makes it a checkpoint. The
  newest ``keep_last`` are kept (:func:`flightplan.trial.checkpoint.prune`).
- :func:`commit_outputs`: a finished or stopped run's outputs, only the names a run
  produces (:data:`OUTPUTS`: predictions, metrics, the artifact folder, the status
  markers; a flight that sends anything else, such as ``trial.json``, the measurements or
  ``checkpoints/``, is refused whole). All are written and checked in ``.incoming/``
  first, then each top-level entry is renamed into place, the status markers
  ``done.json``/``stop.json`` last, so the run counts as ended only once everything it
  made is home.
- :func:`latest_checkpoint`: the newest checkpoint of a folder whose files match its
  manifest, packed for sending (a failing one is set aside as ``.corrupt-transfer``).

Usage::

    blobs = pack(scratch / "checkpoints" / "step-000008", ["manifest.json", "model.safetensors"])
    commit_checkpoint(run_dir / "checkpoints", "step-000008", blobs, keep_last=2)
    commit_outputs(run_dir, pack_tree(scratch, only=OUTPUTS))
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from flightplan.durable import fsync_dir, hash_file, replace_path
from flightplan.errors import CheckpointError, TransferError
from flightplan.rundir import RunDir, list_checkpoints
from flightplan.trial.checkpoint import prune, set_aside
from flightplan.trial.checkpoint_io import MANIFEST, read_manifest

__all__ = ["Blob", "STATUS_MARKERS", "OUTPUTS", "INCOMING", "pack", "pack_tree",
           "commit_checkpoint", "commit_outputs", "latest_checkpoint", "blob_bytes",
           "relative_path", "checkpoint_steps"]

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
    every path a flight sends home (files here, checkpoint chunks in :mod:`.stream`).

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
    checkpoint name a flight sends home.

    Raises:
        TransferError: any other name (a flight sends only those).
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


def _check_against_manifest(name: str, blobs: list[Blob]) -> Blob:
    """The manifest blob of a checkpoint, after checking that the blobs are exactly the
    files it lists with their sizes and sha256.

    Raises:
        TransferError: no manifest, a file missing, unlisted or with another hash.
    """
    by_path = {b.path: b for b in blobs}
    manifest_blob = by_path.pop(MANIFEST, None)
    if manifest_blob is None or hashlib.sha256(manifest_blob.data).hexdigest() \
            != manifest_blob.sha256:
        raise TransferError(f"{name}: its {MANIFEST} is missing or damaged in transit")
    try:
        listed = json.loads(manifest_blob.data)["files"]
    except (ValueError, KeyError, TypeError):
        raise TransferError(f"{name}: its {MANIFEST} is not a flightplan manifest") from None
    if set(listed) != set(by_path):
        raise TransferError(f"{name}: sent files {sorted(by_path)} are not the files its "
                            f"manifest lists {sorted(listed)}")
    for path, record in listed.items():
        blob = by_path[path]
        if record.get("size") != len(blob.data) or record.get("sha256") != blob.sha256:
            raise TransferError(f"{name}/{path}: sha256 {blob.sha256[:12]}… ({len(blob.data)} "
                                f"bytes) differs from its manifest's "
                                f"{str(record.get('sha256'))[:12]}… ({record.get('size')} bytes)")
    return manifest_blob


def commit_checkpoint(parent: Path, name: str, blobs: list[Blob], *,
                      keep_last: int | None = None) -> bool:
    """Commit a sent checkpoint as ``parent/name`` (see the module docstring).

    Args:
        parent: the ``checkpoints`` folder.   name: ``step-NNNNNN``.
        blobs: its files, ``manifest.json`` among them.
        keep_last: prune to the newest this many afterwards (None: keep all).

    Returns:
        False when ``parent/name`` was already there (nothing written), else True.

    Raises:
        TransferError: a bad name, or a file that fails its checks (nothing committed).
    """
    checkpoint_steps(name)
    parent = Path(parent)
    final = parent / name
    if final.is_dir():
        return False
    manifest = _check_against_manifest(name, blobs)
    tmp = parent / f"{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        _write_checked(tmp, [b for b in blobs if b is not manifest])
        _write_checked(tmp, [manifest])
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(final)
    fsync_dir(parent)
    if keep_last is not None:
        prune(parent, keep_last)
    return True


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


def latest_checkpoint(parent: Path) -> tuple[str, list[Blob]] | None:
    """The newest complete checkpoint in ``parent`` whose files match its manifest, packed.

    A checkpoint whose manifest is unreadable, or whose files do not match it, is renamed
    ``<name>.corrupt-transfer`` (never loaded) and the next older one is tried.

    Returns:
        ``(name, blobs)`` or None when no checkpoint is usable.
    """
    complete, _ = list_checkpoints(Path(parent))
    for _, path in complete:
        try:
            manifest = read_manifest(path)
            blobs = pack(path, [MANIFEST, *manifest["files"]])
            _check_against_manifest(path.name, blobs)
        except (CheckpointError, OSError):
            set_aside(path, "transfer")
            continue
        return path.name, blobs
    return None
