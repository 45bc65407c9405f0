"""Checkpoint verification: re-hash, reload every tensor, compare with the save-time digests.

:func:`verify_checkpoint` runs :func:`check_checkpoint` in a fresh Python process, so that
nothing the saving process holds in memory can make a broken checkpoint look good; it is
what ``flightplan checkpoint verify DIR`` calls. Run by hand::

    python -m flightplan.run.checkpoint_verify CHECKPOINT_DIR     # JSON report; exit 0/1

Report: ``{"directory", "verified": bool, "findings": [{check, path, message}], "step",
"run_id", "files", "tensors"}``. Checks: ``no_manifest``, ``manifest``, ``missing``,
``size``, ``sha256``, ``unlisted``, ``unsafe`` (a pickle with code, a path outside the
directory), ``load``, ``tensor_digest``, and ``process`` (the verifying process crashed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from flightplan.errors import UnsafeFileError
from flightplan.run.checkpoint_io import BadCheckpoint, Finding, load_checkpoint, read_manifest

__all__ = ["check_checkpoint", "verify_checkpoint"]


def check_checkpoint(directory: Path) -> dict[str, Any]:
    """Verify ``directory`` in this process: ``{"verified": bool, "findings": [...], ...}``.

    Findings name each fault (``check``: no_manifest, manifest, missing, size, sha256,
    unlisted, unsafe, load, tensor_digest). Also reports ``step``, ``run_id`` and the
    ``files`` and ``tensors`` counts of the manifest.
    """
    directory = Path(directory)
    report: dict[str, Any] = {"directory": str(directory), "verified": False, "findings": []}
    if not directory.is_dir():
        report["findings"].append(Finding("no_manifest", str(directory), "not a directory").as_dict())
        return report
    findings: list[Finding] = []
    try:
        manifest = read_manifest(directory)
        report.update(step=manifest.get("step"), run_id=manifest.get("run_id"),
                      files=len(manifest["files"]), tensors=len(manifest["tensors"]))
        load_checkpoint(directory)
    except BadCheckpoint as exc:
        findings = exc.findings
    except UnsafeFileError as exc:
        findings = [Finding("unsafe", str(exc).partition(":")[0], str(exc).partition(": ")[2])]
    report["findings"] = [f.as_dict() for f in findings]
    report["verified"] = not findings
    return report


def verify_checkpoint(directory: Path | str, *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Verify a checkpoint in a fresh Python process (``python -m flightplan.run.checkpoint_verify``).

    Returns:
        ``{"verified": bool, "findings": [{check, path, message}], "directory", "step",
        "run_id", "files", "tensors"}``; a child that crashes or times out is a finding
        (check ``process``).
    """
    directory = Path(directory).resolve()
    try:
        child = subprocess.run([sys.executable, "-m", "flightplan.run.checkpoint_verify", str(directory)],
                               capture_output=True, text=True, timeout=timeout_s)
        return json.loads(child.stdout)
    except subprocess.TimeoutExpired:
        message = f"the verifying process ran past {timeout_s:.0f} s"
    except json.JSONDecodeError:
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"the verifying process exited {child.returncode} without a report: {tail}"
    return {"directory": str(directory), "verified": False,
            "findings": [Finding("process", str(directory), message).as_dict()]}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m flightplan.run.checkpoint_verify CHECKPOINT_DIR", file=sys.stderr)
        sys.exit(2)
    result = check_checkpoint(Path(sys.argv[1]))
    print(json.dumps(result))
    sys.exit(0 if result["verified"] else 1)
