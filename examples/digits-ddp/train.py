"""The digits MLP trained with plain PyTorch DistributedDataParallel, run by flightplan.

``[[run]] processes = 2`` starts this task as two ranks with the environment ``torchrun``
sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``); the task initialises the
process group itself (gloo on the CPU, NCCL on GPUs, one GPU per rank: ``device()`` is
``cuda:LOCAL_RANK``), as any DDP script does, and runs alone when started as one process. Each rank reads its
own shard of the training rows, in its own random order, with dropout from its own RNG
stream (seeded ``seed + rank``): the state each rank holds apart, which the trial saves
for every rank in each checkpoint. Rank 0 alone writes the predictions, the metrics and
the artifact. Params as ``examples/digits/train.py`` (hidden, lr, epochs, batch_size per
rank, dropout, seed); the helpers (data, model, predictions, the reload hook) are that
example's, repeated here so that the folder is self-contained.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from sklearn.metrics import accuracy_score, f1_score
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from flightplan.trial import device, set_deterministic

DEFAULTS = {"hidden": 32, "lr": 1e-2, "epochs": 3, "batch_size": 32, "dropout": 0.1, "seed": 0}
LABELS = [str(d) for d in range(10)]


def read_split(path: Path, limit: int | None = None) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """``(ids, pixels (N, 64) float32 in [0, 1], labels (N,) int64)`` of one CSV file."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:limit]
    ids = [row["id"] for row in rows]
    pixels = torch.tensor([[float(row[f"p{i}"]) / 16.0 for i in range(64)] for row in rows])
    labels = torch.tensor([int(row["label"]) for row in rows], dtype=torch.long)
    return ids, pixels, labels


def corpus_files(corpus: dict, campaign_dir: Path) -> dict[str, Path]:
    """``{"train": path, "test": path}``, each checked against its frozen sha256."""
    root = Path(campaign_dir) / corpus["path"]
    files = {}
    for name, digest in corpus["sha256"].items():
        path = root / name
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise ValueError(f"{path}: sha256 differs from the campaign file's; restore it")
        files["train" if "train" in name else "test"] = path
    return files


def build_model(hidden: int, dropout: float) -> nn.Module:
    """64 pixels → hidden (ReLU, dropout) → 10 logits."""
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(hidden, 10))


def predict(model: nn.Module, pixels: torch.Tensor, labels: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(probabilities (N, 10), per-example loss (N,))`` of the whole split in one batch."""
    model.eval()
    with torch.no_grad():
        logits = model(pixels)
        loss = nn.functional.cross_entropy(logits, labels, reduction="none")
    model.train()
    return logits.softmax(dim=1), loss


def write_predictions(path: Path, ids: list[str], labels: torch.Tensor, probs: torch.Tensor,
                      loss: torch.Tensor) -> dict:
    """Write the predictions CSV and return the metrics."""
    predicted = probs.argmax(dim=1)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["example_id", "gold", "predicted", "loss",
                         *(f"prob_{c}" for c in LABELS)])
        for i, example in enumerate(ids):
            writer.writerow([example, int(labels[i]), int(predicted[i]), repr(float(loss[i])),
                             *(repr(float(p)) for p in probs[i])])
    gold, pred = labels.tolist(), predicted.tolist()
    return {"accuracy": accuracy_score(gold, pred),
            "macro_f1": f1_score(gold, pred, average="macro"), "n_test": len(gold)}


def train(trial) -> None:
    """Train one run (the task protocol's required function) on ``trial.world_size`` ranks."""
    params = {**DEFAULTS, **trial.params}
    torch.set_num_threads(1)
    rank, world = trial.rank, trial.world_size
    dev = device()                            # this rank's GPU (cuda:LOCAL_RANK), or the CPU
    set_deterministic(dev)
    gpu = dev.type == "cuda"
    if world > 1:
        if gpu:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if gpu else "gloo")  # RANK, WORLD_SIZE, MASTER_*
    files = corpus_files(trial.corpus, Path(trial.campaign_dir))
    _, train_x, train_y = read_split(files["train"], trial.corpus.get("train_limit"))
    test_ids, test_x, test_y = read_split(files["test"], trial.corpus.get("test_limit"))
    train_x, train_y, test_x, test_y = (t.to(dev) for t in (train_x, train_y, test_x, test_y))

    torch.manual_seed(params["seed"])         # the same initial weights on every rank
    model = build_model(params["hidden"], params["dropout"]).to(dev)
    torch.manual_seed(params["seed"] + rank)  # each rank's own dropout stream
    wrapped = (DistributedDataParallel(model, device_ids=[dev.index] if gpu else None)
               if world > 1 else model)
    per_rank = len(train_y) // world          # every rank takes as many steps
    shard = list(range(rank, per_rank * world, world))
    steps_per_epoch = -(-per_rank // params["batch_size"])
    total = params["epochs"] * steps_per_epoch
    last = total if trial.max_steps is None else min(total, trial.max_steps)
    trial.planned_steps = total
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=params["lr"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / total))
    sampler = RandomSampler(shard, generator=torch.Generator().manual_seed(params["seed"] + rank))
    loader = StatefulDataLoader(shard, batch_size=params["batch_size"], sampler=sampler)
    trial.register(model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)
    step = trial.restore()                    # collective: every rank resumes the same step

    while step < last:
        for batch in loader:                                               # (B,) int64
            batch = batch.to(dev)
            loss = nn.functional.cross_entropy(wrapped(train_x[batch]), train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()                   # DDP averages the gradients over the ranks
            optimizer.step()
            scheduler.step()
            trial.log(step, loss=loss.item())  # rank 0's row; a rule on any rank stops all
            trial.maybe_checkpoint(step)       # collective
            step += 1
            if step % steps_per_epoch == 0 or step == last:
                probs, _ = predict(model, test_x, test_y)
                trial.evaluate(step - 1, accuracy=float((probs.argmax(1) == test_y).float().mean()))
            if step >= last:
                break

    if rank == 0:
        run_dir = Path(trial.run_dir)
        probs, loss = predict(model, test_x, test_y)
        metrics = write_predictions(run_dir / "predictions.csv", test_ids, test_y.cpu(),
                                    probs.cpu(), loss.cpu())
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        artifact = run_dir / "artifact"
        artifact.mkdir(exist_ok=True)
        save_file({k: v.cpu() for k, v in model.state_dict().items()},
                  str(artifact / "model.safetensors"))
        (artifact / "artifact.json").write_text(json.dumps({
            "params": params, "corpus": {"path": trial.corpus["path"],
                                         "sha256": trial.corpus["sha256"],
                                         "test_limit": trial.corpus.get("test_limit")}},
            indent=2), encoding="utf-8")
    trial.finish()                            # collective: done.json once every rank is here
    if world > 1:
        dist.destroy_process_group()


def reload_predictions(artifact_dir: Path, out: Path, *, campaign_dir: Path | None = None,
                       limit: int | None = None) -> int:
    """Reload the artifact and write the predictions as training did (the reload hook)."""
    meta = json.loads((artifact_dir / "artifact.json").read_text(encoding="utf-8"))
    if campaign_dir is None:
        found = [p for p in Path(artifact_dir).resolve().parents
                 if (p / meta["corpus"]["path"]).is_dir()]
        if not found:
            raise ValueError(f"no folder above {artifact_dir} holds the corpus "
                             f"{meta['corpus']['path']!r}; give the campaign folder")
        campaign_dir = found[0]
    files = corpus_files(meta["corpus"], campaign_dir)
    ids, test_x, test_y = read_split(files["test"], meta["corpus"].get("test_limit"))
    torch.set_num_threads(1)
    model = build_model(meta["params"]["hidden"], meta["params"]["dropout"])
    model.load_state_dict(load_file(str(artifact_dir / "model.safetensors")))
    probs, loss = predict(model, test_x, test_y)
    n = len(ids) if limit is None else min(limit, len(ids))
    write_predictions(Path(out), ids[:n], test_y[:n], probs[:n], loss[:n])
    return n
