"""Checkpoint files on disk: the atomic writer, the manifest, safe loading and verification.

A checkpoint is a directory ``checkpoints/step-NNNNNN/`` (N = optimizer steps done)::

    model.safetensors      model parameters and buffers (safetensors format)
    optimizer.safetensors  the optimizer state_dict's tensors by path (``state/0/exp_avg``)
    state.pt               the optimizer state_dict's structure (tensors replaced by their
                           names), scheduler, scaler, loader, extra, RNG states, counters
                           (torch.save; loads with ``weights_only=True``)
    manifest.json          written last: format, run_id, config_hash, counters; each file's
                           size (bytes) and sha256; each tensor's crc32, dtype, shape

Writing (:func:`write_checkpoint`): everything goes into ``step-NNNNNN.tmp/``; each file is
hashed while it is written (one pass over memory; for the tensor files in a thread of its
own, a piece behind the writes, and each tensor's crc32 for the manifest in another thread
from the same cached piece: no second pass over the bytes) and fsync'd in another thread
while the next one is written; the manifest is written and fsync'd last; the directory is
fsync'd, renamed to ``step-NNNNNN/`` and the parent fsync'd
(:func:`~flightplan.durable.replace_path`: a checkpoint of the same step already there is
first renamed ``step-NNNNNN.deleting`` and deleted only once the new one is in place). A
directory without a manifest is never loaded; a ``.tmp`` one only after
:func:`flightplan.trial.checkpoint.recover_checkpoints` found it finished (its manifest
written: a save whose last rename a kill cut off) and renamed it into place.

Loading (:func:`load_checkpoint`) re-hashes every file against the manifest, refuses files
the manifest does not list, opens ``.pt`` files only if they are torch zip archives and only
with ``torch.load(weights_only=True)`` (no pickled code runs), loads every tensor and compares
its crc32 with the digest recorded at save time.
:func:`flightplan.trial.checkpoint_check.verify_checkpoint` does the same in a fresh Python
process (``python -m flightplan.trial.checkpoint_check DIR``) and names each fault.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping, cast

import torch

from flightplan.durable import fsync_dir, hash_file, replace_path
from flightplan.errors import CheckpointError, UnsafeFileError
from flightplan.findings import Finding

__all__ = ["FORMAT", "MANIFEST", "MODEL_FILE", "OPTIMIZER_FILE", "STATE_FILE", "BadCheckpoint",
           "CheckpointFiles", "FileRecord", "write_checkpoint", "read_manifest",
           "load_checkpoint", "tensor_digests",
           "step_dir_name", "check_files", "commit_checkpoint"]

FORMAT = "flightplan-checkpoint/1"
MANIFEST = "manifest.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.pt"
_REF = "__safetensors__"  # stands for a tensor of optimizer.safetensors inside state.pt
_OPTIMIZER_KEY = "optimizer"  # the optimizer state_dict's structure, inside state.pt
_CHUNK_BYTES = 4 << 20  # written and hashed in 4 MiB pieces, so hashing reads from cache

_SAFETENSORS_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
                       "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                       "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def step_dir_name(steps_done: int) -> str:
    """``step-NNNNNN``: the directory of the checkpoint taken after ``steps_done`` steps."""
    return f"step-{steps_done:06d}"


@dataclass(frozen=True)
class FileRecord:
    """One file of a checkpoint: ``size`` in bytes and ``sha256`` hex."""
    size: int
    sha256: str


@dataclass
class CheckpointFiles:
    """What a checkpoint holds once loaded: model tensors, optimizer state, the rest, manifest."""
    model: dict[str, Any]
    optimizer: dict[str, Any] | None
    state: dict[str, Any]
    manifest: dict[str, Any]


def _raw_bytes(tensor: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    flat = tensor.detach().reshape(-1)
    return memoryview(flat.view(dtype=torch.uint8).numpy() if flat.numel() else b"").cast("B")


class _HashingFile:
    """A write-only file that feeds every byte to sha256 as it writes it (``torch.save`` target).

    With ``hasher`` (a one-thread executor), hashing runs in that thread while the next
    piece is written; only for data whose owner outlives the write (the snapshot buffers),
    since ``torch.save`` hands over views of temporary buffers. With ``crc`` (another
    one-thread executor) a write given a ``crc_key`` also folds its pieces into
    ``crcs[crc_key]`` (zlib crc32) while they are still in cache.
    """

    def __init__(self, path: Path, hasher: ThreadPoolExecutor | None = None,
                 crc: ThreadPoolExecutor | None = None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.sha = hashlib.sha256()
        self.size = 0
        self.crcs: dict[str, int] = {}
        self._hasher = hasher
        self._crc = crc
        self._hashed: Any = None
        self._crced: Any = None

    def _fold_crc(self, key: str, piece: memoryview) -> None:
        self.crcs[key] = zlib.crc32(piece, self.crcs[key])

    def write(self, data: Any, crc_key: str | None = None) -> int:
        view = memoryview(data).cast("B")
        if crc_key is not None:
            self.crcs[crc_key] = 0
        for start in range(0, view.nbytes, _CHUNK_BYTES):
            piece = view[start:start + _CHUNK_BYTES]
            done = 0
            while done < piece.nbytes:
                done += os.write(self.fd, piece[done:])
            if self._hasher is None:
                self.sha.update(piece)
            else:  # one worker: pieces are hashed in order
                self._hashed = self._hasher.submit(self.sha.update, piece)
            if crc_key is not None:
                if self._crc is None:
                    self._fold_crc(crc_key, piece)
                else:  # one worker: pieces are folded in order
                    self._crced = self._crc.submit(self._fold_crc, crc_key, piece)
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:  # nothing is buffered in user space
        pass

    def record(self) -> FileRecord:
        """Size and sha256 of what was written (waits for the hashing threads, so
        :attr:`crcs` is complete too)."""
        for pending in (self._hashed, self._crced):
            if pending is not None:
                pending.result()
        return FileRecord(self.size, self.sha.hexdigest())

    def sync_close(self) -> None:
        """fsync and close (run in a thread, so the next file is written meanwhile)."""
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)


def _write_safetensors(path: Path, tensors: Mapping[str, Any], metadata: Mapping[str, str],
                       hasher: ThreadPoolExecutor | None = None,
                       crc: ThreadPoolExecutor | None = None) -> _HashingFile:
    """Write ``tensors`` (contiguous CPU tensors) in the safetensors format, hashing as it goes
    (each tensor's crc32 into ``crcs[name]``); the file is left open for
    :meth:`_HashingFile.sync_close`.

    Format (https://github.com/huggingface/safetensors): u64 little-endian header length,
    JSON header ``{name: {dtype, shape, data_offsets}, "__metadata__": {...}}`` padded with
    spaces to a multiple of 8 bytes, then the raw little-endian tensor bytes in header order.
    """
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for name, tensor in tensors.items():
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _SAFETENSORS_DTYPES:
            raise CheckpointError(f"tensor {name!r} has dtype {dtype}, which safetensors cannot "
                                  f"hold; keep model state in a standard dtype")
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    out = _HashingFile(path, hasher, crc)
    try:
        out.write(struct.pack("<Q", len(text)) + text)
        for name, tensor in tensors.items():
            out.write(_raw_bytes(tensor), crc_key=name)
    except BaseException:
        os.close(out.fd)
        raise
    return out


def _write_torch(path: Path, value: Any) -> _HashingFile:
    """``torch.save(value)`` into ``path``, hashing as it writes; left open for ``sync_close``."""
    out = _HashingFile(path)
    try:
        torch.save(value, cast(BinaryIO, out))      # a file object: it has write()
    except BaseException:
        os.close(out.fd)
        raise
    return out


def _split(value: Any, path: str, tensors: dict[str, Any]) -> Any:
    """``value`` with each tensor replaced by ``{"__safetensors__": path}`` (put in ``tensors``)."""
    if isinstance(value, torch.Tensor):
        tensors[path] = value
        return {_REF: path}
    if isinstance(value, Mapping):
        return {key: _split(item, f"{path}/{key}" if path else str(key), tensors)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_split(item, f"{path}/{index}" if path else str(index), tensors)
                 for index, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    return value


def _join(value: Any, tensors: Mapping[str, Any]) -> Any:
    """Undo :func:`_split`.

    Raises:
        KeyError: a reference to a tensor the safetensors file does not hold.
    """
    if isinstance(value, dict):
        if value.keys() == {_REF}:
            return tensors[value[_REF]]
        return {key: _join(item, tensors) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_join(item, tensors) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def tensor_digests(model: Mapping[str, Any], optimizer: Any,
                   state: Any) -> dict[str, dict[str, Any]]:
    """``{path: {crc32, dtype, shape}}`` for every tensor of a checkpoint's three parts.

    Paths are ``model/<name>``, ``optimizer/state/0/exp_avg``, ``state/rng/torch_cpu`` …;
    crc32 (zlib) of the raw bytes detects a tensor that does not reload bit for bit.
    """
    digests = {}
    for part, value in (("model", model), ("optimizer", optimizer), ("state", state)):
        tensors: dict[str, Any] = {}
        _split(value, part, tensors)
        for path, tensor in tensors.items():
            digests[path] = _digest(tensor, zlib.crc32(_raw_bytes(tensor.contiguous())))
    return digests


def _digest(tensor: Any, crc: int) -> dict[str, Any]:
    """One entry of :func:`tensor_digests`."""
    return {"crc32": f"{crc:08x}", "dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": list(tensor.shape)}


def write_checkpoint(parent: Path, steps_done: int, *, model: Mapping[str, Any],
                     optimizer: Any, state: Mapping[str, Any], meta: Mapping[str, Any],
                     before_commit: Callable[[Path], None] | None = None) -> tuple[Path, int]:
    """Write one checkpoint atomically under ``parent`` (see the module docstring).

    Args:
        parent: the ``checkpoints/`` directory (created if missing).
        steps_done: optimizer steps done; names the directory ``step-NNNNNN``.
        model: name → contiguous CPU tensor.   optimizer: the state_dict or None.
        state: everything else (weights_only-loadable).
        meta: JSON values for the manifest (run_id, config_hash, epoch, micro_step …).
            The manifest's ``tensors`` equal :func:`tensor_digests` of the three parts;
            those of the tensor files are computed from the pieces as they are written.
        before_commit: called with the final directory once the checkpoint is complete and
            durable in its ``.tmp`` directory, just before the rename that puts it in place
            (the trial makes its ``checkpoint_saving`` row durable there); an exception from
            it abandons the save.

    Returns:
        (the final directory, bytes written).

    Raises:
        CheckpointError: a tensor dtype safetensors cannot hold; OSError from the disk.
        On any error the ``.tmp`` directory is removed and earlier checkpoints are untouched.
    """
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / step_dir_name(steps_done)
    tmp = parent / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    files: dict[str, FileRecord] = {}
    try:
        digests: dict[str, Any] = {}
        with ThreadPoolExecutor(1, thread_name_prefix="flightplan-fsync") as syncs, \
                ThreadPoolExecutor(1, thread_name_prefix="flightplan-sha256") as hasher, \
                ThreadPoolExecutor(1, thread_name_prefix="flightplan-crc32") as crc:
            pending = []
            for name, write, part, tensors in _file_writers(tmp, model, optimizer, state,
                                                            hasher, crc):
                out = write()
                files[name] = out.record()
                pending.append(syncs.submit(out.sync_close))
                digests.update({f"{part}/{key}": _digest(tensors[key], value)
                                for key, value in out.crcs.items()})
            digests.update(tensor_digests({}, None, state))
            for done in pending:
                done.result()
        manifest = {"format": FORMAT, "step": steps_done, **meta,
                    "files": {n: {"size": r.size, "sha256": r.sha256} for n, r in files.items()},
                    "tensors": dict(sorted(digests.items()))}
        out = _HashingFile(tmp / MANIFEST)
        out.write(json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
        out.sync_close()
        fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    commit_checkpoint(final, tmp, before_commit)
    return final, sum(r.size for r in files.values())


def commit_checkpoint(final: Path, tmp: Path,
                      before_commit: Callable[[Path], None] | None) -> None:
    """Put the finished, fsync'd folder ``tmp`` in place as ``final``: ``before_commit(final)``
    first (the trial's ``checkpoint_saving`` row, durable before the rename), then
    :func:`~flightplan.durable.replace_path` (the same step saved again after a resume: same
    run, same state).

    Raises:
        whatever ``before_commit`` or the renames raise; ``tmp`` is removed first, and
        earlier checkpoints are untouched.
    """
    try:
        if before_commit is not None:
            before_commit(final)
        replace_path(final, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_Writer = tuple[str, Callable[[], _HashingFile], str, Mapping[str, Any]]


def _file_writers(tmp: Path, model: Mapping[str, Any], optimizer: Any, state: Mapping[str, Any],
                  hasher: ThreadPoolExecutor, crc: ThreadPoolExecutor) -> list[_Writer]:
    """(file name, writer, digest prefix, its tensors by name) in write order: model,
    optimizer tensors, the rest (whose tensors :func:`tensor_digests` reads apart)."""
    writers: list[_Writer] = [
        (MODEL_FILE,
         lambda: _write_safetensors(tmp / MODEL_FILE, model, {"format": "pt"}, hasher, crc),
         "model", model)]
    structure = None
    if optimizer is not None:
        tensors: dict[str, Any] = {}
        structure = _split(optimizer, "", tensors)
        writers.append((OPTIMIZER_FILE,
                        lambda: _write_safetensors(tmp / OPTIMIZER_FILE, tensors, {}, hasher, crc),
                        "optimizer", tensors))
    rest = {**state, _OPTIMIZER_KEY: structure}
    writers.append((STATE_FILE, lambda: _write_torch(tmp / STATE_FILE, rest), "state", {}))
    return writers


class BadCheckpoint(CheckpointError):
    """A checkpoint failed a check; ``findings`` names each fault (:class:`Finding`)."""

    def __init__(self, directory: Path, findings: list[Finding]) -> None:
        self.directory = directory
        self.findings = findings
        super().__init__(f"{directory}: " + "; ".join(f"{f.path}: {f.message}" for f in findings))


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a checkpoint directory.

    Raises:
        BadCheckpoint: no manifest (check ``no_manifest``: a save that never finished) or
            one that is not a flightplan manifest (check ``manifest``).
    """
    path = directory / MANIFEST
    if not path.is_file():
        raise BadCheckpoint(directory, [Finding("no_manifest", MANIFEST, f"no {MANIFEST} (the save "
                                                "never finished); it cannot be used")])
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadCheckpoint(directory, [Finding("manifest", MANIFEST,
                                                f"not valid JSON ({exc})")]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
            or not isinstance(manifest.get("files"), dict) \
            or not isinstance(manifest.get("tensors"), dict):
        raise BadCheckpoint(directory, [Finding("manifest", MANIFEST, f"not a {FORMAT} manifest")])
    return manifest


def check_files(directory: Path, manifest: Mapping[str, Any]) -> list[Finding]:
    """Every listed file exists inside ``directory`` with its size and sha256; no unlisted file."""
    findings = []
    listed = manifest["files"]
    for name, record in listed.items():
        path = directory / name
        if "/" in name or "\\" in name or name in ("", ".", "..") or name == MANIFEST:
            findings.append(Finding("unsafe", name, "the manifest lists a path outside the "
                                    "checkpoint directory"))
            continue
        if not path.is_file():
            findings.append(Finding("missing", name, "listed in the manifest but absent"))
            continue
        size, sha = hash_file(path)
        if size != record.get("size"):
            findings.append(Finding("size", name,
                                    f"{size} bytes, the manifest says {record.get('size')}"))
        elif sha != record.get("sha256"):
            findings.append(Finding("sha256", name, f"sha256 {sha[:12]}… differs from the "
                                    f"manifest's {str(record.get('sha256'))[:12]}…"))
    for path in sorted(directory.iterdir()):
        if path.name != MANIFEST and path.name not in listed:
            findings.append(Finding("unlisted", path.name,
                                    "not in the manifest; refusing to load it"))
    return findings


def _load_torch_file(path: Path) -> Any:
    """``torch.load(weights_only=True)`` of a torch zip archive; anything else is refused.

    Raises:
        UnsafeFileError: not a torch zip archive, or the safe unpickler refuses its content.
        BadCheckpoint: the archive is damaged (check ``load``).
    """
    if not zipfile.is_zipfile(path):
        raise UnsafeFileError(f"{path.name}: not a torch zip archive (a raw pickle?); refused "
                              f"without loading it")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise UnsafeFileError(f"{path.name}: refused by the safe loader (it holds objects other "
                              f"than tensors and plain data: {first})") from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise BadCheckpoint(path.parent, [Finding("load", path.name, f"cannot be read "
                                                  f"({type(exc).__name__}: {exc})")]) from None


def load_checkpoint(directory: Path) -> CheckpointFiles:
    """Check and load a checkpoint directory without running any pickled code.

    Raises:
        BadCheckpoint: no manifest, a file missing/resized/re-hashed/unlisted/unreadable, or
            tensors whose crc32 differ from the save-time digests (every fault in ``findings``).
        UnsafeFileError: a ``.pt`` file that is not a torch archive or holds code objects.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    manifest = read_manifest(directory)
    findings = check_files(directory, manifest)
    if findings:
        raise BadCheckpoint(directory, findings)
    try:
        model = load_file(directory / MODEL_FILE, device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise BadCheckpoint(directory, [Finding("load", MODEL_FILE,
                                                f"cannot be read ({exc})")]) from None
    state = _load_torch_file(directory / STATE_FILE)
    structure = state.pop(_OPTIMIZER_KEY, None) if isinstance(state, dict) else None
    optimizer = None
    if structure is not None:
        try:
            optimizer = _join(structure, load_file(directory / OPTIMIZER_FILE, device="cpu"))
        except (SafetensorError, OSError, ValueError, KeyError) as exc:
            raise BadCheckpoint(directory, [Finding("load", OPTIMIZER_FILE, f"cannot be read "
                                                    f"({type(exc).__name__}: {exc})")]) from None
    loaded = tensor_digests(model, optimizer, state)
    expected = manifest["tensors"]
    findings = [Finding("tensor_digest", p, f"reloads with crc32 {loaded[p]['crc32']}, saved "
                        f"{expected[p].get('crc32')} (dtype {loaded[p]['dtype']}, "
                        f"shape {loaded[p]['shape']})")
                for p in expected if p in loaded and loaded[p] != expected[p]]
    findings += [Finding("tensor_digest", p, "saved but not in the files")
                 for p in expected if p not in loaded]
    findings += [Finding("tensor_digest", p, "in the files but has no save-time digest")
                 for p in loaded if p not in expected]
    if findings:
        raise BadCheckpoint(directory, findings)
    return CheckpointFiles(model=model, optimizer=optimizer, state=state, manifest=manifest)
