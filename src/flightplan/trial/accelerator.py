"""Where a run computes: its device, its CPU threads, its precision, and the settings that
keep it bitwise reproducible there. One place for the built-in task and user tasks alike.

The executor decides where a worker runs and says so in its environment: on a machine
with GPUs ``CUDA_VISIBLE_DEVICES`` holds the one GPU of the run (so inside the run it is
``cuda:0``) and ``cores // GPUs`` intra-op threads; without GPUs the run gets
``$FLIGHTPLAN_TORCH_THREADS`` intra-op threads (default :data:`TORCH_THREADS`) and as many
runs share the machine as its cores allow (:func:`cpu_slots`). Either way a worker's
threads are the flight's cores divided by the runs it holds at once
(:func:`flight_threads`).

Usage (in a task)::

    from flightplan.trial.accelerator import device, autocast, grad_scaler, set_deterministic
    dev = device()                        # torch.device("cuda", 0) or torch.device("cpu")
    set_deterministic(dev)                # before building the model
    model = model.to(dev)
    scaler = grad_scaler("fp16", dev)     # register it with the trial: its state is checkpointed
    with autocast("bf16", dev):
        loss = loss_fn(model(x.to(dev)), y.to(dev))

Reproducibility on CUDA needs ``torch.use_deterministic_algorithms(True)`` and the cuBLAS
workspace setting ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set before CUDA starts: the
executor puts it in every GPU worker's environment; NVIDIA cuBLAS docs, "Results
reproducibility"); the CUDA RNG states are in every checkpoint (``trial/checkpoint.py``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, ContextManager, Literal

from flightplan.errors import ArgumentError

__all__ = ["TORCH_THREADS", "THREADS_ENV", "OMP_ENV", "DEVICE_ENV", "CUBLAS_ENV",
           "CUBLAS_WORKSPACE", "PRECISIONS", "Precision", "torch_threads", "cpu_count",
           "cpu_slots", "flight_threads", "visible_gpus", "DETERMINISTIC_ENV", "device",
           "set_deterministic", "autocast", "grad_scaler"]

TORCH_THREADS = 1
"""Intra-op threads unless ``$FLIGHTPLAN_TORCH_THREADS`` says otherwise (see
:func:`torch_threads`; docs/internals.md, "Threads"). One whatever the core count: the
executor runs one run per core at once (:func:`cpu_slots`), and OpenMP threads spin-wait
for one another, so on cores shared with other runs a descheduled thread stalls every peer
of its parallel region; a run of one thread never waits on a peer. A machine that runs a
single run can raise it."""
THREADS_ENV = "FLIGHTPLAN_TORCH_THREADS"
OMP_ENV = "OMP_NUM_THREADS"
"""Set to the same count for a CPU worker (unless already set): OpenMP and BLAS of any
library the task uses (numpy, scikit-learn) then share the run's cores too."""
DEVICE_ENV = "FLIGHTPLAN_DEVICE"
"""``cpu`` keeps a run on the CPU even where a GPU is visible (a reload, a test)."""
DETERMINISTIC_ENV = "FLIGHTPLAN_DETERMINISTIC"
"""``0`` when the run's ``[[run]] deterministic = false`` (the worker sets it from trial.json):
:func:`set_deterministic` then lets an op without a deterministic kernel run, with torch's
warning instead of its error."""
CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"
Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")


def torch_threads(environ: dict[str, str] | None = None) -> int:
    """Intra-op threads for training and prediction: ``$FLIGHTPLAN_TORCH_THREADS`` or
    :data:`TORCH_THREADS`. Results are bitwise reproducible only at the same count, so
    a task records it with its artifact and reuses it on reload.

    Raises:
        ArgumentError: the variable is not a positive integer.
    """
    value = (os.environ if environ is None else environ).get(THREADS_ENV, str(TORCH_THREADS))
    if not value.isdigit() or int(value) < 1:
        raise ArgumentError(f"{THREADS_ENV}={value!r}: give a positive number of threads")
    return int(value)


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask; ``os.cpu_count()`` elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def visible_gpus(environ: dict[str, str] | None = None, dev: Path = Path("/dev")) -> list[str]:
    """The GPUs this process may give its children, as ``CUDA_VISIBLE_DEVICES`` names,
    found without importing torch (a parent that only hands GPUs out, as ``verify`` does
    its reloads, does not pay for it): the entries of ``$CUDA_VISIBLE_DEVICES`` when set
    (up to the first invalid one, as CUDA reads it: empty or ``-1`` is none), else one per
    NVIDIA device file ``/dev/nvidia<N>`` (the driver's, on Linux); [] without either."""
    env = os.environ if environ is None else environ
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        names = []
        for name in (n.strip() for n in given.split(",")):
            if not name or name.startswith("-"):
                break
            names.append(name)
        return names
    try:
        found = [p.name[len("nvidia"):] for p in dev.iterdir()
                 if p.name.startswith("nvidia") and p.name[len("nvidia"):].isdigit()]
    except OSError:
        return []
    return sorted(found, key=int)


def cpu_slots(threads: int, cores: int | None = None) -> int:
    """Runs at once on a machine without GPUs: ``max(1, cores // threads)``, so the
    runs' threads together never outnumber the cores (spin-waiting OpenMP threads on an
    oversubscribed core cost 3–40×, see :data:`TORCH_THREADS`)."""
    return max(1, (cores if cores is not None else cpu_count()) // max(1, threads))


def flight_threads(gpus: int, cores: int | None = None,
                   environ: dict[str, str] | None = None) -> int:
    """Intra-op threads of each worker on a flight: the flight's cores divided by the runs
    it holds at once, so the runs' threads together use every core and never outnumber
    them.

    - ``$FLIGHTPLAN_TORCH_THREADS`` set (in ``environ``, default this process's
      environment): that count (:func:`torch_threads`);
    - with GPUs, one run per GPU at once: ``max(1, cores // gpus)`` (16 cores, 1 GPU: 16;
      16 cores, 3 GPUs: 5; 2 cores, 4 GPUs: 1);
    - without GPUs: :data:`TORCH_THREADS` (1), and the flight holds
      ``cpu_slots(1, cores) = cores`` runs at once, so again cores / runs at once.

    The count is passed to each worker as ``$FLIGHTPLAN_TORCH_THREADS``; a task records the
    count it computed with beside its artifact (textclf: ``artifact.json``
    ``torch_threads``) and a reload computes with that count, so it stays bitwise.

    Raises:
        ArgumentError: ``$FLIGHTPLAN_TORCH_THREADS`` is not a positive integer.
    """
    env = os.environ if environ is None else environ
    if THREADS_ENV in env or gpus <= 0:
        return torch_threads(dict(env))
    return max(1, (cores if cores is not None else cpu_count()) // gpus)


def device() -> Any:
    """The run's ``torch.device``: when CUDA is available and ``$FLIGHTPLAN_DEVICE`` is not
    ``cpu``, ``cuda:0`` (the GPU the executor gave the run through ``CUDA_VISIBLE_DEVICES``),
    or in a run of several processes ``cuda:LOCAL_RANK`` (every rank sees the run's GPUs
    and computes on its own, as under ``torchrun``); else ``cpu``.

    Raises:
        ArgumentError: ``$FLIGHTPLAN_DEVICE`` is neither ``cpu`` nor ``cuda``, or says
            ``cuda`` where none is available; ``LOCAL_RANK`` is not a GPU of the run's.
    """
    import torch

    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    if wanted not in ("", "cpu", "cuda"):
        raise ArgumentError(f"{DEVICE_ENV}={wanted!r}: give cpu or cuda (or leave it unset)")
    if wanted == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        local_rank = os.environ.get("LOCAL_RANK", "0")
        count = torch.cuda.device_count()
        if not (local_rank.isdigit() and int(local_rank) < count):
            raise ArgumentError(f"LOCAL_RANK={local_rank!r} but this run sees {count} GPU"
                                f"{'s' if count != 1 else ''}; give the run [[run]] gpus = "
                                f"processes")
        return torch.device("cuda", int(local_rank))
    if wanted == "cuda":
        raise ArgumentError(f"{DEVICE_ENV}=cuda but torch sees no CUDA device; unset it or "
                            f"run on a machine with a GPU")
    return torch.device("cpu")


def set_deterministic(dev: Any) -> None:
    """Settings that make repeated runs bitwise equal on ``dev``. On CUDA: deterministic
    algorithms (an op without one raises RuntimeError "... does not have a deterministic
    implementation ..."; with ``$FLIGHTPLAN_DETERMINISTIC=0``, the run's ``deterministic =
    false``, it warns and runs), cuDNN without autotuning, and the cuBLAS
    workspace setting (set here too when the executor did not, which works only before
    the first cuBLAS call). On a CPU nothing: its kernels are deterministic at a fixed
    thread count, and deterministic mode would also fill every new tensor with NaN
    (``torch.utils.deterministic.fill_uninitialized_memory``), a cost for nothing. Call
    before building the model."""
    import torch

    if getattr(dev, "type", str(dev)) != "cuda":
        return
    os.environ.setdefault(CUBLAS_ENV, CUBLAS_WORKSPACE)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True,
                                       warn_only=os.environ.get(DETERMINISTIC_ENV) == "0")


def _check(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ArgumentError(f"precision {precision!r}: give one of {', '.join(PRECISIONS)}")


def autocast(precision: str, dev: Any) -> ContextManager[Any]:
    """The mixed-precision context for ``precision`` on ``dev``: ``torch.autocast`` with
    float16 or bfloat16, or a no-op for ``fp32``.

    Raises:
        ArgumentError: an unknown precision, or ``fp16`` off CUDA (CPU autocast does not
            cover fp16 for every op, and running fp32 instead would be a silent change).
    """
    import torch

    _check(precision)
    kind = getattr(dev, "type", str(dev))
    if precision == "fp16" and kind != "cuda":
        raise ArgumentError(f"precision fp16 needs a CUDA device, not {kind}; use bf16 or fp32")
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=kind, dtype=dtype)


def grad_scaler(precision: str, dev: Any) -> Any:
    """A ``torch.amp.GradScaler`` for ``dev``, enabled only for ``fp16`` on CUDA (bf16 and
    fp32 keep fp32's exponent range and need no loss scaling; Micikevicius et al. 2018).
    A disabled scaler passes ``scale``/``step``/``update`` through, so a loop calls it the
    same way in every precision; register it with the trial so its state is checkpointed.

    Raises:
        ArgumentError: an unknown precision.
    """
    import torch

    _check(precision)
    kind = getattr(dev, "type", str(dev))
    return torch.amp.GradScaler(kind, enabled=precision == "fp16" and kind == "cuda")
