"""The training loop of ``textclf``: ``train(trial)``, read top to bottom.

1. Read the corpus (hashes checked again), tokenise train and test once per campaign
   (:mod:`.prepared`: later runs load the campaign's checked cache), ask the trial to
   apply ``max_truncated_fraction`` to the essential inputs (train + test).
2. Build the classifier from ``params.seed``. Control (no adapter): the frozen encoder's
   embeddings of the training set are computed once (forward only, length-sorted
   batches) and only the head trains on them; the checkpoint still holds everything a
   resume needs (head, optimizer, scheduler, loader position, RNGs) because the
   embeddings are a pure function of corpus and base weights. LoRA: the adapters and
   head train through the encoder, each batch padded to its longest input, the
   encoder's linear layers computing its real tokens only (:class:`TrainStep`).
   Everything runs on the run's device (:func:`flightplan.trial.accelerator.device`: the GPU the
   executor gave the run, else the CPU), deterministic on CUDA too; ``params.precision``
   puts the training forward pass under autocast (fp16 with a checkpointed GradScaler).
3. AdamW, warm-up then linear or cosine decay to 0 (a step-wise LambdaLR), a shuffled
   ``StatefulDataLoader`` whose sampler owns a generator seeded from ``params.seed``.
   Every step logs ``loss``, ``step_s`` (forward + backward + optimizer, seconds; on a GPU
   both are read a step later, :mod:`flightplan.trial.readings`),
   ``seq_len`` (the batch's longest input), ``tokens`` (the real tokens it holds) and
   ``lr``; the trial may checkpoint after it.
4. At the end of every epoch: the test set, forward only, in length-sorted batches
   (bitwise reproducible, see :mod:`.inference`), logged with ``eval_s`` through
   ``trial.evaluate``.
5. At the end (or at ``trial.max_steps``, the pilot's cap): ``predictions.csv``,
   ``metrics.json``, ``artifact/``, then ``trial.finish()``.

Measurement rows besides the steps (``docs/internals.md`` lists them): ``encode_s`` per
embedding batch of the control (with ``seq_len``, ``tokens``); ``load_s`` (corpus,
tokenizer, model and, for the control, both embedding passes) with ``data_s`` (the part of
it spent reading the corpus and tokenizing both splits, or loading them from the cache:
goodput's data preparation; the cache's own setup row says which, ``data_cache_hit``)
and ``planned_steps``; ``output_s``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flightplan.durable import write_json_atomic
from flightplan.errors import SpecError
from flightplan.trial import StepTimer, autocast, device, grad_scaler, set_deterministic
from flightplan.spec import BaseModelSection, CorpusSection
from flightplan.tasks.textclf.artifact import save_artifact
from flightplan.tasks.textclf.inference import (EncodedSplit, classification_metrics,
                                                example_embeddings, pooled,
                                                predict_probabilities, prediction_rows,
                                                write_predictions)
from flightplan.tasks.textclf.model import (TaskParams, TextClassifier,
                                            TrainableParameters, base_revision,
                                            build_classifier, torch_threads)
from flightplan.tasks.textclf.prepared import read_and_encode

__all__ = ["train", "lr_factor", "optimizer_and_schedule", "TrainStep"]


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier of the peak lr before optimizer step ``step`` (0-based).

    Linear warm-up over ``warmup`` steps ((step + 1) / warmup), then decay to 0 at
    ``total``: linear ``(total − step) / (total − warmup)`` or cosine
    ``0.5 · (1 + cos(π · progress))`` (Loshchilov & Hutter 2017, without restarts).
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return max(0.0, 1.0 - progress)


def optimizer_and_schedule(model: TextClassifier, params: TaskParams, total: int
                           ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trained tensors (the head at ``params.lr``, adapters at
    ``adapter.lr`` or ``lr``; ``weight_decay``) and its step-wise schedule of
    :func:`lr_factor` over ``total`` optimizer steps."""
    adapter = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("head.")]
    groups = [{"params": list(model.head.parameters()), "lr": params.lr}]
    if adapter:
        groups.append({"params": adapter, "lr": params.adapter.lr or params.lr})
    optimizer = torch.optim.AdamW(groups, weight_decay=params.weight_decay)
    warmup = int(params.warmup_fraction * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total, warmup, params.schedule))
    return optimizer, scheduler


def _sections(trial: Any) -> tuple[CorpusSection, BaseModelSection, Path]:
    corpus = {k: v for k, v in dict(trial.corpus).items() if k != "root"}
    return (CorpusSection.model_validate(corpus),
            BaseModelSection.model_validate(dict(trial.base_model or {})),
            Path(trial.campaign_dir))


def _train_embeddings(trial: Any, model: TextClassifier, split: EncodedSplit) -> torch.Tensor:
    """Pooled embeddings (N, H) of the training set, forward only, in the length-sorted
    batches of :func:`example_embeddings` (fixed, so every process computes the same
    tensor), on the model's device; logs an ``encode_s`` row per batch (seconds, with
    ``seq_len``, ``tokens`` and ``batch_size``) as it ends (``trial.log_setup``: before
    ``restore()``)."""
    model.eval()

    def logged(indices: list[int], seconds: float) -> None:
        lengths = [len(split.input_ids[i]) for i in indices]
        trial.log_setup(encode_s=seconds, seq_len=max(lengths), tokens=sum(lengths),
                        batch_size=len(indices))
    dev = next(model.parameters()).device
    return example_embeddings(model, split, on_batch=logged).to(dev)


@dataclass(frozen=True)
class TrainStep:
    """One optimizer step of textclf on a batch of training examples, as the loop runs it
    (``bench/peer_step.py`` times this very object against a bare PEFT step).

    Trained encoder: the batch padded to its longest input, as a standard collator pads
    it, in one forward pass that computes the real tokens only, attention within each
    text (:class:`~flightplan.tasks.textclf.packed.RealTokenEncoder`: dropout draws masks
    for the real positions only); then the loss, one backward pass. Control
    (``embeddings`` given, (N, H) on the model's device): the head reads the precomputed
    rows. Then AdamW (through the scaler, which passes through
    unless fp16) and the scheduler.

    ``__call__(rows, nan=False) -> (loss, seq_len, tokens)``: the loss as a 0-d tensor (the
    caller reads it), the length the batch is padded to and the real tokens it holds
    (control: ``max_length`` and ``max_length`` × batch, as if padded to it). ``nan``
    multiplies the loss by NaN before the backward pass (``inject_nan_at_step``).
    """

    model: TextClassifier
    split: EncodedSplit
    gold: torch.Tensor                          # (N,) int64 on the model's device
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    precision: str
    embeddings: torch.Tensor | None = None      # control: (N, H) on the model's device
    loss_fn: nn.Module = field(default_factory=nn.CrossEntropyLoss)

    def __call__(self, rows: list[int], *, nan: bool = False) -> tuple[torch.Tensor, int, int]:
        dev = self.gold.device
        with autocast(self.precision, dev):
            if self.embeddings is not None:
                seq_len = self.split.max_length
                tokens = seq_len * len(rows)
                logits = self.model.classify(self.embeddings[rows])          # (B, C)
            else:
                lengths = [len(self.split.input_ids[i]) for i in rows]
                seq_len, tokens = max(lengths), sum(lengths)
                logits = self.model.classify(pooled(self.model, self.split, rows, dev))
        loss = self.loss_fn(logits.float(), self.gold[rows])
        if nan:
            loss = loss * float("nan")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)            # optimizer.step() unless fp16
        self.scaler.update()
        self.scheduler.step()
        return loss.detach(), seq_len, tokens


def _evaluate(trial: Any, model: TextClassifier, step: int, test: EncodedSplit, labels: list[str],
              test_embeddings: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Probabilities (N, C) and metrics on the test set; logs them with ``eval_s``."""
    began = time.perf_counter()
    probs = predict_probabilities(model, test, test_embeddings)
    metrics = classification_metrics(test.gold, probs.argmax(dim=1).tolist(), labels)
    model.train()
    trial.evaluate(step, macro_f1=metrics["macro_f1"], accuracy=metrics["accuracy"],
                   eval_s=time.perf_counter() - began, n_test=len(test))
    return probs, metrics


def train(trial: Any, *, code_version: str) -> None:
    """Train one run of ``textclf`` under ``trial`` and write its outputs (``code_version``:
    the task's ``CODE_VERSION``, recorded in the artifact).

    Reads ``trial.params`` (:class:`TaskParams`), ``trial.corpus``, ``trial.base_model``,
    ``trial.campaign_dir``, ``trial.run_dir``, ``trial.max_steps``. Writes
    ``predictions.csv``, ``metrics.json`` and ``artifact/`` into the run directory.

    Raises:
        SpecError: invalid params or sections; ``precision = "fp16"`` without a GPU.
        CorpusMismatch: the corpus no longer matches the frozen hashes.
        TrialStopped: a stop rule fired (raised by the trial; outputs are not written).
    """
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    began = time.perf_counter()
    torch.set_num_threads(torch_threads())
    params = TaskParams.from_params(dict(trial.params))
    dev = device()
    if params.precision == "fp16" and dev.type != "cuda":
        raise SpecError("fp16 needs a CUDA device and this run has none; use bf16 or fp32 on "
                        "a CPU", field="params.precision", value=params.precision)
    set_deterministic(dev)
    corpus_section, base_section, campaign_dir = _sections(trial)
    data_began = time.perf_counter()
    labels, train_split, test_split = read_and_encode(
        trial.cached, corpus_section, base_section, campaign_dir, max_length=params.max_length,
        code_version=code_version)
    data_s = time.perf_counter() - data_began
    n_inputs = len(train_split) + len(test_split)
    trial.check_truncation((sum(train_split.truncated) + sum(test_split.truncated)) / max(1, n_inputs))

    model = build_classifier(base_section, params, n_labels=len(labels)).to(dev)
    revision = base_revision(base_section, init_seed=params.seed)
    steps_per_epoch = math.ceil(len(train_split) / params.batch_size)
    total = params.epochs * steps_per_epoch
    last = total if trial.max_steps is None else min(total, int(trial.max_steps))
    trial.planned_steps = total
    optimizer, scheduler = optimizer_and_schedule(model, params, total)
    # The sampler owns its generator: with ``shuffle=True`` the loader would share one with
    # the sampler and draw a worker seed from it per epoch, and a loader restored mid-epoch
    # then shuffles the following epochs differently (torchdata 0.11).
    indices = list(range(len(train_split)))
    sampler = RandomSampler(indices, generator=torch.Generator().manual_seed(params.seed))
    loader = StatefulDataLoader(indices, batch_size=params.batch_size, sampler=sampler,
                                generator=torch.Generator().manual_seed(params.seed + 1),
                                num_workers=0)
    scaler = grad_scaler(params.precision, dev)      # enabled for fp16 only
    trial.register(model=TrainableParameters(model), optimizer=optimizer, scheduler=scheduler,
                   loader=loader, scaler=scaler if scaler.is_enabled() else None)
    # The control's embeddings are a pure function of corpus and base weights (no RNG is
    # drawn), so they come before restore(): a resumed pilot that waits there for its
    # checkpoint (trial.json ``await_checkpoint``) has them ready when it arrives.
    train_embeddings = test_embeddings = None
    if params.is_control:
        train_embeddings = _train_embeddings(trial, model, train_split)        # (N, H)
        test_embeddings = example_embeddings(model, test_split)                 # (N, H)
    step = trial.restore()

    gold = torch.tensor(train_split.gold, dtype=torch.long, device=dev)   # (N,)
    trial.log(step, load_s=time.perf_counter() - began, data_s=data_s, planned_steps=total,
              steps_per_epoch=steps_per_epoch)
    train_step = TrainStep(model, train_split, gold, optimizer, scheduler, scaler,
                           params.precision, train_embeddings)
    probs = metrics = None
    timer = StepTimer(dev)   # on a GPU, loss and step_s are read a step later: no sync a step
    model.train()
    while step < last:
        for batch in loader:                                              # (B,) int64
            timer.start()
            lr = optimizer.param_groups[0]["lr"]                          # the head's
            loss, seq_len, tokens = train_step(batch.tolist(),
                                               nan=params.inject_nan_at_step == step)
            trial.log(step, loss=loss, step_s=timer.stop(), seq_len=seq_len,
                      tokens=tokens, batch_size=len(batch), lr=lr)
            trial.maybe_checkpoint(step, epoch=step // steps_per_epoch)
            step += 1
            if step % steps_per_epoch == 0 or step == last:
                probs, metrics = _evaluate(trial, model, step - 1, test_split, labels, test_embeddings)
            if step >= last:
                break
    if probs is None:   # resumed after the last step: outputs were not written yet
        probs, metrics = _evaluate(trial, model, max(0, step - 1), test_split, labels, test_embeddings)

    began = time.perf_counter()
    run_dir = Path(trial.run_dir)
    write_predictions(run_dir / "predictions.csv", prediction_rows(test_split, probs, labels), labels)
    write_json_atomic(run_dir / "metrics.json", metrics)
    save_artifact(run_dir / "artifact", model, params=dict(trial.params), labels=labels,
                  max_length=params.max_length, base_model=base_section, revision=revision,
                  corpus=corpus_section.model_dump(), code_version=code_version)
    trial.log(max(0, step - 1), output_s=time.perf_counter() - began)
    trial.finish()
