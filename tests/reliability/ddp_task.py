"""A small DDP task on the trial API (two ranks on the CPU with gloo), for kill-and-resume.

An MLP (16 → 32 → 4, dropout) wrapped in ``DistributedDataParallel``; each rank reads its
own shard of 256 fixed random examples through a ``StatefulDataLoader`` in its own random
order, with dropout from its own RNG stream (``seed + rank``), so a resume is bitwise
identical only if the weights, the optimizer, every rank's RNG and every rank's data
position all come back. It checkpoints after each step of ``params.checkpoint_at``
(durable before it goes on). At the end rank 0 writes ``final/model.safetensors``,
``final/optimizer.safetensors`` (the optimizer's tensors by path), ``predictions.csv``
and ``metrics.json``.

Params (all optional besides ``steps``): ``steps``, ``checkpoint_at`` (list of steps),
``pause_after`` (after that step's checkpoint is durable, rank 0 writes ``paused`` in the run
directory and every rank sleeps until killed), ``raise_at`` ``[rank, step]`` (that rank
raises there), ``nan_at`` ``[rank, step]`` (that rank logs a NaN loss there),
``step_sleep_s`` (sleep that long after each step, then ``trial.maybe_checkpoint``: the
interval policy's saves and the leave signals).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from ddp_products import write_final


def train(trial) -> None:
    params = trial.params
    rank, world = trial.rank, trial.world_size
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo")
    data = torch.Generator().manual_seed(123)
    x = torch.randn(256, 16, generator=data)
    y = torch.randint(0, 4, (256,), generator=data)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
    torch.manual_seed(7 + rank)
    wrapped = DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    shard = list(range(rank, 256, world))
    loader = StatefulDataLoader(shard, batch_size=8, sampler=RandomSampler(
        shard, generator=torch.Generator().manual_seed(11 + rank)))
    trial.register(model=model, optimizer=optimizer, loader=loader)
    step = trial.restore()
    steps = int(params["steps"])
    while step < steps:
        for batch in loader:
            loss = nn.functional.cross_entropy(wrapped(x[batch]), y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if params.get("raise_at") == [rank, step]:
                raise RuntimeError(f"rank {rank} fails at step {step}")
            value = float("nan") if params.get("nan_at") == [rank, step] else loss.item()
            trial.log(step, loss=value)
            if params.get("step_sleep_s"):
                time.sleep(params["step_sleep_s"])
                trial.maybe_checkpoint(step)
            if step in params.get("checkpoint_at", []):
                trial.checkpoint(step)
                trial.wait_for_checkpoint()
                if params.get("pause_after") == step:
                    if rank == 0:
                        (Path(trial.run_dir) / "paused").write_text(str(step))
                    while True:
                        time.sleep(1)
            step += 1
            if step >= steps:
                break
    if rank == 0:
        model.eval()
        with torch.no_grad():
            probs = model(x[:32]).softmax(dim=1)
        write_final(Path(trial.run_dir), model, optimizer)
        (Path(trial.run_dir) / "predictions.csv").write_text(
            "".join(",".join(repr(float(p)) for p in row) + "\n" for row in probs))
        accuracy = float((probs.argmax(1) == y[:32]).float().mean())
        (Path(trial.run_dir) / "metrics.json").write_text(json.dumps({"accuracy": accuracy}))
    trial.finish()
    if world > 1:
        dist.destroy_process_group()
