"""Checkpoint folders that a training library writes and loads itself, committed by flightplan.

The Hugging Face Trainer writes ``checkpoint-N/`` (weights, ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth``, ``trainer_state.json``) and loads it again on
``resume_from_checkpoint``; Lightning does the same with a ``.ckpt`` file. Neither makes the
folder atomic: a kill mid-save leaves a partial folder that looks like the newest one. Here
the library writes into a staging folder flightplan never loads from, and
:func:`commit_library_checkpoint` turns the finished folder into ``checkpoints/step-NNNNNN/``
with flightplan's manifest (each file's size and sha256, ``kind`` = the library): moved to
``checkpoints/step-NNNNNN.tmp`` once the manifest is written, then renamed into place like a
checkpoint flightplan writes itself (:func:`~flightplan.durable.replace_path`).
:func:`load_library_checkpoint` re-checks every byte before the library may load it;
:meth:`flightplan.trial.trial.Trial.restore_library` picks the newest such checkpoint.

Layout of a committed folder::

    checkpoints/step-NNNNNN/
        <the library's files, flat>      e.g. model.safetensors, optimizer.pt, rng_state.pth
        manifest.json                    format, kind, run_id, config_hash, step, saved_at,
                                         files {name: {size, sha256}}, tensors {} (empty)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from flightplan.durable import fsync_dir, hash_file, write_atomic
from flightplan.errors import CheckpointError
from flightplan.findings import Finding
from flightplan.trial.checkpoint_io import (FORMAT, MANIFEST, BadCheckpoint, CheckpointFiles,
                                            check_files, commit_checkpoint, read_manifest,
                                            step_dir_name)

__all__ = ["commit_library_checkpoint", "load_library_checkpoint", "missing_files"]


def commit_library_checkpoint(source: Path, parent: Path, steps_done: int, *,
                              meta: Mapping[str, Any],
                              before_commit: Callable[[Path], None] | None = None
                              ) -> tuple[Path, int]:
    """Commit a library's finished checkpoint folder as ``parent/step-NNNNNN``.

    Every file of ``source`` is fsync'd, hashed and listed in ``manifest.json`` (written
    atomically into ``source``); the finished folder is renamed ``parent/step-NNNNNN.tmp``
    and ``parent`` fsync'd, then renamed into place by
    :func:`~flightplan.durable.replace_path` (a checkpoint of the same step
    already there is set aside first and deleted last). A kill before the manifest leaves
    ``source`` in a staging folder that is never loaded; after it, a finished ``.tmp`` that
    the next restore puts in place; the previous checkpoints are untouched either way.

    Args:
        source: the library's checkpoint folder (moved, not copied); plain files only.
        parent: the ``checkpoints/`` directory (created if missing), on the same file system.
        steps_done: optimizer steps done; names ``step-NNNNNN``.
        meta: JSON values for the manifest; ``kind`` (the library's name) is required.
        before_commit: called with the final directory just before the rename that puts the
            finished folder in place (the trial's durable ``checkpoint_saving`` row).

    Returns:
        (the committed directory, total bytes of the listed files).

    Raises:
        CheckpointError: ``meta`` has no ``kind``, or ``source`` holds a sub-folder.
        OSError: from the disk (the previous checkpoints are then unchanged).
    """
    if not meta.get("kind"):
        raise CheckpointError("a library checkpoint needs meta['kind'] (the library's name)")
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(source.iterdir()):
        if path.name == MANIFEST:
            continue
        if not path.is_file() or path.is_symlink():
            raise CheckpointError(f"{path}: a library checkpoint folder must hold plain files "
                                  f"only; save sub-folders' content flat")
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        size, sha = hash_file(path)
        files[path.name] = {"size": size, "sha256": sha}
    manifest = {"format": FORMAT, "step": steps_done, **meta, "files": files, "tensors": {}}
    write_atomic(source / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / step_dir_name(steps_done)
    tmp = parent / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.rename(source, tmp)
    fsync_dir(parent)
    commit_checkpoint(final, tmp, before_commit)
    return final, sum(int(record["size"]) for record in files.values())


def load_library_checkpoint(directory: Path) -> CheckpointFiles:
    """Check a folder written by :func:`commit_library_checkpoint` without loading it: the
    manifest, every listed file's size and sha256, and no file the manifest does not list.

    Returns:
        ``CheckpointFiles`` holding the manifest (model and state empty, optimizer None).

    Raises:
        BadCheckpoint: no manifest, a manifest without ``kind`` (check ``manifest``), or a
            file missing, resized, re-hashed or unlisted (every fault in ``findings``).
    """
    manifest = read_manifest(directory)
    if not manifest.get("kind"):
        raise BadCheckpoint(directory, [Finding("manifest", MANIFEST, "not a checkpoint written "
                                                "by a training library (no kind)")])
    findings = check_files(directory, manifest)
    if findings:
        raise BadCheckpoint(directory, findings)
    return CheckpointFiles(model={}, optimizer=None, state={}, manifest=manifest)


def missing_files(manifest: Mapping[str, Any], required: Mapping[str, str]) -> list[str]:
    """The entries of ``required`` (file name → what it holds) absent from ``manifest``,
    as ``"optimizer.pt (optimizer state)"`` lines, in ``required``'s order."""
    listed = manifest.get("files", {})
    return [f"{name} ({what})" for name, what in required.items() if name not in listed]
