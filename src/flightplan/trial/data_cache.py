"""Prepared data built once per campaign: a cache in ``<campaign>/.flightplan/cache/``.

A run's data preparation (tokenising a corpus, decoding images, building features) is
often the same for every run of a campaign. :func:`cached` builds it once, stores it, and
every later run or reload of the campaign loads it instead. An entry is named by its
**key**, the sha256 of the canonical JSON (:func:`flightplan.canonical.canonical_json`) of
the ``key_parts`` the caller names: everything the built object depends on (corpus
hashes, tokenizer files, ``max_length``, the code's version). Two calls with equal parts
share one entry; any changed part gives another.

Files of an entry (``<key>`` = 64 hex digits)::

    <key>.pt      the object, torch.save'd (read back with torch.load(weights_only=True))
    <key>.json    {"key", "parts", "sha256", "bytes", "build_s", "format"}, written after
                  the .pt (both atomically, flightplan.durable); the entry exists only then
    <key>.lock    an flock held while one process checks, builds or loads the entry, so two
                  runs that start together build it once (the second waits, then loads)

An entry is trusted only when its ``.json`` names this key and the ``.pt``'s bytes have
the sha256 it records; anything else (a missing or unreadable file, a tampered or torn
one, bytes that do not unpickle under ``weights_only``) is rebuilt and overwritten, never
used. The bytes hashed are the bytes loaded (read once), so a file changed between the
check and the load cannot slip through.

What may be stored: what ``torch.load(weights_only=True)`` reads back: tensors, lists,
tuples, dicts, strings, numbers, booleans, None (numpy arrays: store
``torch.from_numpy(a)``). The key is not put into run ids: its parts must be functions
of what the run id already holds (params, corpus hashes, base model, code version).

Usage::

    obj, use = cached(campaign_dir / CACHE_DIR, {"what": "tokens", "max_length": 128},
                      lambda: build_tokens(...))
    use.hit, use.key, use.seconds     # loaded or built, the entry's key, time it took
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

from flightplan.canonical import canonical_json
from flightplan.durable import write_atomic, write_json_atomic

__all__ = ["CACHE_DIR", "CACHE_FORMAT", "CacheUse", "cache_key", "cached"]

CACHE_DIR = Path(".flightplan") / "cache"
"""The cache folder, relative to the campaign folder."""
CACHE_FORMAT = "torch.save/1"
"""How an entry's object is stored (recorded in its ``.json``; another value is rebuilt)."""

T = TypeVar("T")


@dataclass(frozen=True)
class CacheUse:
    """What one :func:`cached` call did: ``hit`` (loaded a checked entry) or built it;
    ``rebuilt_because`` says why an existing entry was not used (None when there was none
    or it was used); ``seconds`` the call's wall time (wait, check, load or build)."""

    key: str
    hit: bool
    seconds: float
    rebuilt_because: str | None = None


def cache_key(parts: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``parts``.

    Raises:
        SpecError: ``parts`` holds a value JSON cannot represent exactly.
    """
    return hashlib.sha256(canonical_json(dict(parts))).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)          # closing the descriptor releases the lock


def _load(folder: Path, key: str) -> tuple[bool, Any, str | None]:
    """``(True, object, None)`` from a checked entry; ``(False, None, None)`` when there is
    none; ``(False, None, reason)`` when there is one that cannot be used."""
    import torch

    meta_path, data_path = folder / f"{key}.json", folder / f"{key}.pt"
    if not meta_path.exists():
        return False, None, None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        data = data_path.read_bytes()
    except (OSError, ValueError) as exc:
        return False, None, f"unreadable entry ({exc})"
    if not isinstance(meta, dict) or meta.get("key") != key \
            or meta.get("format") != CACHE_FORMAT:
        return False, None, f"{meta_path.name} does not describe this entry"
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("sha256"):
        return False, None, (f"{data_path.name} has sha256 {digest[:12]}… but {meta_path.name} "
                      f"records {str(meta.get('sha256'))[:12]}…")
    try:
        return True, torch.load(io.BytesIO(data), weights_only=True), None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means: rebuild
        return False, None, f"{data_path.name} does not load ({type(exc).__name__}: {exc})"


def cached(folder: Path | str, key_parts: Mapping[str, Any], build: Callable[[], T]
           ) -> tuple[T, CacheUse]:
    """The object ``build()`` makes for ``key_parts``: loaded from ``folder`` when a checked
    entry is there, else built, stored (atomically, with its sha256) and returned.

    Args:
        folder: the cache folder (``<campaign>/``:data:`CACHE_DIR`; created).
        key_parts: everything the object depends on, as JSON values (module docstring).
        build: makes the object; called at most once, under the entry's lock.

    Returns:
        ``(object, CacheUse)``. A built object is returned as ``build()`` gave it; a loaded
        one is what ``torch.load`` reads back (equal in value: tensors bitwise, tuples may
        come back as tuples, dict order kept).

    Raises:
        SpecError: ``key_parts`` is not representable as canonical JSON.
        OSError: the folder cannot be created or written.
        Whatever ``build`` raises (nothing is stored then).
    """
    import torch

    began = time.perf_counter()
    folder = Path(folder)
    key = cache_key(key_parts)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / f"{key}.lock"):
        found, value, reason = _load(folder, key)
        if found:
            return value, CacheUse(key, True, time.perf_counter() - began)
        built_at = time.perf_counter()
        obj = build()
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data = buffer.getvalue()
        write_atomic(folder / f"{key}.pt", data)
        write_json_atomic(folder / f"{key}.json", {
            "key": key, "parts": dict(key_parts), "format": CACHE_FORMAT,
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "build_s": time.perf_counter() - built_at})
    return obj, CacheUse(key, False, time.perf_counter() - began, reason)
