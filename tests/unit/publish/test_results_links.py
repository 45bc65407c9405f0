"""Copying a run into results/ (flightplan.publish.results.publish_run) never follows a
symbolic link out of the run folder: the link is refused with its path, and nothing of the
run is copied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flightplan.errors import UnsafeFileError
from flightplan.publish.results import publish_run

RUN_ID = "control-0123456789"


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """A campaign folder with one finished run (trial.json, metrics, artifact/) and a
    secret beside the campaign; (campaign, run folder)."""
    campaign = tmp_path / "campaign"
    run = campaign / "runs" / RUN_ID
    (run / "artifact").mkdir(parents=True)
    (run / "trial.json").write_text(json.dumps({"name": "control", "task": "textclf"}))
    (run / "metrics.json").write_text('{"macro_f1": 0.5}')
    (run / "artifact" / "artifact.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("the key")
    return campaign, run


def test_a_link_out_of_the_run_folder_in_the_artifact_is_refused_and_nothing_copied(
        tmp_path: Path) -> None:
    campaign, run = _run(tmp_path)
    link = run / "artifact" / "weights.bin"
    link.symlink_to(tmp_path / "secret.txt")
    with pytest.raises(UnsafeFileError) as caught:
        publish_run(campaign, RUN_ID)
    message = str(caught.value)
    assert message == (f"{link}: a symbolic link out of the run folder (to "
                       f"{(tmp_path / 'secret.txt').resolve()}); refused, nothing of the run "
                       f"copied into results/: put the file itself there")
    assert "\n" not in message and caught.value.exit_code == 1
    results = campaign / "results"
    copied = [p for p in results.rglob("*") if p.is_file()] if results.exists() else []
    assert copied == []
    assert not any(b"the key" in p.read_bytes() for p in copied)


@pytest.mark.parametrize("planted", ["metrics.json", "artifact"])
def test_a_run_file_or_the_artifact_itself_linked_out_is_refused(tmp_path: Path,
                                                                  planted: str) -> None:
    campaign, run = _run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "artifact.json").write_text("{}")
    target = outside if planted == "artifact" else tmp_path / "secret.txt"
    path = run / planted
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)
    with pytest.raises(UnsafeFileError, match=f"^{path}: a symbolic link out of the run folder"):
        publish_run(campaign, RUN_ID)
    results = campaign / "results"
    assert not results.exists() or not [p for p in results.rglob("*") if p.is_file()]


def test_a_link_to_a_file_inside_the_run_folder_is_copied_as_that_file(tmp_path: Path) -> None:
    campaign, run = _run(tmp_path)
    (run / "artifact" / "labels.json").symlink_to(run / "metrics.json")
    written = publish_run(campaign, RUN_ID)
    assert f"artifacts/{RUN_ID}/labels.json" in written
    copied = campaign / "results" / "artifacts" / RUN_ID / "labels.json"
    assert not copied.is_symlink() and copied.read_text() == '{"macro_f1": 0.5}'
