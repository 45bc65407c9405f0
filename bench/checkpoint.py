"""Checkpoint quality bars, from one run (DESIGN.md): prints ratios against baselines
measured in the same run, on the same disk.

1. write throughput: a whole checkpoint (model safetensors + optimizer + state, hashed,
   digested, fsync'd, renamed) in bytes per second of the background writer's persist time,
   against ``os.write`` of the same number of bytes in 8 MiB pieces + ``fsync`` to the same
   directory (target ≥ 80 %);
2. loop stall: what ``Trial.checkpoint`` costs the loop (snapshot into reused buffers)
   against a synchronous ``torch.save`` of the same model + optimizer state (target ≤ 10 %)
   and against the copy floor: ``copy_`` of the same tensors into buffers allocated once,
   on one thread, the least a CPU snapshot can cost (target ≤ 1.2×);
2b. a copy-on-write snapshot by ``fork`` (what Redis's BGSAVE does): the parent pays the
   ``fork`` itself plus the page copies its next training step triggers (measured as that
   step's time minus a step without a child), while the child writes the checkpoint from
   its frozen image; reported against the copy floor (measured, not used by the trial);
3. trial API overhead: ``log`` + ``maybe_checkpoint`` per step against a bare PyTorch
   training step of a small MLP (target ≤ 2 %), timed directly around the calls and, as a
   cross-check, as the difference of whole loops (noisier on a shared machine).

Each ratio is the median over ``--rounds`` rounds of the ratio within a round (baseline and
flightplan back to back, so that load from other processes mostly cancels); the absolute
figures are medians too. The load average is printed with them.
Usage::

    .venv/bin/python bench/checkpoint.py [--dir DIR] [--width 2048] [--rounds 3]
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

from flightplan.trial.checkpoint_io import write_checkpoint
from flightplan.trial import Trial

_PIECE = 8 << 20


def _disk_write(folder: Path, size: int, payload: memoryview) -> float:
    """Seconds to write ``size`` bytes sequentially and fsync them (the disk's bandwidth)."""
    path = folder / "baseline.bin"
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = 0
    while done < size:
        done += os.write(fd, payload[: min(_PIECE, size - done)])
    os.fsync(fd)
    os.close(fd)
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def _sync_save(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Seconds the loop would stall for ``torch.save`` of model + optimizer state."""
    path = folder / "sync.pt"
    start = time.perf_counter()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def _state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor a checkpoint of model + optimizer copies."""
    found = list(model.state_dict().values())
    for per_param in optimizer.state_dict()["state"].values():
        found += [v for v in per_param.values() if isinstance(v, torch.Tensor)]
    return found


def _copy_floor(sources: list[torch.Tensor], buffers: list[torch.Tensor]) -> float:
    """Seconds to ``copy_`` the tensors into buffers allocated once, on one thread (as the
    trial's snapshot does)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        for buffer, source in zip(buffers, sources):
            buffer.copy_(source)
        return time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor) -> float:
    """Seconds of one forward + backward + AdamW step (writes every parameter and state page)."""
    start = time.perf_counter()
    optimizer.zero_grad()
    model(batch).sum().backward()
    optimizer.step()
    return time.perf_counter() - start


def _fork_snapshot(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   batch: torch.Tensor, index: int) -> tuple[float, float, float]:
    """(fork seconds, extra seconds of the next step, child's write seconds) of one
    copy-on-write snapshot: the child writes the checkpoint from the pages as they were at
    the fork and exits; the parent's next step copies every page it writes. The child
    waits for that step to end before it writes, so the step's extra time is the page
    copies alone, not two processes sharing the cores."""
    plain = min(_train_step(model, optimizer, batch) for _ in range(3))
    read_end, write_end = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: its memory is the parent's at the fork, until the parent writes
        code = 1
        try:
            os.close(write_end)
            os.read(read_end, 1)
            began = time.perf_counter()
            write_checkpoint(folder / f"fork-{index}", 1,
                             model={k: v.contiguous() for k, v in model.state_dict().items()},
                             optimizer=optimizer.state_dict(), state={"counters": {"index": index}},
                             meta={"run_id": "fork", "config_hash": "0" * 64})
            (folder / f"fork-{index}.s").write_text(str(time.perf_counter() - began))
            code = 0
        finally:
            os._exit(code)
    forked = time.perf_counter() - start
    os.close(read_end)
    after = _train_step(model, optimizer, batch)
    os.write(write_end, b"go")
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"the forked writer exited with status {status}")
    child_s = float((folder / f"fork-{index}.s").read_text())
    return forked, max(0.0, after - plain), child_s


def _last_checkpoint_row(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("event") == "checkpoint"][-1]


def bench_checkpoint(folder: Path, width: int, rounds: int) -> dict[str, float]:
    """Write throughput and loop stall for an MLP of 5 width×width layers + AdamW state."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(5)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(8, width)).sum().backward()
    optimizer.step()
    trial = Trial.local(folder / "run", name="bench", params={"width": width},
                        checkpoint={"keep_last": 2})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(0)  # allocates the snapshot buffers once
    trial.wait_for_checkpoint()
    size = _last_checkpoint_row(folder / "run")["bytes"]
    payload = memoryview(os.urandom(_PIECE))
    sources = _state_tensors(model, optimizer)
    buffers = [torch.empty_like(t) for t in sources]
    _copy_floor(sources, buffers)  # touches the buffers' pages once, as the trial's first save did
    batch = torch.randn(8, width)
    disk, ours, stall, sync, floor, forked, cow, child = [], [], [], [], [], [], [], []
    for index in range(rounds):
        disk.append(size / _disk_write(folder, size, payload))
        floor.append(_copy_floor(sources, buffers))
        trial.checkpoint(index + 1)
        trial.wait_for_checkpoint()
        row = _last_checkpoint_row(folder / "run")
        ours.append(row["bytes"] / row["persist_s"])
        stall.append(row["stall_s"])
        sync.append(_sync_save(folder, model, optimizer))
        fork_s, cow_s, child_s = _fork_snapshot(folder, model, optimizer, batch, index)
        forked.append(fork_s)
        cow.append(cow_s)
        child.append(child_s)
    trial.finish()
    return {"state_mb": size / 1e6, "disk_mb_s": statistics.median(disk) / 1e6,
            "write_mb_s": statistics.median(ours) / 1e6, "stall_s": statistics.median(stall),
            "sync_save_s": statistics.median(sync), "floor_s": statistics.median(floor),
            "fork_s": statistics.median(forked), "cow_s": statistics.median(cow),
            "child_s": statistics.median(child),
            "write_ratio": statistics.median(o / d for o, d in zip(ours, disk)),
            "stall_ratio": statistics.median(a / b for a, b in zip(stall, sync)),
            "floor_ratio": statistics.median(a / b for a, b in zip(stall, floor)),
            "fork_ratio": statistics.median((f + c) / b for f, c, b in zip(forked, cow, floor))}


def _step(model, optimizer, batch, target) -> float:
    loss = torch.nn.functional.mse_loss(model(batch), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def bench_overhead(folder: Path, steps: int, rounds: int) -> dict[str, float]:
    """Per-step cost of the trial API against a bare training step (seconds), on one torch
    thread for both loops (idle OpenMP workers spinning on a shared CPU slow the Python
    code between steps and blur the comparison)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, target = torch.randn(64, 512), torch.randn(64, 512)
    trial = Trial.local(folder / "overhead", name="overhead", params={})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(0)  # the policy's first save; the next is due in ~30 minutes
    trial.wait_for_checkpoint()
    for _ in range(20):
        _step(model, optimizer, batch, target)  # warm-up
    bare, whole, api = [], [], []
    step = 0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            _step(model, optimizer, batch, target)
        bare.append((time.perf_counter() - start) / steps)
        start, inside = time.perf_counter(), 0.0
        for _ in range(steps):
            loss = _step(model, optimizer, batch, target)
            before = time.perf_counter()
            trial.log(step, loss=loss)
            trial.maybe_checkpoint(step)
            inside += time.perf_counter() - before
            step += 1
        whole.append((time.perf_counter() - start) / steps)
        api.append(inside / steps)
    trial.finish()
    return {"bare_step_s": statistics.median(bare), "trial_step_s": statistics.median(whole),
            "api_s": statistics.median(api),
            "api_ratio": statistics.median(a / b for a, b in zip(api, bare)),
            "loop_ratio": statistics.median(w / b - 1 for w, b in zip(whole, bare))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a temp dir)")
    parser.add_argument("--width", type=int, default=2048, help="MLP width (2048: ~252 MB state)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200, help="steps per overhead round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp-bench-ckpt-", dir=args.dir) as scratch:
        folder = Path(scratch)
        ck = bench_checkpoint(folder, args.width, args.rounds)
        ov = bench_overhead(folder, args.steps, args.rounds)
    load = os.getloadavg()[0]
    print(f"state: {ck['state_mb']:.0f} MB (model + AdamW state + RNG/counters), "
          f"{args.rounds} rounds, medians; {os.cpu_count()} CPUs, load average {load:.1f}")
    print("ratios are medians of per-round ratios (baseline and flightplan back to back)")
    print(f"write throughput: {ck['write_mb_s']:.0f} MB/s vs fsync'd sequential write "
          f"{ck['disk_mb_s']:.0f} MB/s -> {ck['write_ratio']:.0%} (target >= 80%)")
    print(f"loop stall per checkpoint: {ck['stall_s'] * 1e3:.1f} ms vs synchronous torch.save "
          f"{ck['sync_save_s'] * 1e3:.1f} ms -> {ck['stall_ratio']:.1%} (target <= 10%)")
    print(f"copy floor: {ck['floor_s'] * 1e3:.1f} ms (copy_ of the same tensors into buffers "
          f"allocated once, one thread); loop stall -> {ck['floor_ratio']:.2f}x the floor "
          f"(target <= 1.2x)")
    print(f"fork snapshot (copy-on-write, CPU): fork {ck['fork_s'] * 1e3:.1f} ms + page copies "
          f"in the next step {ck['cow_s'] * 1e3:.1f} ms -> {ck['fork_ratio']:.2f}x the copy "
          f"floor; the child wrote the checkpoint in {ck['child_s']:.2f} s")
    print(f"trial API per step: {ov['api_s'] * 1e6:.1f} us vs bare step "
          f"{ov['bare_step_s'] * 1e3:.3f} ms "
          f"-> {ov['api_ratio']:.2%} (target <= 2%); whole-loop difference {ov['loop_ratio']:+.2%}")


if __name__ == "__main__":
    main()
