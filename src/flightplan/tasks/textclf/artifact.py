"""A run's artifact: the trained tensors, the config that rebuilds the model around them,
and the loader that refuses a base model other than the one trained on.

``artifact/`` holds:

- ``model.safetensors``: the trained tensors only (the head; with LoRA also the adapter
  weights), named as in :class:`TextClassifier` (``head.weight``, ``encoder.…lora_A…``);
- ``artifact.json``: ``{task, code_version, params, labels, max_length, input_limit (the
  same: the generic name error analysis reads), torch_threads,
  base_model (the spec section), base_revision {package, version, weights_sha256[, random_init, init_seed,
  shape]}, corpus {package or path, sha256, train_limit, test_limit}, tensors {name:
  shape}}``.

The folder is written beside its final place and renamed into it, so a reader sees a
whole artifact or none.

Usage::

    predictor = load_artifact("runs/lora-r8-1a2b3c4d5e/artifact")
    probs = predictor.predict_probabilities(predictor.encode(examples))   # (N, C)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch

from flightplan.durable import replace_path, write_atomic, write_json_atomic
from flightplan.corpus import Example
from flightplan.errors import VerificationFailed
from flightplan.findings import Finding
from flightplan.spec import BaseModelSection
from flightplan.tasks.textclf.inference import EncodedSplit, encode_split, predict_probabilities
from flightplan.tasks.textclf.model import (TaskParams, TextClassifier, base_revision,
                                            build_classifier, load_tokenizer)

__all__ = ["save_artifact", "load_artifact", "Predictor", "ARTIFACT_JSON", "ARTIFACT_WEIGHTS"]

ARTIFACT_JSON = "artifact.json"
ARTIFACT_WEIGHTS = "model.safetensors"
TASK = "textclf"


def save_artifact(artifact_dir: Path, model: TextClassifier, *, params: dict[str, Any],
                  labels: Sequence[str], max_length: int, base_model: BaseModelSection,
                  revision: dict[str, Any], corpus: dict[str, Any], code_version: str) -> None:
    """Write ``artifact_dir`` (replacing an older one) with the model's trained tensors.

    Args:
        artifact_dir: ``runs/<run_id>/artifact``.
        model: the trained classifier (any device); only its trainable tensors are
            written, as CPU tensors, so the artifact reloads on a machine without a GPU.
        params: the run's params as given in the campaign file.
        labels: class names in output order.
        max_length: tokens (specials included) the model reads.
        base_model: the ``[base_model]`` section (rebuilds the encoder).
        revision: :func:`base_revision` of that encoder.
        corpus: ``{package or path, sha256, train_limit, test_limit}``.
        code_version: the task's ``CODE_VERSION``.
    """
    from safetensors.torch import save

    artifact_dir = Path(artifact_dir)
    state = {name: t.cpu().contiguous().clone() for name, t in model.trainable_state().items()}
    config = {"task": TASK, "code_version": code_version, "params": dict(params),
              "labels": list(labels), "max_length": max_length, "input_limit": max_length,
              "base_model": base_model.model_dump(), "base_revision": revision,
              "torch_threads": torch.get_num_threads(),
              "corpus": {k: v for k, v in corpus.items() if v is not None},
              "tensors": {name: list(t.shape) for name, t in sorted(state.items())}}
    staging = artifact_dir.with_name(artifact_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    write_atomic(staging / ARTIFACT_WEIGHTS, save(state, metadata={"task": TASK}))
    write_json_atomic(staging / ARTIFACT_JSON, config)
    replace_path(artifact_dir, staging)


class Predictor:
    """A reloaded classifier in eval mode, with its tokenizer and recorded config.

    Attributes: ``labels``, ``max_length``, ``params`` (:class:`TaskParams`), ``config``
    (the artifact.json dict), ``model``, ``tokenizer``.
    """

    def __init__(self, model: TextClassifier, tokenizer: Any, config: dict[str, Any]) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self.labels: list[str] = list(config["labels"])
        self.max_length: int = int(config["max_length"])
        self.params = TaskParams.from_params(config["params"])

    def encode(self, examples: Sequence[Example]) -> EncodedSplit:
        """Tokenise examples the way training did (cut at ``max_length``)."""
        return encode_split(self.tokenizer, examples, self.labels, self.max_length)

    def predict_probabilities(self, split: EncodedSplit) -> torch.Tensor:
        """Class probabilities (N, C), in the length-sorted batches of training's
        evaluation (bitwise reproducible; within 1e-5 of one at a time)."""
        return predict_probabilities(self.model, split)

    def predict(self, texts: Sequence[str]) -> list[str]:
        """The predicted label of each text."""
        examples = [Example(id=str(i), inputs={"text": t}) for i, t in enumerate(texts)]
        probs = self.predict_probabilities(self.encode(examples))
        return [self.labels[i] for i in probs.argmax(dim=1).tolist()]


def _refuse(artifact_dir: Path, message: str) -> VerificationFailed:
    return VerificationFailed(f"{artifact_dir}: {message}",
                              findings=[Finding("reload", str(artifact_dir), message)])


def load_artifact(artifact_dir: Path | str) -> Predictor:
    """Reload an artifact for inference.

    Torch runs with the thread count recorded at training time (bitwise reproducible
    predictions need it). The base encoder is rebuilt from the installed package (or, for ``random_init``,
    from the recorded seed and shape) and its weights' sha256 must equal the one
    recorded at training time; then the trained tensors are loaded (all of them, and
    nothing else: a missing or extra tensor is refused).

    Raises:
        VerificationFailed: the folder or its files are missing or unreadable, the base
            model's weights hash differs (message names both hashes and the fix), or the
            tensors do not fit the rebuilt model. ``findings`` holds one entry.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    artifact_dir = Path(artifact_dir)
    try:
        config = json.loads((artifact_dir / ARTIFACT_JSON).read_text(encoding="utf-8"))
        recorded = config["base_revision"]
        section = BaseModelSection.model_validate(config["base_model"])
        params = TaskParams.from_params(config["params"])
        labels = list(config["labels"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _refuse(artifact_dir, f"unreadable {ARTIFACT_JSON} ({exc}); re-run the training "
                      f"run or restore the artifact") from None
    current = base_revision(section, init_seed=int(recorded.get("init_seed", params.seed)))
    if current["weights_sha256"] != recorded.get("weights_sha256"):
        raise _refuse(artifact_dir,
                      f"base model {section.package} {current['version']} has weights sha256 "
                      f"{current['weights_sha256']} but the artifact was trained on "
                      f"{recorded.get('weights_sha256')} ({recorded.get('package')} "
                      f"{recorded.get('version')}); install that exact base model")
    try:
        state = load_file(str(artifact_dir / ARTIFACT_WEIGHTS))
    except (OSError, SafetensorError) as exc:
        raise _refuse(artifact_dir, f"unreadable {ARTIFACT_WEIGHTS} ({exc}); re-run the "
                      f"training run or restore the artifact") from None
    model = build_classifier(section, params, n_labels=len(labels),
                             threads=int(config.get("torch_threads") or 1))
    expected = model.trainable_state()
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in state):
        raise _refuse(artifact_dir, f"{ARTIFACT_WEIGHTS} holds tensors "
                      f"{sorted(state)[:4]}… that do not fit the model its params describe "
                      f"({len(expected)} trained tensors); the files do not belong together")
    with torch.no_grad():
        named = dict(model.named_parameters())
        for name, tensor in state.items():
            named[name].copy_(tensor)
    return Predictor(model, load_tokenizer(section), config)
