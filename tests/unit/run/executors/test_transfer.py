"""run/executors/transfer.py: a run's outputs sent home are committed only after their
hashes are checked, atomically, the status markers last (checkpoints travel in chunks:
test_stream.py, test_to_flight.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from flightplan.errors import TransferError
from flightplan.run.executors.transfer import (Blob, blob_bytes, commit_outputs, pack,
                                               pack_tree)


def _blob(path: str, data: bytes) -> Blob:
    return Blob(path, data, hashlib.sha256(data).hexdigest())


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


def test_pack_tree_reads_only_the_named_entries_with_their_hashes(tmp_path: Path):
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact" / "model.bin").write_bytes(b"one")
    (tmp_path / "metrics.json").write_bytes(b"{}")
    (tmp_path / "trial.json").write_bytes(b"{}")
    blobs = pack_tree(tmp_path, only={"artifact", "metrics.json"})
    assert [(b.path, b.data) for b in blobs] == [("artifact/model.bin", b"one"),
                                                 ("metrics.json", b"{}")]
    assert blobs[0] == _blob("artifact/model.bin", b"one") and blob_bytes(blobs) == 5
    assert pack(tmp_path, ["trial.json"]) == [_blob("trial.json", b"{}")]


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
