"""flightplan's guarantees for the Hugging Face ``Trainer`` (and PEFT adapters on it).

One line in a task's ``train(trial)`` replaces ``trainer.train()``::

    from flightplan.integrations.transformers import train, write_outputs
    train(trainer, trial)              # resumes, checkpoints, applies the stop rules
    write_outputs(trial, trainer, predictions=rows, metrics={"macro_f1": 0.71},
                  base_revision=base_revision(...))

What :func:`train` adds to the Trainer:

- **Atomic, verified checkpoints.** The Trainer writes ``checkpoint-N/`` into
  ``<run_dir>/trainer-staging/`` (emptied at every start, never loaded); once it is complete
  :class:`FlightplanCallback` drops ``training_args.bin`` (a pickle nothing reads back) and
  commits the folder as ``checkpoints/step-NNNNNN/`` with flightplan's manifest of sizes and
  hashes, in one rename (:mod:`flightplan.trial.library_checkpoint`); ``keep_last`` prunes.
- **Resume only from the newest verified checkpoint**, every byte re-hashed first
  (:meth:`Trial.restore_library`). ``save_only_model=True`` (checkpoints without the
  optimizer, schedule and RNG states) is refused before training while ``[stop]
  require_resume`` is on; a checkpoint lacking ``optimizer.pt``, ``scheduler.pt``,
  ``rng_state.pth`` or ``trainer_state.json`` (saved so earlier) stops the run with
  ``no_usable_resume`` instead of going on with a fresh optimizer.
- **When to save**: flightplan's measured interval policy (:mod:`flightplan.trial.interval`)
  sets ``should_save``, unless the user chose the Trainer's own schedule (``save_steps``
  other than its default 500, or ``save_strategy`` ``"epoch"``/``"best"``). A loss row is
  logged before every save, so a NaN never reaches a committed checkpoint unseen.
- **Stop rules**: ``non_finite_loss`` on each logged loss (the Trainer's
  ``logging_nan_inf_filter``, which would replace a NaN by the mean of earlier losses, is
  turned off), ``min_quality`` on evaluation metrics (``eval_`` prefix dropped),
  ``max_truncated_fraction`` through ``trial.check_truncation(fraction)`` before training.
  A stop ends training at the end of that step without saving; :func:`train` then raises
  ``TrialStopped`` (``stop.json`` written) so the worker exits 1.
- **Measurements**: each logged row holds ``loss``, ``lr``, ``grad_norm`` when given, and
  ``step_s`` (mean wall seconds per optimizer step since the last row).

- **Several processes** (``[[run]] processes = N``): the Trainer runs its own DDP in the
  ranks flightplan started (``TrainingArguments`` built inside ``train(trial)`` read the
  launcher's environment). Rank 0 writes the checkpoint and each rank its
  ``rng_state_R.pth`` (:func:`required_files`); the commit waits for every rank, and the
  save, stop and leave decisions are agreed across the ranks every 10 steps and before
  each commit (:data:`flightplan.trial.distributed.AGREEMENT_STEPS`).

Not supported (refused before training): ``load_best_model_at_end`` (its best checkpoint
lives in the staging folder that is emptied), ``TrainingArguments`` that count another
number of processes than the run.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy, TrainOutput

from flightplan.durable import write_json_atomic
from flightplan.errors import ArgumentError, TaskError, TrialStopped
from flightplan.integrations.outputs import new_artifact, write_predictions_and_metrics
from flightplan.rundir import RunDir
from flightplan.trial import Trial

__all__ = ["FlightplanCallback", "train", "write_outputs", "REQUIRED_FILES", "required_files",
           "STAGING", "KIND"]

KIND = "transformers"
STAGING = "trainer-staging"
REQUIRED_FILES = {"optimizer.pt": "optimizer state", "scheduler.pt": "learning-rate schedule",
                  "rng_state.pth": "RNG states", "trainer_state.json": "step and data position"}
"""Files a Trainer checkpoint needs to resume exactly (file name → what it holds)."""


def required_files(world_size: int) -> dict[str, str]:
    """:data:`REQUIRED_FILES` for a run of ``world_size`` processes: with several, the
    Trainer saves each rank's RNG states as ``rng_state_R.pth`` instead of ``rng_state.pth``."""
    if world_size == 1:
        return dict(REQUIRED_FILES)
    files = {k: v for k, v in REQUIRED_FILES.items() if k != "rng_state.pth"}
    return {**files, **{f"rng_state_{rank}.pth": f"rank {rank}'s RNG states"
                        for rank in range(world_size)}}


_PICKLED_ARGS = "training_args.bin"
_DEFAULT_SAVE_STEPS = TrainingArguments.__dataclass_fields__["save_steps"].default


def _policy_saves(args: TrainingArguments) -> bool:
    """Whether flightplan's interval policy decides the saves (the user set no schedule)."""
    return args.save_strategy == SaveStrategy.STEPS and args.save_steps == _DEFAULT_SAVE_STEPS


class FlightplanCallback(TrainerCallback):
    """The Trainer callback behind :func:`train` (add it yourself only to call
    ``trainer.train`` directly, then pass ``resume_from_checkpoint=trial.restore_library(
    required=REQUIRED_FILES)`` and check :attr:`stopped` afterwards).

    Args:
        trial: the run's :class:`~flightplan.trial.trial.Trial`.
        policy_saves: whether flightplan's interval policy sets ``should_save``; None: when
            the training arguments name no save schedule of their own.

    Attributes:
        stopped: the ``TrialStopped`` a stop rule raised during training, or None.
    """

    def __init__(self, trial: Trial, *, policy_saves: bool | None = None) -> None:
        self.trial = trial
        self.policy_saves = policy_saves
        self.stopped: TrialStopped | None = None
        self._step_start = 0.0
        self._step_total_s = 0.0
        self._steps_timed = 0
        self._before_save = 0.0

    def _stop(self, exc: TrialStopped, control: Any) -> None:
        self.stopped = exc
        control.should_training_stop = True
        control.should_save = False

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any,
                       **kwargs: Any) -> None:
        if self.policy_saves is None:
            self.policy_saves = _policy_saves(args)
        if self.trial.stop_rules.non_finite_loss:
            args.logging_nan_inf_filter = False  # it would log a NaN loss as an average
        if self.trial.planned_steps is None and state.max_steps:
            self.trial.planned_steps = int(state.max_steps)

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any,
                      **kwargs: Any) -> None:
        self._step_start = time.perf_counter()

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self._step_total_s += now - self._step_start
        self._steps_timed += 1
        due = self.trial.library_checkpoint_due(state.global_step - 1)  # ranks: agreed
        if self.stopped is not None:
            control.should_save = False
        elif self.policy_saves or self.trial.leave_requested:
            control.should_save = due
        if control.should_save:
            control.should_log = True  # the loss since the last row is checked before the save
        self._before_save = time.perf_counter()

    def on_epoch_end(self, args: TrainingArguments, state: Any, control: Any,
                     **kwargs: Any) -> None:
        if self.stopped is not None:  # save_strategy="epoch" would save the stopped state
            control.should_save = False

    def on_log(self, args: TrainingArguments, state: Any, control: Any,
               logs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if self.stopped is not None or not logs or any(k.startswith("eval_") for k in logs):
            return  # evaluation rows arrive through on_evaluate
        row = {("lr" if key == "learning_rate" else key): value for key, value in logs.items()
               if isinstance(value, (int, float))}
        if self._steps_timed:
            row["step_s"] = self._step_total_s / self._steps_timed
            self._step_total_s, self._steps_timed = 0.0, 0
        try:
            self.trial.log(max(state.global_step - 1, 0), **row)
        except TrialStopped as exc:
            self._stop(exc, control)
        self._before_save = time.perf_counter()

    def on_evaluate(self, args: TrainingArguments, state: Any, control: Any,
                    metrics: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if self.stopped is not None or not metrics:
            return
        values = {key.removeprefix("eval_"): value for key, value in metrics.items()
                  if isinstance(value, (int, float))}
        try:
            self.trial.evaluate(max(state.global_step - 1, 0), **values)
        except TrialStopped as exc:
            self._stop(exc, control)
        self._before_save = time.perf_counter()

    def on_save(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        assert args.output_dir is not None      # TrainingArguments sets its default when None
        source = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        self.trial.ranks.barrier()  # every rank wrote its rng_state_R.pth into the folder
        save_s = time.perf_counter() - self._before_save
        if self.trial.ranks.leader:
            (source / _PICKLED_ARGS).unlink(missing_ok=True)
        self.trial.epoch = int(state.epoch or 0)
        try:  # with several ranks: a rank's stop verdict since their last agreement first
            self.trial.commit_library_checkpoint(source, state.global_step, kind=KIND,
                                                 save_s=save_s)
        except TrialStopped as exc:
            self._stop(exc, control)


def train(trainer: Trainer, trial: Trial, **train_kwargs: Any) -> TrainOutput:
    """``trainer.train()`` inside a flightplan run (see the module docstring).

    Adds a :class:`FlightplanCallback` unless the trainer has one, caps ``args.max_steps``
    at ``trial.max_steps`` when trial.json sets one (the pilot), points the Trainer's
    checkpoint writes at ``<run_dir>/trainer-staging/`` (``args.output_dir``; emptied now),
    picks the newest verified checkpoint of this run and resumes from it.

    Args:
        trainer: a configured ``Trainer`` (``output_dir`` is replaced).
        trial: the run's trial.   train_kwargs: passed on to ``trainer.train`` (not
            ``resume_from_checkpoint``: flightplan chooses it).

    Returns:
        The Trainer's ``TrainOutput``.

    Raises:
        ArgumentError: ``resume_from_checkpoint`` given, ``load_best_model_at_end`` set, or
            ``args.world_size`` is not the run's number of processes.
        CheckpointError: the checkpoint to resume from was saved by another number of ranks.
        TaskError: ``save_only_model=True`` while ``[stop] require_resume`` is on.
        TrialStopped: a stop rule fired (before training: ``no_usable_resume``; during it:
            after the step that crossed it, with no save after it).
    """
    args = trainer.args
    if "resume_from_checkpoint" in train_kwargs:
        raise ArgumentError("train(trainer, trial, resume_from_checkpoint=...): flightplan picks "
                            "the newest verified checkpoint itself; drop the argument")
    if args.load_best_model_at_end:
        raise ArgumentError("TrainingArguments.load_best_model_at_end is not supported inside a "
                            "flightplan run (its checkpoint folder is staging); set it False and "
                            "let min_quality and the final evaluation decide")
    if args.world_size != trial.world_size:
        raise ArgumentError(f"TrainingArguments: {args.world_size} process"
                            f"{'es' if args.world_size > 1 else ''} but this run has "
                            f"{trial.world_size} ([[run]] processes); build the arguments "
                            f"inside train(trial), where the launcher's environment is set")
    if args.save_only_model:
        if trial.stop_rules.require_resume:
            raise TaskError("True saves checkpoints without the optimizer, schedule and RNG "
                            "states, so a run killed after a save could not resume and "
                            "[stop] require_resume would stop it with its work lost; set "
                            "save_only_model=False", field="TrainingArguments.save_only_model",
                            value=True)
        print("flightplan: save_only_model=True: these checkpoints lack the optimizer, schedule "
              "and RNG states; a run killed after a save starts over ([stop] require_resume "
              "is off)", file=sys.stderr)
    callback = next((c for c in trainer.callback_handler.callbacks
                     if isinstance(c, FlightplanCallback)), None)
    if callback is None:
        callback = FlightplanCallback(trial)
        trainer.add_callback(callback)
    if trial.max_steps and not 0 < args.max_steps <= trial.max_steps:
        args.max_steps = trial.max_steps  # the cap trial.json sets (the pilot's)
    staging = trial.run_dir / STAGING
    if trial.ranks.leader:
        shutil.rmtree(staging, ignore_errors=True)  # a save killed midway: never loaded
        staging.mkdir(parents=True)
    trial.ranks.barrier()
    args.output_dir = str(staging)
    args.save_total_limit = None  # keep_last prunes the committed checkpoints
    source = trial.restore_library(required=required_files(trial.world_size))
    output = trainer.train(resume_from_checkpoint=str(source) if source else None, **train_kwargs)
    if callback.stopped is not None:
        raise callback.stopped
    return output


def write_outputs(trial: Trial, trainer: Trainer, *, predictions: Sequence[Mapping[str, Any]],
                  metrics: Mapping[str, Any], base_revision: Mapping[str, Any] | None = None,
                  extra: Mapping[str, Any] | None = None) -> Path:
    """Write what close needs into the run directory: ``predictions.csv`` (one row per test
    example, columns from the first row's keys), ``metrics.json`` and ``artifact/``.

    The artifact replaces the previous one only once it is whole and durable
    (:func:`~flightplan.integrations.outputs.new_artifact`).

    ``artifact/`` holds ``trainer.save_model`` (for a PEFT model: the adapter only,
    ``adapter_model.safetensors`` + ``adapter_config.json``, whose
    ``base_model_name_or_path`` is set to the base revision's ``package`` instead of this
    machine's path, every field PEFT holds as a set (``target_modules``) is sorted, so the
    bytes do not depend on the process's hash seed, and without PEFT's model card; the
    pickled ``training_args.bin`` is dropped) and ``artifact.json`` ``{task, params,
    library: {transformers, peft}, base_revision, peft, **extra}``: nothing in it points
    into this machine.

    Args:
        predictions: rows, e.g. ``{"example_id", "gold", "predicted", "prob_<label>"...}``.
        metrics: JSON-able numbers (the campaign metric among them).
        base_revision: the exact base model (package, version, weights sha256 …); required
            for a PEFT adapter, which cannot be reloaded without it.
        extra: more ``artifact.json`` keys (labels, max_length …).

    With several ranks every rank may call it; rank 0 alone writes.

    Returns:
        The artifact directory.

    Raises:
        ArgumentError: no predictions, or a PEFT model without ``base_revision``.
    """
    import peft
    import transformers

    model = trainer.model
    is_peft = isinstance(model, peft.PeftModel)
    if is_peft and not base_revision:
        raise ArgumentError("write_outputs: a PEFT adapter needs base_revision (the exact base "
                            "model: package, version, weights_sha256) to be reloadable")
    if not trial.ranks.leader:
        return RunDir(trial.run_dir).artifact
    write_predictions_and_metrics(trial.run_dir, predictions=predictions, metrics=metrics)
    with new_artifact(trial.run_dir) as staging:
        trainer.save_model(str(staging))
        (staging / _PICKLED_ARGS).unlink(missing_ok=True)
        if isinstance(model, peft.PeftModel) and base_revision:
            # the adapter names its base by this machine's path: name it by package
            (staging / "README.md").unlink(missing_ok=True)  # PEFT's model card, with the path
            config = json.loads((staging / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = base_revision.get("package")
            for key, value in vars(model.peft_config[model.active_adapter]).items():
                if isinstance(value, set):   # target_modules: PEFT writes its set in hash order
                    config[key] = sorted(value)
            write_json_atomic(staging / "adapter_config.json", config)
        adapter = json.loads((staging / "adapter_config.json").read_text()) if is_peft else None
        write_json_atomic(staging / "artifact.json", {
            "task": trial.task, "params": trial.params, "base_revision": base_revision,
            "library": {"transformers": transformers.__version__, "peft": peft.__version__},
            "peft": adapter, **dict(extra or {})})
    return RunDir(trial.run_dir).artifact
