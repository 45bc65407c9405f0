"""The Trainer and Lightning integrations' per-step overhead, from one run (DESIGN.md: ≤ 2 %).

Trainer: the same Hugging Face Trainer loop (a random 2-layer BERT, hidden 64, 8 sequences
of 32 tokens per step, AdamW, a loss row logged every step, no saves) runs ``--steps`` steps
without flightplan, then through ``flightplan.integrations.transformers.train`` (callback,
measurement rows, stop rules), back to back in each of ``--rounds`` rounds.

Lightning: the same LightningModule (an MLP 256 → 512 → 512 → 10 with dropout, AdamW, 64
examples per step from a shuffled ``StatefulDataLoader``, ``self.log("train_loss", …)`` every
step) is fitted ``--steps`` steps by a bare ``Trainer.fit``, then through
``flightplan.integrations.lightning.fit`` (callback, measurement rows, stop rules; saves
pushed past the end), in each round in turn. Printed for each:

1. hooks: seconds spent inside the callback's hooks, timed around each call, per step,
   against the bare loop's step time (the precise figure);
2. loop: the two loops' times per step, flightplan over bare: ``-> 1.01`` (target ≤ 1.02);
   for Lightning the median step after the first 10 (a stopwatch callback in both loops,
   from one step's end to the next), so the set-up each loop pays once (flightplan's
   restore) is left out.

Both in CPU time of this process (``time.process_time``, the hooks in ``time.thread_time``):
on a machine shared with other jobs a wall clock also counts the time the process waited
for a core; the wall-clock figures are printed beside them. Each ratio is the median over
rounds of the ratio within a round; the loop's is printed with its range over rounds. On
the shared 2-core development machine single rounds' loop ratios scatter by ±5 % and more
(two fits of the same module differ that much), while the hooks' figure moves by a few
percent of itself: the hooks' ratio is the one that resolves 2 %. Saves are left out on
purpose: their cost is the checkpoint interval policy's business (``bench/checkpoint.py``);
one Trainer save's stall is printed apart.

Usage::

    .venv/bin/python bench/trainer_overhead.py [--steps 200] [--rounds 5] [--only lightning]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler
from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback, Trainer,
                          TrainingArguments)

from flightplan.integrations import lightning as lightning_integration
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


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    return time.perf_counter(), time.process_time()


class _Timed:
    """The time spent inside the integration's own hooks: :attr:`hooks_s` (wall) and
    :attr:`hooks_cpu_s` (CPU time of the calling thread)."""

    hooks_s = 0.0
    hooks_cpu_s = 0.0

    @staticmethod
    def subclass(cls: type) -> type:
        """``cls`` with each ``on_*`` hook it defines itself timed (the library's no-op
        hooks it inherits are not: their calls are the library's own cost)."""

        def timed(hook: Any) -> Any:
            @functools.wraps(hook)
            def call(*args: Any, **kwargs: Any) -> Any:
                start, start_cpu = time.perf_counter(), time.thread_time()
                try:
                    return hook(*args, **kwargs)
                finally:
                    _Timed.hooks_cpu_s += time.thread_time() - start_cpu
                    _Timed.hooks_s += time.perf_counter() - start
            return call

        hooks = {name: timed(value) for name, value in vars(cls).items()
                 if name.startswith("on_") and callable(value)}
        return type(f"Timed{cls.__name__}", (cls,), hooks)


_TimedCallback = _Timed.subclass(FlightplanCallback)
_TimedLightningCallback = _Timed.subclass(lightning_integration.FlightplanCallback)


class _Mlp(pl.LightningModule):
    """256 → 512 → 512 → 10 with dropout; AdamW; logs ``train_loss`` every step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.1), torch.nn.Linear(512, 512),
                                       torch.nn.ReLU(), torch.nn.Linear(512, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch                                                   # (64, 256), (64,)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class _Stopwatch(pl.Callback):
    """(wall, CPU) seconds of each optimizer step after the first :data:`WARM_STEPS`, from
    one step's end to the next's, in both loops: the steady state, without the set-up either
    loop pays once."""

    def __init__(self) -> None:
        self.ends: list[tuple[float, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= WARM_STEPS:
            self.ends.append(_clock())

    def steps(self) -> tuple[list[float], list[float]]:
        """(wall, CPU) seconds of each step timed."""
        pairs = list(zip(self.ends, self.ends[1:]))
        return [b[0] - a[0] for a, b in pairs], [b[1] - a[1] for a, b in pairs]


WARM_STEPS = 10


def _lightning_fit(folder: Path | None, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the median step of one fit of ``steps`` steps, after the first
    :data:`WARM_STEPS`: bare (``folder`` None) or through flightplan."""
    torch.manual_seed(0)
    data = torch.Generator().manual_seed(1)
    dataset = torch.utils.data.TensorDataset(torch.randn(4096, 256, generator=data),
                                             torch.randint(0, 10, (4096,), generator=data))
    loader = StatefulDataLoader(dataset, batch_size=64,
                                sampler=RandomSampler(dataset, generator=data))
    watch = _Stopwatch()
    callbacks: list[pl.Callback] = [watch]
    if folder is not None:
        callbacks.insert(0, _TimedLightningCallback(
            Trial.local(folder, run_id=f"overhead-{folder.name}"), every_n_steps=10 ** 9))
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=callbacks)
    module = _Mlp()
    if folder is None:
        trainer.fit(module, loader)
    else:
        lightning_integration.fit(trainer, module, callbacks[0].trial, train_dataloaders=loader)
    wall, cpu = watch.steps()
    return statistics.median(wall), statistics.median(cpu)


def _figures(steps: int, bare: tuple[float, float], flightplan: tuple[float, float]
             ) -> dict[str, float]:
    """One round's figures from the two loops' (wall, CPU) seconds per step and the hooks'
    time over ``steps`` steps."""
    hooks, hooks_cpu = _Timed.hooks_s / steps, _Timed.hooks_cpu_s / steps
    return {"bare_step_s": bare[0], "bare_step_cpu_s": bare[1],
            "flightplan_step_s": flightplan[0], "flightplan_step_cpu_s": flightplan[1],
            "hooks_step_s": hooks, "hooks_step_cpu_s": hooks_cpu,
            "hooks_ratio": hooks / bare[0], "hooks_cpu_ratio": hooks_cpu / bare[1],
            "loop_ratio": flightplan[0] / bare[0], "loop_cpu_ratio": flightplan[1] / bare[1]}


def _lightning_round(folder: Path, steps: int, index: int) -> dict[str, float]:
    _Timed.hooks_s = _Timed.hooks_cpu_s = 0.0
    if index % 2:   # alternate which loop goes first
        flightplan = _lightning_fit(folder / f"lightning-{index}", steps)
        bare = _lightning_fit(None, steps)
    else:
        bare = _lightning_fit(None, steps)
        flightplan = _lightning_fit(folder / f"lightning-{index}", steps)
    return _figures(steps, bare, flightplan)


def _round(folder: Path, steps: int, index: int) -> dict[str, float]:
    bare_trainer = _trainer(folder / "bare", steps)
    wall, cpu = _clock()
    bare_trainer.train()
    end_wall, end_cpu = _clock()
    bare = ((end_wall - wall) / steps, (end_cpu - cpu) / steps)
    trainer = _trainer(folder / f"round-{index}", steps)
    trial = Trial.local(folder / f"round-{index}", run_id=f"overhead-{index}")
    _Timed.hooks_s = _Timed.hooks_cpu_s = 0.0
    trainer.add_callback(_TimedCallback(trial))
    wall, cpu = _clock()
    train(trainer, trial)
    end_wall, end_cpu = _clock()
    trial.finish()
    return _figures(steps, bare, ((end_wall - wall) / steps, (end_cpu - cpu) / steps))


def _one_save(folder: Path) -> dict[str, Any]:
    """The first save of a policy-driven run (the policy saves at its first chance)."""
    trainer = _trainer(folder / "save", 2, save=True)
    trainer.args.save_steps = TrainingArguments.__dataclass_fields__["save_steps"].default
    trial = Trial.local(folder / "save", run_id="overhead-save")
    train(trainer, trial)
    trial.finish()
    rows = [json.loads(line) for line in (folder / "save" / "measurements.jsonl").open()]
    return next(r for r in rows if r.get("event") == "checkpoint")


def _print(name: str, rounds: list[dict[str, float]]) -> None:
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    ratios = sorted(r["loop_cpu_ratio"] for r in rounds)
    print(f"bare {name} step: {median['bare_step_cpu_s'] * 1e3:.2f} ms CPU "
          f"({median['bare_step_s'] * 1e3:.2f} ms wall)")
    print(f"{name} callback hooks per step: {median['hooks_step_cpu_s'] * 1e6:.0f} us CPU = "
          f"{median['hooks_cpu_ratio']:.2%} of the bare step (target <= 2 %; wall: "
          f"{median['hooks_step_s'] * 1e6:.0f} us = {median['hooks_ratio']:.2%})")
    print(f"{name} whole loop, flightplan / bare -> {median['loop_cpu_ratio']:.3f} "
          f"(target <= 1.02; rounds {ratios[0]:.3f} to {ratios[-1]:.3f}; wall: "
          f"{median['loop_ratio']:.3f})")


def main() -> None:
    """Print the medians (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per loop")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["trainer", "lightning"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # no banner per fit
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.only != "lightning":
            _round(folder, 10, -1)  # warm-up: imports, first allocations
            rounds = [_round(folder, args.steps, i) for i in range(args.rounds)]
            save = _one_save(folder)
        if args.only != "trainer":
            _lightning_round(folder, 2 * WARM_STEPS, -1)
            lightning = [_lightning_round(folder, args.steps, i) for i in range(args.rounds)]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.only != "lightning":
        _print("Trainer", rounds)
        print(f"one save (Trainer's save + flightplan's hashes, fsyncs and rename): "
              f"{save['stall_s'] * 1e3:.1f} ms for {save['bytes'] / 1e6:.2f} MB")
    if args.only != "trainer":
        _print("Lightning", lightning)


if __name__ == "__main__":
    main()
