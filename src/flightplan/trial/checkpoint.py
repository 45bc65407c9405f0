"""Capturing and restoring a trial's full training state, and the background writer.

What survives a kill (keys of ``state.pt``; the model goes to ``model.safetensors`` and the
optimizer to ``optimizer.safetensors``, see :mod:`flightplan.trial.checkpoint_io`):

==============  =================================================================
``scheduler``   the LR scheduler's state_dict
``scaler``      the grad scaler's state_dict (when one is used)
``loader``      the data loader's state_dict (torchdata ``StatefulDataLoader``: position)
``generators``  RNG state of ``loader.generator`` and ``loader.sampler.generator``
``extra``       ``{name: state_dict}`` of the extra objects the script registered
``rng``         ``random`` (version, Mersenne state as int64 tensor, gauss_next); numpy
                (kind, keys as int64 tensor, pos, has_gauss, cached_gaussian: plain
                numbers, no numpy objects); torch CPU; every CUDA device when available
``counters``    ``step`` (optimizer steps done), ``epoch``, ``micro_step``
==============  =================================================================

Everything is tensors and plain Python data, so ``torch.load(weights_only=True)`` accepts it.

A save costs the loop only :meth:`Snapshot.capture`: each tensor is ``copy_``-ed into a CPU
buffer allocated once and reused (``clone()`` would allocate each time and stall a third to
a half of a synchronous save for a 210 MB state, the buffers 2–19 %). On CUDA the copies go
into pinned buffers on a side stream of each GPU and the loop does not wait for them: the
next training step's forward and backward overlap them, and each GPU's compute stream waits
for its own copies only before the state can change (the next optimizer step, or the next
forward of a model with buffers); that wait, timed with CUDA events, is added to the save's
stall (:mod:`flightplan.trial.device_copies`). :class:`BackgroundWriter` then waits for every
GPU's copies, hashes, serialises and fsyncs in a thread; at most one save is in flight and
the next one waits for it.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from flightplan.durable import DELETING, fsync_dir, replace_path
from flightplan.errors import CheckpointError, UnsafeFileError
from flightplan.rundir import list_checkpoints
from flightplan.trial.device_copies import DeviceCopies
from flightplan.trial.checkpoint_io import (BadCheckpoint, CheckpointFiles, load_checkpoint,
                                            read_manifest, step_dir_name, write_checkpoint)

__all__ = ["Components", "Captured", "Snapshot", "SaveResult", "BackgroundWriter",
           "capture_rng", "restore_rng", "apply_state", "set_aside",
           "prune", "recover_checkpoints", "Rejection", "select_checkpoint"]


@dataclass
class Components:
    """The objects a script registered (any may be None; ``extra`` maps names to objects with
    ``state_dict()``/``load_state_dict()``)."""

    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    scaler: Any = None
    loader: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Captured:
    """A snapshot: model tensors, optimizer state and the rest, all in reused CPU buffers
    (``device_copies``: the copies from GPUs still running into them, None without)."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    state: dict[str, Any]
    device_copies: DeviceCopies | None = None


def capture_rng() -> dict[str, Any]:
    """RNG states of ``random``, numpy, torch CPU and every CUDA device, as tensors/plain data."""
    version, mt, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    rng: dict[str, Any] = {
        "python": {"version": version, "mt": torch.tensor(mt, dtype=torch.int64),
                   "gauss_next": gauss_next},
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch_cpu": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        rng["torch_cuda"] = list(torch.cuda.get_rng_state_all())
    return rng


def restore_rng(rng: Mapping[str, Any]) -> None:
    """Set every RNG from :func:`capture_rng`'s output.

    Raises:
        CheckpointError: the checkpoint has CUDA RNG states for more devices than are visible.
    """
    python = rng["python"]
    random.setstate((python["version"], tuple(python["mt"].tolist()), python["gauss_next"]))
    numpy = rng["numpy"]
    np.random.set_state((numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(rng["torch_cpu"])
    cuda = rng.get("torch_cuda") or []
    if cuda:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible < len(cuda):
            raise CheckpointError(f"the checkpoint holds RNG states of {len(cuda)} CUDA devices "
                                  f"but {visible} are visible; resume on a machine with as many "
                                  f"GPUs")
        torch.cuda.set_rng_state_all(cuda)


def _loader_generators(loader: Any) -> dict[str, torch.Generator]:
    found = {}
    for name, owner in (("loader", loader), ("sampler", getattr(loader, "sampler", None))):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator):
            found[name] = generator
    return found


class Snapshot:
    """CPU buffers allocated once per tensor path and reused by every capture.

    A buffer is re-allocated only when a tensor at the same path changes shape or dtype
    (e.g. optimizer state appearing after the first step). Buffers are pinned when the
    source is on a GPU, and copies from a GPU are asynchronous on a side stream of that GPU
    (:class:`~flightplan.trial.device_copies.DeviceCopies`: one end event per device; see
    :meth:`_guard` for what waits for them).
    CPU copies run on one thread, whatever the run's thread count: the copy stalls the
    training loop, and torch's parallel copy waits on every peer thread, which a CPU shared
    with other runs deschedules (:data:`flightplan.trial.accelerator.TORCH_THREADS`), while
    one thread's copy time depends only on the bytes.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._sides: dict[int, Any] = {}              # a side stream per CUDA device
        self._copies: DeviceCopies | None = None       # of the capture in progress

    def _copy(self, path: str, tensor: torch.Tensor) -> torch.Tensor:
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu",
                                 pin_memory=tensor.is_cuda)
            self._buffers[path] = buffer
        if not tensor.is_cuda:
            buffer.copy_(tensor.detach())
            return buffer
        if self._copies is None:
            self._copies = DeviceCopies(None)
        with torch.cuda.stream(self._copies.stream_for(tensor)):
            buffer.copy_(tensor.detach(), non_blocking=True)
        return buffer

    def _end_copies(self) -> DeviceCopies | None:
        """The capture's GPU copies with their end events recorded (None: none)."""
        copies, self._copies = self._copies, None
        if copies is None or not copies.devices:
            return None
        copies.finish()
        return copies

    def _tree(self, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            return self._copy(path, value)
        if isinstance(value, Mapping):
            return {key: self._tree(item, f"{path}/{key}") for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            items = [self._tree(item, f"{path}/{index}") for index, item in enumerate(value)]
            return items if isinstance(value, list) else tuple(items)
        return value

    def capture(self, parts: Components, counters: Mapping[str, int]) -> Captured:
        """Copy the registered state into the buffers (the only cost the loop pays).

        Raises:
            CheckpointError: the model state holds a non-tensor entry.
        """
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # see the class docstring
        # with an optimizer, the GPU copies overlap the next step on side streams (a guard
        # makes the state wait for them); without one nothing steps the state between here
        # and the writer, which waits for the copies on each device's own stream
        self._copies = DeviceCopies(self._sides) \
            if parts.optimizer is not None and torch.cuda.is_available() else None
        try:
            captured = self._capture(parts, counters)
            captured.device_copies = self._end_copies()
            if captured.device_copies is not None and captured.device_copies.overlapped:
                self._guard(parts, captured.device_copies)
            return captured
        finally:
            self._copies = None
            torch.set_num_threads(threads)

    @staticmethod
    def _guard(parts: Components, copies: DeviceCopies) -> None:
        """Make each GPU's compute stream wait for its side-stream copies before the state
        can change: at the next optimizer step, or at the next forward of a model that
        holds buffers (BatchNorm statistics change in the forward), whichever comes first.
        State changed in place outside those (weights edited by hand) is not covered."""
        handles: list[Any] = []

        def wait(*_: Any) -> None:
            copies.wait_on_training_streams()
            for handle in handles:
                handle.remove()

        handles.append(parts.optimizer.register_step_pre_hook(wait))
        if isinstance(parts.model, torch.nn.Module) and next(parts.model.buffers(), None) is not None:
            handles.append(parts.model.register_forward_pre_hook(wait))

    def _capture(self, parts: Components, counters: Mapping[str, int]) -> Captured:
        model = {}
        for name, value in parts.model.state_dict().items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointError(f"model state {name!r} is a {type(value).__name__}, not a "
                                      f"tensor; register it in extra instead")
            model[name] = self._copy(f"model/{name}", value)
        optimizer = None
        if parts.optimizer is not None:
            optimizer = self._tree(parts.optimizer.state_dict(), "optimizer")
        own = self._own_state(parts)
        state: dict[str, Any] = {"counters": dict(counters), "rng": own.pop("rng")}
        for name in ("scheduler", "scaler"):
            obj = getattr(parts, name)
            if obj is not None:
                state[name] = self._tree(obj.state_dict(), name)
        state.update(own)
        return Captured(model=model, optimizer=optimizer, state=state)


    def _own_state(self, parts: Components) -> dict[str, Any]:
        """The state each rank of a data-parallel run holds apart (its RNG streams, its
        loader's position, its ``extra`` objects), in the buffers: ``rng``, ``loader`` and
        ``generators`` (with a loader), ``extra``."""
        own: dict[str, Any] = {"rng": capture_rng()}
        if parts.loader is not None:
            own["loader"] = self._tree(parts.loader.state_dict(), "loader")
            own["generators"] = {k: g.get_state()
                                 for k, g in _loader_generators(parts.loader).items()}
        own["extra"] = {k: self._tree(obj.state_dict(), f"extra/{k}")
                        for k, obj in parts.extra.items()}
        return own

    def capture_own(self, parts: Components) -> dict[str, Any]:
        """What a rank other than the leader saves (:meth:`_own_state`; the model and the
        optimizer are the leader's replicas): copied into the buffers on one thread."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # see the class docstring
        try:
            own = self._own_state(parts)
            copies = self._end_copies()
            if copies is not None:  # the buffers go to the leader now: complete them first
                copies.synchronize()
            return own
        finally:
            self._copies = None
            torch.set_num_threads(threads)


def apply_state(name: str, obj: Any, files: CheckpointFiles) -> None:
    """Load the saved state of component ``name`` (``model``, ``optimizer``, ``scheduler``,
    ``scaler``, ``loader`` or ``extra/<key>``) into ``obj``.

    Raises:
        CheckpointError: the checkpoint has no state for it, or the object refuses it.
    """
    saved: Any
    if name == "model":
        saved = files.model
    elif name == "optimizer":
        saved = files.optimizer
    elif name.startswith("extra/"):
        saved = files.state.get("extra", {}).get(name.removeprefix("extra/"))
    else:
        saved = files.state.get(name)
    if saved is None:
        where = step_dir_name(int(files.manifest.get("step", 0)))
        raise CheckpointError(f"{where}: the checkpoint holds no {name} state; register the "
                              f"same components as the run that saved it")
    try:
        obj.load_state_dict(saved)
        if name == "loader":
            # StatefulDataLoader draws a base seed from its generator (the global torch RNG
            # when it has none) each time it builds an iterator. The run that saved this
            # state drew it at the start of the epoch; building the iterator now (the next
            # ``iter(loader)`` reuses it), before the loader's generators and the global RNG
            # are set back, keeps that extra draw from shifting any of them.
            obj.state_dict()
            for key, generator in _loader_generators(obj).items():
                if key in files.state.get("generators", {}):
                    generator.set_state(files.state["generators"][key])
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint's {name} state does not fit the registered "
                              f"{type(obj).__name__}: {exc}") from None


@dataclass(frozen=True)
class SaveResult:
    """One finished save: ``path``, ``bytes``, the loop's stall (with the GPU's wait for
    the copies) and the persist time (s); from a GPU, ``device_wait_s`` (the part of
    ``stall_s`` a training stream waited) and ``copy_s`` (the copies' device seconds)."""

    steps_done: int
    path: Path
    bytes: int
    stall_s: float
    persist_s: float
    device_wait_s: float | None = None
    copy_s: float | None = None


class BackgroundWriter:
    """Writes captured snapshots in a thread, one at a time.

    Args:
        parent: the ``checkpoints/`` directory.
        keep_last: complete checkpoints kept (≥ 2); older ones are deleted after a newer one
            is written and verified (its hashes are taken from the bytes written).
        on_done: called in the writer thread with each :class:`SaveResult`.
        on_error: called in the writer thread with (steps_done, exception) of a failed save.
        before_commit: called in the writer thread with (steps_done, final directory) once a
            save is complete in its ``.tmp`` directory, before it is renamed into place
            (:func:`~flightplan.trial.checkpoint_io.write_checkpoint`).
    """

    def __init__(self, parent: Path, keep_last: int, on_done: Callable[[SaveResult], None],
                 on_error: Callable[[int, BaseException], None], *,
                 before_commit: Callable[[int, Path], None] | None = None) -> None:
        self.parent = parent
        self.keep_last = keep_last
        self._on_done = on_done
        self._on_error = on_error
        self._before_commit = before_commit
        self._thread: threading.Thread | None = None
        self._error: tuple[int, BaseException] | None = None

    def wait(self) -> None:
        """Wait for the save in flight.

        Raises:
            CheckpointError: the last save failed (reported once; its ``.tmp`` is removed and
                the previous checkpoint is intact).
        """
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            steps, exc = self._error
            self._error = None
            raise CheckpointError(f"saving {step_dir_name(steps)} failed ({type(exc).__name__}: "
                                  f"{exc}); the previous checkpoint is intact") from exc

    @property
    def busy(self) -> bool:
        """Whether a save is being written now."""
        return self._thread is not None and self._thread.is_alive()

    def raise_if_failed(self) -> None:
        """Raise a finished save's failure without waiting (see :meth:`wait`)."""
        if self._error is not None and not self.busy:
            self.wait()

    def submit(self, steps_done: int, captured: Captured, meta: Mapping[str, Any],
               stall_s: float) -> None:
        """Start writing ``captured`` (call :meth:`wait` first)."""
        assert self._thread is None, "wait() for the save in flight before submitting another"
        self._thread = threading.Thread(target=self._write, name="flightplan-checkpoint",
                                        args=(steps_done, captured, dict(meta), stall_s))
        self._thread.start()

    def _write(self, steps_done: int, captured: Captured, meta: dict[str, Any],
               stall_s: float) -> None:
        start = time.monotonic()
        try:
            copies = captured.device_copies
            if copies is not None:
                copies.synchronize()
            hook = self._before_commit
            path, size = write_checkpoint(
                self.parent, steps_done, model=captured.model, optimizer=captured.optimizer,
                state=captured.state, meta=meta,
                before_commit=None if hook is None else lambda final: hook(steps_done, final))
            persist_s = time.monotonic() - start
            prune(self.parent, self.keep_last)
            device_wait_s = copy_s = None
            if copies is not None:  # the next step's wait for the copies is the save's cost
                device_wait_s, copy_s = copies.device_wait_s(), copies.copy_s()
                stall_s += device_wait_s
            self._on_done(SaveResult(steps_done, path, size, stall_s, persist_s,
                                     device_wait_s, copy_s))
        except BaseException as exc:  # reported to the loop by wait()
            self._error = (steps_done, exc)
            self._on_error(steps_done, exc)

    def close(self) -> None:
        """Wait for the save in flight (raising its error)."""
        self.wait()


def set_aside(path: Path, reason: str) -> Path:
    """Rename a bad checkpoint to ``<name>.corrupt-<reason>`` (``-2``, ``-3`` … if taken)."""
    target = path.with_name(f"{path.name}.corrupt-{reason}")
    counter = 2
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{reason}-{counter}")
        counter += 1
    path.rename(target)
    return target


def prune(parent: Path, keep_last: int) -> list[Path]:
    """Delete complete checkpoints beyond the newest ``keep_last``; the deleted paths.

    Each is first renamed ``<name>.deleting`` (one atomic step out of the candidates,
    :func:`~flightplan.durable.replace_path`), so a kill in the middle never
    leaves a half-deleted ``step-NNNNNN``; leftovers of earlier kills are removed.
    """
    complete, _ = list_checkpoints(parent)
    doomed = [path for _, path in complete[keep_last:]]
    for path in doomed:
        replace_path(path)
    for path in parent.glob(f"step-*{DELETING}"):
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def recover_checkpoints(parent: Path) -> list[Path]:
    """Settle what a kill during a save, a replacement or a prune left in ``parent``.

    - ``step-NNNNNN.tmp`` holding a flightplan manifest of that step, with no
      ``step-NNNNNN`` beside it: a save that was complete (the manifest is written last)
      but not yet renamed into place. It is renamed now and, like every checkpoint, checked
      in full when loaded.
    - any other ``.tmp``: a save that never finished; removed.
    - ``step-NNNNNN.deleting``: set aside by a replacement or a prune; removed.

    Returns:
        The partial ``.tmp`` directories removed.
    """
    complete, partial = list_checkpoints(parent)
    names = {path.name for _, path in complete}
    removed = []
    for tmp in partial:
        final = tmp.with_name(tmp.name.removesuffix(".tmp"))
        try:
            finished = (final.name not in names
                        and read_manifest(tmp).get("step") == int(final.name[5:]))
        except BadCheckpoint:
            finished = False
        if finished:
            os.rename(tmp, final)
            fsync_dir(parent)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    for path in parent.glob(f"step-*{DELETING}"):
        shutil.rmtree(path, ignore_errors=True)
    return removed


@dataclass(frozen=True)
class Rejection:
    """A checkpoint that could not be used: its name, the reason slug, the message, new name."""

    name: str
    reason: str
    message: str
    renamed_to: str

    def line(self) -> str:
        """One line for stderr and stop records."""
        return f"{self.name}: {self.message} (renamed to {self.renamed_to})"


_REASONS = {"no_manifest": "no-manifest", "manifest": "bad-manifest", "missing": "missing-file",
            "unlisted": "unlisted-file", "load": "unreadable", "tensor_digest": "tensor-digest"}


def _reason(exc: Exception) -> str:
    """The ``.corrupt-<reason>`` slug: the first finding's check, ``unsafe`` or ``unreadable``."""
    if isinstance(exc, BadCheckpoint):
        check = exc.findings[0].check
        return _REASONS.get(check, check)
    return "unsafe" if isinstance(exc, UnsafeFileError) else "unreadable"


def select_checkpoint(parent: Path, run_id: str, config_hash: str | None, *,
                      load: Callable[[Path], CheckpointFiles] = load_checkpoint,
                      ) -> tuple[CheckpointFiles | None, Path | None, list[Rejection], list[Path]]:
    """Walk complete checkpoints newest first and load the first valid one of this run.

    First :func:`recover_checkpoints` (a finished ``.tmp`` is put in place, partial ones and
    ``.deleting`` leftovers are removed). A checkpoint that fails a check, or belongs to
    another run id / config hash, is renamed aside.
    ``load`` checks and loads one directory (``checkpoint_io.load_library_checkpoint`` for
    checkpoints a training library wrote).

    Returns:
        (the loaded files or None, its path or None, rejections newest first, removed partials).
    """
    partial = recover_checkpoints(parent)
    complete, _ = list_checkpoints(parent)
    rejected: list[Rejection] = []
    for _, path in complete:
        try:
            files = load(path)
            saved_id, saved_hash = files.manifest.get("run_id"), files.manifest.get("config_hash")
            if saved_id != run_id or (config_hash and saved_hash and saved_hash != config_hash):
                message = (f"belongs to run {saved_id} (config {str(saved_hash)[:10]}), "
                           f"not this run {run_id} (config {str(config_hash)[:10]})")
                rejected.append(Rejection(path.name, "other-run", message,
                                          set_aside(path, "other-run").name))
                continue
            return files, path, rejected, partial
        except (CheckpointError, UnsafeFileError, OSError) as exc:
            reason, message = _reason(exc), str(exc).removeprefix(f"{path}: ")
        rejected.append(Rejection(path.name, reason, message, set_aside(path, reason).name))
    return None, None, rejected, partial
