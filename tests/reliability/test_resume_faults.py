"""At restore, a damaged, hostile or foreign newest checkpoint is named, set aside, and
the previous valid one is used; training then ends bitwise identical to a run that was
never interrupted. A save that runs out of room fails with a clear error and leaves the
previous checkpoint intact, and the run continues once there is room.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flightplan.errors import TrialStopped
from flightplan.trial.checkpoint_check import check_checkpoint
from flightplan.trial.trial import Trial

from .checkpoint_faults import CORRUPTIONS, HOSTILE
from .cli_harness import child_env
from .trial_script import RUN_ID, build, parameters, train

SCRIPT = Path(__file__).with_name("trial_script.py")
NEWEST, PREVIOUS = "step-000006", "step-000004"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A run of 6 steps with checkpoints after steps 1, 3, 5 (keep_last=2 leaves
    step-000004 and step-000006), the parameters after 4 and 6 uninterrupted steps, and
    a checkpoint of another run id."""
    base = tmp_path_factory.mktemp("history")
    train(base / "run", steps=6, checkpoint_at={1, 3, 5})
    _, after4 = train(base / "four", steps=4, checkpoint_at=set())
    _, after6 = train(base / "six", steps=6, checkpoint_at=set())
    train(base / "other", steps=8, checkpoint_at={7}, run_id="mlp-other00000")
    return {"run": base / "run", "after4": parameters(after4), "after6": parameters(after6),
            "other": base / "other" / "checkpoints" / "step-000008"}


def _copy(history: dict, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(history["run"], run)
    return run


def _restore(run: Path) -> tuple[int, dict[str, bytes]]:
    model, optimizer = build()
    trial = Trial.local(run, name="mlp", run_id=RUN_ID, params={"lr": 1e-2})
    trial.register(model=model, optimizer=optimizer)
    return trial.restore(), parameters(model)


def _events(run: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "measurements.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("event") == kind]


def test_the_history_is_what_the_tests_assume(history: dict) -> None:
    names = sorted(p.name for p in (history["run"] / "checkpoints").iterdir())
    assert names == [PREVIOUS, NEWEST]
    assert history["after4"] != history["after6"]


def _assert_set_aside_and_previous_used(run: Path, history: dict, name: str = NEWEST) -> str:
    start, params = _restore(run)
    assert start == 4
    assert params == history["after4"]
    aside = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(f"{name}.corrupt-")]
    assert len(aside) == 1
    rejected = _events(run, "checkpoint_rejected")
    assert [r["name"] for r in rejected] == [name] and rejected[0]["renamed_to"] == aside[0]
    _, model = train(run, steps=6, checkpoint_at=set())
    assert parameters(model) == history["after6"]
    return aside[0]


@pytest.mark.parametrize("fault", sorted(CORRUPTIONS))
def test_a_corrupt_newest_checkpoint_is_set_aside_and_the_previous_used(
        history: dict, tmp_path: Path, fault: str) -> None:
    run = _copy(history, tmp_path)
    CORRUPTIONS[fault](run / "checkpoints" / NEWEST, random.Random(7))
    _assert_set_aside_and_previous_used(run, history)


@pytest.mark.parametrize("fault", sorted(HOSTILE))
def test_a_hostile_newest_checkpoint_is_set_aside_and_runs_nothing(
        history: dict, tmp_path: Path, fault: str) -> None:
    run = _copy(history, tmp_path)
    marker = tmp_path / "code-ran"
    HOSTILE[fault](run / "checkpoints" / NEWEST, random.Random(7), marker)
    _assert_set_aside_and_previous_used(run, history)
    assert not marker.exists()


def test_a_newer_checkpoint_of_another_run_is_set_aside(history: dict, tmp_path: Path) -> None:
    run = _copy(history, tmp_path)
    shutil.copytree(history["other"], run / "checkpoints" / "step-000008")
    start, params = _restore(run)
    assert start == 6 and params == history["after6"]
    assert (run / "checkpoints" / "step-000008.corrupt-other-run").is_dir()
    assert _events(run, "checkpoint_rejected")[0]["reason"] == "other-run"


def test_a_partial_save_is_removed_and_never_loaded(history: dict, tmp_path: Path) -> None:
    run = _copy(history, tmp_path)
    partial = run / "checkpoints" / "step-000008.tmp"
    shutil.copytree(run / "checkpoints" / NEWEST, partial)
    (partial / "manifest.json").unlink()
    start, params = _restore(run)
    assert start == 6 and params == history["after6"]
    assert not partial.exists()


def test_no_usable_checkpoint_stops_the_run_by_its_rule(history: dict, tmp_path: Path) -> None:
    run = _copy(history, tmp_path)
    for name in (NEWEST, PREVIOUS):
        CORRUPTIONS["flipped byte"](run / "checkpoints" / name, random.Random(3))
    with pytest.raises(TrialStopped) as caught:
        _restore(run)
    assert caught.value.record["rule"] == "no_usable_resume"
    assert json.loads((run / "stop.json").read_text())["rule"] == "no_usable_resume"


# --- full disk: RLIMIT_FSIZE in a child process ------------------------------------------

def _script(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(run), "--steps", "6",
                           "--checkpoint-at", "1,3", *extra], capture_output=True, text=True,
                          timeout=120, env=child_env())


def _digest(params: dict[str, bytes]) -> str:
    import hashlib
    return hashlib.sha256(b"".join(v for _, v in sorted(params.items()))).hexdigest()


def test_a_save_that_runs_out_of_room_fails_clearly_and_the_run_continues_later(
        history: dict, tmp_path: Path) -> None:
    run = tmp_path / "run"
    full = _script(run, "--fsize-after", "1", "--fsize-bytes", "8192")
    assert full.returncode == 3, full.stderr
    assert "Traceback" not in full.stderr
    error = [line for line in full.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "step-000004" in error[0] and "File too large" in error[0] \
        and "previous checkpoint is intact" in error[0], full.stderr
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step-000002"]  # no partial save left behind
    assert check_checkpoint(run / "checkpoints" / "step-000002")["verified"] is True
    rows = [json.loads(line) for line in (run / "measurements.jsonl").read_text().splitlines()]
    assert rows[-1]["event"] == "checkpoint_failed" and rows[-1]["step"] == 4
    again = _script(run)  # room again: resumes from step-000002
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == _digest(history["after6"])
