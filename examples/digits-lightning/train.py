"""Handwritten digits with Lightning: a flightplan file task (``campaign.toml`` beside this file).

The corpus is the one ``[corpus]`` names (here ``data/``, the frozen CSV files of
``examples/digits``: 1437 train / 360 test rows), read with the columns the campaign file declares
(``id_column``, ``input_columns``, ``label_column``), none of them written here. An MLP
(64 pixels → ``hidden`` → 10 classes, dropout) trains with AdamW and a linear decay. The
Lightning code is ordinary; two lines differ: ``fit(trainer, module, trial, ...)`` instead
of ``trainer.fit(...)`` (atomic verified checkpoints with every RNG state, resume from the
newest one, the stop rules) and ``write_outputs(trial, module, ...)``, which leaves
``predictions.csv`` (``example_id, gold, predicted, loss, prob_0 … prob_9``),
``metrics.json`` (``accuracy, macro_f1, n_test``) and ``artifact/`` (``model.safetensors``
and ``artifact.json``); the ``reload_predictions`` hook turns the artifact back into the
same predictions in a fresh process.

Params (all optional): ``hidden`` (32), ``lr`` (1e-2, AdamW's peak), ``epochs`` (4),
``batch_size`` (32), ``dropout`` (0.1), ``seed`` (0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import lightning.pytorch as pl
import torch
from safetensors.torch import load_model
from sklearn.metrics import accuracy_score, f1_score
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from flightplan.corpus import Corpus, Example, load_corpus, verify_hashes
from flightplan.integrations.lightning import MODEL_FILE, fit, write_outputs
from flightplan.integrations.outputs import write_predictions
from flightplan.spec import CorpusSection
from flightplan.trial import Trial, device

DEFAULTS = {"hidden": 32, "lr": 1e-2, "epochs": 4, "batch_size": 32, "dropout": 0.1, "seed": 0}
PIXEL_MAX = 16.0  # the digits' pixels are 0–16


class DigitsMLP(pl.LightningModule):
    """``inputs`` pixels → ``hidden`` (ReLU, dropout) → ``classes`` logits; ``lr`` decays
    linearly to 0 over ``steps`` optimizer steps."""

    def __init__(self, inputs: int, hidden: int, classes: int, dropout: float, lr: float = 0.0,
                 steps: int = 1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
                                       torch.nn.Dropout(dropout), torch.nn.Linear(hidden, classes))
        self.lr, self.steps = lr, steps

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch                                                   # (B, inputs), (B,)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_accuracy", (self.net(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr)
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                  lambda s: max(0.0, 1 - s / self.steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def read_corpus(section: CorpusSection, campaign_dir: Path | str) -> Corpus:
    """The train and test examples of the corpus, checked against the frozen hashes (the
    train and test files are the ones whose names hold ``train`` and ``test``)."""
    corpus = load_corpus(section, campaign_dir)
    verify_hashes(corpus, section.sha256)
    return corpus


def tensors(examples: list[Example], section: CorpusSection, labels: list[str]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pixels (N, inputs) float32 in [0, 1], label indices (N,) int64)`` of ``examples``,
    from the campaign file's ``input_columns`` and ``label_column``."""
    columns = section.input_columns or []
    x = torch.tensor([[float(e.inputs[c]) / PIXEL_MAX for c in columns] for e in examples])
    y = torch.tensor([labels.index(str(e.label)) for e in examples], dtype=torch.long)
    return x, y


def predictions(module: DigitsMLP, examples: list[Example], section: CorpusSection,
                labels: list[str]) -> list[dict[str, Any]]:
    """One predictions.csv row per example, the whole split in one batch on the CPU."""
    x, y = tensors(examples, section, labels)
    module.eval()
    with torch.no_grad():
        logits = module.net.cpu()(x)                                   # (N, classes)
        loss = torch.nn.functional.cross_entropy(logits, y, reduction="none")  # (N,)
    probs = logits.softmax(dim=1)
    return [{"example_id": e.id, "gold": e.label, "predicted": labels[int(probs[i].argmax())],
             "loss": float(loss[i]), **{f"prob_{c}": float(probs[i, j])
                                         for j, c in enumerate(labels)}}
            for i, e in enumerate(examples)]


def train(trial: Trial) -> None:
    """Train one run of the campaign (the task protocol's required function)."""
    params = {**DEFAULTS, **trial.params}
    section = CorpusSection.model_validate({k: v for k, v in (trial.corpus or {}).items()
                                            if k != "root"})
    corpus = read_corpus(section, trial.campaign_dir or ".")   # train/test cut to the pilot's
    labels = corpus.labels
    train_x, train_y = tensors(corpus.train, section, labels)
    test_x, test_y = tensors(corpus.test, section, labels)

    steps = params["epochs"] * math.ceil(len(train_y) / params["batch_size"])
    trial.planned_steps = steps
    pl.seed_everything(params["seed"], verbose=False)
    module = DigitsMLP(train_x.shape[1], params["hidden"], len(labels), params["dropout"],
                       params["lr"], steps)
    train_set = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = RandomSampler(train_set, generator=torch.Generator().manual_seed(params["seed"]))
    loader = StatefulDataLoader(train_set, batch_size=params["batch_size"], sampler=sampler)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(test_x, test_y),
                                              batch_size=len(test_y))
    run_on = device()   # the GPU the executor gave this run, or the CPU
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, check_val_every_n_epoch=1,
                         **({"accelerator": "gpu", "devices": [run_on.index or 0]}
                            if run_on.type == "cuda" else {"accelerator": "cpu", "devices": 1}))
    fit(trainer, module, trial, train_dataloaders=loader, val_dataloaders=test_loader)

    rows = predictions(module, corpus.test, section, labels)
    gold, predicted = [r["gold"] for r in rows], [r["predicted"] for r in rows]
    metrics = {"accuracy": accuracy_score(gold, predicted),
               "macro_f1": f1_score(gold, predicted, average="macro"), "n_test": len(rows)}
    kept = section.model_dump(mode="json", exclude={"train_limit"})
    write_outputs(trial, module, predictions=rows, metrics=metrics,
                  extra={"model": {"inputs": train_x.shape[1], "hidden": params["hidden"],
                                   "dropout": params["dropout"]},
                         "labels": labels, "corpus": kept})


def reload_predictions(artifact_dir: Path | str, out: Path | str, *,
                       campaign_dir: Path | str | None = None, limit: int | None = None) -> int:
    """The reload hook: rebuild the module from ``artifact/`` and write the test split's
    predictions as training did; returns the rows written."""
    artifact_dir = Path(artifact_dir)
    meta: Mapping[str, Any] = json.loads((artifact_dir / "artifact.json").read_text())
    section = CorpusSection.model_validate(meta["corpus"])
    if campaign_dir is None:   # a results directory checked on its own: look above it
        found = [p for p in artifact_dir.resolve().parents if (p / str(section.path)).is_dir()]
        if not found:
            raise ValueError(f"no folder above {artifact_dir} holds the corpus "
                             f"{section.path!r}; give the campaign folder")
        campaign_dir = found[0]
    corpus = read_corpus(section, campaign_dir)
    model = meta["model"]
    module = DigitsMLP(model["inputs"], model["hidden"], len(meta["labels"]), model["dropout"])
    load_model(module, str(artifact_dir / MODEL_FILE))
    examples = corpus.test[:limit] if limit is not None else corpus.test
    rows = predictions(module, examples, section, meta["labels"])
    write_predictions(out, rows)
    return len(rows)
