"""Numbers a training step leaves on a GPU, read a step later instead of stopping the GPU
every step (issue 31, item 5).

``loss.item()`` on a CUDA tensor waits until the GPU has finished every kernel queued
before it: the CPU then queues the next step's kernels only after the GPU ran dry, and for
a small model the GPU idles while the CPU launches. :meth:`flightplan.trial.Trial.log`
takes such a tensor as it is: the value is copied into a pinned host buffer on the current
stream (``non_blocking``) behind a CUDA event, and the row is written when the next row is
logged, or before a checkpoint, an evaluation or the end (``docs/tasks.md``, "Rows a step
later on a GPU"). By then the GPU has usually finished that step, so the CPU waits for the
step before last at most and keeps one step queued ahead. The rows written are the same,
stamped with the time they were logged; a stop rule on a row fires when that row is read
(one step later in the loop, before any checkpoint of the state after it).

:class:`StepTimer` is the matching clock for ``step_s``: wall seconds on a CPU; on CUDA
two timing events on the current stream, whose elapsed time is the device's time for the
step (the idle gaps in it included), read a step later too. Without a GPU nothing here
defers: a CPU tensor is read at once, a timer returns a float.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

__all__ = ["DeviceReading", "HostCopy", "DeviceSpan", "StepTimer", "read_later",
           "PinnedScalars"]


@runtime_checkable
class DeviceReading(Protocol):
    """A number that a device has not produced yet: :meth:`ready` says whether reading it
    would wait, :meth:`read` waits for it and returns it as a Python number."""

    def ready(self) -> bool:
        """Whether :meth:`read` would return without waiting."""
        ...

    def read(self) -> float | int | bool:
        """The value (waits for the device)."""
        ...


class PinnedScalars:
    """Page-locked host buffers of one element, reused: allocating pinned memory costs a
    driver call each time, so a buffer goes back to the pool once its value is read."""

    def __init__(self) -> None:
        self._free: dict[Any, list[Any]] = {}

    def take(self, dtype: Any) -> Any:
        """A pinned 0-d CPU tensor of ``dtype`` (a new one when none is free)."""
        import torch

        free = self._free.get(dtype)
        if free:
            return free.pop()
        return torch.empty((), dtype=dtype, device="cpu", pin_memory=True)

    def give_back(self, buffer: Any) -> None:
        """Return a buffer whose value was read."""
        self._free.setdefault(buffer.dtype, []).append(buffer)


class HostCopy:
    """A one-element CUDA tensor's value, copied into a pinned buffer on the current stream
    behind an event (the copy starts where the stream is now, so a tensor changed in place
    later still reads as it was when logged)."""

    def __init__(self, tensor: Any, pool: PinnedScalars) -> None:
        import torch

        self._pool = pool
        self._buffer = pool.take(tensor.dtype)
        self._buffer.copy_(tensor.detach().reshape(()), non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()
        self._value: float | int | bool | None = None

    def ready(self) -> bool:
        return self._value is not None or bool(self._event.query())

    def read(self) -> float | int | bool:
        if self._value is None:
            self._event.synchronize()
            self._value = self._buffer.item()
            self._pool.give_back(self._buffer)
        return self._value


class DeviceSpan:
    """Seconds between two timing events on one CUDA stream (``start`` recorded before,
    ``end`` after the work), read when both have happened."""

    def __init__(self, start: Any, end: Any) -> None:
        self._start, self._end = start, end

    def ready(self) -> bool:
        return bool(self._end.query())

    def read(self) -> float:
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1000.0  # ms → s


class StepTimer:
    """The clock of one step's ``step_s``: :meth:`start` before the step, :meth:`stop`
    after it. On a CPU the wall seconds between them (a float); on a CUDA device a
    :class:`DeviceSpan` of timing events on its current stream, for :meth:`Trial.log` to
    read a step later.

    Args:
        dev: the run's ``torch.device`` (:func:`flightplan.trial.device`).
    """

    def __init__(self, dev: Any) -> None:
        self._cuda = getattr(dev, "type", str(dev)) == "cuda"
        self._began = 0.0
        self._start: Any = None

    def start(self) -> None:
        """Mark the step's beginning."""
        if self._cuda:
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._began = time.perf_counter()

    def stop(self) -> float | DeviceSpan:
        """The step's seconds (CPU), or a reading of them (CUDA)."""
        if not self._cuda:
            return time.perf_counter() - self._began
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return DeviceSpan(self._start, end)


def read_later(value: Any, pool: PinnedScalars) -> DeviceReading | None:
    """``value`` as a reading to resolve later: itself when it is one already, a
    :class:`HostCopy` of a one-element CUDA tensor; None for everything else (read now)."""
    if isinstance(value, DeviceReading):
        return value
    if getattr(value, "is_cuda", False) and value.numel() == 1:
        return HostCopy(value, pool)
    return None
