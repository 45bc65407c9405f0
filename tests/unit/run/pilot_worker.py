"""A worker for the pilot tests, run by a real LocalExecutor: ``python pilot_worker.py
TRIAL_JSON``. A small torch loop on the real trial runtime (dropout, AdamW), its first
checkpoint after step 0. ``$PILOT_WORKER_MODE``: ``slow_start`` sleeps 1.5 s in the first
(not resumed) process before training, so its early checkpoint comes well after the resumed
process reached ``restore()``; ``crash`` makes the first process exit 1 before any
checkpoint. Every process logs ``ready`` (unix seconds) just before ``restore()``."""

from __future__ import annotations

import os
import sys
import time

import torch

from flightplan.trial.trial import Trial


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
    start = trial.restore()
    trial.log(start, ready=ready)
    if not trial.resume and mode == "crash":
        sys.exit(1)
    if not trial.resume and mode == "slow_start":
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
