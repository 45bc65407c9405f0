"""The GPU side of one checkpoint snapshot: on each CUDA device the state lives on, its
copies into pinned host buffers, the event that marks their end, and how long the
training stream then waited for them (issue 31, item 6).

A snapshot's copies from a GPU run on a side stream of that GPU, behind the state of the
last step (``wait_stream`` on the device's current stream), and overlap the next step's
forward and backward. The training stream waits for them only where the state changes
(the next optimizer step; see :meth:`flightplan.trial.checkpoint.Snapshot.capture`). Three
things follow, one per device:

- **An end event per device.** A tensor's copy runs on its own device's stream, so one
  event on one device says nothing of another's copies: the writer waits for every
  device's event before it reads a buffer (:meth:`DeviceCopies.synchronize`), and each
  device's training stream waits for its own.
- **The copy timed on the device.** A timing event on the side stream before the first
  copy and the end event after the last give the copy's device seconds
  (:meth:`DeviceCopies.copy_s`).
- **The wait booked as the save's cost.** Enqueueing the copies costs the loop little; the
  cost lands in the next step, whose optimizer step waits for a copy still running. Where
  the training stream reaches that wait, a timing event is recorded on it; the wait is the
  time from there to the copy's end event (0 when the copy ended first), the longest over
  the devices (:meth:`DeviceCopies.device_wait_s`). The writer adds it to the save's
  ``stall_s`` (C), so goodput books it as checkpoint time, not as a productive step, and the
  interval formula prices a save at what it costs the GPU (Young 1974 / Daly 2006: C is the
  work lost per save).

Without a GPU nothing of this module runs: CPU tensors are copied synchronously.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["DeviceCopies"]


class DeviceCopies:
    """The copies of one snapshot on each CUDA device.

    Args:
        side_streams: the snapshot's side stream per device index, reused across captures
            (created here on first use), or None to copy on each device's current stream
            (nothing then overlaps the copies, and nothing needs to wait for them but the
            reader of the buffers).
    """

    def __init__(self, side_streams: dict[int, Any] | None) -> None:
        self._sides = side_streams
        self._streams: dict[int, Any] = {}
        self._start: dict[int, Any] = {}
        self._end: dict[int, Any] = {}
        self._reached: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._settled = False

    @property
    def overlapped(self) -> bool:
        """Whether the copies run on side streams (then the training streams must wait for
        them before the state changes: :meth:`wait_on_training_streams`)."""
        return self._sides is not None

    @property
    def devices(self) -> list[int]:
        """The CUDA device indices copied from."""
        return sorted(self._streams)

    def stream_for(self, tensor: torch.Tensor) -> Any:
        """The stream that copies ``tensor`` (on a CUDA device): the device's side stream,
        which first waits for the device's current stream (the state after the last step),
        or its current stream; the first call per device records the timing start."""
        index = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
        stream = self._streams.get(index)
        if stream is None:
            current = torch.cuda.current_stream(index)
            if self._sides is None:
                stream = current
            else:
                stream = self._sides.get(index)
                if stream is None:
                    stream = self._sides[index] = torch.cuda.Stream(device=index)
                stream.wait_stream(current)
            start = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            self._streams[index], self._start[index] = stream, start
        if self._sides is not None:
            tensor.record_stream(stream)  # its memory is not reused before the copy ends
        return stream

    def finish(self) -> None:
        """Record each device's end event after its last copy."""
        for index, stream in self._streams.items():
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            self._end[index] = end

    def synchronize(self) -> None:
        """Wait until every device's copies have ended (the buffers are then complete)."""
        for end in self._end.values():
            end.synchronize()

    def wait_on_training_streams(self) -> None:
        """Make each device's current stream wait for that device's copies, first marking
        where it began to wait (for :meth:`device_wait_s`)."""
        with self._lock:
            for index, end in self._end.items():
                current = torch.cuda.current_stream(index)
                if not self._settled:
                    reached = torch.cuda.Event(enable_timing=True)
                    reached.record(current)
                    self._reached[index] = reached
                current.wait_event(end)

    def copy_s(self) -> float:
        """The longest device time of one device's copies (seconds; after
        :meth:`synchronize`)."""
        return max((self._start[i].elapsed_time(self._end[i]) / 1000.0 for i in self._end),
                   default=0.0)

    def device_wait_s(self) -> float:
        """Seconds a training stream waited for the copies, the longest over the devices
        (after :meth:`synchronize`). A device whose training stream had not asked to wait
        by now never waits: its copies have already ended, and the wait it will enqueue
        comes after them."""
        with self._lock:
            self._settled = True
            reached = dict(self._reached)
        waits = [0.0]
        for index, event in reached.items():
            event.synchronize()
            waits.append(max(0.0, event.elapsed_time(self._end[index]) / 1000.0))
        return max(waits)
