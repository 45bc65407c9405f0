"""Damaged and hostile checkpoints are detected and named, and no pickled code ever runs.

The faults come from :mod:`checkpoint_faults`; each is applied to a fresh copy of one
valid checkpoint. ``check_checkpoint`` must report a finding whose ``check`` is one of
the names the fault allows, ``load_checkpoint`` must refuse, and the marker file that a
payload would create must never exist.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flightplan.errors import CheckpointError, UnsafeFileError
from flightplan.trial.checkpoint_check import check_checkpoint, verify_checkpoint
from flightplan.trial.checkpoint_io import load_checkpoint

from .checkpoint_faults import CORRUPTIONS, HOSTILE, copy_checkpoint, make_checkpoint

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One valid checkpoint, never modified (tests damage copies)."""
    return make_checkpoint(tmp_path_factory.mktemp("pristine") / "checkpoints", 4)


def test_the_pristine_checkpoint_verifies_and_loads(pristine: Path) -> None:
    report = check_checkpoint(pristine)
    assert report["verified"] is True and report["findings"] == []
    assert (report["step"], report["run_id"], report["files"]) == (4, "tiny-0123456789", 3)
    loaded = load_checkpoint(pristine)
    assert sorted(loaded.model) == ["bias", "weight"]
    assert loaded.state["counters"] == {"steps_done": 4}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", sorted(CORRUPTIONS))
def test_each_corruption_is_detected_and_named(pristine: Path, tmp_path: Path, fault: str,
                                               seed: int) -> None:
    ckpt = copy_checkpoint(pristine, tmp_path / "checkpoints" / pristine.name)
    expected = CORRUPTIONS[fault](ckpt, random.Random(seed))
    report = check_checkpoint(ckpt)
    assert report["verified"] is False
    checks = {f["check"] for f in report["findings"]}
    assert checks & expected, (fault, report["findings"])
    with pytest.raises((CheckpointError, UnsafeFileError)):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", sorted(HOSTILE))
def test_each_hostile_file_is_refused_and_runs_nothing(pristine: Path, tmp_path: Path,
                                                       fault: str, seed: int) -> None:
    ckpt = copy_checkpoint(pristine, tmp_path / "checkpoints" / pristine.name)
    marker = tmp_path / "code-ran"
    expected = HOSTILE[fault](ckpt, random.Random(seed), marker)
    report = check_checkpoint(ckpt)
    assert report["verified"] is False
    assert {f["check"] for f in report["findings"]} & expected, (fault, report["findings"])
    with pytest.raises((CheckpointError, UnsafeFileError)):
        load_checkpoint(ckpt)
    assert not marker.exists()


@pytest.mark.parametrize("fault", ["raw pickle that runs code", "torch archive with a code pickle"])
def test_a_fresh_process_refuses_a_code_pickle_too(pristine: Path, tmp_path: Path, fault: str) -> None:
    ckpt = copy_checkpoint(pristine, tmp_path / "checkpoints" / pristine.name)
    marker = tmp_path / "code-ran"
    HOSTILE[fault](ckpt, random.Random(0), marker)
    report = verify_checkpoint(ckpt)
    assert report["verified"] is False
    assert [f["check"] for f in report["findings"]] == ["unsafe"]
    assert not marker.exists()
