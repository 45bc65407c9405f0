"""Checkpoints home over a direct, authenticated TCP connection from the flight.

Ray stays the control plane of an execution on a flight (starting it, rows, logs, the exit
code, the outputs), but the chunks of its checkpoints
(:class:`~flightplan.run.executors.stream.Chunk`) travel over one TCP connection of their
own, from the flight's host (the ``RunHost`` actor's process) straight to home (the
``flightplan run`` process). The protocol is the stream's
(:class:`~flightplan.run.executors.stream.CheckpointSender` on the flight,
:class:`~flightplan.run.executors.stream.CheckpointReceiver` at home): this module is only
the channel.

::

    home (HomeEnd)                                        flight (FlightEnd)
    listen on Ray's address for this node, port 0 ──offer (host, port, secret) with
                                                       RunHost.start, through Ray ──▶
                       ◀── connect ──────────────────────────────────
    MAGIC + home nonce ──────────────────────────────────▶
                       ◀── flight nonce + HMAC(secret, "flight" | home nonce | flight nonce)
    HMAC(secret, "home" | flight nonce | home nonce) ────▶  (home proves it too)
    {"resume": name, "have": {path: offset}} ────────────▶  sender.resume(...)
                       ◀── frame: header + name + path + data (one chunk), …, ping
    {"rewind": [name, path, offset]}, {"settled": name} ──▶  sender.rewind(...)

- **Who listens: home**, one listener per execution, bound to the address Ray itself uses
  for home's node (``ray.util.get_node_ip_address()``) on a port the system picks; nothing
  new listens on the rented flight. The flight pushes each chunk as soon as it is cut:
  home never asks, and home's two threads (one reads frames, one hashes and writes them)
  are the driver's only part in it, so its other work (polls, rows, the ledger) never
  holds the stream up. The listener lives from the execution's start to its end and is
  closed on every way out (:meth:`HomeEnd.close`, and the thread's own ``finally``).
- **Authenticated.** A fresh secret (``secrets.token_bytes(32)``) per execution reaches
  the flight inside ``RunHost.start``'s arguments (Ray's calls carry the cluster's token).
  Each side proves it knows the secret with an HMAC-SHA256 over both sides' fresh nonces
  and its role, compared with :func:`hmac.compare_digest`: a recorded exchange proves
  nothing in another, and a peer that cannot prove it is dropped before a byte of its
  is written at home. Like Ray's own traffic (docs/distributed.md, "Set-up"), the bytes
  are not encrypted: run it on a private network.
- **Bounded.** A frame's header is checked before anything else is read: its kind, a name
  of at most :data:`NAME_BYTES` and a path of at most :data:`PATH_BYTES` bytes of UTF-8,
  and data of at most the chunk size (read into one of three buffers of that size, never an
  allocation of what a header claims). Anything else drops the connection. Every socket
  has a timeout: :data:`CONNECT_S`, :data:`HANDSHAKE_S`, then :data:`IDLE_S` (the flight
  sends a ping every :data:`PING_S` when it has nothing to send).
- **Fallback.** When the connection cannot be made (refused, no answer, a proof that
  fails), or drops and cannot be made again (:data:`RECONNECTS` tries), the flight says
  why once (:attr:`FlightEnd.failed`) and the transfer goes on over Ray's polls from
  where it was. A connection made again goes on from home's offsets (``resume``).
- **The end.** A manifest counts as home once home says what it made of it (``settled``,
  after any ``rewind``): the flight reports the worker's exit only when every committed
  checkpoint is settled (:meth:`FlightEnd.settled`).

Frames from the flight (network byte order, :data:`HEADER`): kind (1 data, 2 manifest,
3 ping), name length, path length, offset, data length, ``resent_bytes``, ``waited_s``,
the CRC-32 of the data; then the name, the path and
the data. Home's messages: a 4-byte length and a JSON object of at most
:data:`CONTROL_BYTES`.

Usage::

    home = HomeEnd(receiver, lock, host=ray.util.get_node_ip_address())    # at home
    actor.start.remote(..., home.offer)
    link = FlightEnd(sender, offer, lock)                                  # on the flight
    link.failed            # None, or why the chunks go over Ray's polls
    home.arrived()          # checkpoints committed (or refused) since the last call
    link.close(); home.close()
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import mmap
import queue
import secrets
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from flightplan.errors import ChannelError, TransferError
from flightplan.run.executors.stream import (CHUNK_BYTES, CheckpointReceiver,
                                             CheckpointSender, Chunk, Outcome, Rewind)
from flightplan.trial.checkpoint_io import MANIFEST

__all__ = ["MAGIC", "HEADER", "NAME_BYTES", "PATH_BYTES", "CONTROL_BYTES", "CONNECT_S",
           "HANDSHAKE_S", "IDLE_S", "PING_S", "RECONNECTS", "Offer", "ArrivedCheckpoint", "HomeEnd",
           "FlightEnd"]

MAGIC = b"FPCKPT02"
"""The first bytes home sends: the protocol and its version."""

HEADER = struct.Struct("!BBHQIQdI")
"""A frame's header: kind, name length, path length, offset, data length, resent bytes,
waited seconds, CRC-32 of the data."""

_DATA, _MANIFEST, _PING = 1, 2, 3
_NONCE = 32
_PROOF = 32

NAME_BYTES = 64
"""The longest checkpoint name a frame may carry (bytes; ``step-`` and 12 digits: 17)."""

PATH_BYTES = 4096
"""The longest file path a frame may carry (bytes of UTF-8; Linux's PATH_MAX)."""

CONTROL_BYTES = 1 << 20
"""The longest message home may send the flight (bytes of JSON; a resume lists one offset
per file of a checkpoint)."""

CONNECT_S = 5.0
"""Seconds the flight waits for home to accept its connection."""

HANDSHAKE_S = 5.0
"""Seconds either side waits for the other's part of the handshake."""

IDLE_S = 30.0
"""Seconds of silence after which either side drops a connection (a frame or a message
that stops half-way, a peer gone without a word)."""

PING_S = 5.0
"""Seconds between pings from a flight with nothing to send (well inside :data:`IDLE_S`)."""

RECONNECTS = 2
"""Tries to make a dropped connection again before the flight falls back to Ray's polls."""

_WAIT_S = 0.1
"""How often a flight with nothing to send looks for a new checkpoint (seconds; Ray's
polls come every 0.2 s)."""

_BUFFERS = 3
"""Chunk buffers at home: one is received while one is written, and a third keeps the
socket read while the disk waits (the flight holds two: ``RunHost``'s ``buffers``)."""

_REFUSALS = 16
"""Refusals :class:`HomeEnd` keeps (the first ones)."""


@dataclass(frozen=True)
class Offer:
    """Where and how a flight connects to home: ``host`` and ``port`` of home's listener,
    the execution's ``secret`` (32 random bytes; never printed) and the largest chunk
    (``chunk_bytes``) home takes. Handed to the flight through Ray, whose calls carry the
    cluster's token."""

    host: str
    port: int
    secret: bytes = field(repr=False)
    chunk_bytes: int = CHUNK_BYTES


@dataclass(frozen=True)
class ArrivedCheckpoint:
    """What home made of a frame that ended a checkpoint's trip: its ``outcome``
    (committed or refused), the checkpoint's ``name``, and unix times: ``asked_at`` when
    the frame's header came, ``fetched_at`` when its data was in, ``done_at`` when it was
    taken (fsync'd and renamed, for a commit)."""

    outcome: Outcome
    name: str
    asked_at: float
    fetched_at: float
    done_at: float


def _proof(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    """HMAC-SHA256 under ``secret`` of the protocol, the prover's ``role`` and the two
    nonces, the verifier's first (RFC 2104)."""
    return hmac.new(secret, MAGIC + role + first + second, hashlib.sha256).digest()


def _read(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes (small reads: headers, proofs, messages).

    Raises:
        ChannelError: the peer closed the connection first. OSError: the socket's.
    """
    view = memoryview(bytearray(size))
    _read_into(sock, view)
    return bytes(view)


def _read_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock`` (``recv_into``, no copy).

    Raises:
        ChannelError: the peer closed the connection first. OSError: the socket's.
    """
    got = 0
    while got < view.nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ChannelError(f"the peer closed the connection ({got} of {view.nbytes} "
                               f"bytes it was due to send read)")
        got += n


def _greet(sock: socket.socket, secret: bytes) -> None:
    """Home's half of the handshake (module docstring).

    Raises:
        ChannelError: the peer's proof is not the secret's. OSError: the socket's.
    """
    ours = secrets.token_bytes(_NONCE)
    sock.sendall(MAGIC + ours)
    answer = _read(sock, _NONCE + _PROOF)
    theirs, proof = answer[:_NONCE], answer[_NONCE:]
    if not hmac.compare_digest(proof, _proof(secret, b"flight", ours, theirs)):
        raise ChannelError("its proof of the secret is wrong")
    sock.sendall(_proof(secret, b"home", theirs, ours))


def _prove(sock: socket.socket, secret: bytes) -> None:
    """The flight's half of the handshake (module docstring).

    Raises:
        ChannelError: the peer is not a flightplan home, refused this proof, or did not
            prove the secret itself. OSError: the socket's.
    """
    hello = _read(sock, len(MAGIC) + _NONCE)
    if not hmac.compare_digest(hello[:len(MAGIC)], MAGIC):
        raise ChannelError("what answers there is not flightplan's home end")
    home = hello[len(MAGIC):]
    ours = secrets.token_bytes(_NONCE)
    sock.sendall(ours + _proof(secret, b"flight", home, ours))
    try:
        answer = _read(sock, _PROOF)
    except ChannelError:
        raise ChannelError("home refused this flight's proof of the secret") from None
    if not hmac.compare_digest(answer, _proof(secret, b"home", ours, home)):
        raise ChannelError("home did not prove the secret")


def _send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)


def _read_message(sock: socket.socket) -> dict[str, Any]:
    """One message from home.

    Raises:
        ChannelError: too long, or not a JSON object. OSError: the socket's.
    """
    (size,) = struct.unpack("!I", _read(sock, 4))
    if size > CONTROL_BYTES:
        raise ChannelError(f"a message of {size} bytes from home (at most {CONTROL_BYTES})")
    try:
        message = json.loads(_read(sock, size))
    except ValueError:
        raise ChannelError("a message from home that is not JSON") from None
    if not isinstance(message, dict):
        raise ChannelError("a message from home that is not a JSON object")
    return message


def _send_chunk(sock: socket.socket, chunk: Chunk) -> None:
    """One chunk as a frame: the header, name and path in one send, the data from its
    buffer in the next."""
    name, path = chunk.name.encode(), chunk.path.encode()
    kind = _MANIFEST if chunk.path == MANIFEST else _DATA
    sock.sendall(HEADER.pack(kind, len(name), len(path), chunk.offset, chunk.size,
                             chunk.resent_bytes, chunk.waited_s, chunk.crc32)
                 + name + path)
    sock.sendall(chunk.data)


def _ping(sock: socket.socket) -> None:
    sock.sendall(HEADER.pack(_PING, 0, 0, 0, 0, 0, 0.0, 0))


@dataclass
class _Peer:
    """An admitted connection, and the lock its sends take (two threads send on it)."""

    sock: socket.socket
    address: str
    sending: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: dict[str, Any]) -> None:
        with self.sending:
            _send_message(self.sock, message)

    def close(self) -> None:
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@dataclass
class _Arrival:
    """A frame read at home, for the writing thread: the chunk (its data a view of
    ``buffer``), who sent it and when it came."""

    chunk: Chunk
    buffer: mmap.mmap
    peer: _Peer
    asked_at: float
    fetched_at: float


class HomeEnd:
    """Home's end of one execution's direct connection (module docstring): listens on
    ``host`` at a port the system picks, admits only a peer that proves the secret of
    :attr:`offer`, and writes every chunk it sends through ``receiver``, on two threads of
    its own.

    Args:
        receiver: home's side of the stream protocol for this run.
        lock: held around every ``receiver.take`` (the executor takes it too for chunks
            that come with Ray's polls).
        host: the address to listen on: the one Ray uses for this node.
        chunk_bytes: the most data one frame may carry (bytes).
        handshake_s, idle_s: socket timeouts (seconds; :data:`HANDSHAKE_S`,
            :data:`IDLE_S`).

    Attributes:
        offer: what the flight needs to connect (hand it over through Ray).
        refused: why peers or frames were dropped (``"ADDRESS: reason"``, the first
            :data:`_REFUSALS`).

    Raises:
        OSError: ``host`` cannot be listened on.
    """

    def __init__(self, receiver: CheckpointReceiver, lock: threading.Lock, *, host: str,
                 chunk_bytes: int = CHUNK_BYTES, handshake_s: float = HANDSHAKE_S,
                 idle_s: float = IDLE_S) -> None:
        self.receiver = receiver
        self.refused: list[str] = []
        self._lock = lock
        self._chunk_bytes = chunk_bytes
        self._handshake_s, self._idle_s = handshake_s, idle_s
        self._secret = secrets.token_bytes(32)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family, backlog=4)
        try:
            self._listener.setblocking(False)
            self.offer = Offer(host, self._listener.getsockname()[1], self._secret,
                               chunk_bytes)
            self._closing = threading.Event()
            self._peer: _Peer | None = None
            self._buffers: list[mmap.mmap] = []
            self._free: queue.Queue[mmap.mmap] = queue.Queue()
            self._arrivals: queue.Queue[_Arrival | None] = queue.Queue(maxsize=1)
            self._arrived: queue.SimpleQueue[ArrivedCheckpoint] = queue.SimpleQueue()
            self._failure: BaseException | None = None
            self._writer = threading.Thread(target=self._write, daemon=True,
                                            name="flightplan-home-write")
            self._server = threading.Thread(target=self._serve, daemon=True,
                                            name="flightplan-home-read")
            self._writer.start()
            self._server.start()
        except BaseException:
            self._listener.close()
            raise

    @property
    def listening(self) -> bool:
        """Whether the listener is still open."""
        return self._listener.fileno() != -1

    def arrived(self) -> list[ArrivedCheckpoint]:
        """Checkpoints committed or refused since the last call, in order.

        Raises:
            OSError: writing at home failed (the thread stopped; the disk's error).
        """
        found = []
        while True:
            try:
                found.append(self._arrived.get_nowait())
            except queue.Empty:
                break
        if self._failure is not None:
            raise self._failure
        return found

    def close(self) -> None:
        """Stop listening and drop the connection (again: nothing); returns once the chunk
        being written is written."""
        self._closing.set()
        peer = self._peer
        if peer is not None:
            with suppress(OSError):
                peer.sock.shutdown(socket.SHUT_RDWR)
        if self._server.is_alive():
            self._server.join()
        if self._writer.is_alive():
            self._arrivals.put(None)
            self._writer.join()

    # -- the reading thread --------------------------------------------------------------
    def _refuse(self, address: str, why: str) -> None:
        if len(self.refused) < _REFUSALS:
            self.refused.append(f"{address}: {why}")

    def _serve(self) -> None:
        """Admit peers and read their frames until :meth:`close`; a new peer that proves
        the secret replaces the one before (a flight that lost its connection)."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        heard = time.monotonic()
        try:
            while not self._closing.is_set():
                for key, _ in selector.select(timeout=0.2):
                    if key.fileobj is self._listener:
                        peer = self._admit()
                        if peer is None:
                            continue
                        if self._peer is not None:
                            selector.unregister(self._peer.sock)
                            self._peer.close()
                        self._peer, heard = peer, time.monotonic()
                        selector.register(peer.sock, selectors.EVENT_READ)
                        self._resume(peer)
                    elif self._peer is not None and key.fileobj is self._peer.sock:
                        try:
                            if self._frame(self._peer):
                                heard = time.monotonic()
                                continue
                        except (OSError, ChannelError) as exc:
                            if not self._closing.is_set():
                                self._refuse(self._peer.address, str(exc))
                        selector.unregister(self._peer.sock)     # hung up or dropped
                        self._peer.close()
                        self._peer = None
                if self._peer is not None and time.monotonic() - heard > self._idle_s:
                    self._refuse(self._peer.address, f"silent for {self._idle_s:g} s")
                    selector.unregister(self._peer.sock)
                    self._peer.close()
                    self._peer = None
        except BaseException as exc:    # a bug or the disk: never a thread that dies mute
            self._failure = self._failure or exc
        finally:
            selector.close()
            self._listener.close()
            if self._peer is not None:
                self._peer.close()

    def _admit(self) -> _Peer | None:
        """Accept one connection and run home's half of the handshake; None when there
        was none to accept or the peer failed (noted in :attr:`refused`, dropped)."""
        try:
            sock, where = self._listener.accept()
        except OSError:
            return None
        address = f"{where[0]}:{where[1]}"
        try:
            sock.settimeout(self._handshake_s)
            _greet(sock, self._secret)
            sock.settimeout(self._idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return _Peer(sock, address)
        except (OSError, ChannelError) as exc:
            self._refuse(address, str(exc) or type(exc).__name__)
            with suppress(OSError):
                sock.close()
            return None

    def _resume(self, peer: _Peer) -> None:
        """Tell a new peer what home has of the checkpoint it receives, once every frame
        read before is written."""
        self._arrivals.join()
        with self._lock:
            name, have = self.receiver.offsets()
        with suppress(OSError):
            peer.send({"resume": name, "have": have})

    def _buffer(self) -> mmap.mmap:
        """A free buffer of ``chunk_bytes`` (one of :data:`_BUFFERS`, allocated once; an
        anonymous mapping: page-aligned, as home's direct writes need)."""
        if len(self._buffers) < _BUFFERS and self._free.empty():
            self._buffers.append(mmap.mmap(-1, self._chunk_bytes))
            return self._buffers[-1]
        return self._free.get()

    def _frame(self, peer: _Peer) -> bool:
        """Read one frame and hand it to the writing thread (a ping: nothing); False when
        the peer hung up between frames.

        Raises:
            ChannelError: a header that is not a frame's, or the peer closed in a frame.
            OSError: the socket's (its timeout included).
        """
        head = memoryview(bytearray(HEADER.size))
        first = peer.sock.recv_into(head)
        if first == 0:
            return False
        _read_into(peer.sock, head[first:])
        kind, name_len, path_len, offset, size, resent, waited, crc32 = HEADER.unpack(head)
        if kind == _PING:
            return True
        asked_at = time.time()
        if kind not in (_DATA, _MANIFEST) or not 0 < name_len <= NAME_BYTES \
                or not 0 < path_len <= PATH_BYTES or not 0 < size <= self._chunk_bytes \
                or offset >= 1 << 62 or resent >= 1 << 62 \
                or not (math.isfinite(waited) and waited >= 0.0) \
                or (kind == _MANIFEST and offset != 0):
            raise ChannelError(f"a frame header that is not a chunk's (kind {kind}, name "
                               f"{name_len} B, path {path_len} B, data {size} B of at most "
                               f"{self._chunk_bytes})")
        words = _read(peer.sock, name_len + path_len)
        try:
            name, path = words[:name_len].decode(), words[name_len:].decode()
        except UnicodeDecodeError:
            raise ChannelError("a frame whose name or path is not UTF-8") from None
        buffer = self._buffer()
        view = memoryview(buffer)[:size]
        try:
            _read_into(peer.sock, view)
        except BaseException:
            self._free.put(buffer)
            raise
        chunk = Chunk(name, path, offset, view, crc32, waited, resent)
        self._arrivals.put(_Arrival(chunk, buffer, peer, asked_at, time.time()))
        return True

    # -- the writing thread --------------------------------------------------------------
    def _write(self) -> None:
        """Write each frame read (hash, ``pwrite``) and answer the flight, in order."""
        while True:
            arrival = self._arrivals.get()
            try:
                if arrival is None:
                    return
                if self._failure is None:
                    self._take(arrival)
            except BaseException as exc:   # the disk's error: stop writing, tell the executor
                self._failure = exc
            finally:
                if arrival is not None:
                    self._free.put(arrival.buffer)
                self._arrivals.task_done()

    def _take(self, arrival: _Arrival) -> None:
        chunk = arrival.chunk
        with self._lock:
            try:
                outcome = self.receiver.take(chunk, asked_at=arrival.asked_at)
            except TransferError as exc:
                self.receiver.abandon()
                outcome = Outcome(refused=str(exc))
        done_at = time.time()
        if outcome.committed is not None or outcome.refused is not None:
            self._arrived.put(ArrivedCheckpoint(outcome, chunk.name, arrival.asked_at,
                                    arrival.fetched_at, done_at))
        with suppress(OSError):
            if outcome.rewind is not None:
                rewind = outcome.rewind
                arrival.peer.send({"rewind": [rewind.name, rewind.path, rewind.offset]})
            if chunk.path == MANIFEST:
                arrival.peer.send({"settled": chunk.name})


_Item = list[Chunk] | None
"""What the flight's sending thread is handed: the chunks of one cut, or a ping (None)."""


class _Outgoing:
    """The flight's sending thread for one connection: sends the cuts handed to it in
    order, and gives their buffer back (``slots``) once sent; after a failed send it only
    gives buffers back (``error`` says why). A manifest's ``waited_s`` grows by the time it
    waited here behind the chunks before it."""

    def __init__(self, sock: socket.socket, slots: threading.Semaphore) -> None:
        self.sock, self.slots = sock, slots
        self.error: BaseException | None = None
        self._items: queue.Queue[tuple[_Item, bool, float] | str] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="flightplan-flight-send")
        self._thread.start()

    def send(self, item: _Item, *, holds: bool) -> None:
        """Send ``item``; ``holds``: its chunks are views of a buffer (give it back)."""
        self._items.put((item, holds, time.monotonic()))

    def stop(self) -> None:
        """Send what was handed over (unless a send failed) and end the thread."""
        self._items.put("stop")
        self._thread.join()

    def _run(self) -> None:
        while True:
            entry = self._items.get()
            if isinstance(entry, str):
                return
            item, holds, cut_at = entry
            try:
                if self.error is None:
                    if item is None:
                        _ping(self.sock)
                    else:
                        for chunk in item:
                            if chunk.path == MANIFEST:
                                chunk = dataclasses.replace(
                                    chunk, waited_s=chunk.waited_s + time.monotonic() - cut_at)
                            _send_chunk(self.sock, chunk)
            except OSError as exc:
                self.error = exc
            finally:
                if holds:
                    self.slots.release()


def _why(exc: BaseException, offer: Offer, connect_s: float) -> str:
    """A failed connection to home in words."""
    where = f"home at {offer.host}:{offer.port}"
    if isinstance(exc, ChannelError):
        return f"{where}: {exc}"
    if isinstance(exc, ConnectionRefusedError):
        return f"{where} refused the connection"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} within {connect_s:g} s"
    return f"cannot reach {where} ({type(exc).__name__}: {exc})"


class FlightEnd:
    """The flight's end of the direct connection (module docstring): connects to home's
    ``offer``, proves the secret, and sends home what ``sender`` cuts, on threads of its own
    (one reads and hashes the next chunk while the other sends this one).

    Args:
        sender: the flight's side of the stream protocol (made with two ``buffers``: one
            is sent while the next is read).
        offer: home's listener and the execution's secret.
        lock: held around every use of ``sender`` (the host's polls take it too).
        connect_s, handshake_s, idle_s, ping_s: timeouts and the ping interval (seconds).
        on_failure: called once, with the reason, when the chunks go over Ray's polls.

    Attributes:
        failed: why the chunks go over Ray's polls instead (set once, when the connection
            cannot be made or made again; None while it is used or being made). From then
            on ``sender`` is the caller's again.
    """

    def __init__(self, sender: CheckpointSender, offer: Offer, lock: threading.Lock, *,
                 connect_s: float = CONNECT_S, handshake_s: float = HANDSHAKE_S,
                 idle_s: float = IDLE_S, ping_s: float = PING_S,
                 on_failure: Callable[[str], None] | None = None) -> None:
        self.sender, self.offer, self.lock = sender, offer, lock
        self.failed: str | None = None
        self._connect_s, self._handshake_s = connect_s, handshake_s
        self._idle_s, self._ping_s = idle_s, ping_s
        self._on_failure = on_failure
        self._ended = threading.Event()
        self._closing = threading.Event()
        self._unsettled: set[str] = set()
        self._slots = threading.Semaphore(sender.buffers)
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="flightplan-flight-read")
        self._thread.start()

    def end(self) -> None:
        """The worker ended: a checkpoint still being written will not be finished."""
        self._ended.set()

    def settled(self) -> bool:
        """Whether every committed checkpoint was sent and home said what it made of it
        (call with ``lock`` held)."""
        return not self._unsettled and not self.sender.pending(ended=self._ended.is_set())

    def close(self) -> None:
        """Drop the connection and end the threads (again: nothing)."""
        self._closing.set()
        sock = self._sock
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join()

    def _run(self) -> None:
        try:
            sock = self._open()
        except (OSError, ChannelError) as exc:
            self._fail(_why(exc, self.offer, self._connect_s))
            return
        current: socket.socket | None = sock
        while current is not None and not self._closing.is_set():
            try:
                self._stream(current)
            except (OSError, ChannelError) as exc:
                current.close()
                current = None if self._closing.is_set() else self._reconnect(exc)
        if current is not None:
            current.close()
        self._sock = None

    def _reconnect(self, dropped: BaseException) -> socket.socket | None:
        """The connection made again after it dropped (:data:`RECONNECTS` tries); None
        when it could not be (the chunks go over Ray's polls) or closing."""
        last: BaseException | None = None
        for attempt in range(RECONNECTS):
            if self._closing.wait(0.2 * (attempt + 1)):
                return None
            try:
                return self._open()
            except (OSError, ChannelError) as exc:
                last = exc
        assert last is not None
        self._fail(f"the direct connection dropped ({type(dropped).__name__}: {dropped}) "
                   f"and could not be made again ({_why(last, self.offer, self._connect_s)})")
        return None

    def _open(self) -> socket.socket:
        """Connect, prove the secret, take home's first message (where to go on from).

        Raises:
            ChannelError, OSError: it could not be made.
        """
        sock = socket.create_connection((self.offer.host, self.offer.port),
                                        timeout=self._connect_s)
        try:
            self._sock = sock
            sock.settimeout(self._handshake_s)
            _prove(sock, self.offer.secret)
            sock.settimeout(self._idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._apply(_read_message(sock))
            return sock
        except BaseException:
            sock.close()
            raise

    def _fail(self, why: str) -> None:
        """Give ``sender`` back for Ray's polls: a manifest home never answered goes again."""
        with self.lock:
            for name in sorted(self._unsettled, reverse=True):     # the newest
                if self.sender.streaming is None:
                    self.sender.rewind(Rewind(name, MANIFEST, 0))
            self._unsettled.clear()
            self.failed = why
        if self._on_failure is not None:
            self._on_failure(why)

    def _stream(self, sock: socket.socket) -> None:
        """Send what the sender cuts, apply home's messages, ping when idle, until
        :meth:`close`.

        Raises:
            OSError, ChannelError: the connection failed.
        """
        outgoing = _Outgoing(sock, self._slots)
        sent = time.monotonic()
        try:
            while not self._closing.is_set():
                self._messages(sock)
                if outgoing.error is not None:
                    raise outgoing.error
                if not self._slots.acquire(timeout=0.2):
                    continue
                with self.lock:
                    chunks = self.sender.next(ended=self._ended.is_set())
                    self._unsettled.update(c.name for c in chunks if c.path == MANIFEST)
                holds = any(c.path != MANIFEST for c in chunks)
                if not holds:
                    self._slots.release()
                if chunks:
                    outgoing.send(chunks, holds=holds)
                    sent = time.monotonic()
                    continue
                if time.monotonic() - sent >= self._ping_s:
                    outgoing.send(None, holds=False)
                    sent = time.monotonic()
                select.select([sock], [], [], _WAIT_S)
        finally:
            if outgoing.error is not None or self._closing.is_set():
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            outgoing.stop()

    def _messages(self, sock: socket.socket) -> None:
        """Apply every message from home that has come (without waiting for one)."""
        while select.select([sock], [], [], 0)[0]:
            self._apply(_read_message(sock))

    def _apply(self, message: dict[str, Any]) -> None:
        """One message from home: a rewind, a manifest settled, or where to go on from.

        Raises:
            ChannelError: a message that is none of these.
        """
        try:
            with self.lock:
                if "rewind" in message:
                    name, path, offset = message["rewind"]
                    self.sender.rewind(Rewind(str(name), str(path), int(offset)))
                elif "settled" in message:
                    self._unsettled.discard(str(message["settled"]))
                elif "resume" in message:
                    home = message["resume"]
                    have = {str(p): int(o) for p, o in dict(message["have"]).items()}
                    self.sender.resume(None if home is None else str(home), have)
                    for name in sorted(self._unsettled, reverse=True):   # unanswered: again
                        if self.sender.streaming is None:
                            self.sender.rewind(Rewind(name, MANIFEST, 0))
                    self._unsettled.clear()
                else:
                    raise ValueError(sorted(message))
        except (ValueError, TypeError, KeyError) as exc:
            raise ChannelError(f"a message from home that is not one ({exc})") from None
