"""flightplan's guarantees for Lightning (``lightning.pytorch.Trainer``).

One line in a task's ``train(trial)`` replaces ``trainer.fit(...)``, another leaves what
``close`` needs::

    from flightplan.integrations.lightning import fit, write_outputs
    trainer = L.Trainer(max_steps=1000, enable_checkpointing=False, ...)
    fit(trainer, module, trial, train_dataloaders=loader)   # loader: a StatefulDataLoader
    write_outputs(trial, module, predictions=rows, metrics={"accuracy": 0.97})

``examples/digits-lightning`` is a whole campaign written so (with its reload hook).

What :func:`fit` adds to Lightning:

- **Atomic, verified checkpoints.** :class:`FlightplanCallback` saves with
  ``trainer.save_checkpoint`` into ``<run_dir>/lightning-staging/step-N/checkpoint.ckpt``
  (emptied at every start, never loaded) after the optimizer step it decides on, then
  commits the folder as ``checkpoints/step-NNNNNN/`` with flightplan's manifest of sizes and
  hashes in one rename (:mod:`flightplan.trial.library_checkpoint`); ``keep_last`` prunes.
  Resume goes through :meth:`Trial.restore_library` (every byte re-hashed first) and loads
  with ``weights_only=True``: no pickled code runs.
- **Every RNG**: a Lightning checkpoint holds no RNG state, so the callback adds ``random``,
  numpy, torch CPU and CUDA states (:func:`flightplan.trial.checkpoint.capture_rng`) and sets
  them back just before the first batch after a resume, once Lightning has built its data
  iterators (which draw from the global RNG).
- **Data position**: every train dataloader must be resumable mid-epoch (``state_dict`` and
  ``load_state_dict``: torchdata's ``StatefulDataLoader``); a plain ``DataLoader`` is refused
  with ``ArgumentError`` before the first batch, since it would restart the epoch from its
  first batch after a resume.
- **When to save**: flightplan's measured interval policy (:mod:`flightplan.trial.interval`),
  or every ``every_n_steps`` optimizer steps if given, and at once when the run is asked to
  leave its flight (:mod:`flightplan.run.executors.leave_watch`). A save due after an epoch's last
  batch is made after the next step instead: resumed from there, Lightning 2.6 with a
  ``StatefulDataLoader`` gives the next epoch another first batch (measured: not
  bitwise). Lightning's own ``ModelCheckpoint`` (non-atomic) is refused: build the Trainer
  with ``enable_checkpointing=False``.
- **Measurements and stop rules**: after each optimizer step a row goes to ``trial.log``
  with ``loss``, the loss ``training_step`` returned (the one the optimizer minimised; with
  gradient accumulation the mean over the step's batches), whatever name the module logs
  its loss under, so the pilot's resume check, ``non_finite_loss``, progress and the
  re-estimate all read it; with it ``lr`` and ``step_s`` (seconds from the batch's start to
  the step's end; on a GPU loss and ``step_s`` are read a step later, without stopping the
  GPU each step: :mod:`flightplan.trial.readings`), and every ``log_every_n_steps`` steps
  (Lightning's own logging steps) each
  logged value whose name contains ``loss`` (e.g. ``train_loss``); every step when
  ``training_step`` returns no loss. (Reading Lightning's logged metrics costs about as
  much as the rest of the callback together: on every step it alone would break the 2 %
  overhead bar, ``bench/trainer_overhead.py``.) After each validation, the logged metrics go to
  ``trial.evaluate`` (``min_quality``). A stop sets ``trainer.should_stop`` (no save after
  it; Lightning validates after the step's save, so the state a validation judged may be
  saved) and :func:`fit` raises ``TrialStopped``.
- **Several processes** (``[[run]] processes = N``): build the Trainer with
  ``strategy="ddp", devices=trial.world_size, use_distributed_sampler=False`` and a
  ``StatefulDistributedSampler``; :func:`fit` initialises the process group before it
  restores, Lightning writes each checkpoint on rank 0 with every rank's RNG states (a list
  in rank order, each rank gets its own back), and the save, stop and leave decisions are
  agreed across the ranks every 10 steps and before each save (docs/tasks.md, "Lightning
  across several processes"; :data:`flightplan.trial.distributed.AGREEMENT_STEPS`).
"""

from __future__ import annotations

import shutil
import time
from importlib.metadata import version as _version
from pathlib import Path
from typing import Any, Mapping, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from lightning.pytorch.callbacks import Checkpoint
from torch.utils.data import DistributedSampler

from flightplan.durable import write_json_atomic
from flightplan.errors import ArgumentError, TrialStopped
from flightplan.integrations.outputs import new_artifact, write_predictions_and_metrics
from flightplan.rundir import RunDir
from flightplan.trial import StepTimer, Trial, capture_rng, restore_rng

__all__ = ["FlightplanCallback", "fit", "write_outputs", "KIND", "STAGING", "CKPT_FILE",
           "MODEL_FILE"]

KIND = "lightning"
STAGING = "lightning-staging"
CKPT_FILE = "checkpoint.ckpt"
MODEL_FILE = "model.safetensors"
"""The module's weights in ``artifact/`` (:func:`write_outputs`)."""
_RNG_KEY = "flightplan_rng"


def _scalar(value: Any) -> float | None:
    """A logged value as a float, or None when it is not a single number."""
    if isinstance(value, torch.Tensor):
        return float(value.item()) if value.numel() == 1 else None
    return float(value) if isinstance(value, (int, float)) else None


def _logged_losses(trainer: pl.Trainer) -> dict[str, float]:
    """The values the module logged whose name contains ``loss`` (but ``loss`` itself), as
    floats (Lightning computes its ``callback_metrics`` anew on each read)."""
    return {key: value for key, value in ((k, _scalar(v)) for k, v in
                                          trainer.callback_metrics.items()
                                          if "loss" in k and k != "loss")
            if value is not None}


def _returned_loss(outputs: Any) -> torch.Tensor | None:
    """The loss ``training_step`` returned (a tensor, or a dict's ``"loss"``; Lightning
    hands it to ``on_train_batch_end`` divided by ``accumulate_grad_batches``), detached;
    None when it returned none (``None``, or manual optimisation without a loss)."""
    loss = outputs.get("loss") if type(outputs) is dict else outputs
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        return None
    return loss.detach() if loss.requires_grad else loss  # automatic optimisation: detached


def _check_rank_sampler(loader: Any) -> None:
    """In a run of several ranks, refuse a train dataloader whose order a resume cannot
    rebuild: Lightning's checkpoint holds rank 0's loader state alone, so every rank's order
    must follow from the seed, the epoch and a count of samples, as a ``DistributedSampler``'s
    does. Lightning's ``DistributedSamplerWrapper`` (what it puts around a sampler it
    cannot shard itself, e.g. torchdata's ``RandomSampler``) draws its inner sampler's order
    afresh after a resume.

    Raises:
        ArgumentError: the sampler is not a ``DistributedSampler``, or is that wrapper.
    """
    batches = getattr(loader, "batch_sampler", None)
    sampler = getattr(batches, "sampler", None) or getattr(loader, "sampler", None)
    if isinstance(sampler, DistributedSampler) and \
            not isinstance(sampler, DistributedSamplerWrapper):
        return
    raise ArgumentError(
        f"train dataloader: with several processes its sampler "
        f"({type(sampler).__name__}) does not give each rank the same order again after a "
        f"resume; use torchdata.stateful_dataloader.sampler.StatefulDistributedSampler"
        f"(dataset, num_replicas=trial.world_size, rank=trial.rank, seed=...) and build the "
        f"Trainer with use_distributed_sampler=False")


class FlightplanCallback(pl.Callback):
    """The Lightning callback behind :func:`fit`.

    Args:
        trial: the run's :class:`~flightplan.trial.trial.Trial`.
        every_n_steps: save every N optimizer steps; None: flightplan's interval policy.

    Attributes:
        stopped: the ``TrialStopped`` a stop rule raised during training, or None.
    """

    def __init__(self, trial: Trial, *, every_n_steps: int | None = None) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ArgumentError(f"every_n_steps = {every_n_steps}: give a positive number of "
                                f"optimizer steps, or None for flightplan's interval policy")
        self.trial = trial
        self.every_n_steps = every_n_steps
        self.stopped: TrialStopped | None = None
        self._rng_to_restore: dict[str, Any] | None = None
        self._timer: StepTimer | None = None
        self._last_step = -1
        self._loss: torch.Tensor | None = None  # the returned losses of this optimizer step
        self._owed = False      # a save due at an epoch's last batch, made one step later
        # looked up once per fit / epoch, not per step
        self._optimizer: Any = None
        self._log_every = 0     # the Trainer's log_every_n_steps
        self._batches: float = 0  # batches in this epoch

    def _stop(self, exc: TrialStopped, trainer: pl.Trainer) -> None:
        self.stopped = exc
        trainer.should_stop = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loaders = getattr(trainer.fit_loop, "_combined_loader", None)
        for loader in (loaders.flattened if loaders is not None else []):
            if not (callable(getattr(loader, "state_dict", None))
                    and callable(getattr(loader, "load_state_dict", None))):
                raise ArgumentError(
                    f"train dataloader: a {type(loader).__name__} cannot resume mid-epoch (no "
                    f"state_dict), so a resumed run would see its first batches again; use "
                    f"torchdata.stateful_dataloader.StatefulDataLoader")
            if self.trial.world_size > 1:
                _check_rank_sampler(loader)
        if self.trial.planned_steps is None and trainer.max_steps and trainer.max_steps > 0:
            self.trial.planned_steps = int(trainer.max_steps)
        self._last_step = trainer.global_step   # after a resume: the restored step
        self._loss = None
        self._optimizer = trainer.optimizers[0] if trainer.optimizers else None
        # set on the Trainer by one of its connectors, so not in its class's annotations
        self._log_every = int(getattr(trainer, "log_every_n_steps", 0) or 0)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._batches = trainer.num_training_batches

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if self._rng_to_restore is not None:  # after Lightning built its iterators
            restore_rng(self._rng_to_restore)
            self._rng_to_restore = None
        if self._timer is None:
            self._timer = StepTimer(pl_module.device)
        self._timer.start()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = _returned_loss(outputs)
        if loss is not None:  # summed over accumulated batches: their mean (each is / N)
            self._loss = loss if self._loss is None else self._loss + loss
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: no optimizer step yet
            return
        self._last_step = step
        row: dict[str, Any] = {} if self._loss is None else {"loss": self._loss}  # read later
        if self._loss is None or (self._log_every and step % self._log_every == 0):
            row.update(_logged_losses(trainer))
        self._loss = None
        if self._optimizer is not None:
            row["lr"] = self._optimizer.param_groups[0]["lr"]
        if self._timer is not None:
            row["step_s"] = self._timer.stop()
        try:
            self.trial.log(step - 1, **row)
        except TrialStopped as exc:
            self._stop(exc, trainer)
            return
        policy_due = self.trial.library_checkpoint_due(step - 1)  # ranks: agreed, leave too
        due = self._owed or (step % self.every_n_steps == 0 or self.trial.leave_requested
                             if self.every_n_steps else policy_due)
        # a checkpoint after an epoch's last batch does not resume bitwise (the next epoch's
        # first batch differs with a StatefulDataLoader): it is taken one step later
        self._owed = due and batch_idx + 1 >= self._batches
        if due and not self._owed:
            try:
                self.trial.flush_rows()  # the row read a step later is judged before the save
            except TrialStopped as exc:
                self._stop(exc, trainer)
                return
            self._save(trainer, step)

    def _save(self, trainer: pl.Trainer, step: int) -> None:
        start = time.perf_counter()
        folder = self.trial.run_dir / STAGING / f"step-{step}"
        if self.trial.ranks.leader:  # with several ranks Lightning writes on rank 0 alone
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        trainer.save_checkpoint(folder / CKPT_FILE, weights_only=False)  # collective
        self.trial.epoch = int(trainer.current_epoch)
        try:  # with several ranks: a rank's stop verdict since their last agreement first
            self.trial.commit_library_checkpoint(folder, step, kind=KIND,
                                                 save_s=time.perf_counter() - start)
        except TrialStopped as exc:
            self._stop(exc, trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.stopped is not None:
            return
        metrics = {k: v for k, v in ((k, _scalar(v)) for k, v in trainer.callback_metrics.items())
                   if v is not None}
        try:
            self.trial.evaluate(max(trainer.global_step - 1, 0), **metrics)
        except TrialStopped as exc:
            self._stop(exc, trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        # with several ranks every rank's states, in rank order (Lightning calls this on
        # every rank and writes rank 0's checkpoint)
        checkpoint[_RNG_KEY] = (self.trial.ranks.gather(capture_rng())
                                if self.trial.ranks.distributed else capture_rng())

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(_RNG_KEY)
        # one rank: a dict; several: a list with one per rank (their number is checked
        # against the manifest's world_size before Lightning loads the file)
        self._rng_to_restore = saved[self.trial.rank] if isinstance(saved, list) else saved
        if self._rng_to_restore is None:
            raise ArgumentError("the checkpoint holds no RNG state (not saved by flightplan's "
                                "callback); dropout and shuffling would differ after resuming")


def _join_ranks(trainer: pl.Trainer, trial: Trial) -> None:
    """Before a run of several processes restores: check that the Trainer spans the run's
    ranks and initialise the process group from the launcher's environment (gloo on the
    CPU, NCCL on GPUs), which Lightning then uses as it finds it.

    Raises:
        ArgumentError: the Trainer's world size (``devices`` × ``num_nodes``) is not the
            run's number of processes, or its strategy is not a parallel one.
    """
    world = int(trainer.world_size)
    if world != trial.world_size:
        raise ArgumentError(
            f"the Trainer spans {world} process{'es' if world > 1 else ''} (devices × "
            f"num_nodes) but this run has {trial.world_size} ([[run]] processes); build it "
            f"with strategy=\"ddp\", devices=trial.world_size")
    if not torch.distributed.is_initialized():
        cuda = isinstance(trainer.accelerator, CUDAAccelerator)
        if cuda:
            torch.cuda.set_device(trainer.strategy.root_device)
        torch.distributed.init_process_group("nccl" if cuda else "gloo")


def fit(trainer: pl.Trainer, module: pl.LightningModule, trial: Trial, *,
        every_n_steps: int | None = None, **fit_kwargs: Any) -> None:
    """``trainer.fit(module, ...)`` inside a flightplan run (see the module docstring).

    Adds a :class:`FlightplanCallback` unless the trainer has one, caps the trainer's
    ``max_steps`` at ``trial.max_steps`` when trial.json sets one (the pilot), empties the
    staging folder, picks the newest verified checkpoint of this run and resumes from it.

    Args:
        trainer: a Lightning Trainer built with ``enable_checkpointing=False``.
        module: the LightningModule.   trial: the run's trial.
        every_n_steps: for a new callback: save every N optimizer steps (None: the policy).
        fit_kwargs: passed on to ``trainer.fit`` (``train_dataloaders``, ``datamodule`` …; not
            ``ckpt_path``: flightplan chooses it).

    Raises:
        ArgumentError: ``ckpt_path`` given, a ``ModelCheckpoint`` on the trainer, a run of
            several processes (``trial.world_size`` > 1) whose Trainer spans another number,
            or a train dataloader that cannot resume mid-epoch (before the first batch).
        CheckpointError: the checkpoint to resume from was saved by another number of ranks.
        TrialStopped: a stop rule fired (``no_usable_resume`` before training).

    With several processes (``[[run]] processes = N``; build the Trainer with
    ``strategy="ddp", devices=trial.world_size``) every rank calls it: it initialises the
    process group, Lightning runs DDP in the launched processes, rank 0 writes each
    checkpoint with every rank's RNG states, and a save, a stop and a leave happen at the
    same step on every rank.
    """
    if "ckpt_path" in fit_kwargs:
        raise ArgumentError("fit(..., ckpt_path=...): flightplan picks the newest verified "
                            "checkpoint itself; drop the argument")
    if trial.world_size > 1:
        _join_ranks(trainer, trial)
    # Lightning's callback connector sets Trainer.callbacks in Trainer.__init__; the class
    # does not declare it
    callbacks: list[Any] = trainer.callbacks  # type: ignore[attr-defined]  # set, not declared
    others = [type(c).__name__ for c in callbacks if isinstance(c, Checkpoint)]
    if others:
        raise ArgumentError(f"the Trainer has {', '.join(others)}, whose saves are not atomic; "
                            f"build it with enable_checkpointing=False (flightplan checkpoints)")
    callback = next((c for c in callbacks if isinstance(c, FlightplanCallback)), None)
    if callback is None:
        callback = FlightplanCallback(trial, every_n_steps=every_n_steps)
        callbacks.append(callback)
    loop = trainer.fit_loop.epoch_loop
    if trial.max_steps and not 0 < loop.max_steps <= trial.max_steps:
        loop.max_steps = trial.max_steps  # the cap trial.json sets (the pilot's)
    if trial.ranks.leader:
        shutil.rmtree(trial.run_dir / STAGING, ignore_errors=True)  # a save killed midway
    source = trial.restore_library(required={CKPT_FILE: "Lightning state and RNG states"})
    trainer.fit(module, ckpt_path=str(source / CKPT_FILE) if source else None,
                weights_only=True, **fit_kwargs)
    if callback.stopped is not None:
        raise callback.stopped


def write_outputs(trial: Trial, module: pl.LightningModule, *,
                  predictions: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any],
                  extra: Mapping[str, Any] | None = None) -> Path:
    """Write what close needs into the run directory: ``predictions.csv`` (one row per test
    example, columns from the first row's keys), ``metrics.json`` and ``artifact/``.

    The artifact replaces the previous one only once it is whole and durable
    (:func:`~flightplan.integrations.outputs.new_artifact`).

    ``artifact/`` holds ``model.safetensors``, the module's ``state_dict`` (parameters and
    buffers; ``safetensors.torch.save_model``: a tensor shared by two names is stored once,
    and ``safetensors.torch.load_model(module, path)`` reloads it into a module built the
    same way; no pickle), and ``artifact.json`` ``{task, params, library: {lightning,
    torch}, **extra}``: nothing in it points into this machine. A reload hook rebuilds the
    module from what ``extra`` records and writes its predictions with
    :func:`flightplan.integrations.outputs.write_predictions`.

    Args:
        trial: the run's trial.   module: the trained LightningModule.
        predictions: rows, e.g. ``{"example_id", "gold", "predicted", "prob_<label>"...}``.
        metrics: JSON-able numbers (the campaign metric among them).
        extra: more ``artifact.json`` keys (what rebuilds the module, the corpus section …).

    With several ranks every rank may call it; rank 0 alone writes.

    Returns:
        The artifact directory.

    Raises:
        ArgumentError: no predictions.
    """
    from safetensors.torch import save_model

    if not trial.ranks.leader:
        return RunDir(trial.run_dir).artifact
    write_predictions_and_metrics(trial.run_dir, predictions=predictions, metrics=metrics)
    with new_artifact(trial.run_dir) as staging:
        save_model(module, str(staging / MODEL_FILE), metadata={"format": "pt"})
        write_json_atomic(staging / "artifact.json", {
            "task": trial.task, "params": trial.params,
            "library": {"lightning": _version("lightning"), "torch": torch.__version__},
            **dict(extra or {})})
    return RunDir(trial.run_dir).artifact
