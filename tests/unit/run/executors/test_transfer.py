"""run/executors/transfer.py: files sent between home and a flight are committed only after their
hashes are checked, atomically, the status markers last."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flightplan.errors import TransferError
from flightplan.run.executors.transfer import (Blob, blob_bytes, commit_checkpoint, commit_outputs,
                                     latest_checkpoint, pack, pack_tree)


def _blob(path: str, data: bytes) -> Blob:
    return Blob(path, data, hashlib.sha256(data).hexdigest())


def _checkpoint(files: dict[str, bytes]) -> list[Blob]:
    """Blobs of a checkpoint whose manifest lists ``files``."""
    manifest = {"format": "flightplan-checkpoint/1", "tensors": {},
                "files": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                          for n, d in files.items()}}
    return [_blob(n, d) for n, d in files.items()] + [
        _blob("manifest.json", json.dumps(manifest).encode())]


def test_a_checkpoint_is_committed_whole_and_pruned_to_keep_last(tmp_path: Path):
    parent = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        blobs = _checkpoint({"model.safetensors": b"m" * step, "state.pt": b"s"})
        assert commit_checkpoint(parent, f"step-{step:06d}", blobs, keep_last=2) is True
    assert sorted(p.name for p in parent.iterdir()) == ["step-000002", "step-000003"]
    assert (parent / "step-000003" / "model.safetensors").read_bytes() == b"mmm"
    # sent again (a poll repeated): nothing written
    assert commit_checkpoint(parent, "step-000003", blobs) is False


@pytest.mark.parametrize("damage, message", [
    ("flip", "sent as 3 bytes"),            # bytes changed in transit: blob hash wrong
    ("manifest", "differs from its manifest"),  # file and blob agree, the manifest does not
    ("extra", "are not the files its manifest lists"),
    ("escape", "must be relative"),
])
def test_a_damaged_checkpoint_is_refused_and_leaves_nothing(tmp_path: Path, damage, message):
    parent = tmp_path / "checkpoints"
    blobs = _checkpoint({"model.safetensors": b"abc"})
    if damage == "flip":
        blobs[0] = Blob("model.safetensors", b"abd", blobs[0].sha256)
    elif damage == "manifest":
        blobs[0] = _blob("model.safetensors", b"abd")
    elif damage == "extra":
        blobs.append(_blob("planted.pt", b"x"))
    else:
        blobs[0] = Blob("../model.safetensors", b"abc", blobs[0].sha256)
        blobs[-1] = _checkpoint({"../model.safetensors": b"abc"})[-1]
    with pytest.raises(TransferError, match=message):
        commit_checkpoint(parent, "step-000004", blobs)
    assert not (parent / "step-000004").exists() and not (parent / "step-000004.tmp").exists()
    assert not (tmp_path / "model.safetensors").exists()


def test_outputs_replace_the_old_ones_and_the_markers_come_last(tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "artifact").mkdir(parents=True)
    (run_dir / "artifact" / "stale.bin").write_bytes(b"old")
    blobs = [_blob("done.json", b"{}"), _blob("artifact/model.safetensors", b"weights"),
             _blob("artifact/artifact.json", b"{}"), _blob("metrics.json", b'{"f1": 1}')]
    assert commit_outputs(run_dir, blobs) == ["artifact", "metrics.json", "done.json"]
    assert sorted(p.name for p in (run_dir / "artifact").iterdir()) == ["artifact.json",
                                                                         "model.safetensors"]
    assert (run_dir / "metrics.json").read_bytes() == b'{"f1": 1}'
    assert sorted(p.name for p in run_dir.iterdir()) == ["artifact", "done.json", "metrics.json"]


def test_damaged_outputs_commit_nothing_so_the_run_is_not_finished(tmp_path: Path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = _blob("metrics.json", b"{}")
    bad = Blob("predictions.csv", b"id,label\n", good.sha256)
    with pytest.raises(TransferError, match="predictions.csv"):
        commit_outputs(run_dir, [_blob("done.json", b"{}"), good, bad])
    assert list(run_dir.iterdir()) == []


def test_pack_and_latest_checkpoint_round_trip_and_set_aside_a_corrupt_one(tmp_path: Path):
    parent = tmp_path / "checkpoints"
    commit_checkpoint(parent, "step-000001", _checkpoint({"model.safetensors": b"one"}))
    commit_checkpoint(parent, "step-000002", _checkpoint({"model.safetensors": b"two"}))
    (parent / "step-000002" / "model.safetensors").write_bytes(b"tw0")   # rot on disk
    name, blobs = latest_checkpoint(parent)
    by_path = {b.path: b.data for b in blobs}
    assert name == "step-000001" and by_path["model.safetensors"] == b"one"
    assert blob_bytes(blobs) == 3 + len(by_path["manifest.json"])
    assert sorted(p.name for p in parent.iterdir()) == ["step-000001",
                                                        "step-000002.corrupt-transfer"]
    # what pack_tree reads commits elsewhere byte for byte
    commit_checkpoint(tmp_path / "there", name,
                      pack_tree(parent / name, only={"manifest.json", "model.safetensors"}))
    assert pack(tmp_path / "there" / name, ["model.safetensors"])[0].data == b"one"
    assert latest_checkpoint(tmp_path / "empty") is None


@pytest.mark.parametrize("stray", ["trial.json", "measurements.jsonl", "log.txt",
                                   "checkpoints/step-000009/model.safetensors",
                                   ".incoming/x", "weights.bin"])
def test_home_commits_only_the_outputs_a_run_produces(tmp_path: Path, stray: str):
    """A flight that sends back anything but a run's outputs (a new trial.json for the next
    execution, rewritten measurements, a checkpoint that skipped the checks) is refused
    whole: nothing is written, so the run is not finished."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text('{"run_id": "r-1"}')
    blobs = [_blob("done.json", b"{}"), _blob("metrics.json", b"{}"), _blob(stray, b"evil")]
    with pytest.raises(TransferError, match=rf"{stray}: not an output of a run \(only "
                                            rf"predictions.csv, metrics.json, artifact, "
                                            rf"done.json, stop.json come home\)"):
        commit_outputs(run_dir, blobs)
    assert sorted(p.name for p in run_dir.iterdir()) == ["trial.json"]
    assert (run_dir / "trial.json").read_text() == '{"run_id": "r-1"}'
