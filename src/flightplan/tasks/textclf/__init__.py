"""Built-in task ``textclf``: text classification on a frozen corpus.

Control: the frozen encoder (the packaged all-MiniLM-L6-v2, or a small random one for
tests) with a trained linear head on mean-pooled embeddings. Variants: peft LoRA
adapters plus the head. See :mod:`.model` for the params, :mod:`.loop` for the training loop,
:mod:`.artifact` for what a run leaves behind and how it reloads.

One implementation of the task protocol (:mod:`flightplan.tasks.protocol`)::

    CODE_VERSION                                  # stands for the code in run ids
    PREDICTION_COLUMNS                            # the columns of its predictions.csv
    train(trial)                                  # trains, evaluates, writes outputs
    reload_predictions(artifact_dir, out, *, campaign_dir, limit)   # in a fresh process
    base_revision(base_model, params)             # {package, version, weights_sha256, ...}
    estimate_run(pilot, data_check, params, ...)  # its cost model (.cost_model)
    pilot_examples(params, steps)                 # steps × batch_size
    data_check(corpus, params_by_run, base_model) # {lengths, truncation} (:mod:`.data`)
    prepare_data(corpus_section, params_by_run, base_model, *, campaign_dir)
                                                  # tokenised splits into the cache (:mod:`.prepared`)

The hooks import torch on first use, so reading ``CODE_VERSION`` does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from flightplan.tasks.textclf.cost_model import pilot_examples

__all__ = ["CODE_VERSION", "PREDICTION_COLUMNS", "train", "reload_predictions", "base_revision", "data_check",
           "prepare_data", "load_artifact", "estimate_run", "pilot_examples"]

CODE_VERSION = "4"
"""Bump when a change alters what a run computes (a new version gives new run ids).
2: evaluation in batches of equal token length (probabilities move in the last float32
bits), runs on the GPU the executor gives them, ``precision`` param.
3: the encoder's linear layers compute the real tokens of a padded batch only; evaluation
and the control's embedding passes in length-sorted batches cut where padding would cost
more than a call (probabilities move in the last float32 bits). Training steps keep the
padded batch and its dropout masks.
4: the whole encoder computes the real tokens only, attention within each example
(:mod:`.packed`); dropout draws masks for the real positions only, so training takes
another random stream than version 3's."""

PREDICTION_COLUMNS = ("example_id", "gold", "predicted", "n_tokens", "truncated", "prob_*")
"""The columns of its predictions.csv (:mod:`flightplan.tasks.protocol`): ``prob_<label>``
one per class, in the model's label order (:mod:`.inference` writes them)."""


def train(trial: Any) -> None:
    """Train one textclf run (:func:`flightplan.tasks.textclf.loop.train`)."""
    from flightplan.tasks.textclf.loop import train as train_loop

    train_loop(trial, code_version=CODE_VERSION)


def reload_predictions(artifact_dir: Path, out: Path, *, campaign_dir: Path | None = None,
                       limit: int | None = None) -> int:
    """Reload the artifact and write its predictions (:mod:`.predict`); rows written."""
    from flightplan.tasks.textclf.predict import predict_to_csv

    return predict_to_csv(artifact_dir, out, limit=limit, campaign_dir=campaign_dir)


def base_revision(base_model: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The base model revision for run ids (``init_seed`` = params ``seed``)."""
    from flightplan.spec import BaseModelSection
    from flightplan.tasks.textclf.model import base_revision as revision

    section = base_model if base_model is not None else BaseModelSection()
    if isinstance(section, Mapping):
        section = BaseModelSection.model_validate(section)
    return revision(section, init_seed=int(params.get("seed", 0)))


def data_check(corpus: Any, params_by_run: Mapping[str, Mapping[str, Any]],
               base_model: Any = None) -> dict[str, Any]:
    """Token lengths and truncation per ``max_length`` (:func:`.data.data_check`)."""
    from flightplan.tasks.textclf.data import data_check as figures

    return figures(corpus, params_by_run, base_model)


def prepare_data(corpus_section: Any, params_by_run: Mapping[str, Mapping[str, Any]],
                 base_model: Any, *, campaign_dir: Path) -> None:
    """The runs' tokenised splits, at every ``max_length`` they use, built once into the
    campaign's cache (:func:`.prepared.prepare_campaign`)."""
    from flightplan.tasks.textclf.prepared import prepare_campaign

    prepare_campaign(corpus_section, params_by_run, base_model, campaign_dir=campaign_dir,
                     code_version=CODE_VERSION)


def load_artifact(artifact_dir: Path) -> Any:
    """The reloaded predictor (:func:`flightplan.tasks.textclf.artifact.load_artifact`)."""
    from flightplan.tasks.textclf.artifact import load_artifact as load

    return load(artifact_dir)


def estimate_run(pilot: Any, data_check: Mapping[str, Any], params: Mapping[str, Any], *,
                 tolerated_loss_s: float, mtbi_s: float | None = None) -> dict[str, Any]:
    """One run's re-estimate by textclf's cost model (:mod:`.cost_model`)."""
    from flightplan.tasks.textclf.cost_model import estimate_run as estimate

    return estimate(pilot, data_check, params, tolerated_loss_s=tolerated_loss_s,
                    mtbi_s=mtbi_s)

