"""The results manifest: every file's relative path, size and sha256, plus the campaign facts.

``results/MANIFEST.json`` is the one file ``flightplan verify`` trusts. It is rewritten
atomically (temp file, fsync, rename) under a lock each time something is published, so a
campaign cut short still leaves a manifest that matches what was finished. Entries are
added only for files the writer itself wrote: a stray file dropped into ``results/`` stays
unlisted and verify reports it.

Layout of ``MANIFEST.json``::

    {
      "format": "flightplan-results/1",
      "campaign": "tiny",                       # campaign name
      "question": "...", "metric": "macro_f1",
      "plan_sha256": "<64 hex>" | null,         # hash of the original (frozen) plan
      "corpus_sha256": {"file.tsv": "<64 hex>"}, # the frozen corpus files
      "base_model_revision": {"package", "version", "weights_sha256"} | null,
      "order_number": "ITG-123" | null,         # the provider's order number
      "expected_run_ids": [...], "accepted_run_ids": [...],
      "runs": {"<run_id>": {"name", "tier", "status", "config_hash"}},
      "writer": {"tmpdirs": [...], "absolute_roots": [...]},  # what verify searches for
      "files": [{"path", "size_bytes", "sha256"}, ...]        # sorted by path
    }

Usage::

    update_manifest(results_dir, written=["plan.json"], meta={"plan_sha256": digest})
    manifest = read_manifest(results_dir)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from flightplan.durable import hash_file, write_json_atomic
from flightplan.errors import VerificationFailed
from flightplan.findings import Finding

__all__ = [
    "MANIFEST_NAME",
    "FORMAT",
    "read_manifest",
    "resized_files",
    "update_manifest",
    "writer_facts",
]

MANIFEST_NAME = "MANIFEST.json"
FORMAT = "flightplan-results/1"
_SHARED_PREFIXES = ("/usr", "/usr/local", "/")


def writer_facts(campaign_dir: Path) -> dict[str, list[str]]:
    """What verify must not find in any text file: this machine's temp and absolute dirs.

    Returns:
        ``{"tmpdirs": [...], "absolute_roots": [...]}``: the writer's ``$TMPDIR`` and
        ``tempfile.gettempdir()``; its campaign directory, home, working directory and
        Python environment (``sys.prefix`` unless it is a system-wide ``/usr`` or
        ``/usr/local``), each resolved; ``/`` itself is left out.
    """
    tmpdirs = {tempfile.gettempdir()}
    if os.environ.get("TMPDIR"):
        tmpdirs.add(os.environ["TMPDIR"])
    tmpdirs = {str(Path(t).resolve()) for t in tmpdirs} | tmpdirs
    roots = {str(campaign_dir.resolve()), str(Path.home().resolve()), str(Path.cwd().resolve())}
    if sys.prefix not in _SHARED_PREFIXES:  # a virtual environment of this machine
        roots.add(str(Path(sys.prefix).resolve()))
    return {key: sorted(i.rstrip("/") for i in items if i and i != "/")
            for key, items in (("tmpdirs", tmpdirs), ("absolute_roots", roots))}


def read_manifest(results_dir: Path) -> dict[str, Any]:
    """The parsed ``MANIFEST.json`` of ``results_dir``.

    Raises:
        VerificationFailed: the manifest is missing or not a JSON object (one finding).
    """
    path = Path(results_dir) / MANIFEST_NAME
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerificationFailed(
            f"{path}: no manifest; run `flightplan close` on the campaign to write it",
            [Finding("missing_file", MANIFEST_NAME, "no MANIFEST.json")],
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise VerificationFailed(
            f"{path}: not valid JSON ({exc}); the manifest was damaged, re-run `flightplan close`",
            [Finding("checksum", MANIFEST_NAME, f"not valid JSON: {exc}")],
        ) from None
    if not isinstance(value, dict) or not isinstance(value.get("files"), list):
        raise VerificationFailed(
            f"{path}: not a flightplan manifest (no files list); re-run `flightplan close`",
            [Finding("checksum", MANIFEST_NAME, "no files list")])
    return value


def resized_files(results_dir: Path) -> list[str]:
    """The files ``MANIFEST.json`` lists that are gone or no longer of the size it gives
    (relative paths, in its order): what a glance can tell without hashing a byte, for
    ``flightplan status``. A file changed within its size is found only by
    ``flightplan verify`` (sha256). An unreadable manifest gives ``["MANIFEST.json"]``."""
    try:
        listed = read_manifest(results_dir)["files"]
    except VerificationFailed:
        return [MANIFEST_NAME]
    changed = []
    for entry in listed:
        path = Path(results_dir) / str(entry.get("path"))
        try:
            size = path.stat().st_size
        except OSError:
            size = None
        if size != entry.get("size_bytes"):
            changed.append(str(entry.get("path")))
    return changed


@contextlib.contextmanager
def _locked(results_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock for one manifest rewrite (the lock file sits beside results/)."""
    lock_path = results_dir.parent / ".flightplan" / "results.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _empty_manifest() -> dict[str, Any]:
    return {"format": FORMAT, "campaign": None, "question": None, "metric": None,
            "plan_sha256": None, "corpus_sha256": None, "base_model_revision": None,
            "order_number": None, "expected_run_ids": [], "accepted_run_ids": [],
            "runs": {}, "writer": {"tmpdirs": [], "absolute_roots": []}, "files": []}


def _remove_stale_temp_files(results_dir: Path, *, listed: dict[str, Any]) -> None:
    """Delete ``.<name>.<random>.tmp`` files a killed writer left (see :func:`write_atomic`).

    Called under the results lock; only one campaign process writes ``results/`` (the
    runner or ``close``, each holding the campaign lock, :mod:`flightplan.campaign_lock`),
    so a temp file seen here is never still being written.
    """
    for path in results_dir.rglob(".*.tmp"):
        rel = path.relative_to(results_dir).as_posix()
        if rel not in listed and path.is_file() and not path.is_symlink():
            path.unlink()


def update_manifest(results_dir: Path, *, written: Iterable[str] = (),
                    removed_prefixes: Iterable[str] = (), meta: dict[str, Any] | None = None,
                    runs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Add or refresh entries for files the caller just wrote, then rewrite the manifest.

    Args:
        results_dir: the results directory (``<campaign>/results``).
        written: relative paths (``/``-separated) of files just written; each is hashed.
        removed_prefixes: relative paths or folder prefixes (``"artifacts/run-1/"``) whose
            entries are dropped first (a re-published run replaces its old files).
        meta: top-level keys to set (``plan_sha256``, ``expected_run_ids``, ...).
        runs: per-run facts merged into ``runs`` (by run id).

    Returns:
        The manifest as written.
    """
    results_dir = Path(results_dir)
    with _locked(results_dir):
        try:
            manifest = read_manifest(results_dir)
        except VerificationFailed:
            manifest = _empty_manifest()
        manifest.setdefault("runs", {})
        prefixes = tuple(removed_prefixes)
        entries = {e["path"]: e for e in manifest["files"]
                   if not (prefixes and e["path"].startswith(prefixes))}
        for rel in written:
            size, digest = hash_file(results_dir / rel)
            entries[rel] = {"path": rel, "size_bytes": size, "sha256": digest}
        manifest["files"] = [entries[p] for p in sorted(entries)]
        for key, value in (meta or {}).items():
            manifest[key] = value
        for run_id, facts in (runs or {}).items():
            manifest["runs"].setdefault(run_id, {}).update(facts)
        _remove_stale_temp_files(results_dir, listed=entries)
        facts = writer_facts(results_dir.parent)
        writer = manifest.setdefault("writer", {})
        for key, items in facts.items():
            writer[key] = sorted(set(writer.get(key, [])) | set(items))
        write_json_atomic(results_dir / MANIFEST_NAME, manifest)
    return manifest
