"""Reloads several artifacts to a process against one process per artifact (issue 31, item 8).

1. A closed campaign: ``--results DIR`` (a results directory whose artifacts are textclf's),
   else a copy of ``examples/tiny/campaign.toml`` (a random 2-layer encoder; its corpus cut
   to ``--train-limit`` / ``--test-limit`` and every run to ``--epochs``) carried through
   ``flightplan run`` and ``close`` in a scratch folder.
2. A scratch copy of its results directory whose artifacts are each copied ``--copies``
   times more under new run ids (with their predictions, listed in the manifest), so the
   reload step has several artifacts per core.
3. The reload step of ``close`` and ``verify`` over all of them, the two ways in turn,
   ``--repeat`` times each (interleaved, so a neighbour's load falls on both):

   - one process per artifact, as ``close`` and ``verify`` reloaded before: the
     ``python -P -m flightplan.tasks.reload`` command of one artifact, single-threaded,
     one process more at once than the cores, each result compared with the stored
     predictions;
   - several per process: :func:`flightplan.close.verify.reproduce_runs` (the artifacts of
     a task in at most one process per core, or one per GPU).

   Both re-create the first ``--limit`` test examples (default: all, as close's
   acceptance does) and must reproduce every artifact.

Printed: the artifacts and where they reload, each way's median wall time, and the ratio
new / old (below 1: faster). Exit 0 when both ways reproduced every artifact, else 1.

``--cpu`` keeps both ways on the CPU (``FLIGHTPLAN_DEVICE=cpu``, no GPU given). The suite
runs ``--cpu --train-limit 32 --test-limit 16 --epochs 1 --copies 1 --repeat 1``.

Usage::

    .venv/bin/python bench/reload_batch.py [--cpu] [--results DIR] [--copies N]
        [--repeat N] [--limit N] [--train-limit N] [--test-limit N] [--epochs N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flightplan_cli import flightplan  # noqa: E402  (the bench's own helpers)
from gpu_campaign import REPO, _campaign_text  # noqa: E402

from flightplan.close.verify import prediction_differences, reload_processes, reproduce_runs  # noqa: E402
from flightplan.publish.manifest import read_manifest, update_manifest  # noqa: E402
from flightplan.tasks.reload import reload_argv  # noqa: E402
from flightplan.trial.accelerator import cpu_count, visible_gpus  # noqa: E402


def _closed_results(folder: Path, env: dict[str, str], args: argparse.Namespace) -> Path:
    """The tiny campaign run and closed in ``folder``; its results directory."""
    source = REPO / "examples" / "tiny" / "campaign.toml"
    folder.mkdir()
    (folder / "campaign.toml").write_text(
        _campaign_text(source, args.train_limit, args.test_limit, args.epochs), encoding="utf-8")
    for verb in ("run", "close"):
        seconds, done = flightplan(folder, verb, "campaign.toml", "--json", env=env)
        if done.returncode != 0:
            raise SystemExit(f"flightplan {verb} exited {done.returncode}: "
                             f"{done.stderr.strip()[-2000:]}")
        print(f"flightplan {verb}: {seconds:.1f} s", file=sys.stderr)
    return folder / "results"


def _with_copies(source: Path, target: Path, copies: int) -> list[str]:
    """``source`` copied to ``target`` with each artifact (and its predictions) copied
    ``copies`` more times as ``<run id>-copy<k>``, listed in the manifest; every run id."""
    shutil.copytree(source, target)
    runs = sorted(p.name for p in (target / "artifacts").iterdir()
                  if (target / "predictions" / f"{p.name}.csv").is_file())
    written = []
    for run_id in runs:
        for k in range(1, copies + 1):
            copy = f"{run_id}-copy{k}"
            shutil.copytree(target / "artifacts" / run_id, target / "artifacts" / copy)
            shutil.copy(target / "predictions" / f"{run_id}.csv",
                        target / "predictions" / f"{copy}.csv")
            written += [f"predictions/{copy}.csv"] + [
                p.relative_to(target).as_posix()
                for p in (target / "artifacts" / copy).rglob("*") if p.is_file()]
    update_manifest(target, written=written)
    return sorted(p.name for p in (target / "artifacts").iterdir())


def _one_per_artifact(results: Path, run_ids: list[str], limit: int | None,
                      env: dict[str, str]) -> dict[str, bool]:
    """The old way: each artifact's reload command in a process of its own, one thread,
    cores + 1 at once; run id → reproduced."""
    manifest = read_manifest(results)

    def one(run_id: str) -> bool:
        entry = (manifest.get("runs") or {}).get(run_id, {}).get("task", {}).get("entry") \
            or json.loads((results / "artifacts" / run_id / "artifact.json").read_text())["task"]
        with tempfile.TemporaryDirectory(prefix="fp-reload-old-") as scratch:
            out = Path(scratch) / f"{run_id}.csv"
            done = subprocess.run(reload_argv(entry, str(results / "artifacts" / run_id),
                                              str(out), limit=limit),
                                  cwd=scratch, env=env, capture_output=True, text=True,
                                  timeout=3600)
            if done.returncode != 0 or not out.is_file():
                return False
            count, differ = prediction_differences(results / "predictions" / f"{run_id}.csv",
                                                   out)
            return bool(count) and not differ
    with ThreadPoolExecutor(max_workers=min(len(run_ids), cpu_count() + 1)) as pool:
        return dict(zip(run_ids, pool.map(one, run_ids)))


def main() -> int:
    """Measure both ways and print the figures (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="keep both ways on the CPU")
    parser.add_argument("--results", type=Path, default=None,
                        help="a closed campaign's results directory (default: run the tiny one)")
    parser.add_argument("--copies", type=int, default=2,
                        help="copies of each artifact added (default 2: 9 artifacts of 3 runs)")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each way (median)")
    parser.add_argument("--limit", type=int, default=None,
                        help="test examples re-created per artifact (default: all)")
    parser.add_argument("--train-limit", type=int, default=None, help="[corpus] train_limit")
    parser.add_argument("--test-limit", type=int, default=None, help="[corpus] test_limit")
    parser.add_argument("--epochs", type=int, default=None, help="every run's params.epochs")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if args.cpu:
        env.update(FLIGHTPLAN_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
        os.environ.update(FLIGHTPLAN_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    old_env = dict(env, FLIGHTPLAN_TORCH_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="fp-reload-batch-", dir=args.dir) as scratch:
        folder = Path(scratch)
        source = args.results.resolve() if args.results else _closed_results(
            folder / "campaign", env, args)
        results = folder / "copies"
        run_ids = _with_copies(source, results, args.copies)
        gpus = [] if args.cpu else visible_gpus()
        processes, threads = reload_processes(len(run_ids), gpus=len(gpus))
        print(f"reload_batch: {len(run_ids)} artifacts ({args.copies} copies added to each "
              f"run's), limit {args.limit or 'all'}, "
              f"{f'{len(gpus)} GPU(s)' if gpus else 'the CPU'}, {cpu_count()} cores")
        old_s, new_s, ok = [], [], True
        for _ in range(args.repeat):
            began = time.perf_counter()
            old = _one_per_artifact(results, run_ids, args.limit, old_env)
            old_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            new = reproduce_runs(results, run_ids, limit=args.limit, trust_code=True, gpus=gpus)
            new_s.append(time.perf_counter() - began)
            ok = ok and all(old.values()) and all(s == "reproduced" for s, _ in new.values())
        old_m, new_m = statistics.median(old_s), statistics.median(new_s)
        print(f"one process per artifact ({min(len(run_ids), cpu_count() + 1)} at once, "
              f"1 thread): {old_m:.1f} s (median of {args.repeat})")
        print(f"several per process ({processes} process(es), {threads} thread(s) each): "
              f"{new_m:.1f} s (median of {args.repeat})")
        print(f"-> several per process / one per artifact = {new_m / old_m:.2f}"
              f"{'' if ok else '; NOT every artifact reproduced'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
