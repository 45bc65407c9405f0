"""The trial API's per-step overhead across the ranks of a DDP run, and the step time with 2
processes beside 1 (DESIGN.md: overhead ≤ 2 % of the step).

Each rank (gloo on the CPU, one thread) trains the same DDP MLP (256 → 512 → 512 → 10 with
dropout, AdamW, 64 examples a step from its own shuffled ``StatefulDataLoader`` shard)
``--steps`` steps bare, then ``--steps`` steps with the trial API of a run of that many
ranks (``trial.log`` and ``trial.maybe_checkpoint`` every step: the ranks agree every
``AGREEMENT_STEPS`` (10) steps, one three-element ``all_reduce`` deciding the stop verdict
and the save together; saves after the first are pushed past the end by a long tolerated
loss), in each of ``--rounds`` rounds. Printed, from rank 0:

1. hooks: seconds inside ``log`` + ``maybe_checkpoint`` per step (wall clock: the calls wait
   for the other rank), over the bare loop's median step time;
2. loop: the median step time with the trial API over the bare one, steps after the first
   10 (the first save and warm-up left out);
3. with ``--compare``: the bare median step time with 2 processes over 1 process (each rank
   does a full step of 64 examples: 2 processes do twice the work per step).

Wall clock throughout: the ranks wait for each other inside every step, so CPU time would
leave out what a collective costs. On the shared 2-core development machine the ratios
scatter by several percent between rounds; the medians over rounds are printed with their
range.

Usage::

    .venv/bin/python bench/ddp_overhead.py [--processes 2] [--steps 150] [--rounds 3] [--compare]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flightplan.run.executors.ranks import RankGroup


def _rank(steps: int, rounds: int, out: Path) -> None:
    """One rank's rounds (run in a child with torchrun's environment)."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torchdata.stateful_dataloader import StatefulDataLoader

    from flightplan.trial.trial import Trial

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    x = torch.randn(64 * (steps + 1) * world, 256, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (len(x),), generator=torch.Generator().manual_seed(1))
    shard = list(range(rank, len(x), world))
    results = []
    for index in range(rounds):
        figures = {}
        for mode in ("bare", "trial"):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            wrapped = DistributedDataParallel(model) if world > 1 else model
            optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
            loader = StatefulDataLoader(shard, batch_size=64, shuffle=True)
            trial = None
            if mode == "trial":
                trial = Trial.local(Path(tempfile.mkdtemp(prefix=f"ddp-{index}-")),
                                    checkpoint={"tolerated_loss": "10h"})
                trial.register(model=model, optimizer=optimizer, loader=loader)
                trial.restore()
            step_s, hooks_s = [], 0.0
            for step, batch in enumerate(loader):
                if step == steps:
                    break
                start = time.perf_counter()
                loss = nn.functional.cross_entropy(wrapped(x[batch]), y[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if trial is not None:
                    inside = time.perf_counter()
                    trial.log(step, loss=loss.item())
                    trial.maybe_checkpoint(step)
                    if step >= 10:
                        hooks_s += time.perf_counter() - inside
                else:
                    loss.item()
                step_s.append(time.perf_counter() - start)
            if trial is not None:
                trial.finish()
            figures[mode] = (statistics.median(step_s[10:]), hooks_s / (len(step_s) - 10))
        bare, trial_step = figures["bare"][0], figures["trial"][0]
        results.append({"bare_step_s": bare, "trial_step_s": trial_step,
                        "hooks_s": figures["trial"][1]})
    if rank == 0:
        out.write_text(json.dumps(results))
    if world > 1:
        dist.destroy_process_group()


def _measure(processes: int, steps: int, rounds: int) -> list[dict]:
    """Run the ranks as the local executor starts them; rank 0's rounds."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rounds.json"
        argv = [sys.executable, __file__, "--rank-of", str(out), "--steps", str(steps),
                "--rounds", str(rounds)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if processes > 1:
            group = RankGroup.start(processes, lambda extra: subprocess.Popen(
                argv, env={**env, **extra}))
            code = group.wait()
        else:
            code = subprocess.run(argv, env=env, check=False).returncode
        if code != 0:
            raise SystemExit(f"the ranks failed (exit {code})")
        rounds_: list[dict] = json.loads(out.read_text())
        return rounds_


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} (range {min(values):.3f}–{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--rank-of", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of is not None:
        _rank(args.steps, args.rounds, args.rank_of)
        sys.stdout.flush()  # as the worker ends a rank: gloo's threads can abort finalization
        os._exit(0)
    rounds = _measure(args.processes, args.steps, args.rounds)
    bare = [r["bare_step_s"] for r in rounds]
    print(f"{args.processes} processes, gloo, {args.steps} steps x {args.rounds} rounds")
    print(f"bare step: {statistics.median(bare) * 1e3:.2f} ms (median over rounds)")
    print(f"hooks (log + maybe_checkpoint) / bare step: "
          f"{_median_range([r['hooks_s'] / r['bare_step_s'] for r in rounds])}")
    print(f"loop with the trial API / bare: "
          f"{_median_range([r['trial_step_s'] / r['bare_step_s'] for r in rounds])}")
    if args.compare:
        alone = _measure(1, args.steps, args.rounds)
        one = statistics.median(r["bare_step_s"] for r in alone)
        print(f"bare step, 1 process: {one * 1e3:.2f} ms; {args.processes} processes / 1: "
              f"{statistics.median(bare) / one:.3f}")


if __name__ == "__main__":
    main()
