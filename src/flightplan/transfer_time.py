"""How long a checkpoint takes to come home from a flight: the figure behind the interval
policy's transfer term, the pilot's transfer figures and the re-estimate's transfer total.

On a remote flight a checkpoint protects work only once it is durable at home. The Ray
executor streams each checkpoint home in chunks as the flight writes it
(:mod:`flightplan.run.executors.stream`, over :mod:`flightplan.run.executors.channel`)
and writes a ``checkpoint_transfer`` row (seconds, bytes) once it is durable at home::

    wait_s    on the flight: from the checkpoint being durable there (its manifest written)
              to its last chunk being cut (what was still to send then, and the poll delay;
              over the direct connection: to its being handed to the socket)
    fetch_s   at home: from asking for the poll that brought the last chunk to having it
              (over the direct connection: from its frame's header coming to its data in)
    commit_s  at home: the manifest checks, fsync, rename
    stream_s  at home: from asking for its first chunk (its first frame coming) to durable
              at home: how long its bytes took to move (rows written before streaming have
              none: fetch + commit)

Over a set of transfers (:class:`TransferTally`)::

    transfer_s   = mean(wait_s + fetch_s + commit_s)   from durable on the flight to durable
                                                       at home, per checkpoint
    bytes_per_s  = Σ bytes / Σ stream_s                the moving throughput
    wait_s       = mean(wait_s)

and for one checkpoint of ``b`` bytes (:func:`checkpoint_transfer_s`)::

    X = b / bytes_per_s + wait_s     when a throughput is known, else transfer_s

X counts the whole checkpoint as moving after it is durable on the flight; streamed as it
is written, most of it is home by then, so X errs long: on the safe side of the
tolerated-loss bound. The executor sends its running figure to the flight, where the run's
host writes it to ``<scratch>/transfer.json`` (:attr:`flightplan.rundir.RunDir.TRANSFER`):
``{transfer_s, bytes_per_s, wait_s, checkpoints}``. The trial reads it when a save
completes and adds X to D in the interval bound (:mod:`flightplan.trial.interval`); a run on
this machine has no such file, so X = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from flightplan.rows import CheckpointTransfer, Row, as_number

__all__ = ["TransferTally", "checkpoint_transfer_s", "trip_s"]


def _fields(record: CheckpointTransfer | Mapping[str, Any]) -> Mapping[str, Any]:
    return record.fields() if isinstance(record, CheckpointTransfer) else record


def _parts(record: CheckpointTransfer | Mapping[str, Any]) -> tuple[float, float]:
    """``(moving_s, wait_s)`` of one transfer (a ``checkpoint_transfer`` row or its ledger
    event's data): its ``stream_s`` (else fetch + commit, a row from before streaming), and
    the wait (0 for a record without one)."""
    record = _fields(record)
    streamed = record.get("stream_s")
    moving = float(streamed) if isinstance(streamed, (int, float)) else \
        float(record["fetch_s"]) + float(record["commit_s"])
    return moving, float(record.get("wait_s") or 0.0)


def trip_s(record: CheckpointTransfer | Mapping[str, Any]) -> float:
    """Seconds one transfer took from durable on the flight to durable at home: wait +
    fetch + commit of its row (or of its ledger event's data)."""
    record = _fields(record)
    return float(record.get("wait_s") or 0.0) + float(record["fetch_s"]) \
        + float(record["commit_s"])


@dataclass
class TransferTally:
    """Checkpoint transfers home, summed (module docstring for the figures).

    Attributes:
        checkpoints: transfers counted.   bytes: their total size (bytes).
        moving_s: Σ stream_s (else fetch_s + commit_s), seconds.   wait_s: Σ wait_s,
        seconds.   trips_s: Σ (wait_s + fetch_s + commit_s), seconds.
    """

    checkpoints: int = 0
    bytes: int = 0
    moving_s: float = 0.0
    wait_s: float = 0.0
    trips_s: float = 0.0

    def add(self, nbytes: int, moving_s: float, wait_s: float = 0.0, *,
            trip_s: float | None = None) -> None:
        """Count one transfer of ``nbytes`` bytes that moved in ``moving_s`` seconds and
        waited ``wait_s`` seconds on the flight after it was durable there; ``trip_s``:
        from durable on the flight to durable at home (default ``moving_s + wait_s``: the
        bytes moved only after it was durable)."""
        self.checkpoints += 1
        self.bytes += int(nbytes)
        self.moving_s += float(moving_s)
        self.wait_s += float(wait_s)
        self.trips_s += float(moving_s) + float(wait_s) if trip_s is None else float(trip_s)

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> "TransferTally":
        """The tally of the ``checkpoint_transfer`` rows among measurement ``rows`` (a row
        written before ``wait_s`` was measured counts a wait of 0)."""
        tally = cls()
        for row in rows:
            if isinstance(row, CheckpointTransfer):
                tally.add(row.bytes, *_parts(row), trip_s=trip_s(row))
        return tally

    @property
    def transfer_s(self) -> float:
        """Mean seconds from durable on the flight to durable at home (0.0 without one)."""
        return self.trips_s / self.checkpoints if self.checkpoints else 0.0

    @property
    def bytes_per_s(self) -> float | None:
        """Σ bytes / Σ moving seconds; None without a transfer (or with no measurable time)."""
        return self.bytes / self.moving_s if self.checkpoints and self.moving_s > 0 else None

    def figure(self) -> dict[str, Any] | None:
        """``transfer.json``'s content ``{transfer_s, bytes_per_s, wait_s, checkpoints}``
        (seconds, bytes per second, count), or None before the first transfer."""
        if not self.checkpoints:
            return None
        return {"transfer_s": self.transfer_s, "bytes_per_s": self.bytes_per_s,
                "wait_s": self.wait_s / self.checkpoints, "checkpoints": self.checkpoints}


def checkpoint_transfer_s(figure: Mapping[str, Any] | None, nbytes: int) -> float:
    """X, the seconds one checkpoint of ``nbytes`` bytes takes to be durable at home.

    Args:
        figure: ``transfer.json``'s content (:meth:`TransferTally.figure`), or None when
            the run has no transfer figure (it runs at home: X = 0).
        nbytes: the checkpoint's size (bytes).

    Returns:
        ``nbytes / bytes_per_s + wait_s`` when the figure has a throughput, else its
        ``transfer_s``; 0.0 without a figure or with one that holds no number.
    """
    if not figure:
        return 0.0
    rate, wait = as_number(figure.get("bytes_per_s")), as_number(figure.get("wait_s"))
    if rate is not None and rate > 0:
        return nbytes / rate + (wait or 0.0)
    seconds = as_number(figure.get("transfer_s"))
    return seconds if seconds is not None else 0.0
