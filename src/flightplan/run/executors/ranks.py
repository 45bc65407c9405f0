"""One execution as several worker processes: the ranks of a data-parallel run.

A run with ``[[run]] processes = N`` (N > 1) executes as N worker processes started
together, each with the environment ``torchrun`` gives its workers (:func:`rank_env`):
``RANK`` and ``LOCAL_RANK`` (0 … N−1, one flight: the same), ``WORLD_SIZE`` and
``LOCAL_WORLD_SIZE`` (N), ``MASTER_ADDR=127.0.0.1`` and ``MASTER_PORT`` (a loopback port
the group holds from before its ranks start until it ended: :class:`PortReservation`;
never an address beyond this machine). On a machine with GPUs every rank sees the run's GPUs (``CUDA_VISIBLE_DEVICES``)
and uses the one at its ``LOCAL_RANK``, as under ``torchrun``.

:class:`RankGroup` holds the processes as one unit, with the part of the
:class:`subprocess.Popen` interface the executor uses (``poll``, ``send_signal``, ``kill``,
``wait``): the group's exit code is the first non-zero exit code of a rank (a rank killed
by a signal: minus the signal), and the moment one rank ends that way every other rank is
killed and waited for (after a stop or a leave, which every rank reaches together, the
others first get :data:`GRACE_S` seconds to end on their own); the group ends with 0 only
once every rank ended with 0. Each rank
appends its output to the run's ``log.txt`` as a single worker does, every line it writes
from Python prefixed ``[rank R] `` (:mod:`flightplan.trial.distributed`).
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Callable, Sequence

from flightplan.errors import TrialPreempted, TrialStopped

__all__ = ["RankGroup", "rank_env", "PortReservation", "LOOPBACK", "ORDERLY_EXITS", "GRACE_S"]

LOOPBACK = "127.0.0.1"
"""``MASTER_ADDR`` of every group: the ranks of a local run meet on the loopback interface."""

ORDERLY_EXITS = frozenset({TrialStopped.exit_code, TrialPreempted.exit_code})
"""Exit codes every rank reaches together (stopped by a rule: 1; left the flight: 75): the
trial ends no rank with them before the run's record is durable, so the others are given
:data:`GRACE_S` to end on their own before they are killed."""

GRACE_S = 10.0
"""Seconds the other ranks get to end after one ended with an :data:`ORDERLY_EXITS` code."""


class PortReservation:
    """A loopback TCP port held for a group's ``MASTER_PORT`` until :meth:`release`.

    The kernel picks a free port (bind to port 0) and this socket keeps it bound, with
    ``SO_REUSEADDR`` and never listening: while it is held the kernel gives the port to no
    other ``bind`` to port 0 and to no outgoing connection's local end, so the seconds a
    rank spends importing before rank 0 listens on it cannot lose it to another process
    (a Ray node's or an MLflow server's port, a client's connection). Rank 0's store binds
    it beside the reservation (it sets ``SO_REUSEADDR`` too, and nothing listens here).

    Raises:
        OSError: no port could be bound.
    """

    def __init__(self, host: str = LOOPBACK) -> None:
        self._socket: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, 0))
        except OSError:
            self._socket.close()
            raise
        self.port: int = self._socket.getsockname()[1]

    def release(self) -> None:
        """Let the port go (idempotent): the group that used it ended."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The environment of rank ``rank`` of ``world_size`` on one machine, as ``torchrun``
    sets it (``MASTER_ADDR`` is :data:`LOOPBACK`, ``MASTER_PORT`` is ``port``).

    Raises:
        ValueError: ``rank`` is not in ``0 … world_size − 1``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0…{world_size - 1}")
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": LOOPBACK,
            "MASTER_PORT": str(port)}


class RankGroup:
    """The N processes of one execution, ended together.

    Args:
        processes: the ranks' processes, rank 0 first.
    """

    def __init__(self, processes: Sequence[subprocess.Popen[bytes]], *,
                 grace_s: float = GRACE_S, port: PortReservation | None = None) -> None:
        self.processes = list(processes)
        self.returncode: int | None = None
        self._grace_s = grace_s
        self._orderly_since: float | None = None
        self._port = port

    @classmethod
    def start(cls, world_size: int, launch: Callable[[dict[str, str]], subprocess.Popen[bytes]],
              *, port: int | None = None) -> "RankGroup":
        """Start ``world_size`` ranks: ``launch(rank_env(...))`` for each, rank 0 first. A
        rank that cannot be started kills those already started.

        Args:
            launch: starts one worker with these extra environment variables.
            port: ``MASTER_PORT`` (default: a :class:`PortReservation` the group holds
                until it ended).
        """
        reservation = PortReservation() if port is None else None
        master_port = reservation.port if reservation is not None else port
        assert master_port is not None
        started: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(world_size):
                started.append(launch(rank_env(rank, world_size, master_port)))
        except BaseException:
            cls(started, port=reservation).kill()
            raise
        return cls(started, port=reservation)

    @property
    def pids(self) -> list[int]:
        """The ranks' process ids, rank 0 first."""
        return [p.pid for p in self.processes]

    def poll(self) -> int | None:
        """The group's exit code once it ended, else None. The first rank found ended with
        a non-zero code ends the group: every other rank is killed and waited for (ranks
        that ended with :data:`ORDERLY_EXITS` codes only: once :data:`GRACE_S` passed)."""
        if self.returncode is not None:
            return self.returncode
        codes = [p.poll() for p in self.processes]
        failed = [code for code in codes if code not in (None, 0)]
        if failed and None in codes and all(code in ORDERLY_EXITS for code in failed):
            now = time.monotonic()
            self._orderly_since = self._orderly_since or now
            if now - self._orderly_since < self._grace_s:
                return None          # the others are on their way out with the same code
        if failed:
            self.kill()
            self.returncode = failed[0]
        elif all(code == 0 for code in codes):
            self.returncode = 0
            self._release_port()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to every rank still running (the leave request reaches each)."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL every rank still running and wait for all of them (none is left behind)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait()
        self._release_port()

    def _release_port(self) -> None:
        if self._port is not None:
            self._port.release()

    def wait(self) -> int:
        """Wait until the group ended (see :meth:`poll`); its exit code."""
        while self.poll() is None:
            for process in self.processes:
                if process.poll() is None:
                    try:
                        process.wait(timeout=0.1)
                    except subprocess.TimeoutExpired:
                        pass
                    break
        assert self.returncode is not None
        return self.returncode
