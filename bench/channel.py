"""The direct connection's throughput with and without hostile connections beside it.

From one run, on this machine: a checkpoint of ``--mib`` MiB (two random files and a
manifest) streamed home over the direct connection alone, without Ray
(:mod:`flightplan.run.executors.channel`: home's end in this process, the flight's end in
a child process, real sockets on 127.0.0.1, every frame under its AES-128-GCM tag), ``--rounds``
times quiet and as many times with 100 hostile connections opened on home's port by
another child process (at nice 19: on this machine it shares the two ends' cores) as soon
as the first chunk is home (50 that never send a byte, 50 that send garbage: a wrong
proof, or 4 KiB of noise), alternating. Throughput: the
checkpoint's bytes over its ``stream_s`` (from its first chunk at home to durable at home,
as the ``checkpoint_transfer`` row's). Best of the rounds each; their ratio (target >=
0.9: the issue's "under 10 %"), and what the hostile connections delivered (target:
nothing; home holds the checkpoint alone, byte for byte, and refused no frame).

Usage::

    .venv/bin/python bench/channel.py [--mib 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from checkpoint_files import home_files, write_checkpoint  # noqa: E402 (put on sys.path first)

from flightplan.run.executors.channel import (HANDSHAKE_S, ArrivedCheckpoint,  # noqa: E402
                                              HomeEnd)
from flightplan.run.executors.stream import CheckpointReceiver  # noqa: E402

MIB = 1 << 20
NAME = "step-000001"

FLIGHT = """
import json, sys, threading, time
from pathlib import Path
from flightplan.run.executors.channel import FlightEnd, Offer
from flightplan.run.executors.stream import CheckpointSender
given = json.loads(sys.stdin.readline())
offer = Offer(given["host"], given["port"], bytes.fromhex(given["secret"]),
              given["chunk_bytes"])
lock = threading.Lock()
link = FlightEnd(CheckpointSender(Path(sys.argv[1]), chunk_bytes=offer.chunk_bytes,
                                  buffers=2), offer, lock)
while True:
    with lock:
        if link.failed is not None or link.settled():
            break
    time.sleep(0.01)
link.close()
print(link.failed or "ok", flush=True)
"""
"""The flight: sends home what its ``checkpoints/`` folder (argv[1]) holds, then ends."""

ATTACKER = """
import os, socket, sys
os.nice(19)
address = (sys.argv[1], int(sys.argv[2]))
sys.stdin.readline()
opened = []
for i in range(100):
    sock = socket.create_connection(address, timeout=30)
    if i % 2:
        sock.sendall(os.urandom(64 if i % 4 == 1 else 4096))
    opened.append(sock)
print("open", flush=True)
sys.stdin.readline()
dropped = 0
for sock in opened:
    sock.setblocking(False)
    try:
        while sock.recv(1 << 16):
            pass
        dropped += 1
    except BlockingIOError:
        pass
    except ConnectionResetError:
        dropped += 1
    sock.close()
print(dropped, flush=True)
"""
"""The attacker: on a line, opens 50 idle and 50 garbage connections to home (argv[1:3])
and says so; on the next, counts those home dropped meanwhile, closes them all and prints
the count. At nice 19: its own work is an attacker's machine's, not home's, and here it
would otherwise take from the cores that both ends share."""


def _checkpoint(folder: Path, mib: int) -> int:
    """A committed checkpoint of ``mib`` MiB of random bytes; returns its files' bytes."""
    files = {"model.safetensors": os.urandom(mib * MIB * 3 // 4),
             "optimizer.safetensors": os.urandom(mib * MIB // 4)}
    write_checkpoint(folder, files)
    return sum(len(data) for data in files.values())


def _round(work: Path, hostile: bool) -> tuple[float, float, int]:
    """Stream the checkpoint of ``work/flight`` home once (with the attack when
    ``hostile``): its ``stream_s``, the seconds into it when the 100 connections were all
    open (0.0 without), and how many of them home dropped while it streamed.

    Raises:
        SystemExit: the flight failed, or something other than the checkpoint came home.
    """
    home_dir = work / "home"
    receiver, lock = CheckpointReceiver(home_dir), threading.Lock()
    home = HomeEnd(receiver, lock, host="127.0.0.1")
    attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, "127.0.0.1",
                                 str(home.offer.port)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) if hostile else None
    flight = subprocess.Popen([sys.executable, "-c", FLIGHT, str(work / "flight")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert flight.stdin is not None and flight.stdout is not None
    flight.stdin.write(json.dumps({"host": "127.0.0.1", "port": home.offer.port,
                                   "secret": home.offer.secret.hex(),
                                   "chunk_bytes": home.offer.chunk_bytes}) + "\n")
    flight.stdin.flush()
    arrived: list[ArrivedCheckpoint] = []
    while receiver.receiving is None and not arrived:  # the same wait in both: no bias
        arrived = home.arrived()
        time.sleep(0.005)
    if attacker is not None:                            # the first chunk is home: now
        assert attacker.stdin is not None and attacker.stdout is not None
        attacker.stdin.write("go\n")
        attacker.stdin.flush()
        attacker.stdout.readline()
    opened_at = time.time()
    while not arrived:
        arrived = home.arrived()
        time.sleep(0.005)
    dropped = 0
    if attacker is not None:
        assert attacker.stdin is not None and attacker.stdout is not None
        attacker.stdin.write("stop\n")
        attacker.stdin.flush()
        dropped = int(attacker.stdout.readline())
        attacker.wait()
    said = flight.stdout.readline().strip()
    flight.wait()
    home.close()
    done = arrived[0].outcome.committed
    if said != "ok" or done is None:
        raise SystemExit(f"the flight said {said!r}; home: {arrived[0].outcome}")
    delivered = sorted(p.name for p in home_dir.iterdir())
    if delivered != [NAME] or home.refused_frames or \
            home_files(home_dir / NAME) != home_files(work / "flight" / NAME):
        raise SystemExit(f"home holds {delivered}, refused frames {dict(home.refused_frames)}")
    shutil.rmtree(home_dir)
    return (arrived[0].done_at - done.first_asked_at,
            opened_at - done.first_asked_at if hostile else 0.0, dropped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="checkpoint size (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fpbench-", dir="/tmp"))
    try:
        size = _checkpoint(work / "flight" / NAME, args.mib)
        _round(work, hostile=False)                      # every code path imported
        times: dict[bool, list[float]] = {False: [], True: []}
        attacks: list[tuple[float, float, int]] = []
        for _ in range(args.rounds):
            for hostile in (False, True):
                stream_s, open_s, dropped = _round(work, hostile)
                times[hostile].append(stream_s)
                attacks += [(open_s, stream_s, dropped)] if hostile else []
        mb, best = size / 1e6, {h: min(times[h]) for h in times}
        rounds = {h: " ".join(f"{s:.2f}" for s in times[h]) for h in times}
        print(f"channel   {mb:.0f} MB checkpoint over the direct connection, best of "
              f"{args.rounds}: quiet {mb / best[False]:.0f} MB/s, with 50 idle and 50 garbage "
              f"connections {mb / best[True]:.0f} MB/s -> {best[False] / best[True]:.2f} "
              f"(target >= 0.9); delivered by them: nothing (home holds the checkpoint "
              f"alone, byte for byte, no frame refused); stream_s of each round: quiet "
              f"{rounds[False]}, hostile {rounds[True]}", flush=True)
        for open_s, stream_s, dropped in attacks:
            print(f"attack    all 100 open {open_s * 1000:.0f} ms into a transfer of "
                  f"{stream_s * 1000:.0f} ms; dropped by home before it ended: {dropped} "
                  f"(the idle ones wait for their {HANDSHAKE_S:g} s deadline)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
