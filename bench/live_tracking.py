"""Live MLflow tracking's per-step cost against the same loop without it (DESIGN: ≤ 2 %).

A training loop (MLP 512→1024→512, batch 64, AdamW, one torch thread) logs every step
through ``Trial.log`` (the row the mirror tails). In the same process, so that the
mirror's thread competes with the loop for the GIL (harsher than the real set-up, where
the mirror lives in the runner and the loop in a trial process), a
:class:`flightplan.integrations.mlflow_live.LiveMirror` polls the campaign folder every
second and sends the new rows to a SQLite MLflow store.

Rounds alternate, back to back:

- baseline: the loop logs into a run folder outside ``runs/`` (the mirror has nothing to
  send; its idle poll lists the folder once a second);
- live: the same loop logs into ``runs/bench-live/``, which the mirror sends.

The mirror is started and warmed (MLflow imported, store created, run created) before
the first round. Prints the median step time of each and the median of per-round
ratios, and what the mirror sent. Usage::

    .venv/bin/python bench/live_tracking.py [--steps 400] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from flightplan.integrations.mlflow_live import LiveMirror
from flightplan.run.trial import Trial


def _trial(run_dir: Path, name: str) -> Trial:
    trial = Trial.local(run_dir, name=name, run_id=run_dir.name, params={"width": 1024})
    # what the runner writes for every run; the mirror reads its name, tier and params
    (run_dir / "trial.json").write_text(json.dumps({
        "run_id": run_dir.name, "name": name, "tier": "essential", "task": "bench",
        "config_hash": "0" * 64, "params": {"width": 1024}}))
    return trial


def _rounds(steps: int, rounds: int, folder: Path) -> dict[str, float]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, target = torch.randn(64, 512), torch.randn(64, 512)
    trials = {"baseline": _trial(folder / "offline" / "bench-base", "base"),
              "live": _trial(folder / "runs" / "bench-live", "live")}
    for trial in trials.values():
        trial.register(model, optimizer)
        trial.restore()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    mirror = LiveMirror(folder, uri, experiment="bench")
    mirror.start()
    trials["live"].log(0, loss=1.0)
    deadline = time.monotonic() + 300
    while mirror.sent == 0 and time.monotonic() < deadline:
        time.sleep(0.2)                                # warm: import, store, run created
    times: dict[str, list[float]] = {"baseline": [], "live": []}
    step = {"baseline": 0, "live": 1}
    for _ in range(rounds):
        for kind in ("baseline", "live"):
            trial = trials[kind]
            start = time.perf_counter()
            for _ in range(steps):
                loss = torch.nn.functional.mse_loss(model(batch), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                trial.log(step[kind], loss=loss.item(), lr=1e-4, batch_size=64)
                step[kind] += 1
            times[kind].append((time.perf_counter() - start) / steps)
    left = mirror.stop(timeout_s=60)
    for trial in trials.values():
        trial.finish()
    return {"baseline_s": statistics.median(times["baseline"]),
            "live_s": statistics.median(times["live"]),
            "ratio": statistics.median(b / a - 1 for a, b in zip(times["baseline"], times["live"])),
            "sent": left["sent"], "rows": step["live"], "error": left["error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    with tempfile.TemporaryDirectory(prefix="fp-bench-live-") as scratch:
        got = _rounds(args.steps, args.rounds, Path(scratch))
    print(f"{args.rounds} rounds of {args.steps} steps, medians; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"step without live tracking: {got['baseline_s'] * 1e3:.3f} ms; with: "
          f"{got['live_s'] * 1e3:.3f} ms -> {got['ratio']:+.2%} per step (target <= 2%)")
    print(f"the mirror sent {got['sent']} metric points for {got['rows']} rows "
          f"(3 per row), error: {got['error']}")


if __name__ == "__main__":
    main()
