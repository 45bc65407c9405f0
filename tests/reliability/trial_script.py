"""A small deterministic training script on the trial API, for restore and full-disk faults.

An MLP (64 → 64 → 4) trained with Adam on batches drawn from the global torch RNG, so a
resume is bitwise identical only if parameters, optimizer state and the RNG all come back.

Run in this process (:func:`train`) or as a child process::

    python trial_script.py RUN_DIR --steps 8 --checkpoint-at 1,3 [--fsize-after 1 --fsize-bytes 65536]

``--fsize-after K`` lowers ``RLIMIT_FSIZE`` (and ignores ``SIGXFSZ``) once the checkpoint
taken after step K is durable, so the next save runs out of room the way a full disk does.
Exit codes: 0 finished, 3 a checkpoint failed (the error on stderr, one line), 1 stopped.
"""

from __future__ import annotations

import argparse
import resource
import signal
import sys
from pathlib import Path

import torch

from flightplan.errors import CheckpointError, TrialStopped
from flightplan.trial.trial import Trial

__all__ = ["RUN_ID", "build", "train", "parameters"]

RUN_ID = "mlp-0123456789"
EXIT_CHECKPOINT_FAILED = 3


def build(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer, initialised from ``seed`` (one thread: same bits everywhere)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def parameters(model: torch.nn.Module) -> dict[str, bytes]:
    """Every parameter's raw bytes (for bitwise comparison)."""
    return {k: v.detach().contiguous().numpy().tobytes() for k, v in model.state_dict().items()}


def train(run_dir: Path, *, steps: int, checkpoint_at: set[int], run_id: str = RUN_ID,
          fsize_after: int | None = None, fsize_bytes: int = 64 * 1024,
          finish: bool = True) -> tuple[Trial, torch.nn.Module]:
    """Train ``steps`` steps (resuming from the newest valid checkpoint) and checkpoint after
    each step in ``checkpoint_at``, waiting until each save is durable.

    Raises:
        CheckpointError: a save failed (e.g. no room left).
        TrialStopped: no usable resume (every checkpoint was rejected).
    """
    model, optimizer = build()
    trial = Trial.local(run_dir, name="mlp", run_id=run_id, params={"lr": 1e-2})
    trial.register(model=model, optimizer=optimizer)
    start = trial.restore()
    if start == 0:
        torch.manual_seed(1)  # the data stream; a resume restores it from the checkpoint
    for step in range(start, steps):
        x = torch.randn(16, 64)
        y = torch.randint(0, 4, (16,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trial.log(step, loss=loss.item())
        if step in checkpoint_at:
            trial.checkpoint(step)
            trial.wait_for_checkpoint()
            if fsize_after is not None and step == fsize_after:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, resource.RLIM_INFINITY))
    if finish:
        trial.finish()
    return trial, model


def main() -> int:
    """Command-line entry point (see the module docstring); prints the parameters' sha256."""
    import hashlib

    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--checkpoint-at", default="1,3,5")
    parser.add_argument("--fsize-after", type=int, default=None)
    parser.add_argument("--fsize-bytes", type=int, default=64 * 1024)
    args = parser.parse_args()
    at = {int(s) for s in args.checkpoint_at.split(",") if s}
    try:
        _, model = train(args.run_dir, steps=args.steps, checkpoint_at=at,
                         fsize_after=args.fsize_after, fsize_bytes=args.fsize_bytes)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CHECKPOINT_FAILED
    except TrialStopped as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 1
    digest = hashlib.sha256(b"".join(v for _, v in sorted(parameters(model).items())))
    print(digest.hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
