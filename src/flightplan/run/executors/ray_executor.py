"""Runs on Ray nodes, one node per flight, with every file streamed home as it is made.

The campaign directory (ledger, ``runs/``, ``results/``) stays on the machine that runs
``flightplan run`` ("home"); each rented flight joins its Ray cluster as a node. Each
execution of a run is a :class:`~flightplan.run.executors.ray_host.RunHost` actor placed on a flight
with the resources the run declares (``num_gpus`` = its ``[[run]] gpus``; on a cluster
without GPUs, one unit of the custom resource :data:`FLIGHT_RESOURCE` per run, so a CPU
node stands in for a one-GPU flight). Ray never retries anything (``max_restarts=0``,
``max_task_retries=0``): flightplan decides what runs again and from which checkpoint.

One execution, seen from home::

    trial.json + latest verified checkpoint ──▶ RunHost.start (scratch folder on the flight,
                                                  python -m flightplan.run.worker)
    every poll_s:  RunHost.poll ──▶ new measurement rows, log bytes, the newest committed
                                     checkpoint not yet home, and at the end every output
    home: rows appended; checkpoint committed after hash checks (run/executors/transfer.py), with a
          ``checkpoint_transfer`` row {name, bytes, wait_s, fetch_s, commit_s, node}; outputs
          committed, done.json/stop.json last

The transfers this executor measured (every run's, the pilot's too) go to the flight with
``start`` and each ``poll`` as one figure, kept in ``<scratch>/transfer.json`` for the
trial's interval policy (:mod:`flightplan.transfer_time`).

When a flight goes away (its node dies: the actor call raises), the run's execution is
reported through ``on_interrupted`` (:class:`~flightplan.run.executors.contract.Interruption`: node,
steps done, the checkpoint home, steps and seconds lost) and the run is queued again at
the front, with ``resume`` set when a checkpoint came home or any was saved: a run whose
checkpoints are all lost is then stopped by its own ``no_usable_resume`` rule instead of
restarting silently from scratch.

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

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import ray
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from flightplan.durable import append_durable
from flightplan.errors import ArgumentError, TransferError
from flightplan.run.executors.contract import (Executor, Interruption, Job, JobResult, MeasurementTail,
                                     RunProgress, left_execution, lost_execution)
from flightplan.run.executors.leave_watch import LeaveBy, LeaveWatch
from flightplan.trial.leave import EXIT_PREEMPTED
from flightplan.run.executors.ray_host import Delta, RunHost
from flightplan.run.executors.transfer import (blob_bytes, commit_checkpoint, commit_outputs,
                                     latest_checkpoint)
from flightplan.rows import (CheckpointTransfer, CheckpointTransferFailed, Row, encode_row, parse_rows,
                             records_a_save)
from flightplan.rundir import RunDir
from flightplan.transfer_time import TransferTally

__all__ = ["FLIGHT_RESOURCE", "EXIT_NO_FLIGHT", "EXIT_HOST_ERROR", "RayExecutor"]

FLIGHT_RESOURCE = "flight"
"""Custom Ray resource that a CPU-only node declares once per run it may hold."""

EXIT_NO_FLIGHT = 4
"""Exit code given to a run that no flight of the cluster can hold any more."""

EXIT_HOST_ERROR = 5
"""Exit code given to an execution whose flight-side host raised (e.g. a checkpoint sent
to it arrived damaged); the error is appended to the run's ``log.txt``."""

@dataclass
class _Execution:
    """Home's view of one execution in flight."""

    job: Job
    actor: Any
    ref: Any                      # the pending where(), start() or poll() call, or None
    start_args: tuple[Any, ...] = ()   # (trial.json bytes, shipped checkpoint)
    placing: bool = True
    admitted: bool = False        # the runner let it start where it was placed
    where: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    last_poll: float = 0.0
    saved_any: bool = False       # a row recording a save came home from this execution
    tail: MeasurementTail | None = None
    watch: LeaveWatch | None = None   # when to ask it to leave before the package ends

    @property
    def node(self) -> str:
        """``<node id[:12]> (<ip>)``."""
        return f"{str(self.where.get('node_id', '?'))[:12]} ({self.where.get('ip', '?')})"


def _row(run_dir: Path, row: Row) -> None:
    """Append one row made at home (a transfer's) to the run's ``measurements.jsonl``."""
    append_durable(RunDir(run_dir).measurements, encode_row(row))


def _node_address(where: dict[str, Any]) -> str:
    """The address the node joined the cluster with (what Ray binds), from the GCS."""
    return next((n["NodeManagerAddress"] for n in ray.nodes()
                 if n["NodeID"] == where["node_id"]), "?")


def _trial(job: Job) -> dict[str, Any]:
    return json.loads(job.trial_json.read_text(encoding="utf-8"))


class RayExecutor(Executor):
    """Runs on the nodes of a Ray cluster (see the module docstring).

    Args:
        address: the cluster's ``HOST:PORT`` (None: ``$RAY_ADDRESS``, or a cluster this
            process already joined).
        poll_s: seconds between polls of each execution.
        env: extra environment variables for every worker.
        scratch: parent folder of the scratch folders on every flight (None: each node's
            ``$FLIGHTPLAN_SCRATCH`` or temp folder).
        no_flight_s: how long a run waits for a flight that the cluster no longer has
            (all lost) before it ends with :data:`EXIT_NO_FLIGHT`.

    Raises:
        ArgumentError: (at ``run``) no cluster answers at ``address``, or it has neither
            GPUs nor the ``flight`` resource.
    """

    def __init__(self, *, address: str | None = None, poll_s: float = 0.2,
                 env: dict[str, str] | None = None, scratch: str | None = None,
                 no_flight_s: float = 120.0) -> None:
        self.address = address
        self.poll_s = poll_s
        self.env = dict(env or {})
        self.scratch = scratch
        self.no_flight_s = no_flight_s
        self._connected = False
        self._transfers = TransferTally()   # every checkpoint that came home through it

    def close(self) -> None:
        """Leave the cluster if :meth:`run` joined it (this process's actors end with it)."""
        if self._connected and ray.is_initialized():
            ray.shutdown()
        self._connected = False

    # -- the cluster -------------------------------------------------------------------
    def _connect(self) -> None:
        if ray.is_initialized():
            return
        self._connected = True
        try:
            ray.init(address=self.address or "auto", log_to_driver=False,
                     logging_level="WARNING", configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ArgumentError(
                f"--address {self.address or '(none: $RAY_ADDRESS or auto)'}: no Ray cluster "
                f"answers ({str(exc).splitlines()[0]}); start the head with `ray start --head "
                f"--node-ip-address HOST --port 6379` and give HOST:6379") from None

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
        actor = ray.remote(RunHost).options(**options).remote(job.run_id, self.scratch,
                                                              self.env)
        trial = _trial(job)
        shipped = latest_checkpoint(job.run_dir / "checkpoints") if trial.get("resume") else None
        return _Execution(job, actor, actor.where.remote(),
                          start_args=(job.trial_json.read_bytes(), shipped,
                                      self._transfers.figure()))

    def _other_flight(self, job: Job, refused: set[str]) -> str | None:
        """A live node that ``job`` was not refused on and whose resources can hold it."""
        needs = self._needs(job)
        return next((n["NodeID"] for n in ray.nodes() if n["Alive"]
                     and n["NodeID"] not in refused and self._has(n["Resources"], needs)),
                    None)

    # -- one execution's deltas ----------------------------------------------------------
    def _absorb(self, ex: _Execution, delta: Delta, asked_at: float) -> None:
        run_dir = ex.job.run_dir
        append_durable(run_dir / "measurements.jsonl", delta.measurements)
        append_durable(run_dir / "log.txt", delta.log)
        if b'"checkpoint' in delta.measurements:
            ex.saved_any = ex.saved_any or any(records_a_save(row)
                                               for row in parse_rows(delta.measurements)[0])
        if delta.checkpoint is None:
            return
        name, blobs = delta.checkpoint
        fetched = time.time()
        keep = (_trial(ex.job).get("checkpoint") or {}).get("keep_last")
        try:
            commit_checkpoint(run_dir / "checkpoints", name, blobs, keep_last=keep)
        except TransferError as exc:
            _row(run_dir, CheckpointTransferFailed(int(name[5:]), time.time(), name=name,
                                                   error=str(exc), node=ex.node))
            return
        committed = time.time()
        size = blob_bytes(blobs)
        _row(run_dir, CheckpointTransfer(int(name[5:]), time.time(), name=name, bytes=size,
                                         wait_s=delta.wait_s, fetch_s=fetched - asked_at,
                                         commit_s=committed - fetched, node=ex.node))
        self._transfers.add(size, committed - asked_at, delta.wait_s)

    def _finish(self, ex: _Execution, delta: Delta) -> JobResult:
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

    @staticmethod
    def _release(ex: _Execution) -> None:
        """End an execution whose worker ended: its scratch folder removed (everything it
        made is home), then its actor."""
        try:
            ray.get(ex.actor.close.remote(), timeout=30)
        except RayError:
            pass
        ray.kill(ex.actor)

    def _lost(self, ex: _Execution, exc: Exception) -> Interruption:
        """Record a lost execution at home and prepare the job to resume."""
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        info = lost_execution(ex.job, node=ex.node, reason=reason, started_at=ex.started_at,
                              saved_any=ex.saved_any)
        try:
            ray.kill(ex.actor)
        except RayError:
            pass
        return info

    # -- the loop -------------------------------------------------------------------------
    def run(self, jobs: Iterable[Job], *, on_start: Callable[[Job], None] | None = None,
            on_done: Callable[[JobResult], None] | None = None,
            on_progress: Callable[[Job, RunProgress], None] | None = None,
            on_interrupted: Callable[[Job, Interruption], None] | None = None,
            admit: Callable[[Job, str], bool] | None = None,
            leave_by: Callable[[Job, str], LeaveBy | None] | None = None) -> list[JobResult]:
        self._connect()
        self._check_cluster()
        queue = list(jobs)
        active: list[_Execution] = []
        results: list[JobResult] = []
        refused: dict[str, set[str]] = {}     # run id → node ids the runner refused it on
        waiting_since: float | None = None
        try:
            while queue or active:
                if queue and not any(e.placing for e in active):
                    needs = self._needs(queue[0])
                    pinned = None
                    if refused.get(queue[0].run_id):
                        pinned = self._other_flight(queue[0], refused[queue[0].run_id])
                        if pinned is None:
                            append_durable(queue.pop(0).run_dir / "log.txt",
                                           b"--- flightplan: not started: no flight left "
                                           b"where it can finish before the package ends "
                                           b"(flightplan status says why) ---\n")
                            continue
                    if self._has(ray.available_resources(), needs):
                        active.append(self._launch(queue.pop(0), pinned))
                        waiting_since = None
                    elif not active and not self._has(ray.cluster_resources(), needs):
                        waiting_since = waiting_since or time.time()
                        if time.time() - waiting_since > self.no_flight_s:
                            results.append(self._no_flight(queue.pop(0), needs, on_done))
                            waiting_since = None
                            continue
                now = time.time()
                for ex in active:
                    if ex.ref is None and now - ex.last_poll >= self.poll_s:
                        ex.last_poll = now
                        ex.ref = ex.actor.poll.remote(self._transfers.figure())
                refs = [e.ref for e in active if e.ref is not None]
                if not refs:
                    time.sleep(self.poll_s)
                    continue
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.poll_s)
                for ex in [e for e in active if e.ref in ready]:
                    ref, ex.ref = ex.ref, None
                    try:
                        value = ray.get(ref)
                    except RayTaskError as exc:  # the host raised: this execution failed
                        active.remove(ex)
                        result = self._host_error(ex, exc)
                        results.append(result)
                        if on_done:
                            on_done(result)
                        continue
                    except RayError as exc:  # actor or node gone: the flight was lost
                        active.remove(ex)
                        if not ex.placing:
                            info = self._lost(ex, exc)
                            if on_interrupted:
                                on_interrupted(ex.job, info)
                        else:
                            ray.kill(ex.actor)
                        queue.insert(0, ex.job)
                        continue
                    if not ex.admitted:
                        ex.where = dict(value, ip=_node_address(value))
                        if admit and not admit(ex.job, ex.node):
                            active.remove(ex)
                            refused.setdefault(ex.job.run_id, set()).add(value["node_id"])
                            ray.kill(ex.actor)
                            queue.insert(0, ex.job)
                            continue
                        ex.admitted, ex.ref = True, ex.actor.start.remote(*ex.start_args)
                        deadline = leave_by(ex.job, ex.node) if leave_by else None
                        if deadline is not None:
                            ex.watch = LeaveWatch(deadline, ex.job.run_dir, poll_s=self.poll_s)
                        continue
                    if ex.placing:
                        ex.placing, ex.where = False, dict(value, ip=_node_address(value))
                        ex.started_at, ex.tail = time.time(), MeasurementTail(ex.job.run_dir)
                        append_durable(ex.job.run_dir / "log.txt",
                                       f"--- flightplan worker started "
                                       f"{time.strftime('%Y-%m-%dT%H:%M:%S')} on node "
                                       f"{ex.node}, host {value['host']}, scratch "
                                       f"{value['scratch']} ---\n".encode())
                        if on_start:
                            on_start(ex.job)
                        continue
                    self._absorb(ex, value, ex.last_poll)
                    if on_progress:
                        on_progress(ex.job, ex.tail.read())
                    if value.exit_code == EXIT_PREEMPTED:  # its checkpoint came with it
                        active.remove(ex)
                        info = self._left(ex)
                        if on_interrupted:
                            on_interrupted(ex.job, info)
                        refused.setdefault(ex.job.run_id, set()).add(ex.where["node_id"])
                        queue.insert(0, ex.job)
                        continue
                    if value.exit_code is None and ex.watch is not None \
                            and ex.watch.due(time.time()):
                        ex.watch.ask(ex.actor.leave.remote)
                    if value.exit_code is not None:
                        active.remove(ex)
                        result = self._finish(ex, value)
                        results.append(result)
                        if on_done:
                            on_done(result)
        finally:
            for ex in active:
                try:
                    ray.kill(ex.actor)
                except RayError:
                    pass
        return results

    def _host_error(self, ex: _Execution, exc: RayTaskError) -> JobResult:
        append_durable(ex.job.run_dir / "log.txt",
                       f"--- flightplan: the host on node {ex.node} failed: {exc} ---\n"
                       .encode())
        try:
            ray.kill(ex.actor)
        except RayError:
            pass
        now = time.time()
        return JobResult(ex.job.run_id, ex.job.run_dir, EXIT_HOST_ERROR, ex.started_at or now,
                         now, node=ex.node)

    def _no_flight(self, job: Job, needs: dict[str, float],
                   on_done: Callable[[JobResult], None] | None) -> JobResult:
        append_durable(job.run_dir / "log.txt",
                       f"--- flightplan: no flight of the cluster has {needs} any more "
                       f"(waited {self.no_flight_s:.0f} s); join a flight and run again to "
                       f"resume ---\n".encode())
        now = time.time()
        result = JobResult(job.run_id, job.run_dir, EXIT_NO_FLIGHT, now, now)
        if on_done:
            on_done(result)
        return result
