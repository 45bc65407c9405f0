"""A small data-parallel task on the trial API (two ranks on the CPU with gloo), for
kill-and-resume: DDP by default, FSDP2 with ``params.fsdp``.

An MLP (16 → 32 → 4, dropout) wrapped in ``DistributedDataParallel``, or with
``params.fsdp`` true each Linear and the whole model sharded by FSDP2's ``fully_shard`` over
a CPU device mesh (each rank holds half of every parameter and of the optimizer's state;
the full state is gathered to rank 0 for each save, :mod:`flightplan.trial.sharded`). Each
rank reads its own shard of 256 fixed random examples through a ``StatefulDataLoader`` in
its own random order, with dropout from its own RNG stream (``seed + rank``), so a resume is
bitwise identical only if the weights, the optimizer (sharded again as they were, under
FSDP), every rank's RNG and every rank's data position all come back. It checkpoints after
each step of ``params.checkpoint_at`` (durable before it goes on). At the end rank 0 writes
``final/model.safetensors``, ``final/optimizer.safetensors`` (the optimizer's tensors by
path; under FSDP the gathered whole state), ``predictions.csv`` and ``metrics.json``.

Params (all optional besides ``steps``): ``steps``, ``fsdp`` (shard with ``fully_shard``
instead of wrapping in DDP), ``checkpoint_at`` (list of steps), ``pause_after`` (after that
step's checkpoint is durable, rank 0 writes ``paused`` in the run directory and every rank
sleeps until killed), ``raise_at`` ``[rank, step]`` (that rank raises there), ``nan_at``
``[rank, step]`` (that rank logs a NaN loss there), ``step_sleep_s`` (sleep that long after
each step, then ``trial.maybe_checkpoint``: the interval policy's saves and the leave
signals).
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

from ddp_products import write_final, write_final_state


def train(trial) -> None:
    params = trial.params
    rank, world = trial.rank, trial.world_size
    fsdp = bool(params.get("fsdp"))
    distributed = fsdp or world > 1
    torch.set_num_threads(1)
    if distributed:
        dist.init_process_group("gloo")
    data = torch.Generator().manual_seed(123)
    x = torch.randn(256, 16, generator=data)
    y = torch.randint(0, 4, (256,), generator=data)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
    if fsdp:
        # imported here, so that the DDP runs import what they always did
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in (model[0], model[3]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model                                   # sharded in place
    else:
        wrapped = DistributedDataParallel(model) if world > 1 else model
    torch.manual_seed(7 + rank)
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
    if fsdp:
        # collectives on every rank: the whole state gathered, the forward's all-gathers
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions, get_model_state_dict, get_optimizer_state_dict)

        whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=whole)
        state = get_optimizer_state_dict(model, optimizer, options=whole)
        model.eval()
        with torch.no_grad():
            probs = model(x[:32]).softmax(dim=1)
    if rank == 0:
        if fsdp:
            write_final_state(Path(trial.run_dir), weights, state)
        else:
            model.eval()
            with torch.no_grad():
                probs = model(x[:32]).softmax(dim=1)
            write_final(Path(trial.run_dir), model, optimizer)
        (Path(trial.run_dir) / "predictions.csv").write_text(
            "".join(",".join(repr(float(p)) for p in row) + "\n" for row in probs))
        accuracy = float((probs.argmax(1) == y[:32]).float().mean())
        (Path(trial.run_dir) / "metrics.json").write_text(json.dumps({"accuracy": accuracy}))
    trial.finish()
    if distributed:
        dist.destroy_process_group()
