"""``flightplan`` verbs of the run stage: ``checkpoint verify`` (and, below, the runner's verbs)."""

from __future__ import annotations

import json
from pathlib import Path


def checkpoint_verify_command(directory: Path, *, as_json: bool) -> int:
    """``flightplan checkpoint verify DIR``: reload a checkpoint in a fresh process, re-hash
    every file, load every tensor and compare it with its save-time digest.

    Prints one JSON object (``--json``) or one line per finding; returns 0 when verified,
    1 when anything is wrong (each finding named: check, path, message).
    """
    from flightplan.run.checkpoint_io import verify_checkpoint

    report = verify_checkpoint(directory)
    if as_json:
        print(json.dumps(report, indent=2))
    elif report["verified"]:
        print(f"{directory}: verified ({report['files']} files, {report['tensors']} tensors, "
              f"step {report['step']}, run {report['run_id']})")
    else:
        for finding in report["findings"]:
            print(f"{directory}: {finding['check']}: {finding['path']}: {finding['message']}")
    return 0 if report["verified"] else 1
