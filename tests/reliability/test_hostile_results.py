"""Hostile results directories: ``flightplan verify`` reads only inside the directory,
never crashes on a manifest built to break it, and never runs code planted in it.

A results directory is something people receive from others, so verify must treat it
as untrusted input: each fault below is a finding (``path_traversal`` for anything that
leads outside), not a traceback and not code execution.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flightplan.close.manifest import MANIFEST_NAME, update_manifest
from flightplan.close.verify import verify_results

RUN_ID = "control-0123456789"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A small results directory whose manifest lists what is there; an ``outside.txt``
    sits next to it (what a traversal would reach)."""
    directory = tmp_path / "campaign" / "results"
    (directory / "params").mkdir(parents=True)
    (directory / "plan.json").write_text('{"stages": []}\n', encoding="utf-8")
    (directory / "params" / f"{RUN_ID}.json").write_text('{"lr": 0.01}\n', encoding="utf-8")
    update_manifest(directory, written=["plan.json", f"params/{RUN_ID}.json"])
    (tmp_path / "campaign" / "outside.txt").write_text("secret\n", encoding="utf-8")
    return directory


def _edit_manifest(results: Path, change) -> None:
    manifest = json.loads((results / MANIFEST_NAME).read_text(encoding="utf-8"))
    change(manifest)
    (results / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")


def _list(results: Path, rel: str, size: int = 7,
          sha: str = "ac7bd1e05f5d6b2ab1e4e6b0d83a9e2e07e8e5ac4e34a66a0e9e3a4f2f4c9f54") -> None:
    _edit_manifest(results, lambda m: m["files"].append({"path": rel, "size_bytes": size,
                                                         "sha256": sha}))


def test_the_untouched_directory_verifies(results: Path) -> None:
    assert verify_results(results, reload=False) == {"verified": True, "findings": []}


@pytest.mark.parametrize("rel", ["../outside.txt", "params/../../outside.txt", "/etc/hostname",
                                 "..", "./../outside.txt"])
def test_a_manifest_path_that_leaves_the_directory_is_path_traversal(results: Path, rel: str) -> None:
    _list(results, rel)
    report = verify_results(results, reload=False)
    assert report["verified"] is False
    assert {"check": "path_traversal", "path": rel} == \
        {k: v for k, v in report["findings"][[f["path"] for f in report["findings"]].index(rel)].items()
         if k != "message"}


def test_a_listed_symlink_to_a_file_outside_is_path_traversal(results: Path) -> None:
    os.symlink(results.parent / "outside.txt", results / "linked.txt")
    _list(results, "linked.txt")
    checks = {(f["check"], f["path"]) for f in verify_results(results, reload=False)["findings"]}
    assert ("path_traversal", "linked.txt") in checks


@pytest.mark.parametrize("target", ["..", "/etc", "/dev"])
def test_an_unlisted_symlinked_folder_leading_outside_is_path_traversal(results: Path, target: str) -> None:
    os.symlink(target if target.startswith("/") else results.parent, results / "escape")
    report = verify_results(results, reload=False)
    assert ("path_traversal", "escape") in {(f["check"], f["path"]) for f in report["findings"]}
    assert not any(f["path"].startswith("escape/") for f in report["findings"])  # not followed


def test_a_link_to_a_device_is_not_read(results: Path) -> None:
    os.symlink("/dev/zero", results / "zeros.bin")  # reading it would never end
    _list(results, "zeros.bin")
    checks = {(f["check"], f["path"]) for f in verify_results(results, reload=False)["findings"]}
    assert ("path_traversal", "zeros.bin") in checks


# Findings: manifests built to crash verify. Each must be a finding, not an exception.
MALFORMED = {
    "a NUL byte in a path": lambda m: m["files"].append({"path": "plan\u0000.json", "size_bytes": 1,
                                                         "sha256": "0" * 64}),
    "an entry that is a string": lambda m: m["files"].append("plan.json"),
    "an entry that is null": lambda m: m["files"].append(None),
    "a path too long for the file system": lambda m: m["files"].append(
        {"path": "x" * 300, "size_bytes": 1, "sha256": "0" * 64}),
    "expected_run_ids is a number": lambda m: m.update(expected_run_ids=5),
}


@pytest.mark.parametrize("label", sorted(MALFORMED))
def test_a_malformed_manifest_is_a_finding_not_a_crash(results: Path, label: str) -> None:
    _edit_manifest(results, MALFORMED[label])
    report = verify_results(results, reload=False)
    assert report["verified"] is False and report["findings"]


# Finding: verify reloads artifacts with `python -m` inside the results directory, so a
# module planted there is imported instead of the installed one.
PLANTED = {
    "a dotted task name pointing at a planted package": ("evil.pkg", "evil/pkg/predict.py",
                                                         ["evil/__init__.py", "evil/pkg/__init__.py"]),
    "a planted flightplan package shadowing the installed one": ("textclf", "flightplan/__init__.py", []),
}


@pytest.mark.parametrize("label", sorted(PLANTED))
def test_code_planted_in_a_results_directory_never_runs(results: Path, label: str) -> None:
    task, code_file, empty_files = PLANTED[label]
    marker = results.parent / "code-ran"
    artifact = results / "artifacts" / RUN_ID
    artifact.mkdir(parents=True)
    (artifact / "artifact.json").write_text(json.dumps({"task": task}), encoding="utf-8")
    (results / "predictions").mkdir()
    (results / "predictions" / f"{RUN_ID}.csv").write_text("example_id,gold,predicted\n1,a,a\n",
                                                         encoding="utf-8")
    for rel in empty_files + [code_file]:
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text("", encoding="utf-8")
    (results / code_file).write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    update_manifest(results, written=[f"artifacts/{RUN_ID}/artifact.json",
                                      f"predictions/{RUN_ID}.csv"])
    report = verify_results(results, reload=True, sample=1)
    assert report["verified"] is False
    assert not marker.exists()
