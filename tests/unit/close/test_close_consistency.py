"""The figures of a closed results directory, computed again from its own predictions
(:mod:`flightplan.close.consistency`): edits whose manifest entries were rewritten to match
are still found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from close_fixture import VARIANT, make_campaign

from flightplan.close.commands import close_campaign
from flightplan.close.consistency import consistency_findings
from flightplan.close.verify import verify_results
from flightplan.publish.manifest import read_manifest, update_manifest



@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    spec, ledger = make_campaign(tmp_path_factory.mktemp("consistent"))
    outcome = close_campaign(spec, ledger)
    assert outcome["verified"], outcome["findings"]
    return Path(outcome["results_dir"])


@pytest.fixture
def copy(closed, tmp_path):
    return Path(shutil.copytree(closed, tmp_path / "results"))


def _found(results: Path) -> list[tuple[str, str, str]]:
    return [(f.check, f.path, f.message) for f in consistency_findings(results, read_manifest(results))]


def test_a_closed_directory_agrees_with_its_predictions(closed):
    assert _found(closed) == []


def test_an_answer_changed_to_yes_is_found_even_with_its_checksum_rewritten(copy):
    path = copy / "conclusion.json"
    conclusion = json.loads(path.read_text())
    assert conclusion["answer"] == "no"
    path.write_text(json.dumps(conclusion | {"answer": "yes"}))
    update_manifest(copy, written=["conclusion.json"])
    assert _found(copy) == [("inconsistent", "conclusion.json",
                             "answer states 'yes', but its comparisons give 'no'")]
    report = verify_results(copy, reload=False)
    assert not report["verified"] and [f["check"] for f in report["findings"]] == ["inconsistent"]


def test_changed_predictions_move_the_metric_value_and_the_comparison(copy):
    rel = f"predictions/{VARIANT}.csv"
    lines = (copy / rel).read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    gold, predicted = header.index("gold"), header.index("predicted")
    changed = 0
    for i, line in enumerate(lines[1:], start=1):
        cells = line.rstrip("\n").split(",")
        if cells[gold] == cells[predicted] and changed < 5:    # 5 right answers made wrong
            cells[predicted] = next(c for c in ("neg", "neu", "pos") if c != cells[gold])
            lines[i] = ",".join(cells) + "\n"
            changed += 1
    (copy / rel).write_text("".join(lines))
    update_manifest(copy, written=[rel])
    found = _found(copy)
    stated = read_manifest(copy)["runs"][VARIANT]["metric_value"]
    assert found[0][:2] == ("inconsistent", "MANIFEST.json")
    assert found[0][2].startswith(f"runs.{VARIANT}.metric_value: states {stated}, but "
                                  f"predictions/{VARIANT}.csv give macro_f1 0.")
    assert found[1][:2] == ("inconsistent", "conclusion.json")
    assert found[1][2].startswith("comparisons[0] (variant vs control): ")
    assert "variant_value states" in found[1][2]


def test_nothing_is_computed_from_a_file_that_failed_its_checksum(copy):
    rel = f"predictions/{VARIANT}.csv"
    (copy / rel).write_text((copy / rel).read_text().replace("t1,neu,neu,", "t1,neu,pos,", 1))
    report = verify_results(copy, reload=False)           # the manifest was not rewritten
    assert [(f["check"], f["path"]) for f in report["findings"]] == [("checksum", rel)]
    assert consistency_findings(copy, read_manifest(copy), changed=frozenset({rel})) == []
    # the comparison's figures, and the verdict's seed notice, which states its interval
    found = _found(copy)
    assert [f[:2] for f in found] == [("inconsistent", "MANIFEST.json"),
                                      ("inconsistent", "conclusion.json"),
                                      ("inconsistent", "conclusion.json")]
    assert found[2][2].startswith("verdict states ")
