"""Checkpoints home over the direct connection (run/executors/channel.py): home's and the
flight's ends on 127.0.0.1 in this process, real sockets between them (through a relay
that damages or cuts what the flight sends, where a case needs it); the flight's host
falling back to Ray's polls; then both paths through a real loopback Ray cluster."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import zlib
import random
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from flightplan.errors import ChannelError
from flightplan.run.executors.channel import (HEADER, MAC_BYTES, MAGIC, PENDING, FlightEnd,
                                              HomeEnd, ArrivedCheckpoint, Offer, _keys,
                                              _read_message, _send_frame, _send_message)
from flightplan.run.executors.stream import CheckpointReceiver, CheckpointSender, Chunk
from checkpoint_files import home_files, write_checkpoint   # tests/fixtures (conftest)

CHUNK = 64 << 10
WAIT_S = 60
"""Longer than any case takes on a loaded machine: a safety net, not a speed check."""

HANDSHAKE = 64
"""Bytes the flight sends in the handshake (its nonce and its proof)."""


class Recorded(CheckpointSender):
    """The flight's sender, noting every data chunk it cuts: ``(path, offset, size)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cut: list[tuple[str, int, int]] = []

    def next(self, *, ended: bool = False) -> list[Chunk]:
        chunks = super().next(ended=ended)
        self.cut += [(c.path, c.offset, c.size) for c in chunks if c.path != "manifest.json"]
        return chunks


Edit = tuple[int, int, Callable[[bytes], bytes]]
"""Bytes ``[start, end)`` of a stream and what to put in their place."""


class Relay:
    """A TCP relay on 127.0.0.1 to ``target``. On its first connection only, it flips byte
    ``flip`` of what the flight sends, or forwards ``cut`` bytes of it and then closes both
    sides, or holds bytes ``[start, end)`` back and sends ``edit(those bytes)`` in their
    place (of what home sends instead when ``back``), or sends the first data frame of
    file ``data_edit[0]`` as ``data_edit[1](that frame)``, found by the frames' headers
    (pings may come first); later connections pass unchanged. ``sent`` records what the
    flight sent on the first connection."""

    def __init__(self, target: tuple[str, int], *, flip: int | None = None,
                 cut: int | None = None, edit: Edit | None = None, back: bool = False,
                 data_edit: tuple[str, Callable[[bytes], bytes]] | None = None) -> None:
        self.target, self.flip, self.cut, self.edit, self.back = target, flip, cut, edit, back
        self.data_edit = data_edit
        self.sent = bytearray()
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            first = self.connections == 0
            self.connections += 1
            for args in ((client, upstream, first and not self.back, True),
                         (upstream, client, first and self.back, False)):
                thread = threading.Thread(target=self._pipe, args=args, daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pipe(self, source: socket.socket, sink: socket.socket, damage: bool,
              flight: bool) -> None:
        passed = 0
        held = bytearray()
        try:
            while data := bytearray(source.recv(1 << 16)):
                at, passed = passed, passed + len(data)
                if damage:
                    if self.flip is not None and at <= self.flip < passed:
                        data[self.flip - at] ^= 0xFF
                    if self.cut is not None and passed >= self.cut:
                        data = data[:self.cut - at]
                        self.sent += data
                        sink.sendall(data)
                        break
                    if self.edit is not None and passed > self.edit[0]:
                        data, held = self._edited(data, at, held)
                    if self.data_edit is not None and passed > HANDSHAKE:
                        data, held = self._data_edited(data, at, held)
                if damage and flight:
                    self.sent += data
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _edited(self, data: bytearray, at: int, held: bytearray
                ) -> tuple[bytearray, bytearray]:
        """``data`` (from byte ``at`` of the stream) as it goes on: what precedes the
        edit's window, then the edited window once all of it came; and what stays held."""
        assert self.edit is not None
        start, end, edit = self.edit
        before = max(0, start - at)
        out, held = data[:before], held + data[before:]
        if len(held) >= end - start:
            out += edit(bytes(held[:end - start])) + held[end - start:]
            held = bytearray()
            self.edit = None                                   # once
        return out, held

    def _data_edited(self, data: bytearray, at: int, held: bytearray
                     ) -> tuple[bytearray, bytearray]:
        """``data`` (from byte ``at`` of the stream) as it goes on: whole frames, the first
        data frame of ``data_edit``'s file edited; and the part of a frame still held."""
        assert self.data_edit is not None
        path, edit = self.data_edit
        before = max(0, HANDSHAKE - at)
        out, held = data[:before], held + data[before:]
        while len(held) >= HEADER.size:
            fields = HEADER.unpack_from(held)
            kind, name_len, path_len, size = fields[0], fields[1], fields[2], fields[5]
            length = HEADER.size + name_len + path_len + size + MAC_BYTES
            if len(held) < length:
                break
            frame, held = bytes(held[:length]), held[length:]
            named = frame[HEADER.size + name_len:HEADER.size + name_len + path_len]
            if kind == 1 and named == path.encode():
                out += edit(frame) + held
                self.data_edit = None                              # once
                return out, bytearray()
            out += frame
        return out, held

    def close(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            sock.close()


def _frame_bytes(name: str, path: str, size: int) -> int:
    return HEADER.size + len(name.encode()) + len(path.encode()) + size + MAC_BYTES


def _dropped(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` without a word (a reset, when it left our bytes
    unread)."""
    try:
        return sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


def _arrived(home: HomeEnd, count: int = 1) -> list[ArrivedCheckpoint]:
    found: list[ArrivedCheckpoint] = []
    deadline = time.monotonic() + WAIT_S
    while len(found) < count:
        assert time.monotonic() < deadline, f"nothing landed in {WAIT_S} s: {home.refused}"
        found += home.arrived()
        time.sleep(0.01)
    return found


def _settled(link: FlightEnd) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        with link.lock:
            if link.settled():
                return
        assert time.monotonic() < deadline, "the flight never heard that all was home"
        time.sleep(0.01)


def _listeners() -> set[str]:
    """``IP:PORT`` of every TCP socket this process listens on (psutil, as ``ss -ltnp``)."""
    return {f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.Process().net_connections("inet")
            if c.status == psutil.CONN_LISTEN}


def _listening(port: int) -> list[str]:
    """The addresses this process listens on at ``port``."""
    return sorted(a for a in _listeners() if a.endswith(f":{port}"))


def _ends(tmp_path: Path, *, via: Relay | None = None, secret: bytes | None = None,
          on_failure: Any = None) -> tuple[HomeEnd, FlightEnd, Recorded]:
    home = HomeEnd(CheckpointReceiver(tmp_path / "home", keep_last=2), threading.Lock(),
                   host="127.0.0.1", chunk_bytes=CHUNK)
    offer = home.offer
    if via is not None:
        offer = dataclasses.replace(offer, port=via.port)
    if secret is not None:
        offer = dataclasses.replace(offer, secret=secret)
    sender = Recorded(tmp_path / "flight", chunk_bytes=CHUNK, buffers=2)
    return home, FlightEnd(sender, offer, threading.Lock(), on_failure=on_failure), sender


def test_a_checkpoint_comes_home_over_the_connection_bit_for_bit(tmp_path: Path) -> None:
    files = {"model.safetensors": os.urandom(40 * CHUNK + 17), "optimizer.pt": os.urandom(999),
             "extra/state.json": b"{}", "empty.bin": b""}
    write_checkpoint(tmp_path / "flight" / "step-000008", files)
    home, link, sender = _ends(tmp_path)
    try:
        # home listens on the address it was given and on no other, at a port of its own
        assert _listening(home.offer.port) == [f"127.0.0.1:{home.offer.port}"]
        assert "secret" not in repr(home.offer) and len(home.offer.secret) == 32
        [landed] = _arrived(home)
        _settled(link)
    finally:
        link.close()
        home.close()
    done = landed.outcome.committed
    assert done is not None and link.failed is None and home.refused == []
    assert (done.name, done.bytes, done.resent_bytes) == ("step-000008",
                                                          40 * CHUNK + 17 + 999 + 2, 0)
    assert home_files(tmp_path / "home" / "step-000008") == files
    assert (tmp_path / "home" / "step-000008" / "manifest.json").read_bytes() == \
        (tmp_path / "flight" / "step-000008" / "manifest.json").read_bytes()
    assert landed.asked_at <= landed.fetched_at <= landed.done_at
    assert done.first_asked_at <= landed.asked_at
    # every byte went once, in chunks no larger than the bound; each side's buffers are two
    assert sum(size for _, _, size in sender.cut) == done.bytes
    assert sender.peak_chunk_bytes <= CHUNK and home.receiver.peak_chunk_bytes <= CHUNK
    # the listener went with close()
    assert not home.listening and _listening(home.offer.port) == []


def test_a_frames_and_a_messages_tag_are_aes_128_gcm_of_their_bytes_under_the_hkdf_keys(
        ) -> None:
    """The tags against an independent construction: the keys are the first 16 bytes of
    HKDF-Expand's block (RFC 5869: HMAC-SHA256(secret, info | 0x01)), a frame's tag is
    ``AESGCM(key).encrypt(nonce, b"", frame)`` with the 12-byte nonce 4 zero bytes and the
    sequence number, and a wrong tag, or a number under another key, is refused."""
    secret, home_nonce, flight_nonce = os.urandom(32), os.urandom(32), os.urandom(32)
    keys = _keys(secret, home_nonce, flight_nonce)

    def hkdf(purpose: bytes) -> bytes:
        info = MAGIC + purpose + home_nonce + flight_nonce
        return hmac.new(secret, info + b"\x01", hashlib.sha256).digest()[:16]
    assert keys.frames == hkdf(b"key of the flight's frames") != keys.messages
    assert keys.messages == hkdf(b"key of home's messages")
    data = os.urandom(3000)
    chunk = Chunk("step-000004", "model.bin", 6000, memoryview(data), zlib.crc32(data))
    near_the_end = (1 << 64) - 1
    flight, home = socket.socketpair()
    with flight, home:
        _send_frame(flight, keys.frames, 7, chunk)
        _send_frame(flight, keys.frames, near_the_end, None)
        frame = home.recv(_frame_bytes("step-000004", "model.bin", 3000), socket.MSG_WAITALL)
        ping = home.recv(HEADER.size + MAC_BYTES, socket.MSG_WAITALL)
        # the last number is used once; the one after it is refused before a byte is sent
        with pytest.raises(ChannelError, match="past the nonces"):
            _send_frame(flight, keys.frames, 1 << 64, None)
        _send_message(home, {"settled": "step-000004"}, keys.messages, 2)
        _send_message(home, {"settled": "step-000004"}, keys.messages, 3)
        assert _read_message(flight, keys.messages, 2) == {"settled": "step-000004"}
        with pytest.raises(ChannelError, match="failed its authentication"):
            _read_message(flight, keys.messages, 4)                 # sent as number 3
    body, tag = frame[:-MAC_BYTES], frame[-MAC_BYTES:]
    assert body == HEADER.pack(1, 11, 9, 7, 6000, 3000, 0, 0.0, zlib.crc32(data)) \
        + b"step-000004model.bin" + data
    assert tag == AESGCM(keys.frames).encrypt(bytes(4) + (7).to_bytes(8, "big"), b"", body)
    assert ping[-MAC_BYTES:] == AESGCM(keys.frames).encrypt(
        b"\0" * 4 + b"\xff" * 8, b"", ping[:-MAC_BYTES])
    # the same bytes under another number, or under the other direction's key, fail
    for key, seq in ((keys.frames, 8), (keys.messages, 7)):
        with pytest.raises(InvalidTag):
            AESGCM(key).decrypt(bytes(4) + seq.to_bytes(8, "big"), tag, body)


def test_a_peer_that_does_not_prove_the_secret_is_dropped_and_nothing_is_written(
        tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "flight" / "step-000003", {"model.bin": os.urandom(5 * CHUNK)})
    failures: list[str] = []
    home, link, _ = _ends(tmp_path, secret=os.urandom(32), on_failure=failures.append)
    address = ("127.0.0.1", home.offer.port)
    try:
        # a stranger: garbage for a proof, then a chunk's frame as if it had passed
        with socket.create_connection(address, timeout=5) as stranger:
            hello = stranger.recv(len(MAGIC) + 32)
            assert hello.startswith(MAGIC)
            stranger.sendall(os.urandom(HANDSHAKE) + HEADER.pack(
                1, 11, 9, 1, 0, 4, 0, 0.0, zlib.crc32(b"data")) + b"step-000009model.bin"
                + b"data" + os.urandom(MAC_BYTES))
            assert _dropped(stranger)                          # no answer
        deadline = time.monotonic() + WAIT_S
        while link.failed is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert home.arrived() == []
    finally:
        link.close()
        home.close()
    # the flight with another secret fell back, once, saying why
    assert failures == [link.failed] == [
        f"home at 127.0.0.1:{home.offer.port}: home refused this flight's proof of the "
        f"secret"]
    assert [r.split(": ", 1)[1] for r in home.refused] == ["its proof of the secret is wrong"] * 2
    assert not (tmp_path / "home").exists()


def test_a_recorded_exchange_cannot_be_replayed(tmp_path: Path) -> None:
    files = {"model.bin": os.urandom(3 * CHUNK)}
    write_checkpoint(tmp_path / "flight" / "step-000002", files)
    home = HomeEnd(CheckpointReceiver(tmp_path / "home"), threading.Lock(), host="127.0.0.1",
                   chunk_bytes=CHUNK)
    relay = Relay(("127.0.0.1", home.offer.port))
    link = FlightEnd(CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK, buffers=2),
                     dataclasses.replace(home.offer, port=relay.port), threading.Lock())
    try:
        [landed] = _arrived(home)
        _settled(link)
        link.close()
        assert landed.outcome.committed is not None
        (tmp_path / "home" / "step-000002" / "manifest.json").unlink()
        (tmp_path / "home" / "step-000002").rename(tmp_path / "elsewhere")
        # the whole honest exchange, sent again to home on a new connection
        with socket.create_connection(("127.0.0.1", home.offer.port), timeout=5) as replay:
            replay.recv(len(MAGIC) + 32)
            replay.sendall(bytes(relay.sent))
            assert _dropped(replay)
        time.sleep(0.2)
        assert home.arrived() == []
    finally:
        relay.close()
        link.close()
        home.close()
    assert home.refused[-1].endswith(": its proof of the secret is wrong")
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == []


def _through_relay(tmp_path: Path, **relay: Any
                   ) -> tuple[Any, Recorded, Relay, HomeEnd, FlightEnd]:
    """The checkpoint under ``tmp_path/flight`` sent home through a :class:`Relay` that
    cuts or damages the stream as ``relay`` says; returns (the committed outcome or None,
    the sender, the relay, home, the flight's end), all closed."""
    home = HomeEnd(CheckpointReceiver(tmp_path / "home"), threading.Lock(), host="127.0.0.1",
                   chunk_bytes=CHUNK)
    through = Relay(("127.0.0.1", home.offer.port), **relay)
    sender = Recorded(tmp_path / "flight", chunk_bytes=CHUNK, buffers=2)
    link = FlightEnd(sender, dataclasses.replace(home.offer, port=through.port),
                     threading.Lock())
    try:
        [landed] = _arrived(home)
        _settled(link)
    finally:
        link.close()
        through.close()
        home.close()
    return landed.outcome.committed, sender, through, home, link


def test_a_dropped_connection_resumes_from_homes_offset(tmp_path: Path) -> None:
    data = os.urandom(40 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000006", {"model.bin": data})
    frame = _frame_bytes("step-000006", "model.bin", CHUNK)
    cut = HANDSHAKE + 12 * frame + frame // 2          # in the middle of the 13th chunk
    done, sender, relay, home, link = _through_relay(tmp_path, cut=cut)
    assert done is not None and link.failed is None and relay.connections == 2
    assert (tmp_path / "home" / "step-000006" / "model.bin").read_bytes() == data
    # home had the first twelve chunks: the flight went on from there, not from the start
    offsets = [offset for _, offset, _ in sender.cut]
    assert [offsets.count(i * CHUNK) for i in range(12)] == [1] * 12
    again = sorted({o for o in offsets if offsets.count(o) == 2})
    assert again[0] == 12 * CHUNK and set(offsets) == {i * CHUNK for i in range(40)}
    # and resent_bytes is what went twice
    assert done.resent_bytes == sum(size for _, _, size in sender.cut) - len(data) \
        == len(again) * CHUNK
    assert any("peer closed" in r for r in home.refused)


def test_a_chunk_damaged_on_the_way_is_sent_again_from_there(tmp_path: Path) -> None:
    data = os.urandom(20 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000002", {"model.bin": data})
    frame = _frame_bytes("step-000002", "model.bin", CHUNK)
    flip = HANDSHAKE + 3 * frame + HEADER.size + len("step-000002model.bin") + 100
    done, sender, relay, home, _ = _through_relay(tmp_path, flip=flip)
    assert done is not None and relay.connections == 1 and home.refused == []
    # the frame's MAC caught it before the chunk's CRC-32 was taken: refused, asked again
    assert home.refused_frames == {"its MAC is wrong": 1}
    assert (tmp_path / "home" / "step-000002" / "model.bin").read_bytes() == data
    offsets = [offset for _, offset, _ in sender.cut]
    # from the damaged chunk on, never from the start (it may go three times: when the
    # flight had sent the manifest before home's rewind came, the manifest finds the file
    # short and asks for the same chunk again)
    assert [offsets.count(i * CHUNK) for i in range(3)] == [1, 1, 1]
    assert offsets.count(3 * CHUNK) >= 2
    # the damaged chunk and what followed it on the way went again, counted
    assert done.resent_bytes == sum(size for _, _, size in sender.cut) - len(data) >= CHUNK


def _flip_data(frame: bytes) -> bytes:
    """One bit of a data frame's data flipped and the header's CRC-32 made right for it:
    what an attacker who knows the format, but not the key, can do."""
    edited = bytearray(frame)
    fields = list(HEADER.unpack_from(edited))
    start = HEADER.size + fields[1] + fields[2]
    edited[start + 100] ^= 0x01
    fields[-1] = zlib.crc32(edited[start:start + fields[5]])
    HEADER.pack_into(edited, 0, *fields)
    return bytes(edited)


def _flip_resent(header: bytes) -> bytes:
    """A manifest frame's header with bit 40 of its ``resent_bytes`` flipped (no CRC
    covers the header: before the MAC, nothing caught this)."""
    fields = list(HEADER.unpack(header))
    fields[6] ^= 1 << 40
    return HEADER.pack(*fields)


def test_a_bit_flipped_in_a_chunks_data_with_its_crc_made_right_is_refused_and_sent_again(
        tmp_path: Path) -> None:
    data = os.urandom(20 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000002", {"model.bin": data})
    frame = _frame_bytes("step-000002", "model.bin", CHUNK)
    start = HANDSHAKE + 3 * frame                        # the 4th chunk, whole
    done, sender, relay, home, _ = _through_relay(
        tmp_path, edit=(start, start + frame, _flip_data))
    assert done is not None and relay.connections == 1 and home.refused == []
    assert home.refused_frames == {"its MAC is wrong": 1}
    assert (tmp_path / "home" / "step-000002" / "model.bin").read_bytes() == data
    # sent again from that chunk (home's offset), not from the start: the damage never
    # reached the file, whose sha256 at the manifest would have sent it all again
    offsets = [offset for _, offset, _ in sender.cut]
    assert [offsets.count(i * CHUNK) for i in range(3)] == [1, 1, 1]
    assert offsets.count(3 * CHUNK) >= 2
    assert done.resent_bytes == sum(size for _, _, size in sender.cut) - len(data) >= CHUNK


def test_a_bit_flipped_in_a_frames_header_is_refused_and_the_frame_sent_again(
        tmp_path: Path) -> None:
    data = os.urandom(4 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000002", {"model.bin": data})
    manifest = HANDSHAKE + 4 * _frame_bytes("step-000002", "model.bin", CHUNK)
    done, sender, relay, home, _ = _through_relay(
        tmp_path, edit=(manifest, manifest + HEADER.size, _flip_resent))
    assert done is not None and relay.connections == 1 and home.refused == []
    assert home.refused_frames == {"its MAC is wrong": 1}
    # the manifest came again, with the flight's own count: nothing went twice
    assert done.resent_bytes == 0 and [o for _, o, _ in sender.cut] == [0, CHUNK, 2 * CHUNK,
                                                                          3 * CHUNK]
    assert home_files(tmp_path / "home" / "step-000002") == {"model.bin": data}


@pytest.mark.parametrize("how", ["replayed", "reordered"])
def test_a_replayed_or_reordered_frame_is_refused(tmp_path: Path, how: str) -> None:
    data = os.urandom(10 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000002", {"model.bin": data})
    frame = _frame_bytes("step-000002", "model.bin", CHUNK)
    start = HANDSHAKE + 3 * frame                        # the 4th and 5th chunks

    def edit(two: bytes) -> bytes:                       # each frame intact, MAC and all
        third, fourth = two[:frame], two[frame:]
        return third + third + fourth if how == "replayed" else fourth + third

    done, sender, relay, home, _ = _through_relay(tmp_path, edit=(start, start + 2 * frame,
                                                                  edit))
    assert done is not None and relay.connections == 1 and home.refused == []
    assert home.refused_frames == {"replayed or out of order": 1}
    assert (tmp_path / "home" / "step-000002" / "model.bin").read_bytes() == data
    offsets = [offset for _, offset, _ in sender.cut]
    assert [offsets.count(i * CHUNK) for i in range(3)] == [1, 1, 1]
    assert done.resent_bytes == sum(size for _, _, size in sender.cut) - len(data)


def test_a_message_of_home_damaged_on_the_way_is_not_applied_the_connection_is_made_again(
        tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000002", {"model.bin": data})
    # what home sends: MAGIC and its nonce, its proof, {"resume": null, "have": {}} and
    # its MAC, then {"settled": "step-000002"}: its name, made "step-000003" on the way
    resume = 4 + len(b'{"resume":null,"have":{}}') + MAC_BYTES
    settled = len(MAGIC) + 32 + 32 + resume
    size = 4 + len(b'{"settled":"step-000002"}')

    def edit(message: bytes) -> bytes:
        return message.replace(b"step-000002", b"step-000003")

    done, _, relay, home, link = _through_relay(
        tmp_path, edit=(settled, settled + size, edit), back=True)
    # the flight dropped that connection, made it again and heard of the manifest again
    assert done is not None and link.failed is None and relay.connections == 2
    assert home.refused_frames == {}
    assert home_files(tmp_path / "home" / "step-000002") == {"model.bin": data}


def _drained(sock: socket.socket) -> bytes:
    """All that home sent on ``sock`` until it dropped it (a close or a reset)."""
    got = b""
    try:
        while data := sock.recv(1 << 16):
            got += data
    except ConnectionResetError:
        pass
    return got


def _garbage(address: tuple[str, int], kind: int) -> socket.socket:
    """A stranger's connection: a wrong proof and a chunk's frame as if it had passed
    (0), 4 KiB of noise (1), nothing but a close (2), or half a proof and then silence
    (3)."""
    sock = socket.create_connection(address, timeout=WAIT_S)
    if kind == 0:
        sock.sendall(os.urandom(HANDSHAKE) + HEADER.pack(
            1, 11, 9, 1, 0, 4, 0, 0.0, zlib.crc32(b"data")) + b"step-000009model.bin"
            + b"data" + os.urandom(MAC_BYTES))
    elif kind == 1:
        sock.sendall(os.urandom(4096))
    elif kind == 2:
        sock.shutdown(socket.SHUT_WR)
    else:
        sock.sendall(os.urandom(HANDSHAKE // 2))
    return sock


def test_idle_and_garbage_connections_during_a_transfer_deliver_nothing_and_hold_nothing_up(
        tmp_path: Path) -> None:
    """50 idle and 50 garbage connections opened while the flight's connection is up,
    before its checkpoint is written: it comes home whole while they are still waiting
    (home's deadline for a proof, here 60 s, is the test's own safety net; before, home
    waited on the first of them and nothing moved), and nothing of theirs is written."""
    small, large = {"model.bin": os.urandom(CHUNK)}, {"model.bin": os.urandom(40 * CHUNK + 3),
                                                      "optimizer.pt": os.urandom(999)}
    write_checkpoint(tmp_path / "flight" / "step-000001", small)
    home = HomeEnd(CheckpointReceiver(tmp_path / "home"), threading.Lock(), host="127.0.0.1",
                   chunk_bytes=CHUNK, handshake_s=WAIT_S)
    sender = Recorded(tmp_path / "flight", chunk_bytes=CHUNK, buffers=2)
    link = FlightEnd(sender, home.offer, threading.Lock())
    address = ("127.0.0.1", home.offer.port)
    try:
        [first] = _arrived(home)                         # the flight's connection is up
        idle = [socket.create_connection(address, timeout=WAIT_S) for _ in range(50)]
        garbage = [_garbage(address, i % 4) for i in range(50)]
        write_checkpoint(tmp_path / "flight" / "step-000002", large)
        [second] = _arrived(home)
        _settled(link)
        # the idle ones and those with half a proof are still waiting for their deadline
        waiting = idle + [sock for i, sock in enumerate(garbage) if i % 4 == 3]
        for sock in waiting:
            assert sock.recv(len(MAGIC) + 32, socket.MSG_WAITALL).startswith(MAGIC)
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
            sock.setblocking(True)
    finally:
        link.close()
        home.close()
    done = second.outcome.committed
    assert first.outcome.committed is not None and done is not None
    assert (done.name, done.resent_bytes, link.failed) == ("step-000002", 0, None)
    assert home_files(tmp_path / "home" / "step-000002") == large
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["step-000001",
                                                                    "step-000002"]
    assert home.refused_frames == {}
    # every one of them is dropped (the waiting ones when home closed), having had from
    # home its greeting and nothing more (a reset, where home left bytes of theirs
    # unread, can come before the greeting is read)
    for sock in waiting:
        assert _drained(sock) == b""
    for i, sock in enumerate(garbage):
        if i % 4 != 3:
            got = _drained(sock)
            assert got == b"" or (len(got) == len(MAGIC) + 32 and got.startswith(MAGIC))
    for sock in idle + garbage:
        sock.close()
    reasons = {r.split(": ", 1)[1] for r in home.refused}
    assert len(home.refused) == 16 and reasons <= {
        "its proof of the secret is wrong",
        "it closed the connection before it proved the secret"}


def test_a_connection_that_does_not_prove_the_secret_in_time_or_in_turn_is_dropped(
        tmp_path: Path) -> None:
    address = ("127.0.0.1", 0)
    home = HomeEnd(CheckpointReceiver(tmp_path / "home"), threading.Lock(), host="127.0.0.1",
                   chunk_bytes=CHUNK, handshake_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", home.offer.port), timeout=WAIT_S) as idle:
            address = idle.getsockname()
            got = _drained(idle)                      # home's greeting, then its close
    finally:
        home.close()
    assert len(got) == len(MAGIC) + 32 and got.startswith(MAGIC)
    assert home.refused == [f"127.0.0.1:{address[1]}: no proof of the secret within 0.5 s"]
    # one more than PENDING waiting at once: the oldest goes, the others wait on
    home = HomeEnd(CheckpointReceiver(tmp_path / "home"), threading.Lock(), host="127.0.0.1",
                   chunk_bytes=CHUNK, handshake_s=WAIT_S)
    waiting = [socket.create_connection(("127.0.0.1", home.offer.port), timeout=WAIT_S)
               for _ in range(PENDING + 1)]
    try:
        assert len(_drained(waiting[0])) == len(MAGIC) + 32
        assert home.refused == [f"127.0.0.1:{waiting[0].getsockname()[1]}: more than "
                                f"{PENDING} connections were proving the secret at once: "
                                f"the oldest went"]
        for sock in waiting[1:]:
            assert len(sock.recv(len(MAGIC) + 32, socket.MSG_WAITALL)) == len(MAGIC) + 32
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        home.close()
        for sock in waiting:
            sock.close()


def test_a_frame_that_breaks_the_bounds_drops_the_connection_before_a_byte_is_read(
        tmp_path: Path) -> None:
    data = os.urandom(6 * CHUNK)
    write_checkpoint(tmp_path / "flight" / "step-000004", {"model.bin": data})
    # the first frame's data length (4 bytes at 20 in the header), 65536, made
    # 0xFF010000 on the way: 4 GiB claimed
    done, _, relay, home, _ = _through_relay(tmp_path, flip=HANDSHAKE + 20)
    assert home.refused[0].endswith(
        f"a frame header that is not a chunk's (kind 1, name 11 B, path 9 B, data "
        f"{0xFF << 24 | CHUNK} B of at most {CHUNK})")
    # nothing of it was written: the next connection started home's file at byte 0
    assert relay.connections == 2 and done is not None
    assert (tmp_path / "home" / "step-000004" / "model.bin").read_bytes() == data


def test_a_flight_that_cannot_reach_home_falls_back_once(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]                  # nothing listens there any more
    (tmp_path / "flight").mkdir()
    failures: list[str] = []
    link = FlightEnd(CheckpointSender(tmp_path / "flight", buffers=2),
                     Offer("127.0.0.1", port, os.urandom(32)), threading.Lock(),
                     on_failure=failures.append)
    link._thread.join(WAIT_S)
    link.close()
    assert failures == [link.failed] == [f"home at 127.0.0.1:{port} refused the connection"]


STAND_IN = """
import os, random, sys
from pathlib import Path
sys.path.insert(0, {fixtures!r})
from checkpoint_files import write_checkpoint
trial = Path(sys.argv[1])
rng = random.Random(7)
files = {{"model.safetensors": rng.randbytes({model}), "optimizer.pt": rng.randbytes(1000)}}
write_checkpoint(trial.parent / "checkpoints" / "step-000001", files)
(trial.parent / "done.json").write_text("{{}}")
"""
"""The worker on the flight: commits one checkpoint of known bytes and ends."""

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _stand_in(tmp_path: Path, model: int) -> tuple[list[str], dict[str, bytes]]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN.format(fixtures=str(FIXTURES), model=model))
    rng = random.Random(7)
    return [sys.executable, str(script)], {"model.safetensors": rng.randbytes(model),
                                           "optimizer.pt": rng.randbytes(1000)}


def test_the_host_falls_back_to_the_polls_and_says_why_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RunHost without Ray (its one call into Ray, where(), answered here): home's listener
    is gone, so its polls carry the chunks."""
    from flightplan.run.executors.ray_host import RunHost

    monkeypatch.setattr(RunHost, "where", lambda self: {"scratch": str(self.dir)})
    worker, files = _stand_in(tmp_path, 3 * CHUNK + 5)
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    host = RunHost("r-1", str(tmp_path / "scratch"), {}, worker=worker)
    host.start(b"{}", None, None, Offer("127.0.0.1", port, os.urandom(32), CHUNK))
    receiver = CheckpointReceiver(tmp_path / "home")
    deltas = [host.poll()]
    deadline = time.monotonic() + WAIT_S
    while deltas[-1].exit_code is None:
        assert time.monotonic() < deadline
        for chunk in deltas[-1].chunks:
            assert receiver.take(chunk, asked_at=time.time()).rewind is None
        deltas.append(host.poll())
    host.close()
    notices = [d.notice for d in deltas if d.notice is not None]
    assert notices == [f"home at 127.0.0.1:{port} refused the connection"]
    assert deltas[-1].exit_code == 0
    assert home_files(tmp_path / "home" / "step-000001") == files
    assert max(c.size for d in deltas for c in d.chunks) <= CHUNK


# -- through a real Ray cluster -----------------------------------------------------------
def _ray_run(cluster: Any, tmp_path: Path, worker: list[str]) -> tuple[Any, Path, list[str]]:
    from flightplan.run.executors.contract import Job
    from flightplan.run.executors.ray_executor import RayExecutor

    made, _, tmp = cluster
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps({"run_id": "r-1", "params": {}}))
    listening: list[str] = []

    def started(_: Any) -> None:       # while it runs: what this process listens on
        listening.extend(_listeners())

    executor = RayExecutor(address=made.address, scratch=str(tmp / "scratch"), poll_s=0.05,
                           worker=worker)
    [result] = executor.run([Job("r-1", run_dir)], on_start=started)
    return result, run_dir, listening


def test_a_checkpoint_comes_home_from_a_ray_flight_over_the_connection(
        cluster: Any, tmp_path: Path) -> None:
    from flightplan.run.executors.stream import CHUNK_BYTES

    before = _listeners()
    worker, files = _stand_in(tmp_path, 2 * CHUNK_BYTES + 12345)
    result, run_dir, listening = _ray_run(cluster, tmp_path, worker)
    assert result.exit_code == 0
    assert home_files(run_dir / "checkpoints" / "step-000001") == files
    [row] = [json.loads(line) for line in (run_dir / "measurements.jsonl").open()
             if '"checkpoint_transfer"' in line]
    assert sorted(row) == sorted(["event", "step", "time", "name", "bytes", "wait_s",
                                  "fetch_s", "commit_s", "stream_s", "resent_bytes", "node"])
    assert (row["name"], row["bytes"], row["resent_bytes"]) == (
        "step-000001", 2 * CHUNK_BYTES + 12345 + 1000, 0)
    assert row["stream_s"] > 0 and row["fetch_s"] >= 0 and row["commit_s"] >= 0
    log = (run_dir / "log.txt").read_text()
    assert "Ray's polls" not in log and "dropped a direct connection" not in log
    # while it ran home listened at one more address, on loopback; not after
    [added] = set(listening) - before
    assert added.startswith("127.0.0.1:") and _listeners() == before


def test_a_flight_refused_by_home_brings_the_checkpoint_with_the_polls(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from flightplan.run.executors import ray_executor

    class Forgetful(HomeEnd):
        """Home handing the flight a secret that is not its own: the flight's proof fails."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.offer = dataclasses.replace(self.offer, secret=os.urandom(32))

    monkeypatch.setattr(ray_executor, "HomeEnd", Forgetful)
    worker, files = _stand_in(tmp_path, 3 * (1 << 20))
    result, run_dir, _ = _ray_run(cluster, tmp_path, worker)
    assert result.exit_code == 0
    assert home_files(run_dir / "checkpoints" / "step-000001") == files
    [row] = [json.loads(line) for line in (run_dir / "measurements.jsonl").open()
             if '"checkpoint_transfer"' in line]
    assert (row["bytes"], row["resent_bytes"]) == (3 * (1 << 20) + 1000, 0)
    lines = (run_dir / "log.txt").read_text().splitlines()
    [notice] = [line for line in lines if "Ray's polls" in line]
    assert notice.startswith("--- flightplan: checkpoints come home with Ray's polls instead "
                             "of the direct connection: home at 127.0.0.1:")
    assert notice.endswith(": home refused this flight's proof of the secret ---")
    [dropped] = [line for line in lines if "dropped a direct connection" in line]
    assert dropped.endswith(": its proof of the secret is wrong ---")
    err = capsys.readouterr().err
    assert err.count("checkpoints come home with Ray's polls") == 1


def test_a_frame_forged_on_the_way_from_a_ray_flight_is_refused_sent_again_and_logged(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flightplan.run.executors import ray_executor
    from flightplan.run.executors.stream import CHUNK_BYTES

    relays: list[Relay] = []

    class Tampered(HomeEnd):
        """Home reached through a relay that flips a bit of the first chunk's data and
        makes its CRC-32 right."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            relays.append(Relay(("127.0.0.1", self.offer.port),
                                data_edit=("model.safetensors", _flip_data)))
            self.offer = dataclasses.replace(self.offer, port=relays[-1].port)

    monkeypatch.setattr(ray_executor, "HomeEnd", Tampered)
    worker, files = _stand_in(tmp_path, 2 * CHUNK_BYTES + 12345)
    try:
        result, run_dir, _ = _ray_run(cluster, tmp_path, worker)
    finally:
        for relay in relays:
            relay.close()
    assert result.exit_code == 0
    assert home_files(run_dir / "checkpoints" / "step-000001") == files
    log = (run_dir / "log.txt").read_text()
    assert "--- flightplan: frames the direct connection refused and had sent again: 1 (its " \
           "MAC is wrong) ---\n" in log, log
    assert "Ray's polls" not in log
    [row] = [json.loads(line) for line in (run_dir / "measurements.jsonl").open()
             if '"checkpoint_transfer"' in line]
    assert row["bytes"] == 2 * CHUNK_BYTES + 12345 + 1000 and row["resent_bytes"] >= CHUNK_BYTES, \
        (run_dir / "measurements.jsonl").read_text()
