"""Runs on Ray nodes, one node per flight, with every file streamed home as it is made.

The campaign directory (ledger, ``runs/``, ``results/``) stays on the machine that runs
``flightplan run`` ("home"); each rented flight joins its Ray cluster as a node. Each
execution of a run is a :class:`~flightplan.run.executors.ray_host.RunHost` actor placed on a flight
with the resources the run declares (``num_gpus`` = its ``[[run]] gpus``; on a cluster
without GPUs, one unit of the custom resource :data:`FLIGHT_RESOURCE` per run, so a CPU
node stands in for a one-GPU flight). A run with ``[[run]] processes = N`` executes as N
ranks that its actor starts together on that one flight, meeting on the flight's loopback
interface. Ray never retries anything (``max_restarts=0``,
``max_task_retries=0``): flightplan decides what runs again and from which checkpoint.

One execution, seen from home::

    when resuming: the newest checkpoint home, in chunks ──▶ RunHost.receive (as below, the
                   other way: run/executors/to_flight.py, on a thread of its own, at most
                   DEPTH chunks on their way; committed on the flight before the worker
                   starts; other executions' polls go on meanwhile)
    trial.json + that checkpoint's name ──▶ RunHost.start (scratch folder on the flight,
                                             python -m flightplan.run.worker)
    every poll_s:  RunHost.poll ──▶ new measurement rows, log bytes and, once every
                                     committed checkpoint is home, the exit code and every
                                     output
    all the while: the newest checkpoint not yet home, in chunks as it is written, over a
                   direct connection from the flight to home (run/executors/channel.py:
                   home listens, the flight proves the execution's secret, sent with
                   start); when it cannot be made, with the polls instead (home's rewinds
                   with the next poll; while checkpoint data waits, polls go at once, DEPTH
                   in flight), said once in log.txt and on stderr
    home: rows appended; chunks written and hash-checked as they come, the checkpoint
          committed at its manifest, with a ``checkpoint_transfer`` row {name, bytes,
          wait_s, fetch_s, commit_s, stream_s, resent_bytes, node}; outputs committed
          after hash checks (run/executors/transfer.py), done.json/stop.json last

The transfers this executor measured (every run's, the pilot's too) go to the flight with
``start`` and each ``poll`` as one figure, kept in ``<scratch>/transfer.json`` for the
trial's interval policy (:mod:`flightplan.transfer_time`).

When a flight goes away (its node dies: the actor call raises), the run's execution is
reported through ``on_interrupted`` (:class:`~flightplan.run.executors.contract.Interruption`: node,
steps done, the checkpoint home, steps and seconds lost) and the run is queued again at
the front, with ``resume`` set when a checkpoint of it came home: a run whose checkpoints
came home and have all gone since is then stopped by its own ``no_usable_resume`` rule
instead of restarting silently from scratch, while one none of whose checkpoints came home
starts again from step 0 (what it saved on the flight went with the flight). The class
says so (``saves_on_flight``), so that the runner counts a save for resume only once its
checkpoint is home (:func:`flightplan.rows.records_a_save`).

Before a run's worker starts, the runner is asked (``admit``) whether it may start on the
flight its actor was placed on (:mod:`flightplan.run.rental`: can it finish before that
flight's package ends?). When it may not, the actor goes and the run is placed again,
pinned (``NodeAffinitySchedulingStrategy``) to a live flight that it was not refused on
and that has the resources it needs; when no such flight is left, the run is dropped
without a result (it stays pending) and ``log.txt`` says so. The actors belong to this
process, so a killed
``flightplan run`` takes its executions with it (the worker dies with its actor:
``PR_SET_PDEATHSIG``); running it again resumes from what came home.

Usage::

    executor = RayExecutor(address="10.0.0.5:6379")
    executor.run(jobs, on_start=..., on_done=..., on_progress=..., on_interrupted=...)
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import ray
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from flightplan.durable import append_durable
from flightplan.rundir import RunDir
from flightplan.errors import ArgumentError, TransferError
from flightplan.run.executors.channel import HomeEnd, ArrivedCheckpoint
from flightplan.run.executors.contract import (EXIT_NO_FLIGHT, ClusterJoined, Executor,
                                               Interruption, Job, JobResult, MeasurementTail,
                                               RunProgress, left_execution, lost_execution)
from flightplan.run.executors.leave_watch import LeaveBy, LeaveWatch
from flightplan.trial.leave import EXIT_PREEMPTED
from flightplan.run.executors.ray_head import check_head, join_settings
from flightplan.run.executors.ray_host import PollUpdate, RunHost
from flightplan.run.executors.stream import (CHUNK_BYTES, DEPTH, CheckpointReceiver, Chunk,
                                             Outcome, Rewind)
from flightplan.run.executors.to_flight import FlightFeed
from flightplan.run.executors.transfer import checkpoint_steps, commit_outputs
from flightplan.rows import CheckpointTransfer, CheckpointTransferFailed, Row, encode_row
from flightplan.transfer_time import TransferTally

__all__ = ["FLIGHT_RESOURCE", "EXIT_NO_FLIGHT", "EXIT_HOST_ERROR", "RayExecutor"]

FLIGHT_RESOURCE = "flight"
"""Custom Ray resource that a CPU-only node declares once per run it may hold."""

EXIT_HOST_ERROR = 5
"""Exit code given to an execution whose flight-side host raised (e.g. a checkpoint sent
to it arrived damaged); the error is appended to the run's ``log.txt``."""

class Phase(enum.Enum):
    """Where one execution stands, seen from home; in each, one call to its actor is pending.

    ::

        PLACING ──where() answered, the runner admits it there──▶ SENDING (resuming) or
           │                                                      STARTING
           │ refused there: the actor goes, the job is placed again pinned elsewhere
        SENDING ──the checkpoint committed on the flight (FlightFeed, no call pending)──▶
           │ STARTING; home's checkpoint failed its own check: set aside, placed again
        STARTING ──start() answered (worker started)──▶ RUNNING
        RUNNING ──poll() every poll_s; ends when a poll brings the worker's exit code

    From any phase, a call that raises ends it: the host's own error or its refusal of the
    checkpoint (a result with :data:`EXIT_HOST_ERROR`) or its actor or node gone (RUNNING:
    an interruption that resumes elsewhere; before that: placed again, nothing lost).
    """

    PLACING = "placing"
    SENDING = "sending"
    STARTING = "starting"
    RUNNING = "running"


@dataclass
class _Execution:
    """Home's view of one execution in flight."""

    job: Job
    actor: Any
    ref: Any                      # the pending where() or start() call, or None
    receiver: CheckpointReceiver
    trial: bytes = b""            # trial.json, until start() is asked
    resume: bool = False          # its newest checkpoint home goes to the flight first
    feed: FlightFeed | None = None    # while that checkpoint is on its way
    offer: Any = None             # the direct connection's offer, for start()
    phase: Phase = Phase.PLACING
    polls: list[tuple[Any, float]] = field(default_factory=list)  # (poll(), unix asked)
    rewinds: list[Rewind] = field(default_factory=list)   # for the next poll
    streaming: bool = False       # checkpoint data waits on the flight: ask at once
    where: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0       # when start() was asked: the execution begins
    last_poll: float = 0.0
    tail: MeasurementTail | None = None
    watch: LeaveWatch | None = None   # when to ask it to leave before the package ends
    home: HomeEnd | None = None       # the direct connection's listener, while it runs
    lock: threading.Lock = field(default_factory=threading.Lock)   # around receiver.take

    @property
    def node(self) -> str:
        """``<node id[:12]> (<ip>)``."""
        return f"{str(self.where.get('node_id', '?'))[:12]} ({self.where.get('ip', '?')})"

    def take(self, chunk: Chunk, asked_at: float) -> Outcome:
        """Write a chunk that came with a poll (a refused name or path: refused)."""
        with self.lock:
            return self.receiver.accept(chunk, asked_at=asked_at)


@dataclass
class _Callbacks:
    """The runner's callbacks of one :meth:`RayExecutor.run` (see :class:`Executor`)."""

    on_start: Callable[[Job], None] | None = None
    on_done: Callable[[JobResult], None] | None = None
    on_progress: Callable[[Job, RunProgress], None] | None = None
    on_interrupted: Callable[[Job, Interruption], None] | None = None
    admit: Callable[[Job, str], bool] | None = None
    leave_by: Callable[[Job, str], LeaveBy | None] | None = None


@dataclass
class _Loop:
    """The state of one :meth:`RayExecutor.run`: jobs waiting (front first), executions
    in flight, results so far, the flights each job was refused on, and since when the
    job at the front has waited for a flight that the cluster does not have."""

    calls: _Callbacks
    queue: list[Job]
    active: list[_Execution] = field(default_factory=list)
    results: list[JobResult] = field(default_factory=list)
    refused: dict[str, set[str]] = field(default_factory=dict)   # run id → node ids
    waiting_since: float | None = None

    def ended(self, result: JobResult) -> None:
        """A job's execution ended with ``result``."""
        self.results.append(result)
        if self.calls.on_done:
            self.calls.on_done(result)

    def again(self, ex: _Execution, info: Interruption | None = None) -> None:
        """``ex`` is over without its run ending: report ``info`` (an interruption) and put
        the job back at the front of the queue."""
        if info is not None and self.calls.on_interrupted:
            self.calls.on_interrupted(ex.job, info)
        self.queue.insert(0, ex.job)


def _row(run_dir: Path, row: Row) -> None:
    """Append one row made at home (a transfer's) to the run's ``measurements.jsonl``."""
    append_durable(RunDir(run_dir).measurements, encode_row(row))


def _step_of(name: str) -> int:
    """The steps a checkpoint folder's name holds, 0 for a name that is not one."""
    try:
        return checkpoint_steps(name)
    except TransferError:
        return 0


def _home_address() -> str:
    """The address Ray uses for this process's node: where home listens for flights."""
    return str(ray.util.get_node_ip_address())


def _node_address(where: dict[str, Any]) -> str:
    """The address the node joined the cluster with (what Ray binds), from the GCS."""
    return next((n["NodeManagerAddress"] for n in ray.nodes()
                 if n["NodeID"] == where["node_id"]), "?")


def _awaited(ex: _Execution) -> Any:
    """The call of ``ex`` to wait for: its oldest poll while it runs (answers come in
    order), else its where() or start(); None when none is pending."""
    if ex.phase is Phase.RUNNING:
        return ex.polls[0][0] if ex.polls else None
    return ex.ref


def _needs_text(needs: dict[str, float]) -> str:
    """``2 GPUs`` or ``1 flight``: what one execution holds, in words."""
    return ", ".join(f"{amount:g} {'GPU' if name == 'GPU' else name}"
                     f"{'s' if amount != 1 else ''}" for name, amount in needs.items())


def _trial(job: Job) -> dict[str, Any]:
    trial: dict[str, Any] = json.loads(job.trial_json.read_text(encoding="utf-8"))
    return trial


class RayExecutor(Executor):
    """Runs on the nodes of a Ray cluster (see the module docstring).

    Args:
        address: the head's ``HOST:PORT`` (None: ``$RAY_ADDRESS``, or a cluster this
            process already joined).
        poll_s: seconds between polls of each execution.
        env: extra environment variables for every worker.
        scratch: parent folder of the scratch folders on every flight (None: each node's
            ``$FLIGHTPLAN_SCRATCH`` or temp folder).
        no_flight_s: how long a run waits for a flight that the cluster does not have
            (all lost, or none with the GPUs it needs) before it ends with
            :data:`~flightplan.run.executors.contract.EXIT_NO_FLIGHT`.
        worker: the command that starts a worker on a flight, before the ``trial.json``
            path (None: ``python -m flightplan.run.worker`` with the flight's Python;
            tests substitute a fake worker).

        trusted_network: join a head without token authentication that the network can
            reach (the user stated that only their machines can reach it).
        direct: bring checkpoints home over a direct connection from each flight
            (:mod:`flightplan.run.executors.channel`); False: with the polls only.
        chunk_bytes: bytes of checkpoint data in one chunk, either way (the memory each
            side holds is a few of them: :data:`~flightplan.run.executors.stream.CHUNK_BYTES`).

    Raises:
        ArgumentError: (at :meth:`connect` or ``run``) no cluster answers at ``address``,
            its head refuses this driver's token, it has no token authentication and the
            network is not stated trusted, or it has neither GPUs nor the ``flight``
            resource.
    """

    saves_on_flight = True

    def __init__(self, *, address: str | None = None, poll_s: float = 0.2,
                 env: dict[str, str] | None = None, scratch: str | None = None,
                 no_flight_s: float = 120.0, worker: list[str] | None = None,
                 trusted_network: bool = False, direct: bool = True,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.address = address
        self.worker = list(worker) if worker else None
        self.poll_s = poll_s
        self.env = dict(env or {})
        self.scratch = scratch
        self.no_flight_s = no_flight_s
        self.trusted_network = trusted_network
        self.direct = direct
        self.chunk_bytes = chunk_bytes
        self._noticed: set[str] = set()      # flights whose fallback to the polls was said
        self._connected = False
        self._joined: ClusterJoined | None = None
        self._settings = contextlib.ExitStack()
        self._transfers = TransferTally()   # every checkpoint that came home through it

    def close(self) -> None:
        """Leave the cluster if :meth:`connect` joined it (this process's actors end with
        it)."""
        if self._connected and ray.is_initialized():
            ray.shutdown()
        self._connected = False
        self._joined = None
        self._settings.close()

    # -- the cluster -------------------------------------------------------------------
    def connect(self) -> ClusterJoined | None:
        """Join the cluster at ``address`` (else ``$RAY_ADDRESS``) once its head was checked
        (:func:`~flightplan.run.executors.ray_head.check_head`: something answers; a head
        without token authentication that the network can reach only with
        ``trusted_network``); nothing when this process already joined one.

        Returns:
            What was found about the head (the runner records it), or None when this
            process had joined a cluster itself.

        Raises:
            ArgumentError: no address; the head check refused it; Ray could not join it.
        """
        if self._joined is not None or (ray.is_initialized() and not self._connected):
            return self._joined
        address = self.address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise ArgumentError("--executor ray: no head address; give --address HOST:PORT "
                                "(or [execution] address, or $RAY_ADDRESS)")
        joined = check_head(address, trusted_network=self.trusted_network)
        self._settings.enter_context(join_settings(joined))
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            self._settings.close()
            raise ArgumentError(
                f"--address {address}: the Ray head answers but this driver could not join "
                f"it ({str(exc).splitlines()[0]}); check that it runs Ray "
                f"{ray.__version__}, as here") from None
        self._connected, self._joined = True, joined
        return joined

    def _needs(self, job: Job) -> dict[str, float]:
        """The resources one execution of ``job`` holds."""
        if ray.cluster_resources().get("GPU", 0) > 0:
            return {"GPU": float(job.gpus)}
        return {FLIGHT_RESOURCE: 1.0}

    def _check_cluster(self) -> None:
        total = ray.cluster_resources()
        if total.get("GPU", 0) <= 0 and total.get(FLIGHT_RESOURCE, 0) <= 0:
            raise ArgumentError(
                f"the Ray cluster at {self.address or 'auto'} has no GPU and no "
                f"{FLIGHT_RESOURCE!r} resource, so no flight to run on; join each flight "
                f"with `ray start --address HOST:PORT --num-gpus N` (a CPU machine: "
                f"--resources '{{\"{FLIGHT_RESOURCE}\": 1}}')")

    @staticmethod
    def _has(pool: dict[str, float], needs: dict[str, float]) -> bool:
        return all(pool.get(k, 0.0) >= v for k, v in needs.items())

    def _launch(self, job: Job, node_id: str | None) -> _Execution:
        """An actor for ``job`` (on ``node_id`` when given, else where Ray places it),
        asked first where it is; its worker starts once the runner admits it there."""
        needs = self._needs(job)
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
        if "GPU" in needs:
            options["num_gpus"] = needs["GPU"]
        else:
            options["resources"] = needs
        if node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        host: Any = ray.remote(RunHost)     # an actor class (Ray's stubs type it as the class)
        actor = host.options(**options).remote(job.run_id, self.scratch, self.env, self.worker,
                                               self.chunk_bytes, job.processes)
        trial = _trial(job)
        keep = (trial.get("checkpoint") or {}).get("keep_last")
        return _Execution(job, actor, actor.where.remote(),
                          CheckpointReceiver(job.run_dir / RunDir.CHECKPOINTS, keep_last=keep),
                          trial=job.trial_json.read_bytes(), resume=bool(trial.get("resume")))

    def _other_flight(self, job: Job, refused: set[str]) -> str | None:
        """A live node that ``job`` was not refused on and whose resources can hold it."""
        needs = self._needs(job)
        return next((n["NodeID"] for n in ray.nodes() if n["Alive"]
                     and n["NodeID"] not in refused and self._has(n["Resources"], needs)),
                    None)

    # -- one execution's deltas ----------------------------------------------------------
    def _absorb(self, ex: _Execution, delta: PollUpdate, asked_at: float) -> None:
        """Append the new rows and log home; write the chunks that came (their rewinds go
        with the next poll); each checkpoint committed gets a ``checkpoint_transfer`` row
        (:mod:`flightplan.transfer_time`): ``wait_s`` on the flight from durable there to
        its last chunk, ``fetch_s`` for the poll that brought it, ``commit_s`` for the
        checks, fsync and rename, ``stream_s`` from asking for its first chunk to durable
        at home, ``resent_bytes``."""
        run_dir = ex.job.run_dir
        append_durable(run_dir / RunDir.MEASUREMENTS, delta.measurements)
        append_durable(run_dir / RunDir.LOG, delta.log)
        if delta.notice is not None:
            self._notice(ex, delta.notice)
        self._record_direct_arrivals(ex)
        ex.streaming = delta.pending or bool(delta.chunks)
        fetched = time.time()
        for chunk in delta.chunks:
            outcome = ex.take(chunk, asked_at)
            if outcome.rewind is not None:
                ex.rewinds.append(outcome.rewind)
            self._record_arrival(ex, ArrivedCheckpoint(outcome, chunk.name, asked_at, fetched, time.time()))

    def _record_direct_arrivals(self, ex: _Execution) -> None:
        """The rows of what came home over the direct connection since the last call."""
        if ex.home is not None:
            for arrival in ex.home.arrived():
                self._record_arrival(ex, arrival)

    def _record_arrival(self, ex: _Execution, arrival: ArrivedCheckpoint) -> None:
        """The row of a checkpoint refused (``checkpoint_transfer_failed``) or committed
        (``checkpoint_transfer``, and the running transfer figure)."""
        outcome, run_dir = arrival.outcome, ex.job.run_dir
        if outcome.refused is not None:
            _row(run_dir, CheckpointTransferFailed(
                _step_of(arrival.name), arrival.done_at, name=arrival.name[:80],
                error=outcome.refused, node=ex.node))
        done = outcome.committed
        if done is None:
            return
        now, asked_at = arrival.done_at, arrival.asked_at
        stream_s, trip = now - done.first_asked_at, done.waited_s + now - asked_at
        _row(run_dir, CheckpointTransfer(
            checkpoint_steps(done.name), now, name=done.name, bytes=done.bytes,
            wait_s=done.waited_s, fetch_s=arrival.fetched_at - asked_at,
            commit_s=now - arrival.fetched_at, stream_s=stream_s,
            resent_bytes=done.resent_bytes, node=ex.node))
        self._transfers.add(done.bytes, stream_s, done.waited_s, trip_s=trip)

    def _notice(self, ex: _Execution, why: str) -> None:
        """Say why checkpoints come with the polls: in the run's log, and once per flight
        on stderr."""
        line = f"checkpoints come home with Ray's polls instead of the direct connection: {why}"
        append_durable(ex.job.run_dir / RunDir.LOG, f"--- flightplan: {line} ---\n".encode())
        flight = str(ex.where.get("node_id", "?"))
        if flight not in self._noticed:
            self._noticed.add(flight)
            print(f"flightplan: flight {ex.node}: {line}", file=sys.stderr)

    def _hang_up(self, ex: _Execution) -> None:
        """Close the execution's listener (and its connection); the rows of what came home
        over it last."""
        if ex.home is not None:
            ex.home.close()
            self._record_direct_arrivals(ex)
            if ex.home.refused:
                append_durable(ex.job.run_dir / RunDir.LOG, "".join(
                    f"--- flightplan: dropped a direct connection from {why} ---\n"
                    for why in ex.home.refused).encode())
            if ex.home.refused_frames:
                counts = ", ".join(f"{n} ({why})" for why, n in
                                   sorted(ex.home.refused_frames.items()))
                append_durable(ex.job.run_dir / RunDir.LOG, f"--- flightplan: frames the "
                               f"direct connection refused and had sent again: {counts} ---\n"
                               .encode())
            ex.home = None

    def _finish(self, ex: _Execution, delta: PollUpdate) -> JobResult:
        assert delta.exit_code is not None
        code = int(delta.exit_code)
        try:
            commit_outputs(ex.job.run_dir, delta.outputs)
        except TransferError as exc:
            append_durable(ex.job.run_dir / "log.txt",
                           f"flightplan: outputs not committed: {exc}\n".encode())
        self._release(ex)
        return JobResult(ex.job.run_id, ex.job.run_dir, code, ex.started_at, time.time(),
                         node=ex.node)

    def _left(self, ex: _Execution) -> Interruption:
        """Record at home an execution that left its flight with its checkpoint (exit
        :data:`~flightplan.run.executors.leave_watch.EXIT_PREEMPTED`) and prepare it to resume."""
        info = left_execution(ex.job, node=ex.node, started_at=ex.started_at, watch=ex.watch)
        self._release(ex)
        return info

    def _release(self, ex: _Execution) -> None:
        """End an execution whose worker ended: its scratch folder removed (everything it
        made is home), then its actor and its listener."""
        try:
            ray.get(ex.actor.close.remote(), timeout=30)
        except RayError:
            pass
        ray.kill(ex.actor)
        self._hang_up(ex)

    def _lost(self, ex: _Execution, exc: Exception) -> Interruption:
        """Record a lost execution at home and prepare the job to resume."""
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        try:
            ray.kill(ex.actor)
        except RayError:
            pass
        self._hang_up(ex)
        return lost_execution(ex.job, node=ex.node, reason=reason, started_at=ex.started_at,
                              saved_any=RunDir(ex.job.run_dir).saved_checkpoint(on_flight=True))

    # -- the loop -------------------------------------------------------------------------
    def run(self, jobs: Iterable[Job], *, on_start: Callable[[Job], None] | None = None,
            on_done: Callable[[JobResult], None] | None = None,
            on_progress: Callable[[Job, RunProgress], None] | None = None,
            on_interrupted: Callable[[Job, Interruption], None] | None = None,
            admit: Callable[[Job, str], bool] | None = None,
            leave_by: Callable[[Job, str], LeaveBy | None] | None = None) -> list[JobResult]:
        self.connect()
        self._check_cluster()
        loop = _Loop(_Callbacks(on_start, on_done, on_progress, on_interrupted, admit,
                                leave_by), list(jobs))
        try:
            while loop.queue or loop.active:
                self._place(loop)
                now = time.time()
                for ex in list(loop.active):
                    if ex.phase is Phase.RUNNING:
                        self._record_direct_arrivals(ex)
                        self._ask(ex, now)
                    elif ex.feed is not None and ex.feed.done.is_set():
                        self._sent(loop, ex)
                awaited = {ref: ex for ex in loop.active if (ref := _awaited(ex)) is not None}
                if not awaited:
                    time.sleep(self.poll_s)
                    continue
                ready, _ = ray.wait(list(awaited), num_returns=len(awaited),
                                   timeout=self.poll_s)
                for ref in ready:
                    if awaited[ref] in loop.active:
                        self._answer(loop, awaited[ref])
        finally:
            for ex in loop.active:
                if ex.feed is not None:
                    ex.feed.stop()
                try:
                    ray.kill(ex.actor)
                except RayError:
                    pass
                if ex.home is not None:
                    ex.home.close()
        return loop.results

    def _place(self, loop: _Loop) -> None:
        """Launch the job at the front of the queue when no other is being placed and a
        flight has what it needs; drop the jobs no flight is left for on the way."""
        while loop.queue and not any(e.phase is not Phase.RUNNING for e in loop.active):
            job = loop.queue[0]
            needs = self._needs(job)
            pinned = None
            if loop.refused.get(job.run_id):
                pinned = self._other_flight(job, loop.refused[job.run_id])
                if pinned is None:
                    append_durable(loop.queue.pop(0).run_dir / "log.txt",
                                   b"--- flightplan: not started: no flight left where it "
                                   b"can finish before the package ends (flightplan status "
                                   b"says why) ---\n")
                    continue
            if self._has(ray.available_resources(), needs):
                loop.active.append(self._launch(loop.queue.pop(0), pinned))
                loop.waiting_since = None
            elif not loop.active and not self._has(ray.cluster_resources(), needs):
                loop.waiting_since = loop.waiting_since or time.time()
                if time.time() - loop.waiting_since > self.no_flight_s:
                    loop.ended(self._no_flight(loop.queue.pop(0), needs))
                    loop.waiting_since = None
                    continue
            return

    def _ask(self, ex: _Execution, now: float) -> None:
        """Poll a running execution: every ``poll_s``, or while checkpoint data waits on
        the flight at once, with up to :data:`~flightplan.run.executors.stream.DEPTH`
        polls in flight (the flight cuts the next chunk while home writes this one)."""
        depth = DEPTH if ex.streaming else 1
        while len(ex.polls) < depth and (ex.streaming or now - ex.last_poll >= self.poll_s):
            ex.polls.append((ex.actor.poll.remote(self._transfers.figure(), ex.rewinds), now))
            ex.rewinds, ex.last_poll = [], now

    def _answer(self, loop: _Loop, ex: _Execution) -> None:
        """Take the answer of ``ex``'s oldest pending call and move it on (:class:`Phase`)."""
        if ex.phase is Phase.RUNNING:
            ref, asked_at = ex.polls.pop(0)
        else:
            ref, ex.ref, asked_at = ex.ref, None, 0.0
        try:
            value = ray.get(ref)
        except RayTaskError as exc:  # the host raised: this execution failed
            loop.active.remove(ex)
            loop.ended(self._host_error(ex, exc))
            return
        except RayError as exc:  # actor or node gone: the flight was lost
            loop.active.remove(ex)
            if ex.phase is Phase.RUNNING:
                loop.again(ex, self._lost(ex, exc))
            else:
                ray.kill(ex.actor)
                self._hang_up(ex)
                loop.again(ex)
            return
        if ex.phase is Phase.PLACING:
            self._placed(loop, ex, value)
        elif ex.phase is Phase.STARTING:
            self._started(loop, ex, value)
        else:
            self._polled(loop, ex, value, asked_at)

    def _placed(self, loop: _Loop, ex: _Execution, where: dict[str, Any]) -> None:
        """PLACING → STARTING when the runner admits the job on the flight Ray chose; else
        the actor goes and the job is placed again, not on that flight."""
        ex.where = dict(where, ip=_node_address(where))
        admit = loop.calls.admit
        if admit and not admit(ex.job, ex.node):
            loop.active.remove(ex)
            loop.refused.setdefault(ex.job.run_id, set()).add(where["node_id"])
            ray.kill(ex.actor)
            loop.again(ex)
            return
        # the execution starts now, on this flight: the checkpoint sent there and the
        # worker launched are its first seconds (goodput: waiting)
        ex.started_at = time.time()
        offer = None
        if self.direct:
            try:
                ex.home = HomeEnd(ex.receiver, ex.lock, host=_home_address(),
                                  chunk_bytes=self.chunk_bytes)
                offer = ex.home.offer
            except OSError as exc:
                append_durable(ex.job.run_dir / RunDir.LOG,
                               f"--- flightplan: checkpoints come home with Ray's polls: "
                               f"cannot listen at {_home_address()} ({exc}) ---\n".encode())
        ex.offer = offer
        deadline = loop.calls.leave_by(ex.job, ex.node) if loop.calls.leave_by else None
        if deadline is not None:
            ex.watch = LeaveWatch(deadline, ex.job.run_dir, poll_s=self.poll_s)
        if ex.resume:
            ex.phase = Phase.SENDING
            ex.feed = FlightFeed(ex.job.run_dir / RunDir.CHECKPOINTS, ex.actor,
                                 chunk_bytes=self.chunk_bytes).start()
        else:
            self._start(ex, None)

    def _start(self, ex: _Execution, checkpoint: str | None) -> None:
        """→ STARTING: ask the flight to start the worker (from ``checkpoint``, committed
        there); nothing of the start stays referenced here but the call."""
        ex.phase = Phase.STARTING
        ex.ref = ex.actor.start.remote(ex.trial, checkpoint, self._transfers.figure(),
                                       ex.offer)
        ex.trial, ex.offer = b"", None

    def _sent(self, loop: _Loop, ex: _Execution) -> None:
        """SENDING ended (its feed is done): start the worker from the checkpoint committed
        on the flight; or, home's checkpoint having failed its check or the flight gone,
        place the job again; or, the flight having refused the checkpoint, end it with
        :data:`EXIT_HOST_ERROR`."""
        feed, ex.feed = ex.feed, None
        assert feed is not None
        log = ex.job.run_dir / RunDir.LOG
        if feed.sent is not None:
            sent = feed.sent
            if sent.name is not None:
                append_durable(log, f"--- flightplan: sent {sent.name} to node {ex.node}: "
                                    f"{sent.bytes} bytes in {sent.chunks} chunks "
                                    f"({sent.resent_bytes} bytes sent again) in "
                                    f"{sent.seconds:.3f} s ---\n".encode())
            self._start(ex, sent.name)
            return
        loop.active.remove(ex)
        if isinstance(feed.error, TransferError):
            loop.ended(self._host_error(ex, feed.error))
            return
        if feed.error is not None and not isinstance(feed.error, RayError):
            raise feed.error
        if feed.set_aside is not None:
            append_durable(log, f"--- flightplan: {feed.set_aside.name.partition('.')[0]} at "
                                f"home does not match its manifest: set aside as "
                                f"{feed.set_aside.name}; placed again with the checkpoint "
                                f"before it ---\n".encode())
            self._release(ex)                  # what it received goes with its scratch
        else:
            with contextlib.suppress(RayError):
                ray.kill(ex.actor)
            self._hang_up(ex)
        loop.again(ex)

    def _started(self, loop: _Loop, ex: _Execution, where: dict[str, Any]) -> None:
        """STARTING → RUNNING: the worker runs on the flight."""
        ex.phase, ex.where = Phase.RUNNING, dict(where, ip=_node_address(where))
        ex.tail = MeasurementTail(ex.job.run_dir)
        append_durable(ex.job.run_dir / "log.txt",
                       f"--- flightplan worker started {time.strftime('%Y-%m-%dT%H:%M:%S')} "
                       f"on node {ex.node}, host {where['host']}, scratch "
                       f"{where['scratch']} ---\n".encode())
        if loop.calls.on_start:
            loop.calls.on_start(ex.job)

    def _polled(self, loop: _Loop, ex: _Execution, delta: PollUpdate, asked_at: float) -> None:
        """RUNNING: take what came home; the execution ends with the worker's exit (which
        the flight reports once every committed checkpoint is home)."""
        assert ex.tail is not None
        self._absorb(ex, delta, asked_at)
        if loop.calls.on_progress:
            loop.calls.on_progress(ex.job, ex.tail.read())
        if delta.exit_code == EXIT_PREEMPTED:  # its checkpoint came with it
            loop.active.remove(ex)
            info = self._left(ex)
            loop.refused.setdefault(ex.job.run_id, set()).add(ex.where["node_id"])
            loop.again(ex, info)
        elif delta.exit_code is not None:
            loop.active.remove(ex)
            loop.ended(self._finish(ex, delta))
        elif ex.watch is not None and ex.watch.due(time.time()):
            ex.watch.ask(ex.actor.leave.remote)

    def _host_error(self, ex: _Execution, exc: Exception) -> JobResult:
        append_durable(ex.job.run_dir / "log.txt",
                       f"--- flightplan: the host on node {ex.node} failed: {exc} ---\n"
                       .encode())
        try:
            ray.kill(ex.actor)
        except RayError:
            pass
        self._hang_up(ex)
        now = time.time()
        return JobResult(ex.job.run_id, ex.job.run_dir, EXIT_HOST_ERROR, ex.started_at or now,
                         now, node=ex.node)

    def _no_flight(self, job: Job, needs: dict[str, float]) -> JobResult:
        append_durable(job.run_dir / "log.txt",
                       f"--- flightplan: not started: no flight of the cluster has "
                       f"{_needs_text(needs)} (waited {self.no_flight_s:.0f} s); join a "
                       f"flight that has and run again to resume ---\n".encode())
        now = time.time()
        return JobResult(job.run_id, job.run_dir, EXIT_NO_FLIGHT, now, now)
