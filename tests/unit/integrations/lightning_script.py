"""A tiny Lightning run through ``flightplan.integrations.lightning.fit``, for the tests.

An MLP (6 → 16 → 3) with dropout, AdamW and a linear LR decay learns 40 random examples
from a shuffled ``StatefulDataLoader`` (8 per batch: 5 batches an epoch) whose sampler has its
own generator, with input noise from numpy. A resume is bitwise identical only if the
weights, the optimizer, the schedule, the data position and every RNG come back.

Run in this process (:func:`run`) or as a child::

    python lightning_script.py RUN_DIR [--steps 12] [--every 3] [--kill save:6]

``--kill WHERE:N`` SIGKILLs this process at global step N: ``step`` (after the step, after
any save) or ``save`` (inside Lightning's write of the checkpoint file, half of it written).
On a normal end the final weights and optimizer state go to ``RUN_DIR/final.pt``.
Exit codes: 0 finished, 1 stopped by a rule.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from flightplan.integrations import lightning as integration
from flightplan.trial.trial import Trial
from script_support import die, parse_kill, save_final, script_main

__all__ = ["RUN_ID", "run", "Module"]

RUN_ID = "mlp-lightning-0123456789"


class Module(pl.LightningModule):
    """The MLP; ``nan_at`` sets every weight to NaN before that global step (0-based)."""

    def __init__(self, steps: int, nan_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                                       torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
        self.steps = steps
        self.nan_at = nan_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.nan_at:
            with torch.no_grad():
                for parameter in self.parameters():
                    parameter.fill_(float("nan"))
        x, y = batch
        x = x + torch.from_numpy(np.random.normal(0, 0.1, x.shape).astype(np.float32))
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_accuracy", (self.net(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                     lambda s: 1 - s / (self.steps + 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule,
                                                         "interval": "step"}}


def _loader(stateful: bool = True) -> Any:
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 6, generator=data), torch.randint(0, 3, (40,), generator=data)
    dataset = torch.utils.data.TensorDataset(x, y)
    if not stateful:
        return torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(2))
    return StatefulDataLoader(dataset, batch_size=8, sampler=sampler)


class _KillAfterStep(pl.Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.at:
            die()


class _LeaveAtStep(pl.Callback):
    """Asks the trial to leave its flight at global step ``at`` (as SIGUSR1 would)."""

    def __init__(self, trial: Trial, at: int) -> None:
        self.trial, self.at = trial, at

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.at:
            self.trial.request_leave(stop=True)


def _kill_mid_save(trainer: pl.Trainer, at: int) -> None:
    checkpoint_io = trainer.strategy.checkpoint_io
    original = checkpoint_io.save_checkpoint

    def half_then_die(checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        if trainer.global_step == at:
            original(checkpoint, path, storage_options)
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[: len(data) // 2])
            die()
        original(checkpoint, path, storage_options)

    checkpoint_io.save_checkpoint = half_then_die


def run(run_dir: Path, *, steps: int = 12, every: int | None = 3, kill: str | None = None,
        nan_at: int | None = None, stateful: bool = True, val_every: int | None = None,
        stop: dict[str, Any] | None = None, cap: int | None = None,
        leave_at: int | None = None) -> pl.LightningModule:
    """Train (resuming from the newest verified checkpoint) and write ``final.pt``;
    ``cap`` is trial.json's ``max_steps`` (the pilot's); ``leave_at``: asked to leave its
    flight at that global step.

    Raises:
        TrialStopped: a stop rule fired.   ArgumentError: a loader that cannot resume.
        TrialPreempted: it left (``leave_at``).
    """
    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    module = Module(steps, nan_at)
    callbacks: list[pl.Callback] = []
    where, at = parse_kill(kill) or ("", 0)
    trial = Trial.local(run_dir, name="mlp-lightning", run_id=RUN_ID, stop=stop, max_steps=cap)
    if where == "step":
        callbacks.append(_KillAfterStep(at))
    if leave_at is not None:
        callbacks.append(_LeaveAtStep(trial, leave_at))
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=str(run_dir / "lightning"),
                         num_sanity_val_steps=0, val_check_interval=val_every,
                         log_every_n_steps=4,
                         check_val_every_n_epoch=None if val_every else 1)
    if where == "save":
        _kill_mid_save(trainer, at)
    integration.fit(trainer, module, trial, every_n_steps=every,
                    train_dataloaders=_loader(stateful),
                    val_dataloaders=_loader() if val_every else None)
    trial.finish()
    save_final(run_dir, module, trainer.optimizers[0])
    return module


if __name__ == "__main__":
    sys.exit(script_main(run, schedule="--every", default_schedule=3, default_steps=12))
