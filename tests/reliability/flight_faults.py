"""Flight nodes of a loopback Ray cluster killed at crash points.

A rented flight dies whole: its GPU, its disk, every process on it. Here a flight is a
node of a loopback Ray cluster (``tests/fixtures/ray_cluster.py``: token authentication
on, everything on 127.0.0.1). Its processes carry the fault shim
(``faultshim/sitecustomize.py``) on their ``PYTHONPATH`` and read their fault from a file
(``FLIGHTPLAN_FAULT_FILE``) when they start, since the nodes outlive every attempt. A
crash point of role ``flight`` is armed there with ``freeze``: the trial process that
reaches the call stops itself and writes its pid into the marker; :meth:`Flights.watcher`
then kills the node it runs on (raylet, workers, every process under them: SIGKILL); a
fresh node takes its place once the attempt is over (:meth:`Flights.replenish`), so every
attempt starts with as many flights as the cluster started with. A ``flight`` timer kills,
once the delay is over, the first node that runs a worker.

Usage::

    with Flights.start(count=2) as flights:
        attempt = run_with_crash(argv + ["--executor", "ray", "--address", flights.address],
                                 cwd=folder, point=CrashPoint("flight", "fsync", nth=3,
                                 contains="checkpoints"), marker=marker, flights=flights)
        flights.killed            # nodes killed so far
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from .cli_harness import ROOT
from .crash_harness import CrashPoint, shim_path

sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from ray_cluster import kill_node, loopback_cluster, node_of  # noqa: E402

__all__ = ["Flights"]

POLL_S = 0.05


def _workers() -> list[int]:
    """Pids of every ``flightplan.run.worker`` process of this machine."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if b"flightplan.run.worker" in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


class Flights:
    """The flight nodes of a loopback cluster and the fault file their processes read.

    Attributes:
        address: the head's ``host:port`` (``flightplan run --executor ray --address``).
        killed: how many flight nodes were killed (and replaced) so far.
    """

    def __init__(self, cluster: Any, nodes: list[Any], fault_file: Path) -> None:
        self.cluster, self.nodes, self.fault_file = cluster, list(nodes), fault_file
        self.count = len(self.nodes)
        self.address: str = cluster.address
        self.killed = 0
        self._lock = threading.Lock()
        self.arm(None)

    @classmethod
    @contextlib.contextmanager
    def start(cls, *, count: int = 2) -> Iterator[Flights]:
        """A head and ``count`` flight nodes (one ``flight`` each), every process stopped by
        its pid at the end."""
        with tempfile.TemporaryDirectory(prefix="flightplan-flights-") as scratch:
            fault_file = Path(scratch) / "fault.json"
            fault_file.write_text("null")
            env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "PYTHONPATH": shim_path(os.environ.get("PYTHONPATH")),
                   "FLIGHTPLAN_FAULT_FILE": str(fault_file)}
            with loopback_cluster(flights=count, env=env) as (cluster, nodes, _):
                yield cls(cluster, nodes, fault_file)

    def arm(self, config: dict | None) -> None:
        """Write the fault (the shim's JSON, None for none) that processes starting on a
        flight from now on read."""
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        os.replace(tmp, self.fault_file)

    def kill(self, node: Any) -> None:
        """Kill ``node`` (SIGKILL to everything on it); :meth:`replenish` replaces it."""
        with self._lock:
            kill_node(self.cluster, node)
            self.nodes.remove(node)
            self.killed += 1

    def replenish(self) -> None:
        """Add a fresh flight node for each one killed (from the main thread: Ray sets
        signal handlers when it starts a node)."""
        with self._lock:
            while len(self.nodes) < self.count:
                self.nodes.append(self.cluster.add_node(num_cpus=1, resources={"flight": 1}))
            self.cluster.wait_for_nodes()

    def _running(self) -> Any | None:
        """A flight node that runs a worker now, if any."""
        for pid in _workers():
            node = node_of(self.nodes, pid)
            if node is not None:
                return node
        return None

    def watcher(self, point: CrashPoint, marker: Path) -> Callable[[subprocess.Popen], None]:
        """What watches one attempt of the driver ``proc``: at the point, the node goes."""

        def at_call(proc: subprocess.Popen) -> None:
            while proc.poll() is None:
                text = marker.read_text() if marker.exists() else ""
                if text.strip():
                    pid = int(text)
                    node = node_of(self.nodes, pid)
                    if node is not None:
                        self.kill(node)
                    else:   # not on a flight: never leave it frozen
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    return
                time.sleep(POLL_S)

        def at_time(proc: subprocess.Popen) -> None:
            deadline = time.monotonic() + point.delay_s
            while proc.poll() is None:
                node = self._running() if time.monotonic() >= deadline else None
                if node is not None:
                    marker.write_text("timer")
                    self.kill(node)
                    return
                time.sleep(POLL_S)

        return at_time if point.point == "timer" else at_call
