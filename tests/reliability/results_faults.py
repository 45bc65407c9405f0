"""Hostile results directories for ``flightplan verify``: paths and links that lead
outside, manifests built to crash the reader, and code planted to be imported.

Usage::

    results = make_results(tmp / "campaign")
    expected = TRAVERSALS["../outside.txt"](results)     # ("path_traversal", "../outside.txt")
    report = verify_results(results, reload=False)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterator

from flightplan.publish.manifest import MANIFEST_NAME, update_manifest

__all__ = ["RUN_ID", "make_results", "edit_manifest", "TRAVERSALS", "MALFORMED", "PLANTED",
           "plant", "run_all"]

RUN_ID = "control-0123456789"
_SHA = "ac7bd1e05f5d6b2ab1e4e6b0d83a9e2e07e8e5ac4e34a66a0e9e3a4f2f4c9f54"


def make_results(campaign_dir: Path) -> Path:
    """A small results directory whose manifest lists what is there (a closed one: the
    files close writes last are listed too), with an ``outside.txt`` next to it (what a
    traversal would reach). Returns ``results/``."""
    from flightplan.close.verify import CLOSE_FILES

    directory = campaign_dir / "results"
    (directory / "params").mkdir(parents=True)
    (directory / "plan.json").write_text('{"stages": []}\n', encoding="utf-8")
    (directory / "params" / f"{RUN_ID}.json").write_text('{"lr": 0.01}\n', encoding="utf-8")
    for rel in CLOSE_FILES:
        (directory / rel).write_text("{}\n", encoding="utf-8")
    (directory / "conclusion.json").write_text(json.dumps({     # what close writes, no runs
        "question": "q?", "metric": "macro_f1", "goal": "max", "min_gain": 0.05,
        "answer": "no", "verdict": "No variant meets the threshold of +0.05 macro_f1.",
        "comparisons": []}) + "\n", encoding="utf-8")
    update_manifest(directory, written=["plan.json", f"params/{RUN_ID}.json", *CLOSE_FILES])
    (campaign_dir / "outside.txt").write_text("secret\n", encoding="utf-8")
    return directory


def edit_manifest(results: Path, change: Callable[[dict], object]) -> None:
    """Rewrite ``MANIFEST.json`` after ``change(manifest)`` (as an attacker would)."""
    manifest = json.loads((results / MANIFEST_NAME).read_text(encoding="utf-8"))
    change(manifest)
    (results / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")


def _listed(rel: str) -> Callable[[Path], tuple[str, str]]:
    def apply(results: Path) -> tuple[str, str]:
        edit_manifest(results, lambda m: m["files"].append({"path": rel, "size_bytes": 7,
                                                            "sha256": _SHA}))
        return "path_traversal", rel
    return apply


def _link(name: str, target: str, *, listed: bool) -> Callable[[Path], tuple[str, str]]:
    def apply(results: Path) -> tuple[str, str]:
        os.symlink(results.parent if target == ".." else target, results / name)
        if listed:
            edit_manifest(results, lambda m: m["files"].append({"path": name, "size_bytes": 7,
                                                                "sha256": _SHA}))
        return "path_traversal", name
    return apply


TRAVERSALS: dict[str, Callable[[Path], tuple[str, str]]] = {
    "manifest path ../outside.txt": _listed("../outside.txt"),
    "manifest path params/../../outside.txt": _listed("params/../../outside.txt"),
    "manifest path /etc/hostname": _listed("/etc/hostname"),
    "manifest path ..": _listed(".."),
    "manifest path ./../outside.txt": _listed("./../outside.txt"),
    "listed link to a file outside": _link("linked.txt", "../outside.txt", listed=True),
    "listed link to /dev/zero": _link("zeros.bin", "/dev/zero", listed=True),
    "unlisted link to the parent folder": _link("escape", "..", listed=False),
    "unlisted link to /etc": _link("etc", "/etc", listed=False),
}
"""Each returns the (check, path) finding verify must report."""

MALFORMED: dict[str, Callable[[dict], object]] = {
    "a NUL byte in a path": lambda m: m["files"].append({"path": "plan\u0000.json", "size_bytes": 1,
                                                         "sha256": "0" * 64}),
    "an entry that is a string": lambda m: m["files"].append("plan.json"),
    "an entry that is null": lambda m: m["files"].append(None),
    "a path too long for the file system": lambda m: m["files"].append(
        {"path": "x" * 300, "size_bytes": 1, "sha256": "0" * 64}),
    "a path nested past PATH_MAX": lambda m: m["files"].append(
        {"path": "a/" * 3000 + "b", "size_bytes": 1, "sha256": "0" * 64}),
    "expected_run_ids is a number": lambda m: m.update(expected_run_ids=5),
    "runs is a list while a run is expected": lambda m: m.update(runs=[1, 2], expected_run_ids=[RUN_ID]),
}
"""Manifest edits that must give findings, never an exception."""

PLANTED: dict[str, tuple[str, str, list[str]]] = {
    "a dotted task name pointing at a planted package": ("evil.pkg", "evil/pkg/predict.py",
                                                         ["evil/__init__.py", "evil/pkg/__init__.py"]),
    "a planted flightplan package shadowing the installed one": ("textclf", "flightplan/__init__.py", []),
}
"""(artifact task, file whose import would run code, empty package files)."""


def plant(results: Path, label: str, marker: Path) -> None:
    """Set up the :data:`PLANTED` case ``label``: an artifact whose reload would import a
    module planted in ``results`` that creates ``marker``."""
    task, code_file, empty_files = PLANTED[label]
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


def run_all(work: Path) -> Iterator[tuple[bool, str]]:
    """Every fault of this module on its own results directory under ``work``, through
    ``verify_results``: (handled, what happened) each. A crash counts as not handled."""
    from flightplan.close.verify import verify_results

    cases: list[tuple[str, Callable[[Path], Callable[[dict], bool]]]] = []
    for name, apply in sorted(TRAVERSALS.items()):
        def traversal(results: Path, apply=apply) -> Callable[[dict], bool]:
            expected = apply(results)
            return lambda report: expected in {(f["check"], f["path"]) for f in report["findings"]}
        cases.append((name, traversal))
    for name, change in sorted(MALFORMED.items()):
        def malformed(results: Path, change=change) -> Callable[[dict], bool]:
            edit_manifest(results, change)
            return lambda report: not report["verified"]
        cases.append((name, malformed))
    for index, (name, setup) in enumerate(cases):
        results = make_results(work / f"results-{index}")
        try:
            accept = setup(results)
            report = verify_results(results, reload=False)
            yield accept(report), f"{name}: findings {[f['check'] for f in report['findings']]}"
        except Exception as exc:  # noqa: BLE001 - a crash of verify is what is counted
            yield False, f"{name}: {type(exc).__name__}: {exc}"[:200]
    for index, name in enumerate(sorted(PLANTED)):
        results = make_results(work / f"planted-{index}")
        marker = work / f"planted-{index}.ran"
        plant(results, name, marker)
        report = verify_results(results, reload=True, sample=1)
        yield (not report["verified"] and not marker.exists(),
               f"{name}: verified={report['verified']}, code ran={marker.exists()}")
