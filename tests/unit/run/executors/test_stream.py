"""Checkpoints home in bounded chunks (run/executors/stream.py): sender and receiver on two
folders of this machine, the chunks handed over as the executor hands them over."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import zlib
from pathlib import Path

import pytest

from flightplan.errors import TransferError
from flightplan.run.executors.stream import (Chunk, CheckpointReceiver, CheckpointSender,
                                             Outcome, Rewind)
from flightplan.run.executors.transfer import checkpoint_steps
from checkpoint_files import home_files as _home_files   # tests/fixtures (conftest)
from checkpoint_files import write_checkpoint as _write

CHUNK = 4096


def _pump(sender: CheckpointSender, receiver: CheckpointReceiver, *, ended: bool = False,
          damage=None, drop=None, limit: int = 10_000) -> dict:
    """Hand every chunk over until nothing is left; ``damage(chunk)`` may return a changed
    chunk, ``drop(chunk)`` True to lose it on the way. Returns what happened."""
    sent: list[Chunk] = []
    seen = {"committed": [], "rewinds": [], "refused": []}
    for _ in range(limit):
        chunks = sender.next(ended=ended)
        if not chunks:
            break
        for chunk in chunks:
            sent.append(chunk)
            if drop and drop(chunk):
                continue
            outcome = receiver.take(damage(chunk) if damage else chunk, asked_at=1.0)
            if outcome.rewind:
                seen["rewinds"].append(outcome.rewind)
                sender.rewind(outcome.rewind)
            if outcome.committed:
                seen["committed"].append(outcome.committed)
            if outcome.refused:
                seen["refused"].append(outcome.refused)
    seen["sent"] = sent
    return seen


def test_a_checkpoint_travels_in_chunks_no_larger_than_the_bound(tmp_path: Path) -> None:
    files = {"model.safetensors": os.urandom(40 * CHUNK + 17), "optimizer.pt": os.urandom(999),
             "extra/state.json": b"{}", "empty.bin": b""}
    _write(tmp_path / "flight" / "step-000008", files)
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home", keep_last=2)
    seen = _pump(sender, receiver)
    [done] = seen["committed"]
    assert (done.name, done.bytes, done.resent_bytes) == ("step-000008",
                                                          40 * CHUNK + 17 + 999 + 2, 0)
    assert _home_files(tmp_path / "home" / "step-000008") == files
    # what either side holds at once is one chunk's worth, whatever the checkpoint's size
    per_call = [c.size for c in seen["sent"]]
    assert max(per_call) <= CHUNK and sender.peak_chunk_bytes <= CHUNK
    assert receiver.peak_chunk_bytes <= CHUNK
    # every byte once, the manifest last
    assert sum(c.size for c in seen["sent"][:-1]) == sum(len(d) for d in files.values())
    assert seen["sent"][-1].path == "manifest.json"
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["step-000008"]
    assert sender.next() == [] and not sender.pending()


def test_a_checkpoint_streams_as_it_is_written(tmp_path: Path) -> None:
    flight, first = tmp_path / "flight" / "step-000004", os.urandom(3 * CHUNK + 5)
    writing = _write(flight, {"model.bin": first}, commit=False)
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    early = _pump(sender, receiver)
    assert sum(c.size for c in early["sent"]) == len(first) and early["committed"] == []
    assert (tmp_path / "home" / "step-000004.tmp" / "model.bin").read_bytes() == first
    rest = os.urandom(2 * CHUNK)
    with open(writing / "model.bin", "ab") as handle:           # the writer goes on
        handle.write(rest)
    _write(flight, {"model.bin": first + rest, "opt.bin": b"o" * 10})     # committed
    late = _pump(sender, receiver)
    assert sum(c.size for c in late["sent"][:-1]) == len(rest) + 10    # only what was new
    assert [c.name for c in late["committed"]] == ["step-000004"]
    assert _home_files(tmp_path / "home" / "step-000004") == {"model.bin": first + rest,
                                                              "opt.bin": b"o" * 10}


def test_a_checkpoint_renamed_into_place_while_it_streams_goes_on_from_its_offsets(
        tmp_path: Path) -> None:
    """The trial's rename of ``.tmp`` falls inside the sender's read of it (the read fails
    as it does then: the file is gone from the path it was listed at): the next chunks
    come from the committed folder at the same offsets, not from 0 (which sent the first
    chunk twice without counting it)."""
    flight, data = tmp_path / "flight" / "step-000003", os.urandom(3 * CHUNK)
    _write(flight, {"model.bin": data[:CHUNK]}, commit=False)

    class RenamedWhileRead(CheckpointSender):
        def _read(self, name: str, where: Path, committed: bool) -> list[Chunk]:
            if not committed and self.offsets():          # the second read of the .tmp
                _write(flight, {"model.bin": data})       # the writer finishes and renames
                raise FileNotFoundError(where / "model.bin")
            return super()._read(name, where, committed)

    sender = RenamedWhileRead(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    [first] = sender.next()
    assert (first.path, first.offset, first.size) == ("model.bin", 0, CHUNK)
    assert receiver.take(first, asked_at=1.0) == Outcome()
    assert sender.next() == [] and sender.offsets() == {"model.bin": CHUNK}
    seen = _pump(sender, receiver)
    assert [(c.path, c.offset) for c in seen["sent"]] == [("model.bin", CHUNK),
                                                          ("model.bin", 2 * CHUNK),
                                                          ("manifest.json", 0)]
    [done] = seen["committed"]
    assert done.resent_bytes == 0 and seen["rewinds"] == []
    assert (tmp_path / "home" / "step-000003" / "model.bin").read_bytes() == data


def test_a_checkpoint_gone_while_it_streams_counts_what_was_sent_if_it_comes_again(
        tmp_path: Path) -> None:
    """A ``.tmp`` folder removed under the sender's read (a failed save) and written
    again: the sender starts it over, and its manifest says the bytes sent before went
    twice."""
    flight, data = tmp_path / "flight" / "step-000003", os.urandom(2 * CHUNK)
    writing = _write(flight, {"model.bin": data[:CHUNK]}, commit=False)

    class GoneWhileRead(CheckpointSender):
        def _read(self, name: str, where: Path, committed: bool) -> list[Chunk]:
            if not committed and self.offsets():
                (writing / "model.bin").unlink()
                writing.rmdir()
                raise FileNotFoundError(where / "model.bin")
            return super()._read(name, where, committed)

    sender = GoneWhileRead(tmp_path / "flight", chunk_bytes=CHUNK)
    assert len(sender.next()) == 1 and sender.next() == [] and sender.streaming is None
    _write(flight, {"model.bin": data})
    receiver = CheckpointReceiver(tmp_path / "home")
    seen = _pump(sender, receiver)
    [done] = seen["committed"]
    assert done.resent_bytes == CHUNK
    assert (tmp_path / "home" / "step-000003" / "model.bin").read_bytes() == data


def test_a_corrupted_chunk_is_sent_again_and_only_it(tmp_path: Path) -> None:
    data = os.urandom(10 * CHUNK)
    _write(tmp_path / "flight" / "step-000002", {"model.bin": data})
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    hit = []

    def flip(chunk: Chunk) -> Chunk:
        if chunk.offset == 3 * CHUNK and not hit:
            hit.append(chunk)
            changed = bytearray(chunk.data)
            changed[100] ^= 0xFF
            return Chunk(chunk.name, chunk.path, chunk.offset, bytes(changed), chunk.crc32)
        return chunk

    seen = _pump(sender, receiver, damage=flip)
    assert seen["rewinds"] == [Rewind("step-000002", "model.bin", 3 * CHUNK)]
    [done] = seen["committed"]
    assert done.resent_bytes == CHUNK
    assert sum(c.size for c in seen["sent"][:-1]) == len(data) + CHUNK
    assert (tmp_path / "home" / "step-000002" / "model.bin").read_bytes() == data


def test_an_interrupted_transfer_resumes_from_what_home_has(tmp_path: Path) -> None:
    data = os.urandom(12 * CHUNK)
    _write(tmp_path / "flight" / "step-000006", {"model.bin": data})
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    # chunks 5 and 6 are lost on the way: home drops what comes after out of turn, and
    # asks, when the manifest comes, for its own next byte
    lost = {5 * CHUNK, 6 * CHUNK}
    dropped: list[int] = []

    def drop(chunk: Chunk) -> bool:
        if chunk.path == "model.bin" and chunk.offset in lost and chunk.offset not in dropped:
            dropped.append(chunk.offset)
            return True
        return False

    seen = _pump(sender, receiver, drop=drop)
    assert seen["rewinds"] == [Rewind("step-000006", "model.bin", 5 * CHUNK)]
    [done] = seen["committed"]
    assert (tmp_path / "home" / "step-000006" / "model.bin").read_bytes() == data
    offsets = [c.offset for c in seen["sent"] if c.path == "model.bin"]
    # the first five chunks went once: the transfer went on from there, not from the start
    assert [offsets.count(i * CHUNK) for i in range(5)] == [1] * 5
    assert all(offsets.count(i * CHUNK) == 2 for i in range(5, 12))
    assert done.bytes == len(data)


def test_a_checkpoint_that_fails_its_check_is_sent_again(tmp_path: Path) -> None:
    flight = tmp_path / "flight" / "step-000003"
    old = os.urandom(2 * CHUNK)
    writing = _write(flight, {"model.bin": old}, commit=False)
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    _pump(sender, receiver)
    new = os.urandom(2 * CHUNK)               # rewritten in place before the commit
    (writing / "model.bin").write_bytes(new)
    _write(flight, {"model.bin": new})
    seen = _pump(sender, receiver)
    assert Rewind("step-000003", "model.bin", 0) in seen["rewinds"]
    [done] = seen["committed"]
    assert (tmp_path / "home" / "step-000003" / "model.bin").read_bytes() == new
    assert done.resent_bytes == len(old)


def test_a_newer_checkpoint_replaces_one_on_its_way(tmp_path: Path) -> None:
    _write(tmp_path / "flight" / "step-000004", {"model.bin": os.urandom(3 * CHUNK)},
           commit=False)
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home", keep_last=1)
    sender_first = sender.next()
    receiver.take(sender_first[0], asked_at=1.0)
    assert receiver.receiving == "step-000004"
    newer = os.urandom(CHUNK + 1)
    _write(tmp_path / "flight" / "step-000008", {"model.bin": newer})
    seen = _pump(sender, receiver)
    assert [c.name for c in seen["committed"]] == ["step-000008"]
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["step-000008"]
    # once the worker ended, a checkpoint still being written is not waited for
    _write(tmp_path / "flight" / "step-000012", {"model.bin": b"x"}, commit=False)
    assert sender.pending() and not sender.pending(ended=True)


def test_names_and_paths_from_a_flight_are_checked(tmp_path: Path) -> None:
    receiver = CheckpointReceiver(tmp_path / "home")
    for name in ("../step-000001", "step-1x", "step-", "step-" + "9" * 13, "latest"):
        with pytest.raises(TransferError, match="not a checkpoint name"):
            receiver.take(Chunk(name, "model.bin", 0, b"x", 0), asked_at=0.0)
    for path in ("../../.bashrc", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(TransferError, match="must be relative"):
            receiver.take(Chunk("step-000001", path, 0, b"x", 0), asked_at=0.0)
    assert not (tmp_path / ".bashrc").exists() and checkpoint_steps("step-000042") == 42
    # a manifest that does not list what was sent refuses the checkpoint
    _write(tmp_path / "flight" / "step-000001", {"model.bin": b"m"})
    (tmp_path / "flight" / "step-000001" / "planted.pt").write_bytes(b"p")
    manifest = json.loads((tmp_path / "flight" / "step-000001" / "manifest.json").read_text())
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    outcome = receiver.take(Chunk("step-000001", "planted.pt", 0, b"p",
                                  zlib.crc32(b"p")), asked_at=0.0)
    assert outcome.rewind is None
    seen = _pump(sender, receiver)
    assert seen["refused"] == [f"step-000001: sent files ['planted.pt'] that its manifest does "
                               f"not list ({sorted(manifest['files'])})"]
    assert not (tmp_path / "home" / "step-000001").exists()
    assert not (tmp_path / "home" / "step-000001.tmp").exists()


def test_a_connection_that_dropped_goes_on_from_homes_offsets(tmp_path: Path) -> None:
    files = {"model.bin": os.urandom(10 * CHUNK), "opt.bin": os.urandom(3 * CHUNK)}
    _write(tmp_path / "flight" / "step-000005", files)
    sender = CheckpointSender(tmp_path / "flight", chunk_bytes=CHUNK)
    receiver = CheckpointReceiver(tmp_path / "home")
    # four chunks came home; the next three were on their way when the connection dropped
    for _ in range(4):
        [chunk] = sender.next()
        assert receiver.take(chunk, asked_at=1.0) == Outcome()
    lost = [c for _ in range(3) for c in sender.next()]
    assert [(c.path, c.offset) for c in lost] == [("model.bin", o * CHUNK) for o in (4, 5, 6)]
    assert receiver.offsets() == ("step-000005", {"model.bin": 4 * CHUNK})
    sender.resume(*receiver.offsets())
    seen = _pump(sender, receiver)
    [done] = seen["committed"]
    assert _home_files(tmp_path / "home" / "step-000005") == files
    assert [(c.path, c.offset) for c in seen["sent"][:3]] == [
        ("model.bin", o * CHUNK) for o in (4, 5, 6)]
    assert done.resent_bytes == 3 * CHUNK
    # a home that had nothing of it: every file from its start, what was sent counted
    _write(tmp_path / "flight" / "step-000009", files)
    first = sender.next()
    assert [(c.name, c.offset) for c in first] == [("step-000009", 0)]
    sender.resume(None, {})
    seen = _pump(sender, receiver)
    assert seen["sent"][0].offset == 0 and seen["committed"][0].resent_bytes == CHUNK
    assert sender.offsets() == {}


def test_direct_and_page_cache_writes_mix_into_the_same_bytes(tmp_path: Path) -> None:
    """Home writes whole aligned blocks from an aligned buffer straight to the disk and the
    rest through the page cache: a chunk from a page-aligned buffer at an aligned offset,
    one from an unaligned buffer (the kernel refuses it direct: it goes through the cache),
    one with a tail shorter than a block, one at an unaligned offset. The file is every
    byte in order, its sha256 the manifest's."""
    data = os.urandom(4 * 4096 + 60)
    pieces = [(0, 8192, True), (8192, 4096, False), (12288, 4106, True), (16394, 50, True)]
    assert sum(size for _, size, _ in pieces) == len(data)
    receiver = CheckpointReceiver(tmp_path / "home")
    for offset, size, aligned in pieces:
        if aligned:
            buffer = mmap.mmap(-1, max(size, 4096))           # page-aligned
            buffer[:size] = data[offset:offset + size]
            payload = memoryview(buffer)[:size]
        else:
            payload = memoryview(bytearray(1) + data[offset:offset + size])[1:]  # odd address
        chunk = Chunk("step-000003", "model.bin", offset, payload, zlib.crc32(payload))
        assert receiver.take(chunk, asked_at=0.0) == Outcome()
    manifest = json.dumps({"format": "flightplan-checkpoint/1", "step": 3, "tensors": {},
                           "files": {"model.bin": {"size": len(data), "sha256":
                                                   hashlib.sha256(data).hexdigest()}}}).encode()
    outcome = receiver.take(Chunk("step-000003", "manifest.json", 0, manifest,
                                  zlib.crc32(manifest)), asked_at=0.0)
    assert outcome.committed is not None and outcome.committed.bytes == len(data)
    assert (tmp_path / "home" / "step-000003" / "model.bin").read_bytes() == data
