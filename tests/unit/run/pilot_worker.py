"""A worker for the pilot tests, run by a real LocalExecutor: ``python pilot_worker.py
TRIAL_JSON``. A small torch loop on the real trial runtime (dropout, AdamW), its first
checkpoint after step 0. ``$PILOT_WORKER_MODE``: ``slow_start`` makes the first
(not resumed) process wait until the resumed one beside it has reached ``restore()`` (its
file ``at-restore``, written just before), then sleep 1.5 s before training, so its early
checkpoint comes at least 1.5 s after that however slowly either process started;
``crash`` makes the first process exit 1 before any checkpoint. Every process logs
``ready`` (unix seconds) just before ``restore()``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from flightplan.trial.trial import Trial


AT_RESTORE = "at-restore"
"""The file a resumed process writes in its run folder just before ``restore()``."""


def _wait_for(path: Path, limit_s: float = 300.0) -> None:
    """Poll until ``path`` exists (at most ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.05)


def main(trial_json: str) -> None:
    trial = Trial.from_file(trial_json)
    mode = os.environ.get("PILOT_WORKER_MODE", "")
    torch.manual_seed(0)
    data = torch.Generator().manual_seed(1)
    features, labels = torch.randn(48, 6, generator=data), torch.randint(0, 3, (48,), generator=data)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    trial.register(model, optimizer)
    ready = time.time()
    if trial.resume:
        (trial.run_dir / AT_RESTORE).touch()
    start = trial.restore()
    trial.log(start, ready=ready)
    if not trial.resume and mode == "crash":
        sys.exit(1)
    if not trial.resume and mode == "slow_start":
        _wait_for(trial.run_dir / "resume" / AT_RESTORE)
        time.sleep(1.5)
    last = trial.max_steps or 8
    for step in range(start, last):
        rows = slice(4 * step % 48, 4 * step % 48 + 4)
        loss = torch.nn.functional.cross_entropy(model(features[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trial.log(step, loss=loss.item(), step_s=0.01)
        if step == 0:
            trial.checkpoint(step)
    trial.finish()


if __name__ == "__main__":
    main(sys.argv[1])
