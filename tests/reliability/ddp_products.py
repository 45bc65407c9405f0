"""What the data-parallel test tasks leave for a bitwise comparison: the final weights and
optimizer state, written by rank 0 (``ddp_task.py``, DDP or FSDP2,
``lightning_ddp_task.py``, ``trainer_ddp_task.py``; this folder is on ``sys.path`` while a task runs)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


def _flat(tree: object, path: str, out: dict[str, torch.Tensor]) -> None:
    if isinstance(tree, torch.Tensor):
        out[path] = tree.detach().contiguous().clone()
    elif isinstance(tree, dict):
        for key, value in tree.items():
            _flat(value, f"{path}/{key}", out)


def write_final(run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """``run_dir/final/model.safetensors`` (the state dict) and ``optimizer.safetensors``
    (the optimizer's tensors by path, e.g. ``state/0/exp_avg``)."""
    write_final_state(run_dir, model.state_dict(), optimizer.state_dict())


def write_final_state(run_dir: Path, model: dict, optimizer: dict) -> None:
    """:func:`write_final` from the two state dicts (a sharded model's, gathered whole)."""
    final = run_dir / "final"
    final.mkdir(exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.items()},
              str(final / "model.safetensors"))
    tensors: dict[str, torch.Tensor] = {}
    _flat(optimizer["state"], "state", tensors)
    save_file(tensors, str(final / "optimizer.safetensors"))
