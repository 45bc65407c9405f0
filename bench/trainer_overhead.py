"""The Trainer integration's per-step overhead, from one run (DESIGN.md: ≤ 2 %).

The same Hugging Face Trainer loop (a random 2-layer BERT, hidden 64, 8 sequences of 32
tokens per step, AdamW, a loss row logged every step, no saves) runs ``--steps`` steps
without flightplan, then through ``flightplan.integrations.transformers.train`` (callback,
measurement rows, stop rules), back to back in each of ``--rounds`` rounds. Printed:

1. hooks: seconds spent inside the callback's hooks, timed around each call, per step,
   against the bare loop's step time (the precise figure);
2. loop: the difference of the two loops' wall times against the bare loop (a cross-check,
   noisier on a shared machine).

Each ratio is the median over rounds of the ratio within a round (so load from other
processes mostly cancels). Saves are left out on purpose: their cost is the checkpoint
interval policy's business (``bench/checkpoint.py``); one save's stall is printed apart.

Usage::

    .venv/bin/python bench/trainer_overhead.py [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback, Trainer,
                          TrainingArguments)

from flightplan.integrations.transformers import FlightplanCallback, train
from flightplan.trial import Trial


def _trainer(folder: Path, steps: int, save: bool = False) -> Trainer:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                        num_labels=3)
    model = BertForSequenceClassification(config)
    data = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 512, (256, 32), generator=data)
    labels = torch.randint(0, 3, (256,), generator=data)
    dataset = [{"input_ids": t, "labels": y} for t, y in zip(tokens, labels)]
    args = TrainingArguments(output_dir=str(folder), max_steps=steps, per_device_train_batch_size=8,
                             logging_steps=1, save_strategy="steps" if save else "no",
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
                             log_level="error", dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.remove_callback(PrinterCallback)  # no log lines on stdout, in both loops
    return trainer


class _TimedCallback(FlightplanCallback):
    """The callback with every hook's time added to :attr:`hooks_s`."""

    hooks_s = 0.0

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if not name.startswith("on_") or not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            finally:
                _TimedCallback.hooks_s += time.perf_counter() - start

        return timed


def _round(folder: Path, steps: int, index: int) -> dict[str, float]:
    bare = _trainer(folder / "bare", steps)
    start = time.perf_counter()
    bare.train()
    bare_s = time.perf_counter() - start
    trainer = _trainer(folder / f"round-{index}", steps)
    trial = Trial.local(folder / f"round-{index}", run_id=f"overhead-{index}")
    _TimedCallback.hooks_s = 0.0
    trainer.add_callback(_TimedCallback(trial))
    start = time.perf_counter()
    train(trainer, trial)
    flightplan_s = time.perf_counter() - start
    trial.finish()
    return {"bare_step_s": bare_s / steps, "hooks_step_s": _TimedCallback.hooks_s / steps,
            "hooks_ratio": _TimedCallback.hooks_s / bare_s,
            "loop_ratio": (flightplan_s - bare_s) / bare_s}


def _one_save(folder: Path) -> dict[str, Any]:
    """The first save of a policy-driven run (the policy saves at its first chance)."""
    trainer = _trainer(folder / "save", 2, save=True)
    trainer.args.save_steps = TrainingArguments.__dataclass_fields__["save_steps"].default
    trial = Trial.local(folder / "save", run_id="overhead-save")
    train(trainer, trial)
    trial.finish()
    rows = [json.loads(line) for line in (folder / "save" / "measurements.jsonl").open()]
    return next(r for r in rows if r.get("event") == "checkpoint")


def main() -> None:
    """Print the medians (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per loop")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _round(folder, 10, -1)  # warm-up: imports, first allocations
        rounds = [_round(folder, args.steps, i) for i in range(args.rounds)]
        save = _one_save(folder)
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"bare Trainer step: {median['bare_step_s'] * 1e3:.2f} ms")
    print(f"callback hooks per step: {median['hooks_step_s'] * 1e6:.0f} us = "
          f"{median['hooks_ratio']:.2%} of the bare step (target <= 2 %)")
    print(f"whole loop, flightplan vs bare: {median['loop_ratio']:+.2%} (cross-check)")
    print(f"one save (Trainer's save + flightplan's hashes, fsyncs and rename): "
          f"{save['stall_s'] * 1e3:.1f} ms for {save['bytes'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
