"""Handwritten digits with Lightning, inside a flightplan trial.

scikit-learn's 8×8 digits (1797 images, bundled with scikit-learn: nothing to download),
split 1437 train / 360 test with a fixed seed; an MLP (64 → 128 → 10, dropout 0.2) trained
with AdamW and a linear decay. The Lightning code is ordinary; one line differs:
``fit(trainer, module, trial, ...)`` instead of ``trainer.fit(...)``, which gives atomic
verified checkpoints with every RNG state, resume from the newest verified one (the loader
is a torchdata ``StatefulDataLoader``, so a resumed epoch does not start over) and the stop
rules (``non_finite_loss`` on ``train_loss``, ``min_quality`` on ``val_accuracy``).

Run by hand (a kill -9 at any time, then the same command, resumes bitwise)::

    python examples/digits-lightning/train.py runs/digits [--steps 400]

As a file task, a campaign names this file and the worker calls ``train(trial)``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from flightplan.integrations.lightning import fit
from flightplan.trial import Trial


class DigitsMLP(pl.LightningModule):
    """64 pixels → 128 → 10 classes; ``lr`` decays linearly to 0 over ``steps``."""

    def __init__(self, lr: float, steps: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.2), torch.nn.Linear(128, 10))
        self.lr, self.steps = lr, steps

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch                                                   # (B, 64), (B,)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_accuracy", (self.net(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr)
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / self.steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def _splits(seed: int) -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)         # (1797, 64) in [0, 1]
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed,
                                                        stratify=y)
    return (torch.utils.data.TensorDataset(x_train, y_train),
            torch.utils.data.TensorDataset(x_test, y_test))


def train(trial: Trial) -> None:
    """Train, validate every 50 steps, write ``metrics.json`` and ``artifact/model.pt``."""
    params = {"lr": 3e-3, "steps": 400, "batch_size": 32, "seed": 0, **trial.params}
    torch.set_num_threads(1)
    pl.seed_everything(params["seed"], verbose=False)
    train_set, test_set = _splits(params["seed"])
    sampler = RandomSampler(train_set, generator=torch.Generator().manual_seed(params["seed"]))
    loader = StatefulDataLoader(train_set, batch_size=params["batch_size"], sampler=sampler)
    module = DigitsMLP(params["lr"], params["steps"])
    trainer = pl.Trainer(max_steps=params["steps"], accelerator="auto", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         val_check_interval=50, check_val_every_n_epoch=None,
                         num_sanity_val_steps=0)
    fit(trainer, module, trial, train_dataloaders=loader,
        val_dataloaders=torch.utils.data.DataLoader(test_set, batch_size=360))
    module.eval()
    with torch.no_grad():
        x, y = test_set.tensors
        accuracy = float((module.net(x.to(module.device)).argmax(-1).cpu() == y).float().mean())
    (trial.run_dir / "metrics.json").write_text(json.dumps({"accuracy": accuracy}) + "\n")
    (trial.run_dir / "artifact").mkdir(exist_ok=True)
    torch.save(module.state_dict(), trial.run_dir / "artifact" / "model.pt")
    trial.finish()


def main() -> None:
    """Run by hand: ``train.py RUN_DIR [--steps N]``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    trial = Trial.local(args.run_dir, name="digits", params={"steps": args.steps},
                        stop={"min_quality": {"metric": "val_accuracy", "below": 0.5,
                                              "after_fraction": 0.5}})
    train(trial)
    print(json.loads((args.run_dir / "metrics.json").read_text()))


if __name__ == "__main__":
    main()
