"""A small Lightning task with ``strategy="ddp"`` (two ranks on the CPU with gloo), for
kill-and-resume through :func:`flightplan.integrations.lightning.fit`.

An MLP (16 → 32 → 4, dropout, input noise from numpy) trains with AdamW and a linear decay
on 64 fixed random examples; each rank reads its shard through torchdata's
``StatefulDistributedSampler`` in a ``StatefulDataLoader`` (4 batches of 8 an epoch, so the
run crosses epochs; Lightning sets the sampler's epoch). The model starts from one seed;
then each rank seeds its RNG streams with ``7 + rank``: a resume is bitwise identical only
if the weights, the optimizer, the schedule, the data position and every rank's RNG come
back. flightplan saves every ``every`` optimizer steps.

Params: ``steps`` (optimizer steps), ``every``, ``pause_after`` (when a batch starts after
that many steps, and so after their save, rank 0 writes ``paused`` in the run directory and
every rank sleeps until killed), ``step_sleep_s`` (before every batch), ``nan_at``
``[rank, step]`` (that rank's loss is NaN there), ``wrapped_sampler`` (true: torchdata's
``RandomSampler`` in Lightning's ``DistributedSamplerWrapper``, which flightplan refuses).
At the end rank 0 writes ``final/model.safetensors``, ``final/optimizer.safetensors``,
``predictions.csv``, ``metrics.json`` and ``artifact/``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler, StatefulDistributedSampler

from ddp_products import write_final
from flightplan.integrations.lightning import fit, write_outputs


class Module(pl.LightningModule):
    def __init__(self, steps: int, nan_at: list[int] | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.2), torch.nn.Linear(32, 4))
        self.steps, self.nan_at = steps, nan_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = x + torch.from_numpy(np.random.normal(0, 0.1, x.shape).astype(np.float32))
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        if self.nan_at == [self.global_rank, self.global_step]:
            return loss * float("nan")
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                  lambda s: max(0.0, 1 - s / self.steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


class Pause(pl.Callback):
    """Sleep until killed when a batch starts after ``after`` optimizer steps; sleep
    ``step_s`` before every batch."""

    def __init__(self, run_dir: Path, after: int | None, step_s: float) -> None:
        self.run_dir, self.after, self.step_s = run_dir, after, step_s

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        time.sleep(self.step_s)
        if trainer.global_step == self.after:
            if trainer.global_rank == 0:
                (self.run_dir / "paused").write_text(str(self.after))
            while True:
                time.sleep(1)


def train(trial) -> None:
    params = trial.params
    steps, world = int(params["steps"]), trial.world_size
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(123)
    x = torch.randn(64, 16, generator=data)
    y = torch.randint(0, 4, (64,), generator=data)
    pl.seed_everything(5, verbose=False)
    module = Module(steps, params.get("nan_at"))
    pl.seed_everything(7 + trial.rank, verbose=False)  # each rank's own noise and dropout
    dataset = torch.utils.data.TensorDataset(x, y)
    sampler = StatefulDistributedSampler(dataset, num_replicas=world, rank=trial.rank, seed=11)
    if params.get("wrapped_sampler"):  # what Lightning puts around a sampler it cannot shard
        sampler = DistributedSamplerWrapper(RandomSampler(dataset), num_replicas=world,
                                            rank=trial.rank)
    loader = StatefulDataLoader(dataset, batch_size=8, sampler=sampler)
    run_dir = Path(trial.run_dir)
    callbacks = [Pause(run_dir, params.get("pause_after"), float(params.get("step_sleep_s", 0)))]
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=world,
                         strategy="ddp" if world > 1 else "auto",
                         use_distributed_sampler=False, enable_checkpointing=False,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, callbacks=callbacks)
    fit(trainer, module, trial, train_dataloaders=loader, every_n_steps=int(params["every"]))
    module.eval()
    with torch.no_grad():
        probs = module.net(x[:16]).softmax(dim=1)
    rows = [{"example_id": str(i), "gold": str(int(y[i])), "predicted": str(int(p.argmax())),
             **{f"prob_{c}": repr(float(p[c])) for c in range(4)}} for i, p in enumerate(probs)]
    accuracy = float((probs.argmax(1) == y[:16]).float().mean())
    write_outputs(trial, module, predictions=rows, metrics={"accuracy": accuracy})
    if trial.rank == 0:
        write_final(run_dir, module, trainer.optimizers[0])
