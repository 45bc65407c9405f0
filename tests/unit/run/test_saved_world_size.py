"""A run that would resume from a checkpoint saved by another number of processes, with
``[[run]] reshard`` off, is refused by ``flightplan run`` before the ledger records
anything (one line naming ``run[i].processes``, the checkpoint, both numbers and the real
restart command; exit 2), instead of failing inside a process start that running again
repeats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flightplan.errors import SpecError
from flightplan.run.ledger import Ledger
from flightplan.run.planned import check_saved_world_sizes, plan_runs
from flightplan.spec import load_spec
from flightplan.trial.checkpoint_io import FORMAT

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny" / "campaign.toml"


def _campaign(folder: Path, *, control: str = "") -> Path:
    """The tiny campaign in ``folder``, with ``control`` added to the control's table."""
    text = TINY.read_text(encoding="utf-8").replace('name = "control"\n',
                                                    f'name = "control"\n{control}\n')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "campaign.toml").write_text(text, encoding="utf-8")
    return folder / "campaign.toml"


def _saved(run_dir: Path, step: int, manifest: dict | str) -> Path:
    """A committed checkpoint folder of ``run_dir`` holding only ``manifest``."""
    folder = run_dir / "checkpoints" / f"step-{step:06d}"
    folder.mkdir(parents=True)
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (folder / "manifest.json").write_text(text, encoding="utf-8")
    return folder


def _manifest(world_size: int | None) -> dict:
    return {"format": FORMAT, "files": {}, "tensors": {}, "step": 3,
            **({} if world_size is None else {"world_size": world_size})}


def _refusal(spec, planned) -> str:
    """The one line :func:`check_saved_world_sizes` refuses ``planned`` with."""
    with pytest.raises(SpecError) as refused:
        check_saved_world_sizes(spec, planned, ())
    return str(refused.value)


def test_the_newest_checkpoint_of_another_world_size_is_refused_naming_the_fixes(tmp_path):
    spec = load_spec(_campaign(tmp_path / "camp"))
    planned = plan_runs(spec)
    control = next(p for p in planned if p.name == "control")
    _saved(control.run_dir, 2, _manifest(None))
    newest = _saved(control.run_dir, 3, _manifest(2))
    assert _refusal(spec, planned) == (
        f"{spec.source}: run[0].processes: control: {newest} was saved by 2 processes but this "
        f"run has 1; resuming at another world size is not bitwise: give [[run]] processes = "
        f"2, set [[run]] reshard = true to resume it at 1 anyway (not bitwise), or start the "
        f"run over with flightplan run {spec.source} --restart control")
    check_saved_world_sizes(spec, planned, ("control",))      # started over: nothing to resume
    (control.run_dir / "done.json").write_text("{}", encoding="utf-8")
    check_saved_world_sizes(spec, planned, ())                # finished: not resumed


def test_a_library_checkpoint_is_refused_before_anything_runs_also_with_reshard(tmp_path):
    """A Trainer's or Lightning's checkpoint (its manifest's ``kind``) is never resharded:
    with ``reshard = true`` too, ``flightplan run`` refuses it up front, and the line does
    not advise reshard (the run would start, then fail inside the library's restore)."""
    spec = load_spec(_campaign(tmp_path / "camp", control="reshard = true"))
    planned = plan_runs(spec)
    newest = _saved(planned[0].run_dir, 3, {**_manifest(2), "kind": "transformers"})
    assert _refusal(spec, planned) == (
        f"{spec.source}: run[0].processes: control: {newest} was saved by 2 processes but this "
        f"run has 1; [[run]] reshard applies to tasks on flightplan's trial API, not to a "
        f"Lightning or Trainer checkpoint: give [[run]] processes = 2, or start the run over "
        f"with flightplan run {spec.source} --restart control")


def test_reshard_the_same_world_size_or_an_unreadable_manifest_pass(tmp_path):
    resharded = load_spec(_campaign(tmp_path / "a", control="reshard = true"))
    planned = plan_runs(resharded)
    _saved(planned[0].run_dir, 3, _manifest(2))
    check_saved_world_sizes(resharded, planned, ())
    spec = load_spec(_campaign(tmp_path / "b"))
    planned = plan_runs(spec)
    _saved(planned[0].run_dir, 3, _manifest(1))
    _saved(planned[1].run_dir, 2, _manifest(2))
    _saved(planned[1].run_dir, 4, "{not json")     # the trial sets it aside, then refuses
    check_saved_world_sizes(spec, planned, ())


def test_flightplan_run_refuses_it_with_exit_2_before_the_ledger_records_anything(tmp_path):
    spec_file = _campaign(tmp_path / "camp")
    control = next(p for p in plan_runs(load_spec(spec_file)) if p.name == "control")
    _saved(control.run_dir, 3, _manifest(2))
    done = subprocess.run([str(Path(sys.executable).parent / "flightplan"), "run", "campaign.toml"],
                          cwd=spec_file.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: campaign.toml: run[0].processes: control: runs/{control.run_id}/checkpoints/"
        f"step-000003 was saved by 2 processes but this run has 1; resuming at another world "
        f"size is not bitwise: give [[run]] processes = 2, set [[run]] reshard = true to "
        f"resume it at 1 anyway (not bitwise), or start the run over with flightplan run "
        f"campaign.toml --restart control"]
    assert [p.name for p in (spec_file.parent / "runs").iterdir()] == [control.run_id]
    assert not (spec_file.parent / "results").exists()
    ledger = Ledger.open(spec_file.parent)
    assert (ledger.events(), ledger.original_plan()) == ([], None)
