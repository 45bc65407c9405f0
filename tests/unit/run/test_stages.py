"""Stages a person carries out, marked started and done from the CLI, and read back by
plan vs execution."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flightplan.close.plan_vs_execution import plan_vs_execution
from flightplan.errors import ArgumentError
from flightplan.plan.campaign_plan import plan_campaign
from flightplan.run.ledger import Ledger
from flightplan.run.stages import mark_stage_done, mark_stage_start
from flightplan.spec import load_spec
from flightplan.units import Duration

REPO = Path(__file__).resolve().parents[3]
FLIGHTPLAN = Path(sys.executable).parent / "flightplan"


def _campaign(folder: Path):
    text = (REPO / "examples" / "drug-reviews" / "campaign.toml").read_text(encoding="utf-8")
    (folder / "campaign.toml").write_text(text, encoding="utf-8")
    return load_spec(folder / "campaign.toml")


@pytest.fixture
def spec(tmp_path):
    """The drug-review campaign, which has run (its ledger exists)."""
    Ledger.open(tmp_path).close()
    return _campaign(tmp_path)


def test_a_campaign_that_never_ran_gets_no_ledger_from_a_mark_or_a_note(tmp_path):
    spec = _campaign(tmp_path)
    message = (f"{tmp_path}: the campaign was never run (no ledger in .flightplan/ yet); run "
               f"`flightplan run` on its campaign file first")
    with pytest.raises(ArgumentError, match=re.escape(message)):
        mark_stage_start(spec, "review")
    with pytest.raises(ArgumentError, match=re.escape(message)):
        mark_stage_done(spec, "review", took=Duration.parse("2h"))
    note = subprocess.run([str(FLIGHTPLAN), "note", "review", "took longer", "--spec",
                           str(spec.source)], capture_output=True, text=True)
    assert note.returncode == 2 and note.stdout == ""
    assert note.stderr.startswith("error: ") and len(note.stderr.splitlines()) == 1
    assert note.stderr == f"error: {message}\n"
    assert not (tmp_path / ".flightplan").exists()          # nothing was created


def test_start_then_done_records_one_execution_that_plan_vs_execution_compares(spec):
    mark_stage_start(spec, "review", at=1000.0)
    record = mark_stage_done(spec, "review", at=1000.0 + 1800)
    assert record == {"name": "review", "started_at": 1000.0, "ended_at": 2800.0,
                      "hours": 0.5, "planned_hours": 0.25, "marks": 1, "total_hours": 0.5}
    with Ledger.open(spec.campaign_dir) as ledger:
        assert [(r.name, r.kind, r.started_at, r.ended_at)
                for r in ledger.stage_times()] == [("review", "stage", 1000.0, 2800.0)]
        ledger.freeze_original(plan_campaign(spec).to_json())
        items = {i["name"]: i for i in plan_vs_execution(ledger)["items"]}
    assert items["review"]["status"] == "done"
    assert items["review"]["observed_hours"] == 0.5
    assert items["review"]["planned_hours"] == 0.25


def test_took_records_a_stage_that_ended_now(spec):
    record = mark_stage_done(spec, "review", took=Duration.parse("2h"), at=10_000.0)
    assert (record["started_at"], record["ended_at"], record["hours"]) == (2800.0, 10_000.0, 2.0)


def test_a_stage_marked_done_again_adds_to_it_and_the_line_says_so(spec):
    """A review held twice: 0.5 h, then 20 minutes; plan vs execution counts 0.8333 h."""
    mark_stage_done(spec, "review", took=Duration.parse("30m"), at=10_000.0)
    done = subprocess.run([str(FLIGHTPLAN), "stage", "done", "review", "--took", "20m",
                           "--spec", str(spec.source)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ("review: done, 0.33 h observed (planned 0.25 h); marked done 2 times, "
                           "0.83 h in all, which plan vs execution counts\n")
    with Ledger.open(spec.campaign_dir) as ledger:
        ledger.freeze_original(plan_campaign(spec).to_json())
        items = {i["name"]: i for i in plan_vs_execution(ledger)["items"]}
    assert items["review"]["observed_hours"] == round(50 / 60, 6)


def test_wrong_marks_are_one_line_errors(spec):
    with pytest.raises(ArgumentError, match="did you mean 'review'"):
        mark_stage_start(spec, "reviw")
    with pytest.raises(ArgumentError, match="executed and timed by flightplan run"):
        mark_stage_start(spec, "pilot")
    with pytest.raises(ArgumentError, match="was not started; run flightplan stage start review"):
        mark_stage_done(spec, "review")
    mark_stage_start(spec, "review", at=5.0)
    with pytest.raises(ArgumentError, match="already started"):
        mark_stage_start(spec, "review")


def test_an_unknown_stage_is_told_the_stages_the_file_has_and_which_a_person_marks(tmp_path):
    """The tiny campaign plans data-check and pilot, both timed by flightplan run: the
    message names them, says none is marked by a person, and how to add one; the
    drug-review campaign lists review as the one a person marks."""
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    (tmp_path / "campaign.toml").write_text(text, encoding="utf-8")
    tiny = load_spec(tmp_path / "campaign.toml")
    assert [s.name for s in tiny.stages] == ["data-check", "pilot"]
    with pytest.raises(ArgumentError) as refused:
        mark_stage_start(tiny, "review")
    assert str(refused.value) == (
        f"'review' is not a [[stage]] of {tiny.source}; it has no stage a person marks; "
        f"data-check and pilot are run and timed by flightplan run itself; add a [[stage]] "
        f"named 'review' to plan and mark it")
    assert not (tmp_path / ".flightplan").exists()
    (tmp_path / "drug").mkdir()
    drug = _campaign(tmp_path / "drug")
    with pytest.raises(ArgumentError) as refused:
        mark_stage_done(drug, "install", took=Duration.parse("1h"))
    assert str(refused.value) == (
        f"'install' is not a [[stage]] of {drug.source}; its stages a person marks: review; "
        f"data-check and pilot are run and timed by flightplan run itself; add a [[stage]] "
        f"named 'install' to plan and mark it")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("after = "))
    start = text.index("[[stage]]")
    end = text.index("[[run]]")
    (tmp_path / "campaign.toml").write_text(text[:start] + text[end:], encoding="utf-8")
    bare = load_spec(tmp_path / "campaign.toml")
    assert bare.stages == []
    with pytest.raises(ArgumentError, match=r"; it has no \[\[stage\]\]; add a \[\[stage\]\] "
                                            r"named 'review' to plan and mark it$"):
        mark_stage_start(bare, "review")


def test_cli_exit_codes_and_json(spec):
    path = str(spec.campaign_dir / "campaign.toml")
    bad = subprocess.run([str(FLIGHTPLAN), "stage", "done", "review", "--took", "2x",
                          "--spec", path], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --took 2x:")
    assert "Traceback" not in bad.stderr
    done = subprocess.run([str(FLIGHTPLAN), "stage", "done", "review", "--took", "30m",
                           "--spec", path, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hours"] == 0.5
