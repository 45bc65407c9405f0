"""How long a checkpoint takes to come home from a flight: the figure behind the interval
policy's transfer term, the pilot's transfer figures and the re-estimate's transfer total.

On a remote flight a checkpoint protects work only once it is durable at home. The Ray
executor measures each trip and writes a ``checkpoint_transfer`` row (seconds, bytes)::

    wait_s    on the flight: from the checkpoint being durable there (its manifest written)
              to the poll that packs it (so the executor's poll delay is measured, not assumed)
    fetch_s   at home: from asking for the poll to having the bytes
    commit_s  at home: hash checks, writes, fsync, rename

Over a set of transfers (:class:`TransferTally`)::

    transfer_s   = mean(wait_s + fetch_s + commit_s)   from durable on the flight to durable
                                                       at home, per checkpoint
    bytes_per_s  = Σ bytes / Σ (fetch_s + commit_s)    the moving throughput (the wait does
                                                       not grow with the size)
    wait_s       = mean(wait_s)

and for one checkpoint of ``b`` bytes (:func:`checkpoint_transfer_s`)::

    X = b / bytes_per_s + wait_s     when a throughput is known, else transfer_s

The executor sends its running figure to the flight, where the run's host writes it to
``<scratch>/transfer.json`` (:attr:`flightplan.rundir.RunDir.TRANSFER`): ``{transfer_s,
bytes_per_s, wait_s, checkpoints}``. The trial reads it when a save completes and adds X
to D in the interval bound (:mod:`flightplan.trial.interval`); a run on this machine has no
such file, so X = 0. ``wait_s + fetch_s`` counts the poll's one-way trip twice (it is in
both), so X errs long by that much: on the safe side of the tolerated-loss bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from flightplan.rows import CheckpointTransfer, Row

__all__ = ["TransferTally", "checkpoint_transfer_s", "trip_s"]


def _parts(record: CheckpointTransfer | Mapping[str, Any]) -> tuple[float, float]:
    """``(moving_s, wait_s)`` of one transfer: a ``checkpoint_transfer`` row, or its ledger
    event's data: fetch + commit, and the wait (0 for a record without one)."""
    if isinstance(record, CheckpointTransfer):
        return record.fetch_s + record.commit_s, record.wait_s
    return (float(record["fetch_s"]) + float(record["commit_s"]),
            float(record.get("wait_s") or 0.0))


def trip_s(record: CheckpointTransfer | Mapping[str, Any]) -> float:
    """Seconds one transfer took from durable on the flight to durable at home: wait +
    fetch + commit of its row (or of its ledger event's data)."""
    return sum(_parts(record))


@dataclass
class TransferTally:
    """Checkpoint transfers home, summed (module docstring for the figures).

    Attributes:
        checkpoints: transfers counted.   bytes: their total size (bytes).
        moving_s: Σ (fetch_s + commit_s), seconds.   wait_s: Σ wait_s, seconds.
    """

    checkpoints: int = 0
    bytes: int = 0
    moving_s: float = 0.0
    wait_s: float = 0.0

    def add(self, nbytes: int, moving_s: float, wait_s: float = 0.0) -> None:
        """Count one transfer of ``nbytes`` bytes that moved in ``moving_s`` seconds after
        waiting ``wait_s`` seconds on the flight."""
        self.checkpoints += 1
        self.bytes += int(nbytes)
        self.moving_s += float(moving_s)
        self.wait_s += float(wait_s)

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> "TransferTally":
        """The tally of the ``checkpoint_transfer`` rows among measurement ``rows`` (a row
        written before ``wait_s`` was measured counts a wait of 0)."""
        tally = cls()
        for row in rows:
            if isinstance(row, CheckpointTransfer):
                tally.add(row.bytes, *_parts(row))
        return tally

    @property
    def transfer_s(self) -> float:
        """Mean seconds from durable on the flight to durable at home (0.0 without one)."""
        return (self.moving_s + self.wait_s) / self.checkpoints if self.checkpoints else 0.0

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
    rate, wait = figure.get("bytes_per_s"), figure.get("wait_s")
    if _number(rate) and rate > 0:
        return nbytes / rate + (wait if _number(wait) else 0.0)
    seconds = figure.get("transfer_s")
    return float(seconds) if _number(seconds) else 0.0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
