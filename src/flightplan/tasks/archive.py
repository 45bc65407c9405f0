"""A task's source kept with the results, so the work can be reproduced (and re-hashed).

When a run is published, the source of its task is copied into the results directory and
described by a **task record** that goes into the run's manifest entry (``runs.<id>.task``):

- a built-in task is kept by reference: ``{"kind": "builtin", "ref": "textclf",
  "entry": "textclf", "code_version": "1", "source": null}`` (the installed flightplan's
  code; its ``CODE_VERSION`` is what the run id was made from);
- a file or module task is copied to ``tasks/<hex[:12]>/`` (``hex``: the sha256 of its
  ``code_version``) in the layout it is imported from: a file task as ``<name>.py`` (with
  the campaign folder's modules it imports, at their paths in that folder), a
  module ``a.b.c`` as ``a/b/c.py`` or ``a/b/c/...`` with the ``__init__.py`` of its parent
  packages. The record::

      {"kind": "file" | "module", "ref": "tasks/reg.py",   # as in the campaign file
       "entry": "reg.py" | "a.b.c",          # what the reload entry loads, inside source
       "code_version": "sha256:<hex>",       # the run id's code identity
       "source": "tasks/<hex[:12]>",          # the folder, relative to results/
       "files": ["tasks/<hex[:12]>/reg.py", ...],   # every file kept (hashed in the manifest)
       "code_root": "" | "a/b" | "a/b/c",     # folder inside source the code is hashed from
       "code_files": ["reg.py"], "package": false}   # what hashes to code_version
                                                     # (flightplan.tasks.loader.hash_code)

  When the source no longer hashes to the run's ``code_version`` (edited after the run) or
  is gone, a copy kept by an earlier publish serves if it still hashes right; otherwise
  ``source`` is null and ``not_kept`` says why: such a run cannot be reloaded from its
  results, so close does not accept it.

:func:`check_kept` re-hashes a kept copy without importing it (what ``flightplan verify``
does before it would ever run the code).

Usage::

    record, written = keep_task_source(results, trial["task_source"], trial["task"])
    problems = check_kept(results, record)      # [] when the copy hashes to code_version
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from flightplan.durable import write_atomic
from flightplan.tasks.loader import BUILTIN_TASKS, hash_code, task_files, visibly_lacks_reload

__all__ = ["KEPT_DIRNAME", "kept_folder", "keep_task_source", "check_kept", "task_record",
           "kept_lacks_reload"]

KEPT_DIRNAME = "tasks"
"""Folder of results/ that holds the kept task sources."""


def kept_folder(code_version: str) -> str:
    """``tasks/<sha256(code_version)[:12]>``, relative to results/."""
    return f"{KEPT_DIRNAME}/{hashlib.sha256(code_version.encode('utf-8')).hexdigest()[:12]}"


def task_record(task: str, source: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record of a task that is not (or not yet) copied: built-in, or not kept.

    Args:
        task: the run's ``task`` (trial.json).
        source: trial.json's ``task_source`` (``TaskSource.to_json()``), or None when the
            trial file predates it.
    """
    kind = (source or {}).get("kind") or ("builtin" if task in BUILTIN_TASKS else "module")
    record: dict[str, Any] = {"kind": kind, "ref": task, "entry": task,
                              "code_version": (source or {}).get("code_version"),
                              "source": None}
    if kind != "builtin":
        record["not_kept"] = "trial.json does not say where the task's source is"
    return record


def _layout(source: Mapping[str, Any]) -> tuple[str, str, bool, list[tuple[Path, str]]]:
    """``(entry, code_root, package, [(file on disk, path inside the kept folder)])``."""
    root, files = Path(source["root"]), [str(f) for f in source["files"]]
    if source["kind"] == "file":  # the task file first, then the modules it imports
        return files[0], "", False, [(root / f, f) for f in files]
    parts = str(source["module"]).split(".")
    package = "__init__.py" in files
    code_root = "/".join(parts if package else parts[:-1])
    import_root = root.parents[len(parts) - 1] if package else \
        (root.parents[len(parts) - 2] if len(parts) > 1 else root)
    pairs = [(root / f, PurePosixPath(code_root, f).as_posix()) for f in files]
    for depth in range(1, len(parts)):  # the parent packages a, a.b of a.b.c
        init = PurePosixPath(*parts[:depth], "__init__.py").as_posix()
        if (import_root / init).is_file():
            pairs.append((import_root / init, init))
    return str(source["module"]), code_root, package, pairs


def keep_task_source(results: Path, source: Mapping[str, Any] | None, task: str
                     ) -> tuple[dict[str, Any], list[str]]:
    """Copy a file or module task's source into ``results/tasks/<hex[:12]>/``.

    When the source no longer hashes to the run's ``code_version`` (edited since) or is
    gone (the campaign moved), a copy an earlier publish kept is used if it still hashes
    to it; otherwise the record says why nothing is kept.

    Args:
        results: the results directory.
        source: trial.json's ``task_source`` (with its machine ``root``), or None.
        task: the run's ``task``.

    Returns:
        ``(task record, relative paths written)`` (see the module docstring); nothing is
        written for a built-in task or a source that is not kept or already was.
    """
    if not source or source.get("kind") == "builtin" or not source.get("root"):
        return task_record(task, source), []
    entry, code_root, package, pairs = _layout(source)
    folder = kept_folder(str(source.get("code_version")))
    record = task_record(task, source) | {
        "entry": entry, "source": folder, "code_root": code_root,
        "code_files": sorted(str(f) for f in source["files"]), "package": package}
    del record["not_kept"]
    try:
        now = hash_code(Path(source["root"]), tuple(source["files"]), package=package)
        blobs = [(rel, path.read_bytes()) for path, rel in pairs]
    except OSError as exc:
        reason = f"the task's source cannot be read ({exc.strerror or exc})"
    else:
        if now == source.get("code_version"):
            written = []
            for rel, data in sorted(blobs):
                write_atomic(results / folder / rel, data)
                written.append(f"{folder}/{rel}")
            return record | {"files": written}, written
        reason = (f"the task's source changed since the run ({now} is not "
                  f"{source.get('code_version')})")
    kept = results / folder
    earlier = sorted(p.relative_to(results).as_posix() for p in kept.rglob("*")
                     if p.is_file()) if kept.is_dir() else []
    if earlier and not check_kept(results, record | {"files": earlier}):
        return record | {"files": earlier}, []
    return task_record(task, source) | {"not_kept": reason}, []


def _entry_is_kept(record: Mapping[str, Any], kept: Path, code_root: str,
                   files: list[str]) -> bool:
    """Whether loading ``entry`` from the kept folder ``kept`` loads the hashed files, and
    no other module of that folder (a file task: its file and the kept modules it imports,
    :func:`~flightplan.tasks.loader.task_files`; a module ``a.b.c``: ``a/b/c.py`` or
    package ``a/b/c``)."""
    entry = record.get("entry")
    if not isinstance(entry, str):
        return False
    if record.get("kind") == "file":
        return code_root == "" and sorted(task_files(kept, entry)) == sorted(files)
    parts = entry.split(".")
    if record.get("package"):
        return code_root == "/".join(parts) and "__init__.py" in files
    return code_root == "/".join(parts[:-1]) and files == [f"{parts[-1]}.py"]


def check_kept(results: Path, record: Mapping[str, Any]) -> list[str]:
    """Why a kept task source is not the code its runs were made from ([] when it is):
    a malformed record, an ``entry`` that would load something else than the hashed files,
    or files that do not hash to ``code_version``.

    Reads and hashes files only; nothing is imported.
    """
    folder, code_root = record.get("source"), record.get("code_root")
    files = record.get("code_files")
    if not isinstance(folder, str) or not isinstance(code_root, str) \
            or not isinstance(files, list) or not all(isinstance(f, str) for f in files) \
            or not files:
        return ["the task record does not list the kept source files"]
    for rel in [folder, code_root, *files]:
        if rel.startswith("/") or ".." in PurePosixPath(rel).parts or "\\" in rel:
            return [f"the task record's path {rel!r} is not a plain relative path"]
    if not folder.startswith(f"{KEPT_DIRNAME}/"):
        return [f"the task record's source {folder!r} is not under {KEPT_DIRNAME}/"]
    if not _entry_is_kept(record, results / folder, code_root, files):
        return [f"the task record's entry {record.get('entry')!r} is not the kept code "
                f"({code_root or '.'}: {', '.join(files)})"]
    try:
        digest = hash_code(results / folder / code_root, tuple(files),
                           package=bool(record.get("package")))
    except OSError as exc:
        return [f"the kept source cannot be read ({exc.strerror or exc})"]
    if digest != record.get("code_version"):
        return [f"the kept source hashes to {digest}, not the run's code_version "
                f"{record.get('code_version')}: it is not the code the runs were made from"]
    return []


def kept_lacks_reload(results: Path, record: Mapping[str, Any]) -> bool:
    """Whether a kept file or one-file module task visibly defines no ``reload_predictions``
    hook, read and never run (:func:`~flightplan.tasks.loader.visibly_lacks_reload` of the
    file ``entry`` loads: ``<source>/<entry>`` for a file task, ``<source>/<code_root>/
    <last part>.py`` for a module). False for a package, where that cannot be told without
    running it. Call it only on a record :func:`check_kept` passes.
    """
    entry = str(record["entry"])
    if record.get("package"):
        return False
    name = entry if record.get("kind") == "file" else f"{entry.rsplit('.', 1)[-1]}.py"
    return visibly_lacks_reload(results / str(record["source"]) / str(record["code_root"]) / name)
