"""Built-in task ``textclf``: text classification on a frozen corpus.

Control: the frozen encoder (the packaged all-MiniLM-L6-v2, or a small random one for
tests) with a trained linear head on mean-pooled embeddings. Variants: peft LoRA
adapters plus the head. See :mod:`.model` for the params, :mod:`.loop` for the training loop,
:mod:`.artifact` for what a run leaves behind and how it reloads.

Task contract (``docs/internals.md``)::

    CODE_VERSION                       # part of every run id
    train(trial)                       # trains, evaluates, writes predictions/metrics/artifact
    load_artifact(artifact_dir)        # -> Predictor; refuses a base whose weights differ

``train`` and ``load_artifact`` are imported on first use, so reading ``CODE_VERSION``
does not import torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CODE_VERSION", "train", "load_artifact"]

CODE_VERSION = "2"
"""Bump when a change alters what a run computes (a new version gives new run ids).
2: evaluation in batches of equal token length (probabilities move in the last float32
bits), runs on the GPU the executor gives them, ``precision`` param."""


def __getattr__(name: str) -> Any:
    if name == "train":
        from flightplan.tasks.textclf.loop import train
        return train
    if name == "load_artifact":
        from flightplan.tasks.textclf.artifact import load_artifact
        return load_artifact
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
