"""Resume is proven: train N steps straight, or train, SIGKILL, resume in a new process.

The training run has everything that usually breaks resumption: dropout (torch RNG), input
noise from numpy and ``random``, AdamW, a warm-up + cosine LambdaLR, a CPU GradScaler whose
scale grows during training, and a shuffled StatefulDataLoader over 23 examples in batches
of 4 (an epoch of 6 batches, the last one short). Checkpoints are taken after every 4th
step. Parameters, optimizer, scheduler and scaler state, RNG states and every logged loss
must be bit-identical to the uninterrupted run.

This file is also the training script: ``python test_resume.py RUN_DIR MODE KILL_AT``.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

TOTAL_STEPS = 22
SAVE_EVERY = 4


def _warmup_cosine(step: int) -> float:
    warmup = 3
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (TOTAL_STEPS - warmup)))


class Tally:
    """Extra state: examples seen (restored through register(extra=...))."""

    def __init__(self) -> None:
        self.seen = 0

    def state_dict(self) -> dict:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.seen = state["seen"]


def train(run_dir: Path, mode: str, kill_at: int) -> None:
    """Train to TOTAL_STEPS; ``mode`` kill: SIGKILL after step ``kill_at`` once the checkpoint
    before it is durable; kill_in_save: SIGKILL inside the write of checkpoint ``kill_at``
    (model and optimizer files written, no manifest); late: build scheduler, scaler and loader
    after restore(); no_rng: resume without restoring RNGs (a control that must differ)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from flightplan.trial import checkpoint_io, trial as trial_module
    from flightplan.trial.trial import Trial

    if mode == "kill_in_save":
        original = checkpoint_io._write_torch

        def write_then_die(path, value):
            if path.name == checkpoint_io.STATE_FILE and path.parent.name == f"step-{kill_at:06d}.tmp":
                os.kill(os.getpid(), signal.SIGKILL)
            return original(path, value)

        checkpoint_io._write_torch = write_then_die
    if mode == "no_rng":
        trial_module.restore_rng = lambda rng: None

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    data = torch.Generator().manual_seed(1)
    features, labels = torch.randn(23, 6, generator=data), torch.randint(0, 3, (23,), generator=data)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    tally = Tally()

    def build_rest():
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
        loader = StatefulDataLoader(torch.utils.data.TensorDataset(features, labels),
                                    batch_size=4, shuffle=True)
        return scheduler, scaler, loader

    trial = Trial.local(run_dir, name="resume test", params={"lr": 3e-2})
    if mode == "late":
        trial.register(model, optimizer, extra={"tally": tally})
        start = trial.restore()
        scheduler, scaler, loader = build_rest()
        trial.register(scheduler=scheduler, scaler=scaler, loader=loader)
    else:
        scheduler, scaler, loader = build_rest()
        trial.register(model, optimizer, scheduler, scaler=scaler, loader=loader, extra={"tally": tally})
        start = trial.restore()

    step, epoch = start, trial.epoch
    while step < TOTAL_STEPS:
        for xb, yb in loader:
            noise = torch.from_numpy(np.random.randn(*xb.shape).astype(np.float32)) * 0.01
            xb = xb + noise + random.random() * 0.01
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            tally.seen += len(yb)
            trial.log(step, loss=loss.item(), lr=scheduler.get_last_lr()[0], scale=scaler.get_scale())
            if (step + 1) % SAVE_EVERY == 0:
                trial.checkpoint(step, epoch=epoch)
            if mode == "kill" and step == kill_at:
                trial.wait_for_checkpoint()
                os.kill(os.getpid(), signal.SIGKILL)
            step += 1
            if step >= TOTAL_STEPS:
                break
        else:
            epoch += 1
    trial.finish()
    from flightplan.trial.checkpoint import capture_rng

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "tally": tally.seen, "epoch": epoch, "rng": capture_rng()}, run_dir / "final.pt")


def _run(run_dir: Path, mode: str, kill_at: int = -1) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    child = subprocess.run([sys.executable, __file__, str(run_dir), mode, str(kill_at)],
                           env=env, capture_output=True, text=True, timeout=300)
    if child.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"training child failed ({child.returncode}):\n{child.stderr}")
    return child.returncode


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "event" not in r]


def _events(run_dir: Path, name: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("event") == name]


def _assert_same(a, b, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}/{index}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("straight")
    assert _run(run_dir, "straight") == 0
    return run_dir


def _assert_resumed_identically(straight: Path, resumed: Path) -> None:
    reference = dict(_losses(straight))
    assert sorted(reference) == list(range(TOTAL_STEPS))
    rows = _losses(resumed)
    assert {step for step, _ in rows} == set(reference)
    for step, loss in rows:  # also the rows logged before the kill and redone after it
        assert loss == reference[step], f"loss at step {step}: {loss!r} != {reference[step]!r}"
    final_a = torch.load(straight / "final.pt", weights_only=True)
    final_b = torch.load(resumed / "final.pt", weights_only=True)
    _assert_same(final_a, final_b)


@pytest.fixture(scope="module")
def killed_mid_epoch(tmp_path_factory) -> Path:
    """A run killed after step 9 (the 4th batch of epoch 2), its checkpoint step-000008 durable."""
    run_dir = tmp_path_factory.mktemp("killed")
    assert _run(run_dir, "kill", kill_at=9) == -signal.SIGKILL
    assert not (run_dir / "final.pt").exists()
    return run_dir


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(source, target)
    return target


def test_kill_mid_epoch_resumes_bit_identically(straight, killed_mid_epoch, tmp_path):
    run_dir = _copy(killed_mid_epoch, tmp_path)
    assert _run(run_dir, "resume") == 0
    restore = _events(run_dir, "restore")[-1]
    assert restore["source"] == "step-000008" and restore["step"] == 8
    _assert_resumed_identically(straight, run_dir)
    assert [s for s, _ in _losses(run_dir)].count(8) == 2  # logged before the kill and redone


def test_kill_during_save_falls_back_and_resumes_bit_identically(straight, tmp_path):
    assert _run(tmp_path, "kill_in_save", kill_at=16) == -signal.SIGKILL
    partial = tmp_path / "checkpoints" / "step-000016.tmp"
    assert sorted(p.name for p in partial.iterdir()) == ["model.safetensors", "optimizer.safetensors"]
    assert _run(tmp_path, "resume") == 0
    assert _events(tmp_path, "partial_checkpoint_removed")[0]["name"] == "step-000016.tmp"
    assert _events(tmp_path, "restore")[-1]["source"] == "step-000012"
    _assert_resumed_identically(straight, tmp_path)


def test_scheduler_scaler_and_loader_built_after_restore_still_resume(straight, killed_mid_epoch,
                                                                      tmp_path):
    run_dir = _copy(killed_mid_epoch, tmp_path)
    assert _run(run_dir, "late") == 0
    assert _events(run_dir, "restore")[-1]["not_yet_registered"] == ["loader", "scaler", "scheduler"]
    _assert_resumed_identically(straight, run_dir)


def test_control_resume_without_rng_state_differs(straight, killed_mid_epoch, tmp_path):
    """The comparison can fail: skipping the RNG restore changes the dropout masks."""
    run_dir = _copy(killed_mid_epoch, tmp_path)
    assert _run(run_dir, "no_rng") == 0
    reference = dict(_losses(straight))
    resumed_rows = _losses(run_dir)[10:]  # the first process logged steps 0..9
    assert resumed_rows[0][0] == 8
    assert any(loss != reference[step] for step, loss in resumed_rows)


if __name__ == "__main__":
    train(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
