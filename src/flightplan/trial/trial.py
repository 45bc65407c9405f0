"""The trial API: what a training script calls so that a run can be killed and resumed.

Usage (the contract in ``docs/internals.md``)::

    trial = Trial.from_env()                      # FLIGHTPLAN_TRIAL=<run_dir>/trial.json
    trial = Trial.local("runs/try", params={...}) # for a script run by hand
    trial.register(model, optimizer, scheduler, scaler=None, loader=loader, extra={...})
    start = trial.restore()                       # optimizer steps done (0 when fresh)
    trial.check_truncation(fraction)              # before training (max_truncated_fraction)
    for step in range(start, total):
        ...
        trial.log(step, loss=loss)                # JSONL row; stop rules (TrialStopped)
        trial.maybe_checkpoint(step)              # by the measured interval (interval.py)
    trial.evaluate(step, macro_f1=0.71)           # a row that min_quality reads
    trial.finish()                                # waits for the writer, writes done.json

A loop whose library saves and loads its own checkpoints (the Hugging Face Trainer,
Lightning: ``flightplan.integrations``) calls :meth:`Trial.restore_library` instead of
``register``/``restore``, :meth:`Trial.library_checkpoint_due` to ask the interval policy and
:meth:`Trial.commit_library_checkpoint` after each library save.

``step`` is the index of the step just done (0-based), so a checkpoint taken at ``step``
is ``step-{step+1:06d}`` and ``restore()`` returns ``step + 1``: the loop's next index.

Components registered after :meth:`restore` (a scaler or scheduler built late, a loader
whose construction draws from the global RNG) get their saved state when registered, the
optimizer's saved hyper-parameters and every RNG are set again after them; this is refused
once the loop has logged or saved. State in a checkpoint that no registered component
takes is an error at the first :meth:`log`, never silently dropped.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from flightplan.durable import fsync_dir, write_json_atomic
from flightplan.errors import ArgumentError, CheckpointError, TrialPreempted, TrialStopped
from flightplan.trial.checkpoint import (BackgroundWriter, Components, Rejection, SaveResult,
                                         Snapshot, apply_state, prune, restore_rng,
                                         select_checkpoint)
from flightplan.trial.checkpoint_io import CheckpointFiles, load_checkpoint, step_dir_name
from flightplan.trial.distributed import (RANK_STATE_KEY, WORLD_SIZE_KEY, Ranks,
                                          check_world_size, rank_files, saved_by)
from flightplan.ids import run_id as make_run_id
from flightplan.trial.interval import CheckpointSchedule
from flightplan.trial.library_checkpoint import (commit_library_checkpoint,
                                                 load_library_checkpoint, missing_files)
from flightplan.trial.readings import DeviceReading, PinnedScalars, read_later
from flightplan.trial.sharded import (FullStateModel, FullStateOptimizer, check_not_fsdp1,
                                      is_sharded)
from flightplan.trial.stop_rules import (NoUsableResume, Stop, StopRule, build_rules,
                                         stop_record)
from flightplan.transfer_time import checkpoint_transfer_s
from flightplan.trial.trial_file import TRIAL_ENV, TrialFile, read_trial_file
from flightplan.rows import (CheckpointFailed, CheckpointRejected, CheckpointSaved,
                             CheckpointSaving, Evaluation, Finished, ForcedCheckpoint, Measurement,
                             PartialCheckpointRemoved, Restore, Row, StopEvent, Truncation,
                             encode_row)
from flightplan.rundir import RunDir
from flightplan.spec import CheckpointPolicy, StopRules

__all__ = ["Trial", "AWAIT_POLL_S"]

_COMPONENTS = ("model", "optimizer", "scheduler", "scaler", "loader")

AWAIT_POLL_S = 0.05
"""How often (seconds) a process told to ``await_checkpoint`` looks for it."""


def _item(value: Any, name: str = "value") -> Any:
    """Tensors and numpy scalars as Python numbers (``.item()``); anything else unchanged.

    Raises:
        ArgumentError: ``value`` (logged as ``name``) is a tensor or array of more than one
            element.
    """
    if isinstance(value, (float, int, str)) or value is None:
        return value
    if not callable(getattr(value, "item", None)):
        return value
    size = getattr(value, "numel", None)
    count = size() if callable(size) else getattr(value, "size", 1)
    if isinstance(count, int) and count != 1:
        raise ArgumentError(f"{name}: a tensor of {count} elements, not one number; log "
                            f"one (e.g. {name}=value.mean()), or each under its own name")
    return value.item()


class Trial:
    """One training run inside its process: checkpoints, measurements and stop rules.

    Attributes:
        run_id, name, tier, task, params, corpus, base_model, campaign_dir, max_steps,
        config_hash: as in ``trial.json``.
        planned_steps: total optimizer steps the task plans (set it once known; min_quality
            needs it).
        run_dir: the run directory.   epoch, micro_step: counters saved with each checkpoint
            (set them in the loop; restored by :meth:`restore`).
        rank, world_size: this process's place in a run of several processes (``RANK``,
            ``WORLD_SIZE``; 0 and 1 alone): :mod:`flightplan.trial.distributed`.

    With several ranks, every rank makes the same calls in the same order (``restore``,
    ``log``, ``evaluate``, ``check_truncation``, ``maybe_checkpoint``, ``checkpoint`` and
    ``finish`` are collective); rank 0 alone writes the run's files.
    """

    def __init__(self, run_dir: Path | str, config: TrialFile) -> None:
        self.run_dir = Path(run_dir)
        self.config = config
        self.run_id, self.name, self.tier = config.run_id, config.name, config.tier
        self.task = config.task
        self.params = dict(config.params)
        self.planned_steps, self.max_steps = config.planned_steps, config.max_steps
        self.corpus, self.base_model = config.corpus, config.base_model
        self.campaign_dir = config.campaign_dir
        self.config_hash, self.resume = config.config_hash, config.resume
        self.stop_rules, self.checkpoint_policy = config.stop, config.checkpoint
        self.epoch = 0
        self.micro_step = 0
        self.finished = False
        self._rules = build_rules(config.stop)
        self._log_rules = [r for r in self._rules if type(r).on_log is not StopRule.on_log]
        mtbi = config.checkpoint.mean_time_between_interruptions
        self._schedule = CheckpointSchedule(float(config.checkpoint.tolerated_loss.seconds),
                                            float(mtbi.seconds) if mtbi else None)
        self._parts = Components()
        self._snapshot = Snapshot()
        self._writer = BackgroundWriter(self.run_dir / "checkpoints", config.checkpoint.keep_last,
                                        self._saved, self._save_failed,
                                        before_commit=self._saving)
        self._lock = threading.Lock()
        self._log_fd: int | None = None
        self._log_name_durable = False
        self._restored: CheckpointFiles | None = None
        self._pending: set[str] = set()
        self._loop_started = False
        self._planned_logged: int | None = None
        self._restore_called = False
        self._steps_done = 0
        self._started_s = time.monotonic()
        self._leave: bool | None = None  # a request to leave the flight: True = then stop
        self._leave_asked: bool | None = None  # this rank's, not yet agreed by the ranks
        self._ranks = Ranks.from_env()
        self._agreed: tuple[int, bool, bool | None] | None = None  # log's (step, due, leave)
        self._waiting_row: Measurement | None = None  # a row whose device readings are due
        self._pinned = PinnedScalars()
        self.rank, self.world_size = self._ranks.rank, self._ranks.world_size

    @property
    def ranks(self) -> Ranks:
        """This process's place in its run and the collectives across the ranks (gather,
        broadcast, barrier; one rank: no-ops): :class:`~flightplan.trial.distributed.Ranks`."""
        return self._ranks

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: Path | str) -> "Trial":
        """The trial described by ``<run_dir>/trial.json``.

        Raises:
            SpecError: the file is missing, not JSON, or a field is invalid (names the field).
        """
        return cls(Path(path).parent, read_trial_file(path))

    @classmethod
    def from_env(cls) -> "Trial":
        """The trial whose ``trial.json`` path is in ``$FLIGHTPLAN_TRIAL``.

        Raises:
            ArgumentError: the variable is not set.   SpecError: as :meth:`from_file`.
        """
        path = os.environ.get(TRIAL_ENV)
        if not path:
            raise ArgumentError(f"{TRIAL_ENV} is not set; run the script through `flightplan run`, "
                                f"or build the trial with Trial.local(run_dir, params=...)")
        return cls.from_file(path)

    @classmethod
    def local(cls, run_dir: Path | str, *, params: Mapping[str, Any] | None = None,
              name: str = "local", run_id: str | None = None, task: str = "local",
              stop: StopRules | Mapping[str, Any] | None = None,
              checkpoint: CheckpointPolicy | Mapping[str, Any] | None = None,
              planned_steps: int | None = None, max_steps: int | None = None,
              resume: bool = False) -> "Trial":
        """A trial for a script run by hand, in ``run_dir`` (created).

        ``run_id`` defaults to :func:`flightplan.ids.run_id` of (name, task, params).
        ``stop``/``checkpoint`` take the spec models or their TOML tables as dicts.
        """
        params = dict(params or {})
        config = TrialFile.model_validate({
            "run_id": run_id or make_run_id(name, task, params, {}, None, "local"),
            "name": name, "task": task, "params": params, "planned_steps": planned_steps,
            "max_steps": max_steps, "resume": resume,
            "stop": stop if stop is not None else StopRules(),
            "checkpoint": checkpoint if checkpoint is not None else CheckpointPolicy()})
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return cls(run_dir, config)

    # -- registration and restore -------------------------------------------------------

    def register(self, model: Any = None, optimizer: Any = None, scheduler: Any = None,
                 scaler: Any = None, loader: Any = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        """Name what must survive a kill. May be called again to add components.

        Every object needs ``state_dict()``/``load_state_dict()``; the loader must be
        resumable mid-epoch (torchdata ``StatefulDataLoader``).

        A model sharded with FSDP2 (``fully_shard``) is saved as one full state
        (:mod:`flightplan.trial.sharded`).

        Raises:
            TypeError: an object without ``state_dict``/``load_state_dict``, or a model in
                FSDP's first API (``FullyShardedDataParallel``).
            CheckpointError: a component registered after the loop started, or one the
                restored checkpoint holds no state for.
        """
        given = {"model": model, "optimizer": optimizer, "scheduler": scheduler,
                 "scaler": scaler, "loader": loader}
        given.update({f"extra/{k}": v for k, v in (extra or {}).items()})
        new = {k: v for k, v in given.items() if v is not None}
        for key, obj in new.items():
            if not (callable(getattr(obj, "state_dict", None))
                    and callable(getattr(obj, "load_state_dict", None))):
                hint = (" (use torchdata.stateful_dataloader.StatefulDataLoader)"
                        if key == "loader" else "")
                raise TypeError(f"{key}: {type(obj).__name__} has no state_dict/load_state_dict, "
                                f"so it cannot be checkpointed{hint}")
        check_not_fsdp1(new.get("model"))
        if self._loop_started and new:
            raise CheckpointError(f"{', '.join(new)} registered after training started; register "
                                  f"every component before the first log() or checkpoint")
        for key, obj in new.items():
            if key.startswith("extra/"):
                self._parts.extra[key.removeprefix("extra/")] = obj
            else:
                setattr(self._parts, key, obj)
        self._wrap_sharded(new)
        if self._restored is not None:
            self._apply_late(new)

    def _wrap_sharded(self, new: dict[str, Any]) -> None:
        """A model sharded across the ranks (FSDP2) and its optimizer are saved and
        restored as one full state (:mod:`flightplan.trial.sharded`): wrap them (in ``new``
        too, for the late restore)."""
        parts = self._parts
        if is_sharded(parts.model):
            parts.model = new["model"] = FullStateModel(parts.model)
        if isinstance(parts.model, FullStateModel) and parts.optimizer is not None \
                and not isinstance(parts.optimizer, FullStateOptimizer):
            parts.optimizer = FullStateOptimizer(parts.model.module, parts.optimizer)
            if "optimizer" in new:
                new["optimizer"] = parts.optimizer

    def _apply_late(self, new: Mapping[str, Any]) -> None:
        """Give components registered after restore() their saved state, then re-set the
        optimizer (a scheduler's constructor rewrites its learning rates) and every RNG."""
        files = self._restored
        assert files is not None
        for key, obj in new.items():
            apply_state(key, obj, files)
            self._pending.discard(key)
        if "scheduler" in new and self._parts.optimizer is not None:
            apply_state("optimizer", self._parts.optimizer, files)
        restore_rng(files.state["rng"])

    def restore(self) -> int:
        """Load the newest valid checkpoint of this run, if any.

        Walks ``checkpoints/`` newest first; a finished ``.tmp`` save whose rename a kill
        cut off is put in place, partial ones are removed
        (:func:`~flightplan.trial.checkpoint.recover_checkpoints`); a checkpoint that fails a
        check or belongs to another run is renamed ``<name>.corrupt-<reason>``, reported on
        stderr and in ``measurements.jsonl``. RNG states are set last.

        Returns:
            Optimizer steps done by the restored checkpoint (0 when starting fresh).

        Raises:
            TypeError: no model registered.
            TrialStopped: rule ``no_usable_resume``: ``require_resume`` is on and either
                checkpoints existed but none is valid, or trial.json says ``resume`` and there
                is no finished checkpoint (stop.json written).
            CheckpointError: a valid checkpoint does not fit the registered components, or
                was saved by another number of ranks and trial.json's ``reshard`` is off.
        """
        if self._parts.model is None:
            raise TypeError("register(model=...) before restore()")
        self._await_checkpoint()
        start = time.monotonic()
        files, path, rejected = self._select(load_checkpoint)
        if files is None or path is None:
            return 0
        saved_ranks = check_world_size(files.manifest, self.world_size, path.name,
                                       reshard=self.config.reshard)
        files = rank_files(files, self.rank, saved_ranks)
        resharded_from = saved_ranks if saved_ranks != self.world_size else None
        if resharded_from is not None and self._ranks.leader:
            print(f"flightplan: {saved_by(path.name, saved_ranks)} and resumes at "
                  f"{self.world_size} ([[run]] reshard = true): this run is not bitwise "
                  f"from here on", file=sys.stderr, flush=True)
        for key in _COMPONENTS:
            obj = getattr(self._parts, key)
            if obj is not None:
                apply_state(key, obj, files)
        for key, obj in self._parts.extra.items():
            apply_state(f"extra/{key}", obj, files)
        restore_rng(files.state["rng"])
        self._pending = ({k for k in _COMPONENTS[2:]
                          if k in files.state and getattr(self._parts, k) is None}
                         | {f"extra/{k}" for k in files.state.get("extra", {})
                            if k not in self._parts.extra})
        counters = files.state["counters"]
        self._steps_done = int(counters["step"])
        self._ranks.resume_at(self._steps_done)
        self.epoch = int(counters.get("epoch", 0))
        self.micro_step = int(counters.get("micro_step", 0))
        self._restored = files
        restore_s = time.monotonic() - start
        self._schedule.record_restore(restore_s)
        self._write(Restore(self._steps_done, time.time(), source=path.name if path else None,
                            restore_s=restore_s, rejected=tuple(r.name for r in rejected),
                            not_yet_registered=tuple(sorted(self._pending)),
                            resharded_from=resharded_from))
        return self._steps_done

    def _await_checkpoint(self) -> None:
        """With ``await_checkpoint`` in trial.json (a resumed pilot started beside the first
        process, :mod:`flightplan.run.pilot`): wait, polling every :data:`AWAIT_POLL_S`
        seconds, until the runner has placed a committed checkpoint in ``checkpoints/`` or
        written ``no-checkpoint`` (none will come; the restore then finds none). Without it,
        returns at once. The wait is not part of the measured restore time."""
        if not self.config.await_checkpoint:
            return
        run = RunDir(self.run_dir)
        while not run.has_checkpoint() and not run.no_checkpoint.exists():
            time.sleep(AWAIT_POLL_S)

    def _select(self, load: Callable[[Path], CheckpointFiles]
                ) -> tuple[CheckpointFiles | None, Path | None, list[Rejection]]:
        """The newest valid checkpoint (partials removed, bad ones set aside, both logged);
        with none: the ``no_usable_resume`` stop when it applies, else a ``restore`` row."""
        self._restore_called = True
        if not self._ranks.leader:  # the leader settles the folder; the others load its pick
            chosen, stop = self._ranks.broadcast(None)
            if stop is not None:
                self._stop(stop)
            if chosen is None:
                return None, None, []
            path = self.run_dir / "checkpoints" / chosen
            return load(path), path, []
        files, path, rejected, stop = self._select_here(load)
        self._ranks.broadcast((path.name if path is not None else None, stop))
        if stop is not None:
            self._stop(stop)
        return files, path, rejected

    def _select_here(self, load: Callable[[Path], CheckpointFiles]
                     ) -> tuple[CheckpointFiles | None, Path | None, list[Rejection], Stop | None]:
        """:meth:`_select` in the leader: the folder settled, rows written, the stop (if
        one applies) returned rather than raised."""
        files, path, rejected, partial = select_checkpoint(self.run_dir / "checkpoints",
                                                           self.run_id, self.config_hash,
                                                           load=load)
        for tmp in partial:
            self._write(PartialCheckpointRemoved(0, time.time(), name=tmp.name))
        for rejection in rejected:
            print(f"flightplan: checkpoint rejected: {rejection.line()}", file=sys.stderr)
            self._write(CheckpointRejected(0, time.time(), name=rejection.name,
                                           reason=rejection.reason, message=rejection.message,
                                           renamed_to=rejection.renamed_to))
        if files is None:
            if self.stop_rules.require_resume and (rejected or self.resume):
                removed = ", ".join(p.name for p in partial)
                found = [r.line() for r in rejected] or [
                    "this run saved checkpoints before, but its checkpoints/ folder "
                    "holds no finished one" + (f" (partial saves removed: {removed})"
                                                if removed else "")
                    + (f"; to train it from step 0 on purpose run flightplan run CAMPAIGN_FILE "
                       f"--restart {self.name}" if self.name else "")]
                return None, None, rejected, NoUsableResume().verdict(found,
                                                                      rejected=len(rejected))
            self._write(Restore(0, time.time(), source=None, resume_requested=self.resume,
                                rejected=tuple(r.name for r in rejected),
                                message="no checkpoint of this run; starting at step 0"))
        return files, path, rejected, None

    def _begin_loop(self) -> None:
        if self._loop_started:
            return
        if not self._restore_called:  # a forgotten restore() would silently start over
            raise CheckpointError("log or checkpoint before restore(); register the components "
                                  "and call trial.restore() first, then start the loop at the "
                                  "step it returns")
        if self._pending:
            raise CheckpointError(f"the restored checkpoint holds state for "
                                  f"{', '.join(sorted(self._pending))} but nothing registered "
                                  f"takes it; register it before training")
        self._loop_started = True
        self._restored = None

    # -- measurements and stop rules ----------------------------------------------------

    def _write(self, row: Row, *, durable: bool = False) -> None:
        """Append ``row`` to measurements.jsonl (:func:`flightplan.rows.encode_row`);
        ``durable``: fsync it before returning (it then survives the machine, not only the
        process; the first durable row of a process fsyncs the run folder too, since this
        process or its worker may have just created the file)."""
        if not self._ranks.leader:  # rank 0 writes the run's rows
            return
        line = encode_row(row)
        with self._lock:  # one write(2) per row: a SIGKILL loses no row that was logged
            if self._log_fd is None:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                self._log_fd = os.open(self.run_dir / RunDir.MEASUREMENTS,
                                       os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._log_fd, line)
            if durable:
                os.fsync(self._log_fd)
                if not self._log_name_durable:  # the file may be new: its name too, once
                    fsync_dir(self.run_dir)
                    self._log_name_durable = True

    def _stop(self, stop: Stop) -> None:
        """Wait for the save in flight, write stop.json, log the stop and raise TrialStopped
        (with several ranks: the leader writes, and every rank raises once it has)."""
        try:
            self._writer.wait()
        except CheckpointError as exc:
            print(f"flightplan: {exc}", file=sys.stderr)
        record = stop_record(self.run_id, stop)
        if self._ranks.leader:
            write_json_atomic(self.run_dir / RunDir.STOP, record)
            self._write(StopEvent(stop.step, time.time(), rule=stop.rule, message=stop.message))
        self._ranks.barrier()  # no rank ends (and has the others killed) before stop.json
        raise TrialStopped(record)

    def _settle(self, step: int) -> None:
        """With several ranks, before saving the state after ``step``: stop on a verdict some
        rank holds since the ranks' last agreement (:meth:`Ranks.settle`).

        Raises:
            TrialStopped: a rank's rule fired since (nothing saved).
        """
        stop = self._ranks.settle(step)
        if stop is not None:
            self._stop(stop)

    def _first_stop(self, verdicts: Iterable[Stop | None]) -> None:
        """Stop at the first verdict of ``verdicts`` (an iterable of ``Stop | None``, rules
        applied lazily) of the lowest rank where one fired (:meth:`Ranks.first_stop`)."""
        stop = next((v for v in verdicts if v is not None), None)
        stop = self._ranks.first_stop(stop)
        if stop is not None:
            self._stop(stop)

    def log(self, step: int, **measurements: Any) -> None:
        """Append ``{"step", "time" (unix s), **measurements}`` to measurements.jsonl and apply
        the stop rules (non-finite numbers are written as ``"nan"``, ``"inf"``, ``"-inf"``).
        The first row after ``planned_steps`` is set or changed carries it too (the pilot
        and the progress bars read it).

        A value may be a one-element CUDA tensor (the loss as the step left it) or a
        :class:`~flightplan.trial.readings.DeviceReading` (a :class:`StepTimer`'s ``stop()``
        on a GPU): the row then waits, without stopping the GPU, until the next row or
        checkpoint, evaluation, :meth:`flush_rows` or :meth:`finish`, which reads it, writes
        it and applies the stop rules to it (:mod:`flightplan.trial.readings`). A run of
        several ranks reads every value at once (its ranks agree on the stop verdict every
        :data:`~flightplan.trial.distributed.AGREEMENT_STEPS` steps).

        Raises:
            TrialStopped: a rule fired on this row or on the row waiting before it (stop.json
                written, earlier checkpoints intact).
            ArgumentError: a value is a tensor or array of more than one element.
        """
        if not self._loop_started:
            self._begin_loop()
        self.flush_rows()
        values: dict[str, Any] = {}
        waits = False
        for key, value in measurements.items():
            reading = None if self._ranks.distributed or isinstance(value, (float, int, str)) \
                else read_later(value, self._pinned)
            values[key] = _item(value, key) if reading is None else reading
            waits |= reading is not None
        if "planned_steps" not in values and self.planned_steps is not None \
                and self.planned_steps != self._planned_logged:
            values["planned_steps"] = int(self.planned_steps)
        self._planned_logged = values.get("planned_steps", self._planned_logged)
        if step >= self._steps_done:
            self._steps_done = step + 1
        row = Measurement(step, time.time(), values)
        if waits:
            self._waiting_row = row
        else:
            self._write_step_row(row)

    def _write_step_row(self, row: Measurement) -> None:
        """Write a row of :meth:`log` whose values are all read, and apply the stop rules to
        it (with several ranks: agree on the verdict and the step's save in one collective).

        Raises:
            TrialStopped: a rule fired on it.
        """
        self._write(row)
        step, values = row.step, row.values
        if self._ranks.distributed:  # the stop verdict and the step's save in one collective
            stop = next((v for v in (r.on_log(step, values) for r in self._log_rules)
                         if v is not None), None)
            stop, due, leave = self._ranks.agree(step, stop, self._save_due(), self._leave_asked)
            self._agreed = (step, due, leave)
            if stop is not None:
                self._stop(stop)
        elif self._log_rules:
            self._first_stop(rule.on_log(step, values) for rule in self._log_rules)

    def flush_rows(self) -> None:
        """Read the row that waits for its device readings (:meth:`log`), if any, write it
        and apply the stop rules to it; a no-op when none waits. Call it before work that
        must not start on a state a stop rule would reject (a library's own checkpoint).

        Raises:
            TrialStopped: a rule fired on that row.
        """
        row, self._waiting_row = self._waiting_row, None
        if row is None:
            return
        values = {key: value.read() if isinstance(value, DeviceReading) else value
                  for key, value in row.values.items()}
        self._write_step_row(Measurement(row.step, row.time, values))

    def log_setup(self, **measurements: Any) -> None:
        """Append a row of the work before the training loop (data preparation, an embedding
        pass: ``encode_s``, ``data_s``, with ``tokens`` and the like), ``{"step": 0, "time"
        (unix s), **measurements}``, stamped when the work is done. Unlike :meth:`log` it may
        come before :meth:`restore` (a process preparing its data while it waits for its
        checkpoint, as the pilot's resumed process does) and applies no stop rule.

        Raises:
            CheckpointError: the loop has begun (a row of the loop goes through :meth:`log`).
        """
        if self._loop_started:
            raise CheckpointError("log_setup after the loop began: log rows of the loop with "
                                  "trial.log(step, ...)")
        self._write(Measurement(0, time.time(), {k: _item(v, k) for k, v in measurements.items()}))

    def cached(self, key_parts: Mapping[str, Any], build: Callable[[], Any]) -> Any:
        """Data prepared once per campaign: the object ``build()`` makes for ``key_parts``,
        built by the first run that asks and loaded, checked by its sha256, by every later
        run and reload (:func:`flightplan.trial.data_cache.cached`; a tampered or torn entry
        is rebuilt, never used). Stored in ``<campaign_dir>/.flightplan/cache/`` (a
        :meth:`local` trial, which has no campaign folder: under its run directory).

        ``key_parts`` must name everything the object depends on (corpus hashes, tokenizer,
        ``max_length``, the code's version) as JSON values; ``build`` must return what
        ``torch.load(weights_only=True)`` reads back (tensors, lists, dicts, strings,
        numbers). Before the loop it logs a setup row ``{data_cache: <key>,
        data_cache_hit: bool, data_cache_s: seconds}`` (the key is the run's record of which
        prepared input it read).

        Raises:
            SpecError: ``key_parts`` is not representable as canonical JSON.
            Whatever ``build`` raises.
        """
        from flightplan.trial.data_cache import CACHE_DIR, cached

        base = Path(self.campaign_dir) if self.campaign_dir else self.run_dir
        value, use = cached(base / CACHE_DIR, key_parts, build)
        if not self._loop_started:
            self._write(Measurement(0, time.time(), {"data_cache": use.key,
                                                     "data_cache_hit": use.hit,
                                                     "data_cache_s": use.seconds}))
        if use.rebuilt_because:
            print(f"flightplan: data cache {use.key[:12]} rebuilt: {use.rebuilt_because}",
                  file=sys.stderr)
        return value

    def evaluate(self, step: int, **metrics: Any) -> None:
        """Log an evaluation (``"event": "evaluation"``) and apply ``min_quality``.

        Raises:
            TrialStopped: the metric is below the threshold after ``after_fraction``.
        """
        self._begin_loop()
        self.flush_rows()
        values = {k: _item(v, k) for k, v in metrics.items()}
        self._write(Evaluation(step, time.time(), values))
        self._first_stop(rule.on_evaluate(step, values, self.planned_steps)
                         for rule in self._rules)

    def check_truncation(self, fraction: float) -> None:
        """Record the fraction (0–1) of essential inputs longer than ``max_length`` and apply
        ``max_truncated_fraction``. Call once before training.

        Raises:
            TrialStopped: more than the allowed fraction would be truncated.
        """
        self._write(Truncation(0, time.time(), fraction=float(_item(fraction))))
        self._first_stop(rule.on_truncation(fraction) for rule in self._rules)

    # -- checkpoints --------------------------------------------------------------------

    def checkpoint(self, step: int, *, epoch: int | None = None,
                   micro_step: int | None = None) -> None:
        """Save now, after step ``step`` (0-based): waits for a save in flight, snapshots the
        state into reused buffers and returns; a thread writes ``step-{step+1:06d}``.

        Raises:
            CheckpointError: the previous background save failed.
            TrialStopped: with several ranks, a rank's stop rule fired since their last
                agreement (nothing saved).
        """
        self._begin_loop()
        self.flush_rows()  # a stop rule on the last row comes before saving the state after it
        self._settle(step)
        self._writer.wait()
        self._agreed = None  # a save now: log()'s decision for this step is spent
        if epoch is not None:
            self.epoch = epoch
        if micro_step is not None:
            self.micro_step = micro_step
        start = time.monotonic()
        if not self._ranks.leader:  # its own state goes to the leader, which saves the step
            if isinstance(self._parts.model, FullStateModel):  # gathered to the leader:
                self._parts.model.state_dict()                 # collective, in its order
                if self._parts.optimizer is not None:
                    self._parts.optimizer.state_dict()
            self._ranks.gather(self._snapshot.capture_own(self._parts))
            return
        counters = {"step": step + 1, "epoch": self.epoch, "micro_step": self.micro_step}
        captured = self._snapshot.capture(self._parts, counters)
        meta = {"run_id": self.run_id, "config_hash": self.config_hash, "epoch": self.epoch,
                "micro_step": self.micro_step, "saved_at": time.time()}
        if self._ranks.distributed:
            others = self._ranks.gather(None) or []
            captured.state[RANK_STATE_KEY] = {str(r): own for r, own in enumerate(others) if r}
            meta[WORLD_SIZE_KEY] = self.world_size
        stall_s = time.monotonic() - start
        self._schedule.record_start(start)
        self._writer.submit(step + 1, captured, meta, stall_s)

    def maybe_checkpoint(self, step: int, *, epoch: int | None = None,
                         micro_step: int | None = None) -> bool:
        """Save if the measured interval has passed and no save is in flight, or at once
        (waiting until it is durable) when the run was asked to leave its flight.

        Returns:
            Whether a save was started.

        Raises:
            CheckpointError: a background save failed.
            TrialPreempted: the run was asked to leave its flight and stop (:meth:`request_leave`):
                this save was made at once and is durable.
        """
        self._writer.raise_if_failed()
        agreed, self._agreed = self._agreed, None
        if agreed is not None and agreed[0] == step:   # agreed by this step's log()
            _, due, leave = agreed
        else:
            _, due, leave = self._ranks.agree(step, None, self._save_due(), self._leave_asked)
        if leave is not None:
            self._leave = leave
            self.checkpoint(step, epoch=epoch, micro_step=micro_step)
            self._writer.wait()
            self._left(step + 1)
            return True
        if not due:
            return False
        self.checkpoint(step, epoch=epoch, micro_step=micro_step)
        return True

    def _save_due(self) -> bool:
        """Whether the measured interval wants a save now and no save is in flight."""
        return not self._writer.busy and self._schedule.due(time.monotonic())

    def request_leave(self, *, stop: bool) -> None:
        """Ask for a checkpoint at the next step boundary (the next :meth:`maybe_checkpoint`
        or library save) and then, when ``stop``, to end with :class:`TrialPreempted`
        (:mod:`flightplan.run.executors.leave_watch`; the worker calls this from a signal handler).

        Safe in a signal handler: it only sets a flag. ``TrialPreempted`` is raised later,
        by that save. With several ranks the request waits for their next agreement
        (:data:`~flightplan.trial.distributed.AGREEMENT_STEPS`), where every rank saves.
        """
        self._leave_asked = stop or bool(self._leave_asked)
        if not self._ranks.distributed:  # with several ranks: once they agreed on it
            self._leave = self._leave_asked

    @property
    def leave_requested(self) -> bool:
        """Whether the run was asked to checkpoint now (:meth:`request_leave`); loops whose
        library saves on its own schedule save at their next step end when True. With
        several ranks, True once the ranks agreed on a request, on every rank at once."""
        return self._leave is not None

    def _left(self, steps_done: int) -> None:
        """The requested checkpoint is durable: log it, and raise when asked to stop."""
        stop, self._leave, self._leave_asked = self._leave, None, None
        name = step_dir_name(steps_done)
        self._write(ForcedCheckpoint(steps_done, time.time(), name=name,
                                     then="stop" if stop else "continue"))
        self._ranks.barrier()  # the save and its row are durable before any rank ends
        if stop:
            raise TrialPreempted(self.run_id, steps_done, name)

    def wait_for_checkpoint(self) -> None:
        """Block until the save in flight is durable (e.g. before an evaluation that may crash).

        Raises:
            CheckpointError: that save failed.
        """
        self._writer.wait()

    def _saving(self, steps_done: int, final: Path) -> None:
        """A save is complete and about to be renamed into place: the durable record that
        this run saved (:class:`~flightplan.rows.CheckpointSaving`), no later than the
        checkpoint itself."""
        self._write(CheckpointSaving(steps_done, time.time(), name=final.name), durable=True)

    def _saved(self, result: SaveResult) -> None:
        self._write(CheckpointSaved(result.steps_done, time.time(), name=result.path.name,
                                    bytes=result.bytes, stall_s=result.stall_s,
                                    persist_s=result.persist_s,
                                    device_wait_s=result.device_wait_s, copy_s=result.copy_s))
        transfer = RunDir(self.run_dir).read_json(RunDir.TRANSFER)  # on a flight: X home
        choice = self._schedule.record_save(result.stall_s, result.persist_s,
                                            checkpoint_transfer_s(transfer, result.bytes))
        if choice is not None:
            self._write(choice.as_row(result.steps_done, time.time()))

    def _save_failed(self, steps_done: int, exc: BaseException) -> None:
        print(f"flightplan: checkpoint after {steps_done} steps failed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        self._write(CheckpointFailed(steps_done, time.time(), error=f"{type(exc).__name__}: {exc}"))

    # -- checkpoints a training library writes (Trainer, Lightning) ---------------------

    def restore_library(self, *, required: Mapping[str, str]) -> Path | None:
        """Pick the checkpoint a library (Trainer, Lightning) should resume from, instead of
        :meth:`restore`: the newest committed folder whose every byte matches its manifest
        (partials removed, bad ones set aside as in :meth:`restore`), and which holds every
        file of ``required`` (file name → what it holds).

        Returns:
            The folder to hand to the library, or None to start at step 0.

        Raises:
            TrialStopped: rule ``no_usable_resume``: as :meth:`restore`, or (with
                ``require_resume`` on) the newest valid checkpoint lacks a required file,
                e.g. one saved with the Trainer's ``save_only_model=True``.
            CheckpointError: that checkpoint was saved by another number of ranks (also
                with ``reshard`` on: a library's checkpoint is not resharded).

        With several ranks every rank calls it; the leader picks, every rank gets its pick.
        """
        self._await_checkpoint()
        start = time.monotonic()
        files, path, rejected = self._select(load_library_checkpoint)
        if files is None or path is None:
            return None
        check_world_size(files.manifest, self.world_size, path.name)
        missing = missing_files(files.manifest, required)
        if missing:
            reason = (f"{path.name} lacks {', '.join(missing)}: resuming from it would go on "
                      f"with a fresh optimizer, schedule and random streams")
            if self.stop_rules.require_resume:
                fix = ("save full checkpoints (the Trainer's save_only_model=False), then start "
                       "this run over on purpose: flightplan run CAMPAIGN_FILE --restart "
                       f"{self.name or 'NAME'}")
                self._stop(NoUsableResume().verdict([reason], rejected=len(rejected), fix=fix))
            self._write(Restore(0, time.time(), source=None,
                                rejected=tuple(r.name for r in rejected),
                                message=f"{reason}; starting at step 0 (require_resume is off)"))
            return None
        self._steps_done = int(files.manifest["step"])
        self._ranks.resume_at(self._steps_done)
        self.epoch = int(files.manifest.get("epoch", 0))
        restore_s = time.monotonic() - start
        self._schedule.record_restore(restore_s)
        self._write(Restore(self._steps_done, time.time(), source=path.name, restore_s=restore_s,
                            rejected=tuple(r.name for r in rejected)))
        return path

    def library_checkpoint_due(self, step: int | None = None) -> bool:
        """Whether the measured interval policy (:mod:`flightplan.trial.interval`) wants a save
        now; the first call is True (that save measures its cost). True as well when the
        executor asked the run to leave its flight (:meth:`request_leave`).

        With several ranks it is collective: every rank calls it after the same step and gets
        the same answer (the leader's interval, a leave request of any rank), agreed by the
        :meth:`log` of ``step`` (0-based) when that was the last row, else by a collective of
        its own; False without one between agreements
        (:data:`~flightplan.trial.distributed.AGREEMENT_STEPS`). ``step`` is not needed with
        one rank (None with several: agree now).
        """
        if not self._ranks.distributed:
            return self.leave_requested or self._schedule.due(time.monotonic())
        agreed, self._agreed = self._agreed, None
        if agreed is not None and step is not None and agreed[0] == step:
            _, due, leave = agreed
        else:
            _, due, leave = self._ranks.agree(step, None, self._schedule.due(time.monotonic()),
                                              self._leave_asked)
        if leave is not None:
            self._leave = leave
        return due or leave is not None

    def commit_library_checkpoint(self, source: Path, steps_done: int, *, kind: str,
                                  save_s: float) -> Path:
        """Commit the library's finished folder ``source`` as ``step-{steps_done:06d}``
        (:func:`flightplan.trial.library_checkpoint.commit_library_checkpoint`), keep the newest
        ``keep_last``, log the ``checkpoint`` row and feed the interval policy.

        Args:
            source: the folder the library wrote (in its staging folder).
            steps_done: optimizer steps done.   kind: the library (``"transformers"``).
            save_s: seconds the loop spent in the library's own save, before this call.

        Returns:
            The committed directory.

        With several ranks every rank calls it after the library's save (which wrote on the
        leader only, holding every rank's state); the leader commits, the others go on.

        Raises:
            CheckpointError: ``source`` is not a flat folder.   OSError: from the disk.
            TrialPreempted: the run was asked to leave its flight and stop (after the commit).
            TrialStopped: with several ranks, a rank's stop rule fired since their last
                agreement: nothing is committed.
        """
        self._begin_loop()
        self.flush_rows()
        self._settle(steps_done - 1)
        parent = self.run_dir / "checkpoints"
        if not self._ranks.leader:
            if self._leave is not None:
                self._left(steps_done)
            return parent / step_dir_name(steps_done)
        start = time.monotonic()
        meta: dict[str, Any] = {"kind": kind, "run_id": self.run_id,
                                "config_hash": self.config_hash, "epoch": self.epoch,
                                "saved_at": time.time()}
        if self._ranks.distributed:
            meta[WORLD_SIZE_KEY] = self.world_size
        path, size = commit_library_checkpoint(source, parent, steps_done, meta=meta,
                                               before_commit=partial(self._saving, steps_done))
        prune(parent, self.checkpoint_policy.keep_last)
        stall_s = save_s + time.monotonic() - start  # the save is synchronous: C = D
        self._schedule.record_start(start - save_s)
        self._saved(SaveResult(steps_done, path, size, stall_s, stall_s))
        if self._leave is not None:
            self._left(steps_done)
        return path

    # -- the end ------------------------------------------------------------------------

    def finish(self) -> None:
        """Wait for the save in flight and write ``done.json`` ``{run_id, finished_at, steps,
        wall_s}`` (``finished_at`` ISO-8601 UTC; ``wall_s`` of this process).

        Raises:
            CheckpointError: the last background save failed.
            TrialStopped: with several ranks, a stop rule fired on some rank after their
                last agreement (:data:`~flightplan.trial.distributed.AGREEMENT_STEPS`).
        """
        self.flush_rows()
        self._writer.close()
        stop = self._ranks.first_stop(None)  # every rank reached the end; a stop rule that
        if stop is not None:                 # fired after the last agreement is obeyed
            self._stop(stop)
        if not self._ranks.leader:
            self.finished = True
            return
        write_json_atomic(self.run_dir / RunDir.DONE, {
            "run_id": self.run_id, "steps": self._steps_done,
            "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - self._started_s, 3)})
        self._write(Finished(self._steps_done, time.time()))
        with self._lock:
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None
        self.finished = True
