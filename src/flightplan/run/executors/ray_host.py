"""The flight's side of one execution on Ray: :class:`RunHost`, a Ray actor that runs the
worker in a scratch folder on the flight and hands home, at each poll, what is new.

Home (:mod:`flightplan.run.executors.ray_executor`), when the run resumes, first sends its
newest checkpoint in chunks (:meth:`RunHost.receive`, driven by
:class:`~flightplan.run.executors.to_flight.FlightFeed`: each chunk's CRC-32 and each file's
sha256 against the manifest checked here, a failed chunk asked for again from its offset,
the checkpoint committed into the scratch folder's ``checkpoints/`` with one rename), then
sends ``trial.json``, the name of the checkpoint it committed here and where to send
checkpoints (:meth:`RunHost.start`), then polls: each :class:`PollUpdate` holds the new
measurement rows and log bytes and, once the worker ended and every committed checkpoint
is home, its exit code and its outputs. The checkpoints (cut as the trial writes them:
:class:`~flightplan.run.executors.stream.CheckpointSender`) go home over a direct
connection (:class:`~flightplan.run.executors.channel.FlightEnd`); when it cannot be made,
the polls carry them instead (at most one chunk's worth each, home's
:class:`~flightplan.run.executors.stream.Rewind` s with the next poll) and the next
:class:`PollUpdate` says why once. Home's running
transfer figure comes back with each poll and is written to ``<scratch>/transfer.json`` for
the trial's interval policy (:mod:`flightplan.transfer_time`). ``RunHost.leave`` passes
home's request to leave the flight to the worker
(:mod:`flightplan.run.executors.leave_watch`).

Plain Python apart from :meth:`RunHost.where`, so it is testable without a cluster.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy

import ray

from flightplan.durable import write_json_atomic
from flightplan.rundir import RunDir
from flightplan.run.executors.channel import FlightEnd, Offer
from flightplan.run.executors.contract import worker_argv
from flightplan.run.executors.ranks import RankGroup
from flightplan.run.executors.tether import tethered
from flightplan.errors import TransferError
from flightplan.run.executors.stream import (CHUNK_BYTES, CheckpointReceiver, CheckpointSender,
                                             Chunk, Outcome, Rewind)
from flightplan.run.executors.transfer import OUTPUTS, Blob, checkpoint_steps, pack_tree

__all__ = ["SCRATCH_ENV", "PollUpdate", "RunHost"]

SCRATCH_ENV = "FLIGHTPLAN_SCRATCH"
"""On a flight: the folder under which each execution gets its scratch folder (default:
the system's temp folder)."""

@dataclass(frozen=True)
class PollUpdate:
    """What one :meth:`RunHost.poll` sends home.

    Attributes:
        measurements: new complete rows of ``measurements.jsonl`` (bytes, newline-ended).
        log: new bytes of the worker's stdout/stderr.
        chunks: the next pieces of the newest checkpoint not yet home, when the polls
            carry them (at most one chunk's worth of data; numpy arrays, which Ray hands
            home without a copy); none while the direct connection does.
        exit_code: the worker's exit code once it ended and every committed checkpoint
            was sent, else None (reported once with the outputs; None again after that).
        outputs: with the exit code, the run's outputs (:data:`~flightplan.run.executors.transfer.OUTPUTS`).
        pending: more checkpoint data waits on the flight for the polls (home asks again
            at once).
        notice: once, why the checkpoints come with the polls instead of over the direct
            connection (None: they do not, or it was said).
    """

    measurements: bytes
    log: bytes
    chunks: list[Chunk]
    exit_code: int | None
    outputs: list[Blob]
    pending: bool = False
    notice: str | None = None


class RunHost:
    """The flight's side of one execution (a Ray actor; plain Python, so it is testable).

    Args:
        run_id: names the scratch folder.
        scratch: parent of the scratch folder (default ``$FLIGHTPLAN_SCRATCH`` or the temp
            folder of the node).
        env: extra environment variables for the worker.
        worker: the command before the ``trial.json`` path (None: ``python -m
            flightplan.run.worker`` with this node's Python).
        chunk_bytes: checkpoint data per poll (:data:`~flightplan.run.executors.stream.CHUNK_BYTES`;
            over the direct connection, the offer's).
        processes: the worker processes of the execution (``[[run]] processes``): with
            more than one, the ranks of a data-parallel run, started and ended together on
            this flight (:class:`~flightplan.run.executors.ranks.RankGroup`; they meet on
            its loopback interface).
    """

    def __init__(self, run_id: str, scratch: str | None, env: dict[str, str],
                 worker: list[str] | None = None, chunk_bytes: int = CHUNK_BYTES,
                 processes: int = 1) -> None:
        root = scratch or os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()
        os.makedirs(root, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"flightplan-{run_id}-", dir=root))
        self.env = dict(env)
        self.worker = list(worker) if worker else None
        self.proc: subprocess.Popen[bytes] | RankGroup | None = None
        self.processes = processes
        self._offsets = {"measurements.jsonl": 0, "log.txt": 0}
        self._chunk_bytes = chunk_bytes
        self.sender = CheckpointSender(self.dir / RunDir.CHECKPOINTS, chunk_bytes=chunk_bytes)
        self.incoming = CheckpointReceiver(self.dir / RunDir.CHECKPOINTS)   # home's, to resume
        self._ended = False                 # the exit code went home
        self._transfer: dict[str, Any] | None = None
        self._lock = threading.Lock()       # the sender's: the polls and the link's thread
        self.link: FlightEnd | None = None
        self._noticed = False

    def where(self) -> dict[str, Any]:
        """``{node_id, host, scratch, pid}`` of this actor (``node_id`` None for a host made
        outside Ray: asking Ray for it would start a cluster of its own)."""
        return {"node_id": ray.get_runtime_context().get_node_id() if ray.is_initialized()
                else None,
                "host": socket.gethostname(), "scratch": str(self.dir), "pid": os.getpid()}

    def receive(self, chunk: Chunk) -> Outcome:
        """Write one chunk of the checkpoint home sends to resume from (before
        :meth:`start`): checked and written as a chunk that comes home is
        (:meth:`~flightplan.run.executors.stream.CheckpointReceiver.accept`), the checkpoint
        committed in ``<scratch>/checkpoints/`` once its manifest checks.

        Returns:
            A rewind for home to send again from, the checkpoint committed, or its refusal.
        """
        return self.incoming.accept(chunk, asked_at=time.time())

    def start(self, trial: bytes, checkpoint: str | None,
              transfer: dict[str, Any] | None = None,
              channel: Offer | None = None) -> dict[str, Any]:
        """Write ``trial.json`` and the transfer figure (:meth:`_note_transfer`), start
        sending checkpoints home over ``channel`` (home's listener and the execution's
        secret; None: with the polls), start the worker.

        Args:
            checkpoint: the checkpoint home sent to resume from (:meth:`receive`), None
                when it sent none.

        Returns:
            :meth:`where`.

        Raises:
            TransferError: ``checkpoint`` was not committed here.
        """
        (self.dir / "trial.json").write_bytes(trial)
        self.incoming.abandon()        # anything half-received is not resumed from
        sent = []
        if checkpoint is not None:
            checkpoint_steps(checkpoint)
            if not (self.dir / RunDir.CHECKPOINTS / checkpoint).is_dir():
                raise TransferError(f"{checkpoint}: home's checkpoint was not committed on "
                                    f"this flight; the worker is not started")
            sent = [checkpoint]
        self.sender = CheckpointSender(self.dir / RunDir.CHECKPOINTS,
                                       chunk_bytes=channel.chunk_bytes if channel
                                       else self._chunk_bytes, sent=sent,
                                       buffers=2 if channel else 1)
        if channel is not None:
            self.link = FlightEnd(self.sender, channel, self._lock)
        self._note_transfer(transfer)
        trial_json = self.dir / "trial.json"
        env = dict(os.environ, **self.env, FLIGHTPLAN_TRIAL=str(trial_json),
                   PYTHONUNBUFFERED="1")
        argv = [*self.worker, str(trial_json)] if self.worker else worker_argv(trial_json)

        def launch(rank_env: dict[str, str]) -> subprocess.Popen[bytes]:
            with open(self.dir / "log.txt", "ab") as log:
                return subprocess.Popen(tethered(argv), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env={**env, **rank_env},
                                        cwd=str(self.dir))
        self.proc = (RankGroup.start(self.processes, launch) if self.processes > 1
                     else launch({}))
        return self.where()

    def _read_new(self, name: str, *, whole_lines: bool) -> bytes:
        try:
            with open(self.dir / name, "rb") as handle:
                handle.seek(self._offsets[name])
                data = handle.read()
        except FileNotFoundError:
            return b""
        if whole_lines:
            data = data[:data.rfind(b"\n") + 1]
        self._offsets[name] += len(data)
        return data

    def _note_transfer(self, transfer: dict[str, Any] | None) -> None:
        """Keep home's latest transfer figure in ``<scratch>/transfer.json`` (written
        atomically, only when it changed; None leaves the file as it is)."""
        if transfer is not None and transfer != self._transfer:
            write_json_atomic(self.dir / RunDir.TRANSFER, transfer)
            self._transfer = dict(transfer)

    def poll(self, transfer: dict[str, Any] | None = None,
             rewinds: Sequence[Rewind] = ()) -> PollUpdate:
        """What is new since the last poll (see :class:`PollUpdate`).

        Args:
            transfer: home's latest transfer figure (:meth:`_note_transfer`) or None.
            rewinds: chunks home asks for again.
        """
        assert self.proc is not None, "start() before poll()"
        self._note_transfer(transfer)
        code = self.proc.poll()  # read first: everything written before the exit is below
        rows = self._read_new("measurements.jsonl", whole_lines=True)
        log = self._read_new("log.txt", whole_lines=False)
        ended = code is not None
        # after the rows: a saved row's checkpoint is on disk
        chunks, pending, home = self._checkpoints(ended, rewinds)
        notice = None
        if self.link is not None and self.link.failed is not None and not self._noticed:
            notice, self._noticed = self.link.failed, True
        if ended and home and not self._ended:
            self._ended = True
            return PollUpdate(rows, log, [], code, pack_tree(self.dir, only=OUTPUTS), notice=notice)
        return PollUpdate(rows, log, chunks, None, [], pending, notice)

    def _checkpoints(self, ended: bool, rewinds: Sequence[Rewind]
                     ) -> tuple[list[Chunk], bool, bool]:
        """``(chunks for this poll, more wait for the polls, every committed checkpoint is
        home)``: nothing for the polls while the direct connection carries them (home is
        then told what it made of each), else the sender's next chunks (numpy arrays, which
        Ray hands home without a copy), after home's ``rewinds``."""
        link = self.link
        with self._lock:
            if link is not None and link.failed is None:
                if ended:
                    link.end()
                return [], False, link.settled()
            for rewind in rewinds:
                self.sender.rewind(rewind)
            chunks = [Chunk(c.name, c.path, c.offset,
                            numpy.frombuffer(c.data, dtype=numpy.uint8), c.crc32, c.waited_s,
                            c.resent_bytes) for c in self.sender.next(ended=ended)]
            pending = self.sender.pending(ended=ended)
        return chunks, pending, not chunks and not pending

    def leave(self, signum: int) -> None:
        """Send ``signum`` to the worker while it runs: the request to checkpoint and leave
        the flight, or to checkpoint and go on (:mod:`flightplan.run.executors.leave_watch`)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def close(self) -> None:
        """Drop the direct connection, remove the scratch folder (everything it made is
        home)."""
        if self.link is not None:
            self.link.close()
        shutil.rmtree(self.dir, ignore_errors=True)
