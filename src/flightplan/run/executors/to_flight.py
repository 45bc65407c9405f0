"""A checkpoint sent from home to a flight in bounded chunks: the stream home, reversed.

When a run resumes on a flight, home sends it the newest checkpoint of
``runs/<id>/checkpoints/`` before its worker starts. It never travels whole: a
:class:`FlightFeed` cuts it with a :class:`~flightplan.run.executors.stream.CheckpointSender`
over home's folder (each file read once, in chunks of ``chunk_bytes``, a CRC-32 of each
taken as it is read) and hands each chunk to the flight's
:meth:`~flightplan.run.executors.ray_host.RunHost.receive` (a Ray call), which writes it
with a :class:`~flightplan.run.executors.stream.CheckpointReceiver` into
``<scratch>/checkpoints/step-NNNNNN.tmp/``: the same checks as the way home, on the other
side. At most ``depth`` chunks' worth of data is on its way at once, so home holds at most
the chunk being read and those on their way, whatever the checkpoint's size.

::

    home (the feed's thread)                              flight (RunHost.receive)
    step-N/ file by file, chunk by chunk ── Chunk ──────▶ CRC-32 of data = crc32; written at
      crc32 taken as it is read            (≤ depth       its offset in step-N.tmp/, running
                                            on their way)  sha256 per file
    Rewind: send again from that offset ◀── Outcome ───── a chunk that failed its CRC, or a
                                                          file that failed the manifest
    step-N/manifest.json, last ─────────────────────────▶ every file's size and sha256 = the
    done ◀──────────────────────────────── committed ──── manifest's; fsync, rename

- **It runs beside the executor's loop.** The feed reads, sends and waits on a thread of
  its own, so the other executions' polls, rows and checkpoints go on while a large
  checkpoint travels; the executor looks at :attr:`FlightFeed.done` at each turn of its
  loop and starts the worker once the checkpoint is committed on the flight.
- **A chunk that fails is sent again from its offset** (the flight's
  :class:`~flightplan.run.executors.stream.Rewind`), never the file from its start; what
  was on its way behind it comes again after it.
- **Home's own copy is checked only when the flight doubts it.** A file that arrived whole
  but does not match the manifest is hashed at home (on the feed's thread): when home's
  file does not match either, the checkpoint is set aside as ``<name>.corrupt-transfer``
  (never loaded) and :attr:`FlightFeed.set_aside` says so; the executor places the run
  again, which then sends the checkpoint before it. One that cannot be read at home at all
  (its manifest damaged, a file missing) is set aside the same way.

Usage::

    feed = FlightFeed(run_dir / "checkpoints", actor, chunk_bytes=CHUNK_BYTES).start()
    ...                                   # each turn of the loop:
    if feed.done.is_set():
        feed.sent, feed.error, feed.set_aside  # what came of it
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import ray

from flightplan.durable import hash_file
from flightplan.errors import CheckpointError, TransferError
from flightplan.rundir import list_checkpoints
from flightplan.trial.checkpoint import set_aside
from flightplan.trial.checkpoint_io import MANIFEST, read_manifest
from flightplan.run.executors.stream import CHUNK_BYTES, DEPTH, Chunk, CheckpointSender
from flightplan.run.executors.transfer import relative_path

__all__ = ["Sent", "FlightFeed"]

_WAIT_S = 0.2
"""Seconds the feed waits for an answer before it looks whether it was stopped."""


@dataclass(frozen=True)
class Sent:
    """What one send did: the checkpoint committed on the flight (``name``; None: home had
    none to send), its files' ``bytes``, the ``chunks`` sent (resent ones included),
    ``resent_bytes`` (file bytes sent more than once), ``seconds`` from the first chunk
    read to the commit's answer, and ``peak_bytes_out`` (the most chunk data on its way at
    once)."""

    name: str | None
    bytes: int = 0
    chunks: int = 0
    resent_bytes: int = 0
    seconds: float = 0.0
    peak_bytes_out: int = 0


class _Unusable(Exception):
    """Home's checkpoint failed its own check (it was set aside)."""


class _Stopped(Exception):
    """The feed was stopped before it ended."""


class FlightFeed:
    """Sends the newest checkpoint of ``folder`` to a flight, on a thread of its own (see
    the module docstring).

    Args:
        folder: the run's ``checkpoints/`` folder at home.
        actor: the flight's host (its ``receive.remote(chunk)`` answers an
            :class:`~flightplan.run.executors.stream.Outcome`).
        chunk_bytes: the most data bytes in one chunk.
        depth: chunks' worth of data on its way at most (home holds these and the chunk
            it reads).

    Attributes:
        done: set once the feed ended, whichever way.
        sent: what it sent (:class:`Sent`), once it ended well.
        error: what ended it otherwise: ``RayError`` (the flight or its actor went),
            :class:`~flightplan.errors.TransferError` (the flight refused the checkpoint),
            or any other exception of home's disk.
        set_aside: where home's checkpoint went when it failed its own check (the error
            is then None and nothing was committed on the flight).
    """

    def __init__(self, folder: Path, actor: Any, *, chunk_bytes: int = CHUNK_BYTES,
                 depth: int = DEPTH) -> None:
        self.folder = Path(folder)
        self.actor = actor
        self.chunk_bytes = chunk_bytes
        self.depth = max(1, depth)
        self.done = threading.Event()
        self.sent: Sent | None = None
        self.error: BaseException | None = None
        self.set_aside: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flightplan-to-flight",
                                        daemon=True)

    def start(self) -> FlightFeed:
        """Start sending; returns the feed."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending (the feed ends within a fraction of a second, without a result)."""
        self._stop.set()

    def _run(self) -> None:
        try:
            self.sent = self._send()
        except (_Unusable, _Stopped):
            pass
        except BaseException as exc:     # handed to the executor's loop
            self.error = exc
        finally:
            self.done.set()

    def _unusable(self, checkpoint: Path) -> _Unusable:
        """Set ``checkpoint`` aside (as the loader would) and say so."""
        if checkpoint.is_dir():
            self.set_aside = set_aside(checkpoint, "transfer")
        return _Unusable(checkpoint.name)

    def _send(self) -> Sent:
        """Send the newest checkpoint, rewinding where the flight asks, until it is
        committed there."""
        complete, _ = list_checkpoints(self.folder)
        if not complete:
            return Sent(None)
        target = complete[0][1]
        try:
            listed = read_manifest(target)["files"]
        except (CheckpointError, OSError):
            raise self._unusable(target) from None
        started = time.time()
        # only this one: every older checkpoint counts as sent, partial ones are not read
        sender = CheckpointSender(self.folder, chunk_bytes=self.chunk_bytes,
                                  sent=[path.name for _, path in complete[1:]])
        out: list[tuple[Any, Chunk]] = []      # (the receive() call, its chunk) oldest first
        chunks = peak = 0
        while True:
            manifest_out = any(c.path == MANIFEST for _, c in out)
            while not manifest_out and \
                    sum(c.size for _, c in out) <= (self.depth - 1) * self.chunk_bytes:
                cut = sender.next(ended=True)
                if not cut:
                    break
                for chunk in cut:
                    out.append((self.actor.receive.remote(_portable(chunk)), chunk))
                    manifest_out = manifest_out or chunk.path == MANIFEST
                chunks += len(cut)
                peak = max(peak, sum(c.size for _, c in out))
            if not out:      # nothing to send and nothing on its way: it could not be read
                raise self._unusable(target)
            ready, _ = ray.wait([out[0][0]], timeout=_WAIT_S)   # answers come in order
            if self._stop.is_set():
                raise _Stopped()
            if not ready:
                continue
            _, chunk = out.pop(0)
            outcome = ray.get(ready[0])
            if outcome.refused is not None:
                raise TransferError(f"{target.name}: the flight refused it: {outcome.refused}")
            if outcome.committed is not None:
                return Sent(target.name, outcome.committed.bytes, chunks,
                            outcome.committed.resent_bytes, time.time() - started, peak)
            rewind = outcome.rewind
            if rewind is None:
                continue                      # a chunk out of turn after a rewind: ignored
            if chunk.path == MANIFEST and rewind.path != MANIFEST and rewind.offset == 0:
                # the flight doubts the file (a path out of the folder: refused)
                size, sha = hash_file(target / relative_path(rewind.path))
                record = listed.get(rewind.path) or {}
                if size != record.get("size") or sha != record.get("sha256"):
                    raise self._unusable(target)
            sender.rewind(rewind)


def _portable(chunk: Chunk) -> Chunk:
    """``chunk`` with its data as a numpy array (which Ray copies into its object store
    when the call is made, so the sender's buffer can be read into again)."""
    if isinstance(chunk.data, bytes):
        return chunk
    return Chunk(chunk.name, chunk.path, chunk.offset,
                 numpy.frombuffer(chunk.data, dtype=numpy.uint8), chunk.crc32, 0.0,
                 chunk.resent_bytes)
