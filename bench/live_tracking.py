"""Live MLflow tracking's per-step cost against the same loop without it (DESIGN: ≤ 2 %).

A training loop (MLP 512→1024→512, batch 64, AdamW, one torch thread) logs every step
through ``Trial.log`` (the row the mirror tails), in its own process as a trial does,
while this process plays the runner: a
:class:`flightplan.tracking.live.LiveMirror` polls the campaign folder (every
2 s) and sends the new rows to a SQLite MLflow store. ``--same-process`` runs the loop in
the mirror's process instead (the two then also share the GIL: a harsher case than
flightplan's).

Rounds alternate, back to back:

- baseline: the loop logs into a run folder outside ``runs/`` (the mirror has nothing to
  send; its idle pass lists the folder);
- live: the same loop logs into ``runs/bench-live/``, which the mirror sends.

The mirror is started and warmed (MLflow imported, store and run created) before the
first round. Prints the median step time of each and the median of per-round ratios
(wall clock: noisy on a shared machine), and the mirror thread's CPU time per row it sent
against the loop's CPU time per step (``time.thread_time``: what the mirror takes from a
core per training step). Usage::

    .venv/bin/python bench/live_tracking.py [--steps 200] [--rounds 10] [--same-process]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flightplan.tracking.live import LiveMirror

RUNS = {"baseline": Path("offline") / "bench-base", "live": Path("runs") / "bench-live"}


def _trial_file(run_dir: Path, name: str) -> None:
    """What the runner writes for every run; the mirror reads its name, tier and params."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trial.json").write_text(json.dumps({
        "run_id": run_dir.name, "name": name, "tier": "essential", "task": "bench",
        "config_hash": "0" * 64, "params": {"width": 1024}}))


def _loop(folder: Path, steps: int, rounds: int, warm: Any, out: Any) -> None:
    """The training loop: one warm row into the live run, wait for ``warm``, then the rounds.
    Puts ``{"baseline": [s/step…], "live": [...], "cpu": [loop CPU s/step…]}`` on ``out``."""
    import torch

    from flightplan.trial import Trial

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, target = torch.randn(64, 512), torch.randn(64, 512)
    trials = {kind: Trial.local(folder / rel, name=kind, run_id=rel.name,
                                params={"width": 1024}) for kind, rel in RUNS.items()}
    for trial in trials.values():
        trial.register(model, optimizer)
        trial.restore()
    trials["live"].log(0, loss=1.0)
    warm.wait(300)
    times: dict[str, list[float]] = {"baseline": [], "live": [], "cpu": []}
    step = {"baseline": 0, "live": 1}
    for _ in range(rounds):
        for kind in ("baseline", "live"):
            trial = trials[kind]
            start, start_cpu = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                loss = torch.nn.functional.mse_loss(model(batch), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                trial.log(step[kind], loss=loss.item(), lr=1e-4, batch_size=64)
                step[kind] += 1
            times[kind].append((time.perf_counter() - start) / steps)
            if kind == "baseline":
                times["cpu"].append((time.thread_time() - start_cpu) / steps)
    for trial in trials.values():
        trial.finish()
    out.put(times)


def bench(folder: Path, steps: int, rounds: int, *, same_process: bool) -> dict[str, Any]:
    """Run the rounds with a mirror on ``folder``; see the module docstring."""
    for kind, rel in RUNS.items():
        _trial_file(folder / rel, kind)
    mirror = LiveMirror(folder, f"sqlite:///{folder / 'mlflow.db'}", experiment="bench")
    mirror.start()
    if same_process:
        import queue
        import threading

        warm, out = threading.Event(), queue.Queue()
        loop = threading.Thread(target=_loop, args=(folder, steps, rounds, warm, out))
    else:
        context = multiprocessing.get_context("spawn")
        warm, out = context.Event(), context.Queue()
        loop = context.Process(target=_loop, args=(folder, steps, rounds, warm, out))
    loop.start()
    deadline = time.monotonic() + 300
    while mirror.sent == 0 and time.monotonic() < deadline:
        time.sleep(0.2)                       # warm: MLflow imported, store and run created
    warm_cpu_s, warm_sent = mirror.cpu_s, mirror.sent
    warm.set()
    times = out.get(timeout=3600)
    loop.join()
    left = mirror.stop(timeout_s=120)
    rows = steps * rounds
    return {"baseline_s": statistics.median(times["baseline"]),
            "live_s": statistics.median(times["live"]),
            "ratio": statistics.median(b / a - 1 for a, b in zip(times["baseline"], times["live"])),
            "loop_cpu_s": statistics.median(times["cpu"]),
            "mirror_cpu_per_row_s": (left["cpu_s"] - warm_cpu_s) / rows,
            "warm_cpu_s": warm_cpu_s, "sent": left["sent"] - warm_sent, "rows": rows,
            "error": left["error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--same-process", action="store_true",
                        help="run the loop in the mirror's process (shares the GIL)")
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    with tempfile.TemporaryDirectory(prefix="fp-bench-live-") as scratch:
        got = bench(Path(scratch), args.steps, args.rounds, same_process=args.same_process)
    where = "the mirror's process" if args.same_process else "its own process"
    print(f"{args.rounds} rounds of {args.steps} steps, loop in {where}, medians; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"step without live tracking: {got['baseline_s'] * 1e3:.3f} ms; with: "
          f"{got['live_s'] * 1e3:.3f} ms -> {got['ratio']:+.2%} per step (target <= 2%)")
    print(f"CPU: the mirror's thread {got['mirror_cpu_per_row_s'] * 1e6:.0f} us per row vs "
          f"{got['loop_cpu_s'] * 1e3:.3f} ms of loop CPU per step -> "
          f"{got['mirror_cpu_per_row_s'] / got['loop_cpu_s']:.2%} of a core's work per step, "
          f"at nice 19 (start-up with MLflow's import: {got['warm_cpu_s']:.1f} s CPU once)")
    print(f"the mirror sent {got['sent']} metric points for {got['rows']} rows "
          f"(3 per row), error: {got['error']}")


if __name__ == "__main__":
    main()
