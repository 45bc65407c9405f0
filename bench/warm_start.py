"""Warm starts: a run's start → its task's own work, cold (a fresh interpreter imports
torch and flightplan) against warm (forked from the local executor's template), in one
process, on the same machine.

The runs are ``--runs`` executions of a small file task (written to a temporary campaign
folder) through :class:`flightplan.run.executors.local.LocalExecutor`, one at a time,
first every run cold (``warm=False``) then every run warm. The task imports torch and the
trial API, notes the time at which ``train`` begins and at which its first step has been
logged, and trains ``--steps`` steps of a small MLP. Per run:

- *imports*: the executor's start of the execution (``JobResult.started_at``, taken
  before the process exists) → ``train`` begins: process start, interpreter, imports,
  task load (the first warm run also waits for the template's imports, paid once per
  runner: the median leaves it out from 3 runs on);
- *start → first step*: the same start → the first step logged.

Every run's final weights are compared: warm and cold runs must be bitwise equal.
Printed: the median of each figure cold and warm and their ratio (cold / warm); the target
is ≤ 1.5 s of imports per warm run on a CPU machine.

Usage::

    .venv/bin/python bench/warm_start.py [--runs 3] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor

TARGET_IMPORT_S = 1.5

TASK = '''
import json
import time

import torch

import flightplan.trial  # noqa: F401 - what every task imports


def train(trial):
    entered = time.time()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    trial.register(model=model, optimizer=optimizer)
    first = None
    for step in range(trial.restore(), int(trial.params["steps"])):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(16, 64)),
                                                 torch.randint(0, 4, (16,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trial.log(step, loss=loss.item())
        first = first or time.time()
    out = trial.run_dir / "artifact"
    out.mkdir(exist_ok=True)
    (out / "times.json").write_text(json.dumps({"entered": entered, "first_step": first}))
    (out / "weights.bin").write_bytes(b"".join(p.detach().numpy().tobytes()
                                               for p in model.parameters()))
'''


def _runs(folder: Path, label: str, runs: int, steps: int, warm: bool
          ) -> tuple[list[float], list[float], list[bytes]]:
    """(imports s, start → first step s, weights) per run."""
    jobs = []
    for i in range(runs):
        run_dir = folder / f"{label}-{i}"
        run_dir.mkdir()
        (run_dir / "trial.json").write_text(json.dumps({
            "run_id": f"{label}-{i}", "task": "task.py", "campaign_dir": str(folder),
            "params": {"steps": steps}}))
        jobs.append(Job(f"{label}-{i}", run_dir))
    imports, first, weights = [], [], []
    executor = LocalExecutor(slots=1, poll_s=0.02, warm=warm,
                             env={"FLIGHTPLAN_TORCH_THREADS": "1"})
    results = executor.run(jobs)
    for job, result in zip(jobs, results):
        if result.exit_code != 0:
            raise SystemExit(f"{job.run_id} exited {result.exit_code}: "
                             f"{(job.run_dir / 'log.txt').read_text()[-2000:]}")
        times = json.loads((job.run_dir / "artifact" / "times.json").read_text())
        imports.append(times["entered"] - result.started_at)
        first.append(times["first_step"] - result.started_at)
        weights.append((job.run_dir / "artifact" / "weights.bin").read_bytes())
    return imports, first, weights


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 0 when warm and cold weights are bitwise equal."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "task.py").write_text(TASK)
        cold_i, cold_f, cold_w = _runs(folder, "cold", args.runs, args.steps, warm=False)
        warm_i, warm_f, warm_w = _runs(folder, "warm", args.runs, args.steps, warm=True)
    if set(cold_w) != set(warm_w) or len(set(cold_w)) != 1:
        print("FAIL: warm and cold runs' weights differ")
        return 1
    print(f"{args.runs} runs each, {args.steps} steps, one at a time, 1 thread")
    for name, cold, warm in (("imports (start -> train)", cold_i, warm_i),
                             ("start -> first step", cold_f, warm_f)):
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"{name}: cold {c:.2f} s, warm {w:.2f} s (medians; per run cold "
              f"{', '.join(f'{x:.2f}' for x in cold)}, warm {', '.join(f'{x:.2f}' for x in warm)})"
              f", ratio cold/warm {c / w:.1f}x")
    target = statistics.median(warm_i) <= TARGET_IMPORT_S
    print(f"target imports per warm run <= {TARGET_IMPORT_S} s: "
          f"{'met' if target else 'not met'}")
    print("weights: warm and cold runs bitwise equal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
