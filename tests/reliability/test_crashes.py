"""SIGKILL at seeded moments, then run again: the result is bitwise identical to a run
that was never interrupted, no corrupt checkpoint is ever loaded, and the ledger holds.

Two levels. A training script on the trial API (seconds per process) is killed before,
during and after its checkpoint writes. The tiny campaign (``examples/tiny`` cut to 64
train / 16 test reviews, control and LoRA run: ``small_tiny``) is killed in the runner
and in its trial processes — during checkpoint writes, ledger commits and ``close`` — and
run again until it finishes. CI runs a few points; ``bench/faults.py``
draws 50 and more from the same harness.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import sys
from pathlib import Path

import pytest

from flightplan.errors import TrialStopped
from flightplan.rundir import RunDir
from flightplan.trial.trial import Trial

from .cli_harness import FLIGHTPLAN
from .small_campaigns import small_tiny
from .crash_harness import (CrashPoint, count_calls, crash_campaign, draw_points, fingerprint,
                            ledger_findings, run_with_crash)
from .trial_script import RUN_ID, build

SCRIPT = Path(__file__).with_name("trial_script.py")
SEED = 20261129


def _script_argv(run_dir: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), str(run_dir), "--steps", "6", "--checkpoint-at", "1,3,5"]


@pytest.fixture(scope="module")
def script_reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One uninterrupted run of the script in count mode: its digest and call counts."""
    folder = tmp_path_factory.mktemp("script-reference")
    code, counts = count_calls(_script_argv(folder / "run"), cwd=folder)
    assert code == 0
    clean = run_with_crash(_script_argv(folder / "again"), cwd=folder, point=None,
                           marker=folder / "fired")
    return {"digest": clean.stdout.strip(), "counts": counts}


def _script_points(counts: dict, n: int, seed: int) -> list[CrashPoint]:
    kinds = [("runner", "fsync", "checkpoints"), ("runner", "replace", "checkpoints"),
             ("runner", "replace", "")]
    return [CrashPoint("any", p.point, nth=p.nth, after=p.after, contains=p.contains, group=True)
            for p in draw_points(counts, n=n, seed=seed, kinds=kinds)]


def test_the_script_counts_what_a_checkpoint_does(script_reference: dict) -> None:
    counts = script_reference["counts"]
    # three saves, each fsyncing at least its four files and renaming step-N.tmp -> step-N
    assert counts[("runner", "fsync", "checkpoints")] >= 3 * 4
    assert counts[("runner", "replace", "checkpoints")] >= 3
    assert len(script_reference["digest"]) == 64


@pytest.mark.parametrize("index", range(2))
def test_a_script_killed_around_a_checkpoint_write_resumes_bitwise(
        script_reference: dict, tmp_path: Path, index: int) -> None:
    point = _script_points(script_reference["counts"], 2, SEED)[index]
    run_dir = tmp_path / "run"
    crashed = run_with_crash(_script_argv(run_dir), cwd=tmp_path, point=point, marker=tmp_path / "fired")
    assert crashed.fired and crashed.code == -signal.SIGKILL, (point.label(), crashed)
    again = run_with_crash(_script_argv(run_dir), cwd=tmp_path, point=None, marker=tmp_path / "fired")
    assert again.code == 0, again.stderr_tail
    assert again.stdout.strip() == script_reference["digest"], point.label()
    rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    assert not [r for r in rows if r.get("event") == "checkpoint_rejected"], point.label()
    restored = [r for r in rows if r.get("event") == "restore"][-1]
    assert restored["source"] is None or restored["source"].startswith("step-")
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000004", "step-000006"]


def test_a_script_killed_right_after_its_first_checkpoint_is_in_place_has_recorded_the_save(
        tmp_path: Path) -> None:
    """The record that a run saved is durable no later than the checkpoint: killed right
    after the first rename, with the checkpoint then lost, the run must not start over."""
    run_dir = tmp_path / "run"
    point = CrashPoint("any", "replace", nth=1, after=True, contains="checkpoints", group=False)
    crashed = run_with_crash(_script_argv(run_dir), cwd=tmp_path, point=point,
                             marker=tmp_path / "fired")
    assert crashed.fired and crashed.code == -signal.SIGKILL, crashed
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000002"]
    shutil.rmtree(run_dir / "checkpoints")
    assert RunDir(run_dir).saved_checkpoint()        # what the runner sets resume from
    model, optimizer = build()
    trial = Trial.local(run_dir, name="mlp", run_id=RUN_ID, params={"lr": 1e-2}, resume=True)
    trial.register(model=model, optimizer=optimizer)
    with pytest.raises(TrialStopped, match="holds no finished one"):
        trial.restore()
    assert json.loads((run_dir / "stop.json").read_text())["rule"] == "no_usable_resume"


# --- the tiny campaign: runner, trial processes and close ------------------------------------

@pytest.fixture(scope="module")
def campaign_reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The (small) tiny campaign run without faults, counting calls: its products' sha256
    (everything ``run`` publishes; ``close`` adds only reports) and the call counts that
    crash points are drawn from."""
    folder = tmp_path_factory.mktemp("campaign-reference") / "tiny"
    spec = small_tiny(folder)
    code, counts = count_calls(FLIGHTPLAN + ["run", str(spec)], cwd=folder)
    assert code == 0
    assert ledger_findings(folder) == []
    return {"fingerprint": fingerprint(folder), "counts": counts}


def test_the_reference_campaign_has_products_and_counted_calls(campaign_reference: dict) -> None:
    products = campaign_reference["fingerprint"]
    assert any(k.endswith("artifact/model.safetensors") for k in products)
    assert any(k.startswith("results/predictions/") for k in products)
    counts = campaign_reference["counts"]
    assert counts[("trial", "fsync", "checkpoints")] > 0 and counts[("runner", "commit", "")] > 0


def test_the_tiny_campaign_killed_mid_save_mid_commit_and_in_close_ends_bitwise_identical(
        campaign_reference: dict, tmp_path: Path) -> None:
    spec = small_tiny(tmp_path / "tiny")
    rng = random.Random(SEED)
    counts = campaign_reference["counts"]
    run_points = [
        # a trial process dies while writing a checkpoint (the runner lives on: run failed)
        CrashPoint("trial", "fsync", nth=rng.randint(1, counts[("trial", "fsync", "checkpoints")]),
                   after=rng.random() < 0.5, contains="checkpoints", group=False),
        # the machine dies around a ledger commit early in the next invocation
        CrashPoint("runner", "commit", nth=rng.randint(1, 4), after=rng.random() < 0.5),
    ]
    # close rewrites results/MANIFEST.json once per file it adds: the first few are certain
    close_points = [CrashPoint("runner", "replace", contains="results", after=rng.random() < 0.5,
                               nth=rng.randint(1, 4))]
    report = crash_campaign(spec, run_points=run_points, close_points=close_points,
                            reference=campaign_reference["fingerprint"])
    trace = [(label, a.code, a.fired, a.stderr_tail[-200:]) for label, a in report.attempts]
    assert report.fired == 3, trace
    assert report.finished, trace
    assert report.differences == [], trace
    assert report.ledger == []
    assert report.verify_code == 0
    assert report.rejected == []  # every kill left a complete checkpoint or a .tmp, never a bad one


def test_a_publish_killed_mid_write_leaves_nothing_that_blocks_verify(tmp_path: Path) -> None:
    """The runner and ``close`` write results/ with temp files beside the target; a kill
    before the rename leaves one behind. The next publish must leave a directory whose
    only finding is that close has not completed it yet (internals.md: a campaign cut
    short still leaves a results/ whose every listed file checks out)."""
    from flightplan.publish.results import publish_plan
    from flightplan.close.verify import verify_results

    campaign = tmp_path / "campaign"
    campaign.mkdir()
    plan = {"stages": [], "reserved_hours": 1.0}
    code = (f"from pathlib import Path\nfrom flightplan.publish.results import publish_plan\n"
            f"publish_plan(Path({str(campaign)!r}), {plan!r})\n")
    point = CrashPoint("any", "replace", nth=1, contains="results")
    crashed = run_with_crash([sys.executable, "-c", code], cwd=tmp_path, point=point,
                             marker=tmp_path / "fired")
    assert crashed.fired and crashed.code == -signal.SIGKILL
    publish_plan(campaign, plan)
    report = verify_results(campaign / "results", reload=False)
    assert [f["check"] for f in report["findings"]] == ["incomplete"]  # never closed, nothing else


@pytest.mark.slow
def test_a_campaign_killed_right_after_a_runs_first_checkpoint_stops_it_once_that_is_lost(
        tmp_path: Path) -> None:
    """The machine dies right after the control's first checkpoint is renamed into place;
    its checkpoints are then lost. The next ``run`` stops the control with
    ``no_usable_resume`` instead of training it again from step 0."""
    from flightplan.run.planned import plan_runs
    from flightplan.spec import load_spec

    spec = small_tiny(tmp_path / "tiny")
    control = next(p.run_id for p in plan_runs(load_spec(spec)) if p.run.name == "control")
    point = CrashPoint("trial", "replace", nth=1, after=True, group=True,
                       contains=f"runs/{control}/checkpoints")
    crashed = run_with_crash(FLIGHTPLAN + ["run", str(spec)], cwd=spec.parent, point=point,
                             marker=tmp_path / "fired")
    assert crashed.fired and crashed.code == -signal.SIGKILL, crashed
    checkpoints = spec.parent / "runs" / control / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == ["step-000001"]
    shutil.rmtree(checkpoints)
    again = run_with_crash(FLIGHTPLAN + ["run", str(spec), "--json"], cwd=spec.parent,
                           point=None, marker=tmp_path / "fired")
    outcome = json.loads(again.stdout)
    stopped = next(r for r in outcome["runs"] if r["run_id"] == control)
    assert stopped["status"] == "stopped", (stopped, again.stderr_tail)
    assert stopped["stop"]["rule"] == "no_usable_resume"
    assert not (spec.parent / "runs" / control / "done.json").exists()
