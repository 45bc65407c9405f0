"""Checkpoints in bounded chunks: home as the flight writes them, and to a flight to resume.

A checkpoint can be larger than either machine's memory, so it never travels whole. On
the flight, a :class:`CheckpointSender` cuts the newest checkpoint of the run's
``checkpoints/`` folder into :class:`Chunk` s of at most ``chunk_bytes`` each, with a
CRC-32 of each taken as it reads; at home, a :class:`CheckpointReceiver` checks each chunk
and writes it where it belongs in ``checkpoints/step-NNNNNN.tmp/``, taking each file's
sha256 as it writes. Neither side reads a byte twice,
and each holds only the chunk in hand: memory is bounded by the chunk size, whatever the
checkpoint's size (the executor keeps at most :data:`DEPTH` chunks in flight; over the
direct connection of :mod:`flightplan.run.executors.channel`, the flight holds two and
home three). The same two classes carry a checkpoint the other way, from home's
``runs/<id>/checkpoints/`` to a flight where the run resumes
(:mod:`flightplan.run.executors.to_flight`: the sender at home, the receiver on the
flight); what is said below of the flight and home then holds of home and the flight.

::

    flight                                             home
    step-N.tmp/model… (being written) ─┐
                                        ├─ Chunk(name, path, offset, data, crc32) ──▶ CRC-32 of data
    step-N/ (renamed: committed) ──────┘   crc32 = CRC-32 of data, taken as it        = crc32; write
                                           was read                                   at offset (direct
                                                                                      I/O), running
                                                                                      sha256 per file
    step-N/manifest.json ───────────────── the last chunk, once every file is sent ──▶ every file's
                                                                                       size and sha256
                                                                                       = the manifest's;
                                                                                       fsync, rename

- **As it is written.** While the trial writes ``step-N.tmp/`` (files written front to
  back), the sender sends what is already there; once ``step-N/`` exists (the trial's
  rename: the checkpoint is committed), it sends the rest and then the manifest. A newer
  checkpoint replaces one still on its way (only the newest matters), and so does a save
  that failed and went away.
- **A chunk that fails its check is sent again.** Each chunk carries the CRC-32 of its
  data, taken on the flight as the bytes were read (the check of the way, as S3 takes one
  per uploaded part: 0.17 CPU-s per GB here against a sha256's 0.55); home takes it again
  before writing. A chunk that does not match is not written and home asks for
  it again (:class:`Rewind`); the file travels again from that chunk on, never from its
  start (what the flight had sent after it, out of turn at home, comes again behind it).
  The end-to-end check is the sha256 below, which the trial took while it wrote.
- **A checkpoint that fails its check is sent again.** When the manifest arrives, every
  file must have exactly the size and sha256 the manifest lists (the trial's own hash,
  taken while it wrote); a file that does not (rewritten after it was sent) is sent again
  from its start, the manifest after it. A manifest that lists files the flight never
  sent, or misses some that came, refuses the checkpoint
  (:class:`~flightplan.errors.TransferError`).
- **An interrupted transfer resumes.** Home keeps every byte that passed its check;
  whatever stopped the stream (a chunk that failed, chunks that arrived out of turn, a
  checkpoint still being written), the next chunk it accepts is the one at its own offset
  in each file, so a transfer goes on from there instead of starting over. A direct
  connection that dropped tells the flight home's offsets when it is made again
  (:meth:`CheckpointSender.resume`).
- **What went twice is counted.** The flight counts every byte it sends again (a rewind
  or a resume behind what it had sent) and the manifest chunk carries the count to home
  (``resent_bytes`` of :class:`Committed`).

Usage::

    sender = CheckpointSender(scratch / "checkpoints")        # on the flight
    receiver = CheckpointReceiver(run_dir / "checkpoints", keep_last=2)   # at home
    for chunk in sender.next():
        outcome = receiver.take(chunk, asked_at=t)
        if outcome.rewind: sender.rewind(outcome.rewind)       # (sent with the next poll)
        if outcome.committed: ...                              # step-N is home, durable
    sender.resume(*receiver.offsets())     # a connection dropped: go on from home's bytes
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import threading
import time
import zlib
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from flightplan.durable import fsync_dir
from flightplan.errors import TransferError
from flightplan.rundir import list_checkpoints
from flightplan.trial.checkpoint import prune
from flightplan.trial.checkpoint_io import MANIFEST
from flightplan.run.executors.transfer import checkpoint_steps, relative_path

__all__ = ["CHUNK_BYTES", "DEPTH", "Chunk", "Rewind", "Committed", "Outcome",
           "CheckpointSender", "CheckpointReceiver"]

CHUNK_BYTES = 8 << 20
"""Bytes of checkpoint data in one chunk (8 MiB). It bounds memory: each side holds at most
three chunks at a time whatever the checkpoint's size (docs/distributed.md, "What travels
over the network"); and it is large enough that a chunk's fixed costs (a poll or a frame, a
CRC-32 call, a ``pwrite``) are a small share of moving its bytes. ``bench/distributed.py``
measures the transfer rate and the memory held (docs/distributed.md, "Measured")."""

DEPTH = 3
"""Chunks asked for before the first of them is home (the executor's polls in flight while
a checkpoint streams): the flight reads and hashes the next while home writes this one."""

_DROP_BEHIND = 2 * CHUNK_BYTES
"""Bytes behind the newest chunk of a file that home asks the page cache to drop again
(by then written back, so they can go)."""

DIRECT_ALIGN = 4096
"""Bytes that offsets, lengths and buffer addresses of home's direct writes are multiples
of (``O_DIRECT``: the largest logical block size of common disks)."""


@dataclass(frozen=True)
class Chunk:
    """A piece of one checkpoint on its way home.

    Attributes:
        name: the checkpoint (``step-NNNNNN``).
        path: its file (POSIX, relative); :data:`MANIFEST` for the last chunk.
        offset: where ``data`` starts in the file (bytes; 0 for the manifest).
        data: the bytes (any buffer: Ray hands home a read-only view of its object store).
        crc32: CRC-32 (``zlib.crc32``) of ``data``, taken on the flight.
        waited_s: for the manifest chunk, seconds from the checkpoint being durable on the
            flight (its manifest written) to this chunk being cut (the flight's clock);
            0.0 for the others.
        resent_bytes: for the manifest chunk, bytes of the checkpoint's files that the
            flight sent more than once so far (rewinds, resumes); 0 for the others.
    """

    name: str
    path: str
    offset: int
    data: Any
    crc32: int
    waited_s: float = 0.0
    resent_bytes: int = 0

    @property
    def size(self) -> int:
        """Bytes of ``data``."""
        return memoryview(self.data).nbytes


@dataclass(frozen=True)
class Rewind:
    """Home's request to send ``path`` of checkpoint ``name`` again from ``offset``."""

    name: str
    path: str
    offset: int


class CheckpointSender:
    """The sending side (module docstring): what to send next, one chunk's worth at a time.

    Args:
        folder: the run's ``checkpoints/`` folder on the flight (at home, to a flight).
        chunk_bytes: the most data bytes :meth:`next` returns.
        sent: checkpoint names home already has (e.g. the one it sent to start from).
        buffers: buffers of ``chunk_bytes`` the sender reads into in turn.

    Attributes:
        peak_chunk_bytes: the most data bytes one :meth:`next` returned (by construction
            at most ``chunk_bytes``: what the sender holds at once).
        buffers: as given (at least 1).

    The data chunks of one :meth:`next` are views of one buffer of ``chunk_bytes``, read
    into again ``buffers`` calls that returned data later (no allocation per chunk): hand
    them on before then (Ray copies a method's result into its object store when it
    returns; the direct connection sends one buffer while the next is read).
    """

    def __init__(self, folder: Path, *, chunk_bytes: int = CHUNK_BYTES,
                 sent: Iterable[str] = (), buffers: int = 1) -> None:
        self.folder = Path(folder)
        self.chunk_bytes = chunk_bytes
        self.peak_chunk_bytes = 0
        self._done: set[str] = set(sent)
        self._name: str | None = None
        self._files: dict[str, int] = {}            # path → the next offset to send
        self._buffers: list[bytearray] = []         # allocated as they are first needed
        self.buffers = max(1, buffers)
        self._turn = 0
        self._resent = ("", 0)                       # (checkpoint, bytes it sent twice)

    @property
    def streaming(self) -> str | None:
        """The checkpoint on its way (None: nothing begun)."""
        return self._name

    def rewind(self, to: Rewind) -> None:
        """Send ``to.path`` of ``to.name`` again from ``to.offset`` (the manifest after it),
        as long as that checkpoint is still on the flight; a checkpoint already sent whole
        is opened again with only that file to send. What was sent of the file past
        ``to.offset`` counts as sent again."""
        committed = self.folder / to.name
        where = committed if committed.is_dir() else self.folder / f"{to.name}.tmp"
        if not where.is_dir() or (to.name != self._name and where != committed):
            return
        try:
            if to.name != self._name:
                listed = json.loads((where / MANIFEST).read_bytes())["files"]
                self._done.discard(to.name)
                self._name = to.name
                self._files = {str(p): int(r["size"]) for p, r in listed.items()}
            if to.path != MANIFEST:
                relative_path(to.path)          # a path out of the folder: refused, below
                old = self._files.get(to.path, 0)
                self._files[to.path] = to.offset
                self._count_resent(to.name, old - to.offset)
        except (OSError, ValueError, KeyError, TypeError, TransferError):
            self._name, self._files = None, {}         # gone meanwhile: the newest is sent

    def resume(self, name: str | None, have: Mapping[str, int]) -> None:
        """Home has ``have`` (path → bytes) of checkpoint ``name`` and nothing of any other
        checkpoint on its way (None: none): send each file of the one on its way again from
        what home has (what was on its way when a connection dropped never came)."""
        streaming = self._name
        for path, offset in sorted(self._files.items()):
            home = max(0, int(have.get(path, 0))) if name == streaming else 0
            if streaming is not None and self._name == streaming and offset > home:
                self.rewind(Rewind(streaming, path, home))

    def offsets(self) -> dict[str, int]:
        """Bytes sent so far of each file of the checkpoint on its way (path → bytes)."""
        return dict(self._files)

    def _count_resent(self, name: str, nbytes: int) -> None:
        """Count ``nbytes`` (when positive) of checkpoint ``name`` as sent again."""
        if nbytes > 0:
            self._resent = (name, (self._resent[1] if self._resent[0] == name else 0) + nbytes)

    def _target(self, *, ended: bool) -> tuple[str, Path, bool] | None:
        """The checkpoint to stream: the newest committed one not home, or one being
        written that is newer still (not once the worker ended: it will not be finished).
        ``(name, folder, committed)``."""
        complete, partial = list_checkpoints(self.folder)
        newest = complete[0] if complete else None
        if self._name is not None and (self.folder / self._name).is_dir() \
                and (newest is None or newest[1].name == self._name):
            return self._name, self.folder / self._name, True
        writing = [p for p in partial if not ended and p.name[:-4] not in self._done
                   and (newest is None or int(p.name[5:-4]) > newest[0])]
        if writing:
            latest = max(writing, key=lambda p: int(p.name[5:-4]))
            return latest.name[:-4], latest, False
        if newest is not None and newest[1].name not in self._done:
            return newest[1].name, newest[1], True
        return None

    def pending(self, *, ended: bool = False) -> bool:
        """Whether a checkpoint is on its way or waits to be sent."""
        return self._target(ended=ended) is not None

    def next(self, *, ended: bool = False) -> list[Chunk]:
        """The next chunks (at most ``chunk_bytes`` of data in all; empty: nothing to send
        now). ``ended``: the worker has exited (a checkpoint still being written will not
        be finished: it is not sent)."""
        target = self._target(ended=ended)
        if target is None:
            return []
        name, where, committed = target
        if name != self._name:
            self._name, self._files = name, {}
        try:
            chunks = self._read(name, where, committed)
        except (OSError, ValueError, KeyError, TypeError, TransferError):
            if not committed and (self.folder / name).is_dir():
                return []       # renamed into place meanwhile: on from the same offsets
            # pruned or failed meanwhile: start over with whatever is newest (what was sent
            # of this one counts as sent again, should it come again); a committed one that
            # cannot be read (its manifest damaged) is not sent at all
            if committed and where.is_dir():
                self._done.add(name)
            self._count_resent(name, sum(self._files.values()))
            self._name, self._files = None, {}
            return []
        self.peak_chunk_bytes = max(self.peak_chunk_bytes, sum(c.size for c in chunks))
        return chunks

    def _read(self, name: str, where: Path, committed: bool) -> list[Chunk]:
        """Up to ``chunk_bytes`` of the files of ``where`` from each file's cursor; the
        manifest once every file it lists is sent."""
        listed: dict[str, int] | None = None
        manifest = b""
        if committed:
            manifest = (where / MANIFEST).read_bytes()
            listed = {p: int(r["size"]) for p, r in json.loads(manifest)["files"].items()}
            sizes = listed
        else:
            sizes = {p.relative_to(where).as_posix(): p.stat().st_size
                     for p in sorted(where.rglob("*")) if p.is_file() and p.name != MANIFEST}
        chunks, used = [], 0
        if len(self._buffers) <= self._turn:
            self._buffers.append(bytearray(self.chunk_bytes))
        buffer = self._buffers[self._turn]
        for path, size in sorted(sizes.items()):
            offset = self._files.setdefault(path, 0)
            if used >= self.chunk_bytes or offset >= size:
                continue
            want = min(size - offset, self.chunk_bytes - used)
            view = memoryview(buffer)[used:used + want]
            with open(where / relative_path(path), "rb") as handle:
                handle.seek(offset)
                got = handle.readinto(view)
            if not got:
                continue
            data = view[:got]
            chunks.append(Chunk(name, path, offset, data, zlib.crc32(data)))
            self._files[path] = offset + got
            used += got
        if chunks:
            self._turn = (self._turn + 1) % self.buffers
        if listed is not None and not chunks and all(
                self._files.get(p, 0) >= s for p, s in listed.items()):
            waited = max(0.0, time.time() - (where / MANIFEST).stat().st_mtime)
            again = self._resent[1] if self._resent[0] == name else 0
            chunks.append(Chunk(name, MANIFEST, 0, manifest, zlib.crc32(manifest), waited,
                                again))
            self._done.add(name)
            self._name, self._files = None, {}
        return chunks


@dataclass(frozen=True)
class Committed:
    """A checkpoint made durable at home: ``name``, its files' ``bytes``, the flight's
    ``waited_s`` (its manifest chunk's), unix ``first_asked_at`` (the poll that brought its
    first chunk was asked for, or its frame came), ``resent_bytes`` (bytes the flight sent
    more than once: chunks and files that failed their check and what followed them, what
    a dropped connection lost; its manifest chunk's count)."""

    name: str
    bytes: int
    waited_s: float
    first_asked_at: float
    resent_bytes: int


@dataclass(frozen=True)
class Outcome:
    """What one :meth:`CheckpointReceiver.take` did: a ``rewind`` to ask the flight for,
    a checkpoint ``committed``, or a checkpoint ``refused`` (the reason; nothing kept)."""

    rewind: Rewind | None = None
    committed: Committed | None = None
    refused: str | None = None


@dataclass
class _ReceivedFile:
    """One file being written at home: its descriptor, the same file opened for direct
    writes (None where the file system has none), the next offset, the running hash, and
    how much of it the page cache was told to drop."""

    fd: int
    direct: int | None = None
    offset: int = 0
    sha: Any = field(default_factory=hashlib.sha256)
    dropped: int = 0

    def close(self) -> None:
        """Close both descriptors."""
        os.close(self.fd)
        if self.direct is not None:
            os.close(self.direct)

    def write_checked(self, data: memoryview, offset: int, crc32: int) -> bool:
        """Check ``data`` against the flight's ``crc32`` and :meth:`write` it at ``offset``
        on a thread of its own, while the running hash takes it here (each lets go of the
        GIL: the hash overlaps the check and the disk's wait). False: ``data`` failed
        its check; nothing was written and the hash is as it was.

        Raises:
            OSError: the disk's.
        """
        before = self.sha.copy()
        outcome: list[bool | BaseException] = []

        def check_and_write() -> None:
            try:
                intact = zlib.crc32(data) == crc32
                if intact:
                    self.write(data, offset)
                outcome.append(intact)
            except BaseException as exc:       # handed to the caller below
                outcome.append(exc)

        writer = threading.Thread(target=check_and_write, name="flightplan-home-disk",
                                  daemon=True)
        writer.start()
        self.sha.update(data)
        writer.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        if not outcome[0]:
            self.sha = before
        return outcome[0]

    def write(self, data: memoryview, offset: int) -> None:
        """All of ``data`` at ``offset``: its whole blocks of :data:`DIRECT_ALIGN` bytes
        from a block-aligned ``offset`` straight to the disk (``O_DIRECT``: no copy into
        the page cache and none of its write-back work on this side: the disk's DMA reads
        the buffer), the rest through the page cache. The
        kernel refuses a buffer at an unaligned address (``EINVAL``, nothing written):
        that chunk goes through the page cache whole.

        Raises:
            OSError: the disk's.
        """
        done = 0
        whole = data.nbytes - data.nbytes % DIRECT_ALIGN
        if self.direct is not None and offset % DIRECT_ALIGN == 0 and whole:
            try:
                while done < whole:
                    done += os.pwrite(self.direct, data[done:whole], offset + done)
            except OSError as exc:
                if exc.errno != errno.EINVAL or done:
                    raise
        if done == data.nbytes:
            return
        start = done
        while done < data.nbytes:
            done += os.pwrite(self.fd, data[done:], offset + done)
        # start writing it back now (the final fsync then waits for little), and drop from
        # the page cache what was written back since (pages still dirty cannot go): the
        # cache never holds the whole checkpoint, and the next writes reuse freed pages
        # instead of making the kernel reclaim others
        os.posix_fadvise(self.fd, offset + start, done - start, os.POSIX_FADV_DONTNEED)
        behind = offset - _DROP_BEHIND
        if behind > self.dropped:
            os.posix_fadvise(self.fd, self.dropped, behind - self.dropped,
                             os.POSIX_FADV_DONTNEED)
            self.dropped = behind


class CheckpointReceiver:
    """The receiving side (module docstring): writes each chunk in place and commits a
    checkpoint once its manifest checks.

    Args:
        parent: the run's ``checkpoints/`` folder at home (on a flight, from home).
        keep_last: prune to the newest this many after each commit (None: keep all).

    Attributes:
        peak_chunk_bytes: the largest chunk written (what home holds at once, by
            construction: it writes each chunk from the buffer it came in).
    """

    def __init__(self, parent: Path, *, keep_last: int | None = None) -> None:
        self.parent = Path(parent)
        self.keep_last = keep_last
        self.peak_chunk_bytes = 0
        self._name: str | None = None
        self._files: dict[str, _ReceivedFile] = {}
        self._first_asked_at = 0.0

    @property
    def receiving(self) -> str | None:
        """The checkpoint being received (None: none)."""
        return self._name

    def offsets(self) -> tuple[str | None, dict[str, int]]:
        """``(checkpoint being received or None, path → bytes home has of it that passed
        their check)``: where the flight goes on from (:meth:`CheckpointSender.resume`)."""
        return self._name, {path: sink.offset for path, sink in self._files.items()}

    def _staging(self) -> Path:
        assert self._name is not None
        return self.parent / f"{self._name}.tmp"

    def abandon(self) -> None:
        """Drop the checkpoint being received (its ``.tmp`` folder goes)."""
        for sink in self._files.values():
            sink.close()
        if self._name is not None:
            shutil.rmtree(self._staging(), ignore_errors=True)
        self._name, self._files = None, {}

    def _begin(self, name: str, asked_at: float) -> None:
        self.abandon()
        self._name, self._first_asked_at = name, asked_at
        staging = self._staging()
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)

    def take(self, chunk: Chunk, *, asked_at: float) -> Outcome:
        """Write ``chunk`` (asked for at unix ``asked_at``) and say what follows.

        A chunk of an older checkpoint than one home has, or at another offset than the
        one home expects next in its file (a chunk out of turn after a rewind), is
        ignored. A chunk of a newer checkpoint drops the one being received.

        Raises:
            TransferError: a name or path that is not a checkpoint's (nothing is written).
        """
        steps = checkpoint_steps(chunk.name)
        path = relative_path(chunk.path).as_posix()
        self.peak_chunk_bytes = max(self.peak_chunk_bytes, chunk.size)
        if (self.parent / chunk.name).is_dir():
            return Outcome()                               # already home
        if chunk.name != self._name:
            if self._name is not None and checkpoint_steps(self._name) > steps:
                return Outcome()                           # older than the one on its way
            self._begin(chunk.name, asked_at)
        if path == MANIFEST:
            return self._finish(chunk)
        sink = self._files.get(path) or self._sink(path)
        if chunk.offset != sink.offset:
            return Outcome()                               # out of turn: home asks for its own
        data = memoryview(chunk.data).cast("B")
        if not sink.write_checked(data, chunk.offset, chunk.crc32):
            return Outcome(rewind=Rewind(chunk.name, path, chunk.offset))   # ask for it again
        sink.offset += data.nbytes
        return Outcome()

    def accept(self, chunk: Chunk, *, asked_at: float) -> Outcome:
        """:meth:`take`, with a name or path that is not a checkpoint's refused (the
        checkpoint being received dropped) instead of raised: what a chunk that came over
        the network gets."""
        try:
            return self.take(chunk, asked_at=asked_at)
        except TransferError as exc:
            self.abandon()
            return Outcome(refused=str(exc))

    def _sink(self, path: str) -> _ReceivedFile:
        """A new file ``path`` of the checkpoint being received."""
        target = self._staging() / path
        target.parent.mkdir(parents=True, exist_ok=True)
        sink = self._files[path] = _ReceivedFile(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
        direct = getattr(os, "O_DIRECT", None)             # Linux
        if direct is not None:
            with suppress(OSError):        # none here (tmpfs): all through the page cache
                sink.direct = os.open(target, os.O_WRONLY | direct)
        return sink

    def _finish(self, chunk: Chunk) -> Outcome:
        """The manifest: check every file against it; commit, or ask again, or refuse."""
        data = bytes(memoryview(chunk.data))
        if zlib.crc32(data) != chunk.crc32:
            return Outcome(rewind=Rewind(chunk.name, MANIFEST, 0))
        try:
            listed = {str(p): r for p, r in json.loads(data)["files"].items()}
            sizes = {p: int(r["size"]) for p, r in listed.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._refuse(f"{chunk.name}: its {MANIFEST} is not a flightplan manifest")
        extra = sorted(set(self._files) - set(listed))
        if extra:
            return self._refuse(f"{chunk.name}: sent files {extra} that its manifest does not "
                                f"list ({sorted(listed)})")
        for path in sorted(listed):
            relative_path(path)
            if sizes[path] == 0 and path not in self._files:
                self._sink(path)                   # an empty file sends no chunk
            sink = self._files.get(path)
            if sink is None or sink.offset < sizes[path]:
                # not all here (chunks out of turn were dropped): from home's offset again
                return Outcome(rewind=Rewind(chunk.name, path, sink.offset if sink else 0))
            if sink.offset != sizes[path] or sink.sha.hexdigest() != listed[path].get("sha256"):
                os.ftruncate(sink.fd, 0)           # changed after it was sent: all again
                sink.offset, sink.sha = 0, hashlib.sha256()
                return Outcome(rewind=Rewind(chunk.name, path, 0))
        return Outcome(committed=self._commit(chunk, data, sizes))

    def _refuse(self, reason: str) -> Outcome:
        self.abandon()
        return Outcome(refused=reason)

    def _commit(self, chunk: Chunk, manifest: bytes, sizes: dict[str, int]) -> Committed:
        """fsync every file, write the manifest, rename ``.tmp`` into place, prune."""
        staging, folders = self._staging(), set()
        for path, sink in self._files.items():
            os.fsync(sink.fd)
            sink.close()
            folders.add((staging / path).parent)
        self._files = {}
        fd = os.open(staging / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view, written = memoryview(manifest), 0
            while written < len(manifest):
                written += os.write(fd, view[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        for folder in folders | {staging}:
            fsync_dir(folder)
        staging.rename(self.parent / chunk.name)
        fsync_dir(self.parent)
        committed = Committed(chunk.name, sum(sizes.values()), chunk.waited_s,
                              self._first_asked_at, chunk.resent_bytes)
        self._name = None
        if self.keep_last is not None:
            prune(self.parent, self.keep_last)
        return committed
