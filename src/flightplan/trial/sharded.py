"""A model sharded across the ranks of a run (FSDP2's ``fully_shard``: parameters that are
``DTensor`` s), checkpointed as one full state.

:meth:`Trial.register <flightplan.trial.trial.Trial.register>` wraps such a model in
:class:`FullStateModel` and its optimizer in :class:`FullStateOptimizer`. Their
``state_dict()`` is collective: every rank calls it and the full, unsharded state is
gathered to rank 0's host memory (``torch.distributed.checkpoint.state_dict`` with
``full_state_dict=True, cpu_offload=True``; the other ranks get ``{}``), so the checkpoint
holds the same files as a single process's (``model.safetensors`` by parameter name, the
optimizer's state keyed by parameter name) and verifies, streams home and reloads as one.
``load_state_dict`` hands each rank the full state, which it shards as the model is
sharded. The model and optimizer state must therefore fit in rank 0's host memory;
``torch.distributed.checkpoint``'s sharded files (a state larger than one host) are not
written.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping

import torch

__all__ = ["is_sharded", "check_not_fsdp1", "FullStateModel", "FullStateOptimizer"]


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is a module with a parameter sharded across ranks (a ``DTensor``)."""
    # a sharded model's code imported torch.distributed.tensor; importing it here for
    # every model would add its import time to each run's start
    dtensor = sys.modules.get("torch.distributed.tensor")
    if dtensor is None or not isinstance(model, torch.nn.Module):
        return False
    return any(isinstance(p, dtensor.DTensor) for p in model.parameters())


def check_not_fsdp1(model: Any) -> None:
    """Refuse a model wrapped in FSDP's first API (``FullyShardedDataParallel``): its
    ``state_dict()`` is collective in a way the trial does not drive, so the first save would
    wait for ever.

    Raises:
        TypeError: ``model`` is a ``FullyShardedDataParallel``.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    wrapper = getattr(fsdp, "FullyShardedDataParallel", None)
    if wrapper is not None and isinstance(model, wrapper):
        raise TypeError("model: a FullyShardedDataParallel (FSDP's first API) cannot be "
                        "checkpointed by the trial; shard it with FSDP2 instead "
                        "(torch.distributed.fsdp.fully_shard) and register the model")


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


class FullStateModel:
    """A sharded model seen as one full state (see the module docstring).

    Args:
        module: the sharded ``torch.nn.Module``.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def state_dict(self) -> dict[str, Any]:
        """The full state by parameter and buffer name on rank 0 (CPU tensors), ``{}`` on
        the other ranks. Collective."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.module, options=_options())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Shard the full ``state`` (every rank holds it) into the model. Collective.

        Raises:
            RuntimeError: a name is missing or unexpected.
        """
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.module, dict(state), options=_options())


class FullStateOptimizer:
    """The optimizer of a sharded model seen as one full state, keyed by parameter name.

    Args:
        module: the sharded model.   optimizer: its optimizer.
    """

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.module = module
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        """The full state on rank 0, ``{}`` on the other ranks. Collective."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.module, self.optimizer, options=_options())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Shard the full ``state`` (every rank holds it) into the optimizer. Collective."""
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(self.module, self.optimizer, dict(state), options=_options())

    def register_step_pre_hook(self, hook: Any) -> Any:
        """The optimizer's own (a snapshot's copies on a GPU wait for the next step)."""
        return self.optimizer.register_step_pre_hook(hook)
