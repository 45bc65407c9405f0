"""Two Ray flights against the local executor, and checkpoint transfer against a local copy.

From one run, on this machine:

1. **makespan**: ``flightplan run`` of the tiny campaign (``examples/tiny``: data check,
   pilot, three runs) with the local executor (one run at a time on a machine without GPU),
   then with ``--executor ray`` on a loopback cluster of two flights (a head and two nodes
   of one CPU and one ``flight`` each, ``tests/fixtures/ray_cluster.py``). Wall time of each
   command and their ratio; the products of both are compared byte for byte.
2. **transfer**: a checkpoint of ``--mib`` MiB (two random tensor files and a manifest)
   packed on a flight by a Ray task (:func:`flightplan.run.executors.transfer.pack`), sent home
   through Ray and committed with :func:`flightplan.run.executors.transfer.commit_checkpoint` (hash
   checks, fsync, rename), against ``shutil.copytree`` of the same folder plus an fsync of
   every file. Best of ``--rounds``; MB/s of each and their ratio.

Usage::

    .venv/bin/python bench/distributed.py [--mib 64] [--rounds 3] [--skip-campaign]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from ray_cluster import loopback_cluster  # noqa: E402 (tests/fixtures is put on sys.path first)

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
PRODUCTS = ("predictions.csv", "metrics.json", "artifact")


def _campaign(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "tiny" / "campaign.toml", folder / "campaign.toml")
    return folder / "campaign.toml"


def _run(spec: Path, *extra: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(FLIGHTPLAN), "run", str(spec), "--json", *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"flightplan run {spec} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall


def _products(folder: Path) -> dict[str, bytes]:
    found = {}
    for run_dir in sorted((folder / "runs").iterdir()):
        if run_dir.name.startswith("pilot-"):
            continue
        for path in sorted(run_dir.rglob("*")):
            relative = path.relative_to(run_dir)
            if path.is_file() and relative.parts[0] in PRODUCTS:
                found[f"{run_dir.name}/{relative.as_posix()}"] = path.read_bytes()
    return found


def _checkpoint(folder: Path, mib: int) -> None:
    folder.mkdir(parents=True)
    files = {}
    for name, share in (("model.safetensors", 3), ("optimizer.safetensors", 1)):
        data = os.urandom(mib * (1 << 20) * share // 4)
        (folder / name).write_bytes(data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(
        {"format": "flightplan-checkpoint/1", "files": files, "tensors": {}}))


def _copy_fsync(source: Path, target: Path) -> None:
    shutil.copytree(source, target)
    for path in target.iterdir():
        with open(path, "rb+") as handle:
            os.fsync(handle.fileno())
    fd = os.open(target, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="checkpoint size (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-campaign", action="store_true", help="transfer only")
    args = parser.parse_args()
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="fpbench-"))
    try:
        with loopback_cluster(flights=2, env=env) as (cluster, _, _):
            import ray

            from flightplan.run.executors.transfer import blob_bytes, commit_checkpoint, pack

            if not args.skip_campaign:
                local_s = _run(_campaign(work / "local"))
                ray_s = _run(_campaign(work / "ray"), "--executor", "ray",
                             "--address", cluster.address)
                same = _products(work / "local") == _products(work / "ray")
                print(f"makespan  local executor {local_s:7.1f} s   ray, 2 flights "
                      f"{ray_s:7.1f} s   ratio {ray_s / local_s:.2f}   products identical: "
                      f"{same}")
            source = work / "step-000001"
            _checkpoint(source, args.mib)
            ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
            fetch = ray.remote(pack).options(resources={"flight": 1}, num_cpus=1,
                                             max_retries=0)
            names = ["manifest.json", "model.safetensors", "optimizer.safetensors"]
            best_ray = best_copy = float("inf")
            size = 0
            for round_ in range(args.rounds):
                started = time.perf_counter()
                blobs = ray.get(fetch.remote(str(source), names))
                commit_checkpoint(work / f"home-{round_}", "step-000001", blobs)
                best_ray = min(best_ray, time.perf_counter() - started)
                size = blob_bytes(blobs)
                started = time.perf_counter()
                _copy_fsync(source, work / f"copy-{round_}")
                best_copy = min(best_copy, time.perf_counter() - started)
            ray.shutdown()
            mb = size / 1e6
            print(f"transfer  {mb:.0f} MB checkpoint: ray + hash checks {mb / best_ray:7.1f} MB/s"
                  f"   local copy + fsync {mb / best_copy:7.1f} MB/s   ratio "
                  f"{best_copy / best_ray:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
