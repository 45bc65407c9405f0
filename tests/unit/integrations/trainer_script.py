"""A tiny Trainer run through ``flightplan.integrations.transformers.train``, for the tests.

A random 1-layer BERT (vocab 64, hidden 16, dropout 0.2) classifies 48 random sequences of
8 tokens into 3 labels, with AdamW, a linear schedule, a shuffled loader (4 per batch, 12
batches an epoch) and dropout, so a resume is bitwise identical only if the weights, the
optimizer, the schedule, the data position and every RNG come back.

Run in this process (:func:`run`) or as a child::

    python trainer_script.py RUN_DIR [--steps 14] [--save-steps 3] [--kill save:6]

``--kill WHERE:N`` SIGKILLs this process at global step N: ``step`` (after the step, before
any save), ``save`` (inside the Trainer's save: weights and optimizer written, RNG and state
not), ``commit`` (flightplan's manifest written, before the last rename). On a normal end the
final weights and optimizer state are written to ``RUN_DIR/final.pt``. Exit codes: 0
finished, 1 stopped by a rule.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)

from flightplan.integrations import transformers as integration
from flightplan.trial import library_checkpoint
from flightplan.trial.trial import Trial
from script_support import die, parse_kill, save_final, script_main

__all__ = ["RUN_ID", "run", "build_trainer"]

RUN_ID = "bert-tiny-0123456789"


class _Poison(TrainerCallback):
    """Sets every weight to NaN before global step ``at`` (0-based index), so its loss is NaN."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                      **kwargs: Any) -> None:
        if state.global_step == self.at:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.fill_(float("nan"))


class _KillAfterStep(TrainerCallback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.at:
            die()


def _arm_kill(trainer: Trainer, where: str, at: int) -> None:
    if where == "step":
        trainer.add_callback(_KillAfterStep(at))
    elif where == "save":
        original = trainer._save_rng_state

        def die_mid_save(output_dir: str) -> None:
            if trainer.state.global_step == at:
                die()
            original(output_dir)

        trainer._save_rng_state = die_mid_save
    elif where == "commit":
        rename = library_checkpoint.os.rename

        def die_before_rename(source: Any, target: Any) -> None:
            if Path(target).name == f"step-{at:06d}":
                die()
            rename(source, target)

        library_checkpoint.os.rename = die_before_rename
    else:
        raise ValueError(f"--kill {where}:{at}: WHERE is step, save or commit")


def _accuracy(prediction: Any) -> dict[str, float]:
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def build_trainer(run_dir: Path, *, steps: int, save_steps: int | None,
                  save_only_model: bool = False, nan_at: int | None = None,
                  eval_steps: int | None = None, lora_modules: list[str] | None = None
                  ) -> Trainer:
    """The tiny Trainer (writes nothing until trained); ``save_steps`` None: flightplan's
    interval policy decides the saves; ``eval_steps``: accuracy on the first 8 examples
    every that many steps; ``lora_modules``: train a PEFT LoRA adapter (rank 2) on those
    modules instead of the whole model."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=3,
                        hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    model = BertForSequenceClassification(config)
    if lora_modules:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=2, lora_alpha=4, target_modules=list(lora_modules), task_type="SEQ_CLS"))
    data = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 64, (48, 8), generator=data)
    labels = torch.randint(0, 3, (48,), generator=data)
    dataset = [{"input_ids": t, "attention_mask": torch.ones(8, dtype=torch.long), "labels": y}
               for t, y in zip(tokens, labels)]
    extra: dict[str, Any] = {"save_steps": save_steps} if save_steps else {}
    if eval_steps:
        extra.update(eval_strategy="steps", eval_steps=eval_steps)
    args = TrainingArguments(output_dir=str(run_dir), max_steps=steps,
                             per_device_train_batch_size=4, learning_rate=1e-3,
                             warmup_steps=2, logging_steps=1, seed=0, report_to=[],
                             use_cpu=True, disable_tqdm=True,
                             save_only_model=save_only_model, dataloader_num_workers=0, **extra)
    trainer = Trainer(model=model, args=args, train_dataset=dataset,
                      eval_dataset=dataset[:8] if eval_steps else None,
                      compute_metrics=_accuracy if eval_steps else None)
    if nan_at is not None:
        trainer.add_callback(_Poison(nan_at))
    return trainer


def run(run_dir: Path, *, steps: int = 14, save_steps: int | None = 3, kill: str | None = None,
        save_only_model: bool = False, nan_at: int | None = None, eval_steps: int | None = None,
        stop: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None) -> Trainer:
    """Train (resuming from the newest verified checkpoint) and write ``final.pt``.

    Raises:
        TrialStopped: a stop rule fired.
    """
    trainer = build_trainer(run_dir, steps=steps, save_steps=save_steps,
                            save_only_model=save_only_model, nan_at=nan_at,
                            eval_steps=eval_steps)
    armed = parse_kill(kill)
    if armed:
        _arm_kill(trainer, *armed)
    trial = Trial.local(run_dir, name="bert-tiny", run_id=RUN_ID, stop=stop,
                        checkpoint=checkpoint)
    integration.train(trainer, trial)
    trial.finish()
    save_final(run_dir, trainer.model, trainer.optimizer)
    return trainer


if __name__ == "__main__":
    sys.exit(script_main(run, schedule="--save-steps", default_schedule=3, default_steps=14))
