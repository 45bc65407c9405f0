"""Hostile results directories: ``flightplan verify`` reads only inside the directory,
never crashes on a manifest built to break it, and never runs code planted in it.

A results directory is something people receive from others, so verify treats it as
untrusted input: each fault of :mod:`results_faults` is a finding (``path_traversal``
for anything that leads outside), not a traceback and not code execution.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flightplan.close.verify import verify_results

from .cli_harness import run_inprocess
from .results_faults import MALFORMED, PLANTED, TRAVERSALS, edit_manifest, make_results, plant


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return make_results(tmp_path / "campaign")


def test_the_untouched_directory_verifies(results: Path) -> None:
    assert verify_results(results, reload=False) == {"verified": True, "findings": []}


@pytest.mark.parametrize("label", sorted(TRAVERSALS))
def test_anything_that_leads_outside_is_path_traversal(results: Path, label: str) -> None:
    check, path = TRAVERSALS[label](results)
    report = verify_results(results, reload=False)
    assert report["verified"] is False
    assert (check, path) in {(f["check"], f["path"]) for f in report["findings"]}
    assert not any(f["path"].startswith(f"{path}/") for f in report["findings"])  # not followed


@pytest.mark.parametrize("label", sorted(MALFORMED))
def test_a_malformed_manifest_is_a_finding_not_a_crash(results: Path, label: str) -> None:
    edit_manifest(results, MALFORMED[label])
    report = verify_results(results, reload=False)
    assert report["verified"] is False and report["findings"]


@pytest.mark.parametrize("label", sorted(PLANTED))
def test_code_planted_in_a_results_directory_never_runs(results: Path, label: str) -> None:
    marker = results.parent / "code-ran"
    plant(results, label, marker)
    report = verify_results(results, reload=True, sample=1)
    assert report["verified"] is False
    assert not marker.exists()


@pytest.mark.parametrize("label", ["manifest path ../outside.txt", "unlisted link to the parent folder"])
def test_the_verify_verb_exits_1_and_names_path_traversal(results: Path, label: str) -> None:
    _, path = TRAVERSALS[label](results)
    outcome = run_inprocess(["verify", str(results), "--json"])
    assert outcome.code == 1, outcome.stderr
    assert "Traceback" not in outcome.stderr
    report = json.loads(outcome.stdout)
    assert {"check": "path_traversal", "path": path} in \
        [{"check": f["check"], "path": f["path"]} for f in report["findings"]]
