"""Verify's hashing throughput against hashlib.sha256 on the same files (DESIGN: ≥ 80 %).

Writes a results-like folder (one 256 MiB artifact, 200 small files of 4-64 KiB) in a
temporary directory, warms the page cache, then times, alternately and five times each:

- baseline: ``hashlib.file_digest(f, "sha256")`` on every file;
- flightplan: :func:`flightplan.durable.hash_file` (1 MiB ``readinto`` chunks).

Prints MB/s of the best round of each and their ratio. Usage::

    .venv/bin/python bench/verify_hashing.py [--big-mib 256]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

from flightplan.durable import hash_file


def _make(folder: Path, big_mib: int) -> list[Path]:
    files = []
    big = folder / "artifact.safetensors"
    with open(big, "wb") as out:
        for _ in range(big_mib):
            out.write(os.urandom(1 << 20))
    files.append(big)
    for i in range(200):
        small = folder / f"small-{i:03d}.json"
        small.write_bytes(os.urandom(4096 * (1 + i % 16)))
        files.append(small)
    return files


def _baseline(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as handle:
            hashlib.file_digest(handle, "sha256").hexdigest()


def _ours(files: list[Path]) -> None:
    for path in files:
        hash_file(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp-bench-hash-") as scratch:
        files = _make(Path(scratch), args.big_mib)
        total = sum(p.stat().st_size for p in files)
        _baseline(files)  # warm the page cache
        best = {"hashlib.sha256": float("inf"), "flightplan hash_file": float("inf")}
        for _ in range(args.rounds):
            for name, function in (("hashlib.sha256", _baseline), ("flightplan hash_file", _ours)):
                start = time.perf_counter()
                function(files)
                best[name] = min(best[name], time.perf_counter() - start)
    for name, seconds in best.items():
        print(f"{name:22s} {total / seconds / 1e6:8.1f} MB/s  ({total / 1e6:.0f} MB in {seconds:.3f} s)")
    ratio = best["hashlib.sha256"] / best["flightplan hash_file"]
    print(f"ratio flightplan/hashlib throughput: {ratio:.3f} (quality bar >= 0.80)")


if __name__ == "__main__":
    main()
