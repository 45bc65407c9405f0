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
       both sides: frame key and message key = HKDF-Expand(secret, purpose | both nonces)
    {"resume": name, "have": {path: offset}} + tag ──────▶  sender.resume(...)
                       ◀── frame: header (seq 1) + name + path + data + tag, …, ping (seq n)
    {"rewind": [name, path, offset]}, {"settled": name},
    {"resume": …} after a frame it refused, each + tag ──▶  sender.rewind(...), resume(...)

- **Who listens: home**, one listener per execution, bound to the address Ray itself uses
  for home's node (``ray.util.get_node_ip_address()``) on a port the system picks; nothing
  new listens on the rented flight. The flight pushes each chunk as soon as it is cut:
  home never asks, and home's two threads (one reads frames, one hashes and writes them)
  are the driver's only part in it, so its other work (polls, rows, the ledger) never
  holds the stream up. The listener lives from the execution's start to its end and is
  closed on every way out (:meth:`HomeEnd.close`, and the thread's own ``finally``).
- **Admitted only with the secret.** A fresh secret (``secrets.token_bytes(32)``) per
  execution reaches the flight inside ``RunHost.start``'s arguments: Ray's calls carry
  the cluster's token, so only a holder of the token learns it. Each side proves it
  knows the secret with an HMAC-SHA256 over both sides' fresh nonces and its role,
  compared with :func:`hmac.compare_digest`: a recorded exchange proves nothing in
  another, and a peer that cannot prove it is dropped before a byte of its is read as a
  frame.
- **A connection proving itself holds nobody up.** Home's side of the handshake never
  blocks its reading thread: every connection being accepted is a non-blocking socket in
  the same selector as the stream, with a deadline of its own (:data:`HANDSHAKE_S`); at
  most :data:`PENDING` are held at once (one more drops the oldest). A thousand idle or
  garbage connections cost the established stream an ``accept``, 40 bytes sent and one
  HMAC each, never a wait.
- **Every frame authenticated.** Once both proofs are in, each side derives two 16-byte
  keys of this connection from the execution's secret and both nonces (:func:`_keys`:
  HKDF-Expand of RFC 5869 with HMAC-SHA256, L = 16; the secret is 32 random bytes
  already, so HKDF's extract step is not needed, RFC 5869 §3.3): one for the flight's
  frames, one for home's messages. The key is therefore derived from the cluster's token
  only in this sense: the secret it comes from reaches the flight under the token's
  protection, and a party that can forge a frame could already make Ray's calls. A frame
  carries a sequence number (1, 2, … on each connection) and ends in a 16-byte tag:
  AES-128-GCM under the frame key of no plaintext, with the frame's header, name, path
  and data as associated data (GMAC, NIST SP 800-38D), its 12-byte nonce the sequence
  number (:func:`_nonce`). The nonce holds no direction: each key serves one direction
  only, and each number is used at most once under a key (the flight's frames count from
  1, home's messages from 0, both up, and a number past 2**64 - 1 is never wrapped: the
  connection is dropped and made again, under fresh keys); a nonce used twice under one
  key would let GCM's tags be forged. Home refuses a frame whose tag is wrong
  (``InvalidTag``), or whose sequence number is not above the last one it took (replayed
  or reordered): it writes nothing of it, counts it (:attr:`HomeEnd.refused_frames`) and
  tells the flight what it has (``resume``, as after a reconnect), so that the flight
  sends again from there. Each message of home ends in the same tag of its bytes under
  the message key, its number on the connection (0, 1, …) the nonce; a message that fails
  drops the connection (it is made again). Like Ray's own traffic (docs/distributed.md,
  "Set-up"), the bytes are not encrypted: run it on a private network.
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
3 ping), name length, path length, sequence number, offset, data length,
``resent_bytes``, ``waited_s``, the CRC-32 of the data; then the name, the path, the data
and the frame's tag (:data:`MAC_BYTES`). Home's messages: a 4-byte length, a JSON object
of at most :data:`CONTROL_BYTES`, and the message's tag.

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
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import (AEADDecryptionContext, AEADEncryptionContext,
                                                    Cipher, algorithms, modes)

from flightplan.errors import ChannelError, TransferError
from flightplan.run.executors.stream import (CHUNK_BYTES, CheckpointReceiver,
                                             CheckpointSender, Chunk, Outcome, Rewind)
from flightplan.trial.checkpoint_io import MANIFEST

__all__ = ["MAGIC", "HEADER", "MAC_BYTES", "NAME_BYTES", "PATH_BYTES", "CONTROL_BYTES",
           "CONNECT_S", "HANDSHAKE_S", "IDLE_S", "PING_S", "PENDING", "RECONNECTS", "Offer",
           "ArrivedCheckpoint", "HomeEnd", "FlightEnd"]

MAGIC = b"FPCKPT04"
"""The first bytes home sends: the protocol and its version (04: frames and messages
authenticated with AES-128-GCM tags, frames numbered; 03 had HMAC-SHA256)."""

HEADER = struct.Struct("!BBHQQIQdI")
"""A frame's header: kind, name length, path length, sequence number, offset, data length,
resent bytes, waited seconds, CRC-32 of the data (44 bytes)."""

MAC_BYTES = 16
"""Bytes of the tag (AES-128-GCM, no plaintext) that ends every frame and every message of
home."""

_DATA, _MANIFEST, _PING = 1, 2, 3
_NONCE = 32
_PROOF = 32
_KEY = 16
_LENGTH = struct.Struct("!I")
_NUMBER = struct.Struct("!4xQ")
"""A GCM nonce (12 bytes) of a frame's or a message's number: 4 zero bytes, then the number."""

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
"""Seconds either side waits for the other's part of the handshake (at home: from the
connection's accept to its proof, for each connection on its own)."""

IDLE_S = 30.0
"""Seconds of silence after which either side drops a connection (a frame or a message
that stops half-way, a peer gone without a word)."""

PING_S = 5.0
"""Seconds between pings from a flight with nothing to send (well inside :data:`IDLE_S`)."""

PENDING = 128
"""Connections home holds in the handshake at once; one more drops the oldest of them (a
flood of idle connections cannot keep a flight's own out for longer than it keeps the
flood up, and costs home 128 sockets at most)."""

RECONNECTS = 2
"""Tries to make a dropped connection again before the flight falls back to Ray's polls."""

_WAIT_S = 0.1
"""How often a flight with nothing to send looks for a new checkpoint (seconds; Ray's
polls come every 0.2 s)."""

_SELECT_S = 0.2
"""The longest home's reading thread waits in ``select`` before it looks at deadlines and
at :meth:`HomeEnd.close` (seconds)."""

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


@dataclass(frozen=True)
class _Keys:
    """The two AES-128 keys of one connection (16 bytes each, never printed): ``frames``
    tags the flight's frames, ``messages`` home's messages; neither ever tags the other
    direction's."""

    frames: bytes = field(repr=False)
    messages: bytes = field(repr=False)


def _proof(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    """HMAC-SHA256 under ``secret`` of the protocol, the prover's ``role`` and the two
    nonces, the verifier's first (RFC 2104)."""
    return hmac.new(secret, MAGIC + role + first + second, hashlib.sha256).digest()


def _keys(secret: bytes, home: bytes, flight: bytes) -> _Keys:
    """The keys of the connection whose nonces were ``home`` and ``flight``: for each
    purpose, HKDF-Expand (RFC 5869 §2.3, L = 16: the first 16 bytes of
    HMAC-SHA256(secret, info | 0x01)) with info = the protocol, the purpose and both
    nonces. Fresh nonces make fresh keys: a frame or a message of one connection fails on
    every other."""
    def expand(purpose: bytes) -> bytes:
        return hmac.new(secret, MAGIC + purpose + home + flight + b"\x01",
                        hashlib.sha256).digest()[:_KEY]
    return _Keys(frames=expand(b"key of the flight's frames"),
                 messages=expand(b"key of home's messages"))


def _nonce(number: int) -> bytes:
    """The 12-byte GCM nonce of frame or message ``number`` (:data:`_NUMBER`). Callers keep
    the invariant GCM needs (module docstring): each key tags one direction only, and each
    number at most once under it.

    Raises:
        ChannelError: ``number`` is past 2**64 - 1 (never wrapped: the connection is made
            again, under fresh keys).
    """
    if not 0 <= number < 1 << 64:
        raise ChannelError(f"frame or message number {number} is past the nonces of this "
                           f"connection's keys (it is made again)")
    return _NUMBER.pack(number)


def _tagger(key: bytes, number: int) -> AEADEncryptionContext:
    """A GMAC of ``number``'s frame or message under ``key``: AES-128-GCM with no
    plaintext, fed the bytes as associated data piece by piece
    (``authenticate_additional_data``, which takes any contiguous buffer without a copy),
    the 16-byte tag read after ``finalize()``.

    Raises:
        ChannelError: ``number`` past the nonces (:func:`_nonce`).
    """
    return Cipher(algorithms.AES(key), modes.GCM(_nonce(number))).encryptor()


def _checker(key: bytes, number: int) -> AEADDecryptionContext:
    """The other side of :func:`_tagger`: fed the same bytes, ``finalize_with_tag(tag)``
    raises ``cryptography.exceptions.InvalidTag`` unless ``tag`` is theirs.

    Raises:
        ChannelError: ``number`` past the nonces (:func:`_nonce`).
    """
    return Cipher(algorithms.AES(key), modes.GCM(_nonce(number))).decryptor()


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


def _prove(sock: socket.socket, secret: bytes) -> _Keys:
    """The flight's half of the handshake (module docstring); the connection's keys.

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
    return _keys(secret, home, ours)


def _send_message(sock: socket.socket, message: dict[str, Any], key: bytes,
                  number: int) -> None:
    """Home's ``number``-th message on this connection (from 0), its tag after it.

    Raises:
        ChannelError: ``number`` past the nonces (:func:`_nonce`). OSError: the socket's.
    """
    body = json.dumps(message, separators=(",", ":")).encode()
    framed = _LENGTH.pack(len(body)) + body
    tag = _tagger(key, number)
    tag.authenticate_additional_data(framed)
    tag.finalize()
    sock.sendall(framed + tag.tag)


def _read_message(sock: socket.socket, key: bytes, number: int) -> dict[str, Any]:
    """Home's ``number``-th message on this connection (from 0).

    Raises:
        ChannelError: too long, its tag not the key's (damaged, forged, replayed or out of
            order), or not a JSON object. OSError: the socket's.
    """
    length = _read(sock, _LENGTH.size)
    (size,) = _LENGTH.unpack(length)
    if size > CONTROL_BYTES:
        raise ChannelError(f"a message of {size} bytes from home (at most {CONTROL_BYTES})")
    body = _read(sock, size)
    check = _checker(key, number)
    check.authenticate_additional_data(length)
    check.authenticate_additional_data(body)
    try:
        check.finalize_with_tag(_read(sock, MAC_BYTES))
    except InvalidTag:
        raise ChannelError(f"message {number} from home failed its authentication "
                           f"(AES-GCM tag)") from None
    try:
        message = json.loads(body)
    except ValueError:
        raise ChannelError("a message from home that is not JSON") from None
    if not isinstance(message, dict):
        raise ChannelError("a message from home that is not a JSON object")
    return message


def _send_frame(sock: socket.socket, key: bytes, seq: int, chunk: Chunk | None) -> None:
    """Frame ``seq`` of the connection: ``chunk`` (None: a ping). The header, name and
    path in one send, the data from its buffer in the next (tagged where it lies, not
    copied), then the tag of them all.

    Raises:
        ChannelError: ``seq`` past the nonces (:func:`_nonce`; nothing sent). OSError:
            the socket's.
    """
    tag = _tagger(key, seq)
    if chunk is None:
        head = HEADER.pack(_PING, 0, 0, seq, 0, 0, 0, 0.0, 0)
        tag.authenticate_additional_data(head)
        tag.finalize()
        sock.sendall(head + tag.tag)
        return
    name, path = chunk.name.encode(), chunk.path.encode()
    kind = _MANIFEST if chunk.path == MANIFEST else _DATA
    head = HEADER.pack(kind, len(name), len(path), seq, chunk.offset, chunk.size,
                       chunk.resent_bytes, chunk.waited_s, chunk.crc32) + name + path
    tag.authenticate_additional_data(head)
    tag.authenticate_additional_data(chunk.data)
    tag.finalize()
    sock.sendall(head)
    sock.sendall(chunk.data)
    sock.sendall(tag.tag)


@dataclass
class _Peer:
    """An admitted connection: its keys, the number of messages sent on it and the lock
    those sends take (two threads send on it), and the sequence number of the last frame
    taken from it."""

    sock: socket.socket
    address: str
    keys: _Keys
    last_seq: int = 0
    sent: int = 0
    sending: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: dict[str, Any]) -> None:
        """Send ``message`` under the next number. Its numbers spent (2**64 of them, never
        wrapped): the connection is shut, and the flight makes it again under fresh keys.

        Raises:
            OSError: the socket's.
        """
        with self.sending:
            try:
                _send_message(self.sock, message, self.keys.messages, self.sent)
            except ChannelError:
                self.sock.shutdown(socket.SHUT_RDWR)
                return
            self.sent += 1

    def close(self) -> None:
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@dataclass
class _Pending:
    """A connection in the handshake at home: a non-blocking socket that was sent
    :data:`MAGIC` and ``nonce``, and the flight's nonce and proof as far as they came
    (``got``), due by ``deadline`` (``time.monotonic``)."""

    sock: socket.socket
    address: str
    nonce: bytes
    deadline: float
    got: bytearray = field(default_factory=bytearray)


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
    :attr:`offer`, takes only frames that carry that connection's tag, and writes every
    chunk it sends through ``receiver``, on two threads of its own.

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
        refused: why peers were dropped (``"ADDRESS: reason"``, the first
            :data:`_REFUSALS`).
        refused_frames: frames of admitted peers that were refused (not written, asked for
            again), by reason: ``"its MAC is wrong"`` or ``"replayed or out of order"``.

    Raises:
        OSError: ``host`` cannot be listened on.
    """

    def __init__(self, receiver: CheckpointReceiver, lock: threading.Lock, *, host: str,
                 chunk_bytes: int = CHUNK_BYTES, handshake_s: float = HANDSHAKE_S,
                 idle_s: float = IDLE_S) -> None:
        self.receiver = receiver
        self.refused: list[str] = []
        self.refused_frames: Counter[str] = Counter()
        self._lock = lock
        self._chunk_bytes = chunk_bytes
        self._handshake_s, self._idle_s = handshake_s, idle_s
        self._secret = secrets.token_bytes(32)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family, backlog=PENDING)
        try:
            self._listener.setblocking(False)
            self.offer = Offer(host, self._listener.getsockname()[1], self._secret,
                               chunk_bytes)
            self._closing = threading.Event()
            self._peer: _Peer | None = None
            self._pending: dict[socket.socket, _Pending] = {}    # oldest first
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
        """Stop listening and drop the connection and those still in the handshake
        (again: nothing); returns once the chunk being written is written."""
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
        the secret replaces the one before (a flight that lost its connection). Nothing
        here waits on a connection still in the handshake."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        heard = time.monotonic()
        try:
            while not self._closing.is_set():
                for key, _ in selector.select(timeout=self._select_s()):
                    if key.fileobj is self._listener:
                        self._accept(selector)
                    elif isinstance(key.data, _Pending):
                        if self._pending.get(key.data.sock) is not key.data:
                            continue                # dropped since the select: gone
                        peer = self._proving(selector, key.data)
                        if peer is not None:
                            self._replace(selector, peer)
                            heard = time.monotonic()
                    elif isinstance(key.data, _Peer) and key.data is self._peer \
                            and self._take_frame(selector, key.data):
                        heard = time.monotonic()
                self._expire(selector)
                if self._peer is not None and time.monotonic() - heard > self._idle_s:
                    self._refuse(self._peer.address, f"silent for {self._idle_s:g} s")
                    self._drop_peer(selector)
        except BaseException as exc:    # a bug or the disk: never a thread that dies mute
            self._failure = self._failure or exc
        finally:
            selector.close()
            self._listener.close()
            for pending in self._pending.values():
                pending.sock.close()
            if self._peer is not None:
                self._peer.close()

    def _select_s(self) -> float:
        """How long to wait for the next event: :data:`_SELECT_S`, or less where a
        handshake's deadline comes first."""
        now = time.monotonic()
        return max(0.0, min([_SELECT_S] + [p.deadline - now for p in self._pending.values()]))

    def _accept(self, selector: selectors.BaseSelector) -> None:
        """Accept every connection waiting, send each :data:`MAGIC` and a nonce, and hold
        it in the handshake (dropping the oldest held beyond :data:`PENDING`)."""
        while True:
            try:
                sock, where = self._listener.accept()
            except OSError:                # none left (or none to be had: the next select)
                return
            address = f"{where[0]}:{where[1]}"
            nonce = secrets.token_bytes(_NONCE)
            try:
                sock.setblocking(False)
                hello = MAGIC + nonce
                if sock.send(hello) != len(hello):     # an empty socket buffer takes 40 B
                    raise ChannelError("it took only part of home's greeting")
            except (OSError, ChannelError) as exc:
                self._refuse(address, str(exc) or type(exc).__name__)
                sock.close()
                continue
            if len(self._pending) >= PENDING:
                self._drop_pending(selector, next(iter(self._pending.values())),
                                   f"more than {PENDING} connections were proving the "
                                   f"secret at once: the oldest went")
            pending = _Pending(sock, address, nonce, time.monotonic() + self._handshake_s)
            self._pending[sock] = pending
            selector.register(sock, selectors.EVENT_READ, pending)

    def _proving(self, selector: selectors.BaseSelector, pending: _Pending) -> _Peer | None:
        """Read what came of a handshake; the peer once its proof is in and right (home's
        own proof sent), else None (still due, or dropped: noted in :attr:`refused`)."""
        try:
            got = pending.sock.recv(_NONCE + _PROOF - len(pending.got))
        except BlockingIOError:
            return None
        except OSError as exc:
            self._drop_pending(selector, pending, str(exc) or type(exc).__name__)
            return None
        if not got:
            self._drop_pending(selector, pending, "it closed the connection before it "
                                                  "proved the secret")
            return None
        pending.got += got
        if len(pending.got) < _NONCE + _PROOF:
            return None
        theirs, proof = bytes(pending.got[:_NONCE]), bytes(pending.got[_NONCE:])
        if not hmac.compare_digest(proof, _proof(self._secret, b"flight", pending.nonce,
                                                 theirs)):
            self._drop_pending(selector, pending, "its proof of the secret is wrong")
            return None
        selector.unregister(pending.sock)
        del self._pending[pending.sock]
        sock = pending.sock
        try:
            sock.settimeout(self._handshake_s)
            sock.sendall(_proof(self._secret, b"home", theirs, pending.nonce))
            sock.settimeout(self._idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            self._refuse(pending.address, str(exc) or type(exc).__name__)
            sock.close()
            return None
        return _Peer(sock, pending.address, _keys(self._secret, pending.nonce, theirs))

    def _expire(self, selector: selectors.BaseSelector) -> None:
        """Drop the connections whose handshake is past its deadline."""
        now = time.monotonic()
        for pending in [p for p in self._pending.values() if p.deadline <= now]:
            self._drop_pending(selector, pending, f"no proof of the secret within "
                                                  f"{self._handshake_s:g} s")

    def _drop_pending(self, selector: selectors.BaseSelector, pending: _Pending,
                      why: str) -> None:
        selector.unregister(pending.sock)
        del self._pending[pending.sock]
        self._refuse(pending.address, why)
        pending.sock.close()

    def _replace(self, selector: selectors.BaseSelector, peer: _Peer) -> None:
        """Make ``peer`` the connection read from (the one before it goes) and tell it
        where to go on from."""
        if self._peer is not None:
            self._drop_peer(selector)
        self._peer = peer
        selector.register(peer.sock, selectors.EVENT_READ, peer)
        self._resume(peer)

    def _drop_peer(self, selector: selectors.BaseSelector) -> None:
        assert self._peer is not None
        selector.unregister(self._peer.sock)
        self._peer.close()
        self._peer = None

    def _take_frame(self, selector: selectors.BaseSelector, peer: _Peer) -> bool:
        """Read one frame of the admitted peer; whether it was heard from (False: it hung
        up or was dropped, and is gone)."""
        try:
            if self._frame(peer):
                return True
        except (OSError, ChannelError) as exc:
            if not self._closing.is_set():
                self._refuse(peer.address, str(exc))
        self._drop_peer(selector)                   # hung up or dropped
        return False

    def _resume(self, peer: _Peer) -> None:
        """Tell the peer what home has of the checkpoint it receives, once every frame
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
        """Read one frame and hand it to the writing thread (a ping: nothing; a frame that
        fails its tag or its sequence number: refused, and the peer told where to go on
        from); False when the peer hung up between frames.

        Raises:
            ChannelError: a header that is not a frame's, the peer closed in a frame, or
                an authentic frame whose name or path is not UTF-8.
            OSError: the socket's (its timeout included).
        """
        head = memoryview(bytearray(HEADER.size))
        first = peer.sock.recv_into(head)
        if first == 0:
            return False
        _read_into(peer.sock, head[first:])
        kind, name_len, path_len, seq, offset, size, resent, waited, crc32 = \
            HEADER.unpack(head)
        self._check(kind, name_len, path_len, offset, size, resent, waited)
        asked_at = time.time()
        check = _checker(peer.keys.frames, seq)
        check.authenticate_additional_data(head)
        if kind == _PING:
            self._authentic(peer, check, seq)
            return True
        words = _read(peer.sock, name_len + path_len)
        check.authenticate_additional_data(words)
        buffer = self._buffer()
        view = memoryview(buffer)[:size]
        try:
            _read_into(peer.sock, view)
            check.authenticate_additional_data(view)
            if not self._authentic(peer, check, seq):
                self._free.put(buffer)
                return True
            name, path = words[:name_len].decode(), words[name_len:].decode()
        except UnicodeDecodeError:
            self._free.put(buffer)
            raise ChannelError("a frame whose name or path is not UTF-8") from None
        except BaseException:
            self._free.put(buffer)
            raise
        chunk = Chunk(name, path, offset, view, crc32, waited, resent)
        self._arrivals.put(_Arrival(chunk, buffer, peer, asked_at, time.time()))
        return True

    def _check(self, kind: int, name_len: int, path_len: int, offset: int, size: int,
               resent: int, waited: float) -> None:
        """A frame header's bounds (module docstring).

        Raises:
            ChannelError: a header that is not a frame's.
        """
        if kind == _PING and name_len == path_len == size == 0:
            return
        if kind not in (_DATA, _MANIFEST) or not 0 < name_len <= NAME_BYTES \
                or not 0 < path_len <= PATH_BYTES or not 0 < size <= self._chunk_bytes \
                or offset >= 1 << 62 or resent >= 1 << 62 \
                or not (math.isfinite(waited) and waited >= 0.0) \
                or (kind == _MANIFEST and offset != 0):
            raise ChannelError(f"a frame header that is not a chunk's (kind {kind}, name "
                               f"{name_len} B, path {path_len} B, data {size} B of at most "
                               f"{self._chunk_bytes})")

    def _authentic(self, peer: _Peer, check: AEADDecryptionContext, seq: int) -> bool:
        """Read the frame's tag and check it with ``check`` (:func:`_checker` of the frame
        key and ``seq``, fed the frame's bytes) and ``seq`` against the last frame taken.
        False: the frame is refused, counted in :attr:`refused_frames`, and the peer is
        told where to go on from.

        Raises:
            ChannelError: the peer closed before the tag. OSError: the socket's.
        """
        try:
            check.finalize_with_tag(_read(peer.sock, MAC_BYTES))
            authentic = True
        except InvalidTag:
            authentic = False
        if not authentic:
            why = "its MAC is wrong"                # the GCM tag: a MAC (GMAC)
        elif seq <= peer.last_seq:
            why = "replayed or out of order"
        else:
            peer.last_seq = seq
            return True
        self.refused_frames[why] += 1
        self._resume(peer)
        return False

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


@dataclass
class _Connection:
    """The flight's connection once the handshake is done: its socket, its keys and the
    number of home's messages read on it so far."""

    sock: socket.socket
    keys: _Keys
    heard: int = 0

    def message(self) -> dict[str, Any]:
        """Home's next message.

        Raises:
            ChannelError: not a message of home's (:func:`_read_message`). OSError: the
                socket's.
        """
        message = _read_message(self.sock, self.keys.messages, self.heard)
        self.heard += 1
        return message


class _Outgoing:
    """The flight's sending thread for one connection: sends the cuts handed to it in
    order, as frames numbered from 1, and gives their buffer back (``slots``) once sent;
    after a failed send it only gives buffers back (``error`` says why). A manifest's
    ``waited_s`` grows by the time it waited here behind the chunks before it."""

    def __init__(self, link: _Connection, slots: threading.Semaphore) -> None:
        self.sock, self.key, self.slots = link.sock, link.keys.frames, slots
        self.seq = 0
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
                    for chunk in [None] if item is None else item:
                        if chunk is not None and chunk.path == MANIFEST:
                            chunk = dataclasses.replace(
                                chunk, waited_s=chunk.waited_s + time.monotonic() - cut_at)
                        self.seq += 1
                        _send_frame(self.sock, self.key, self.seq, chunk)
            except (OSError, ChannelError) as exc:       # ChannelError: numbers spent
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
    ``offer``, proves the secret, and sends home what ``sender`` cuts, each frame under the
    connection's tag, on threads of its own (one reads and hashes the next chunk while the
    other tags this one and sends it).

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
            first = self._open()
        except (OSError, ChannelError) as exc:
            self._fail(_why(exc, self.offer, self._connect_s))
            return
        current: _Connection | None = first
        while current is not None and not self._closing.is_set():
            try:
                self._stream(current)
            except (OSError, ChannelError) as exc:
                current.sock.close()
                current = None if self._closing.is_set() else self._reconnect(exc)
        if current is not None:
            current.sock.close()
        self._sock = None

    def _reconnect(self, dropped: BaseException) -> _Connection | None:
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

    def _open(self) -> _Connection:
        """Connect, prove the secret, take home's first message (where to go on from).

        Raises:
            ChannelError, OSError: it could not be made.
        """
        sock = socket.create_connection((self.offer.host, self.offer.port),
                                        timeout=self._connect_s)
        try:
            self._sock = sock
            sock.settimeout(self._handshake_s)
            link = _Connection(sock, _prove(sock, self.offer.secret))
            sock.settimeout(self._idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._apply(link.message())
            return link
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

    def _stream(self, link: _Connection) -> None:
        """Send what the sender cuts, apply home's messages, ping when idle, until
        :meth:`close`.

        Raises:
            OSError, ChannelError: the connection failed.
        """
        outgoing = _Outgoing(link, self._slots)
        sent = time.monotonic()
        try:
            while not self._closing.is_set():
                self._messages(link)
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
                select.select([link.sock], [], [], _WAIT_S)
        finally:
            if outgoing.error is not None or self._closing.is_set():
                with suppress(OSError):
                    link.sock.shutdown(socket.SHUT_RDWR)
            outgoing.stop()

    def _messages(self, link: _Connection) -> None:
        """Apply every message from home that has come (without waiting for one)."""
        while select.select([link.sock], [], [], 0)[0]:
            self._apply(link.message())

    def _apply(self, message: dict[str, Any]) -> None:
        """One message from home: a rewind, a manifest settled, or where to go on from
        (on a new connection, or after home refused a frame).

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
