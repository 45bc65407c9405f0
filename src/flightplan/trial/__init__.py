"""What runs inside a worker, and all that a task or an integration may import.

A training loop sees this package and nothing of the runner that launched it (the
orchestrator is :mod:`flightplan.run`; it talks to a worker only through ``trial.json`` in
and the measurement rows out). The public API, documented in ``docs/tasks.md``::

    from flightplan.trial import Trial, device, autocast, grad_scaler, set_deterministic

- :class:`Trial` (:mod:`.trial`): register, restore, log, evaluate, checkpoint, finish; the
  library-checkpoint methods for the Trainer and Lightning integrations.
- :class:`TrialStopped`, :class:`TrialPreempted`: what a stop rule and a request to leave a
  flight raise through the loop (the worker exits 1 and 75).
- device helpers (:mod:`.accelerator`): :func:`device`, :func:`set_deterministic`,
  :func:`autocast`, :func:`grad_scaler`, :func:`torch_threads`.
- :func:`capture_rng`, :func:`restore_rng` (:mod:`.checkpoint`): every RNG a resume needs.
- :class:`StepTimer` (:mod:`.readings`): a step's seconds, read a step later on a GPU.
- :func:`choose_interval` (:mod:`.interval`): the checkpoint interval policy, for a task's
  cost model.
- :func:`check_checkpoint`, :func:`verify_checkpoint` (:mod:`.checkpoint_check`).

Names are imported on first use, so the runner can import :mod:`.leave` or
:mod:`.trial_file` without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flightplan.errors import TrialPreempted, TrialStopped
    from flightplan.trial.checkpoint import capture_rng, restore_rng
    from flightplan.trial.checkpoint_check import check_checkpoint, verify_checkpoint
    from flightplan.trial.accelerator import (autocast, device, grad_scaler, set_deterministic,
                                         torch_threads)
    from flightplan.trial.interval import IntervalChoice, choose_interval
    from flightplan.trial.readings import StepTimer
    from flightplan.trial.trial import Trial

__all__ = ["Trial", "TrialStopped", "TrialPreempted", "device", "set_deterministic",
           "autocast", "grad_scaler", "torch_threads", "capture_rng", "restore_rng",
           "choose_interval", "IntervalChoice", "check_checkpoint", "verify_checkpoint",
           "StepTimer"]

_HOME = {"Trial": "flightplan.trial.trial",
         "TrialStopped": "flightplan.errors", "TrialPreempted": "flightplan.errors",
         "device": "flightplan.trial.accelerator", "set_deterministic": "flightplan.trial.accelerator",
         "autocast": "flightplan.trial.accelerator", "grad_scaler": "flightplan.trial.accelerator",
         "torch_threads": "flightplan.trial.accelerator",
         "capture_rng": "flightplan.trial.checkpoint", "restore_rng": "flightplan.trial.checkpoint",
         "choose_interval": "flightplan.trial.interval",
         "IntervalChoice": "flightplan.trial.interval",
         "check_checkpoint": "flightplan.trial.checkpoint_check",
         "verify_checkpoint": "flightplan.trial.checkpoint_check",
         "StepTimer": "flightplan.trial.readings"}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'flightplan.trial' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
