"""Re-checking a checkpoint folder: every file against its manifest, in this process or a
fresh one.

:func:`check_checkpoint` reads a ``step-N`` folder as a restore would (hashes, sizes,
tensor crc32 digests; a folder a training library wrote is checked file by file) and
returns what it found; :func:`verify_checkpoint` does the same in a new Python process
(``python -m flightplan.trial.checkpoint_check DIR``, exit 0 verified, 1 findings), which is
what ``flightplan checkpoint verify DIR`` runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from flightplan.errors import UnsafeFileError
from flightplan.findings import Finding
from flightplan.trial.checkpoint_io import BadCheckpoint, load_checkpoint, read_manifest
from flightplan.trial.library_checkpoint import load_library_checkpoint

__all__ = ["check_checkpoint", "verify_checkpoint"]


def check_checkpoint(directory: Path) -> dict[str, Any]:
    """Verify ``directory`` in this process: ``{"directory", "verified", "findings": [{check,
    path, message}], "step", "run_id", "files", "tensors"}`` (counts from the manifest).
    Checks: no_manifest, manifest, missing, size, sha256, unlisted, unsafe, load, tensor_digest.
    """
    directory = Path(directory)
    report: dict[str, Any] = {"directory": str(directory), "verified": False, "findings": []}
    findings: list[Finding] = []
    try:
        manifest = read_manifest(directory)
        report.update(step=manifest.get("step"), run_id=manifest.get("run_id"),
                      files=len(manifest["files"]), tensors=len(manifest["tensors"]))
        if manifest.get("kind"):  # written by a training library (trial/library_checkpoint.py)
            load_library_checkpoint(directory)
        else:
            load_checkpoint(directory)
    except BadCheckpoint as exc:
        findings = exc.findings
    except UnsafeFileError as exc:
        findings = [Finding("unsafe", str(exc).partition(":")[0], str(exc).partition(": ")[2])]
    report["findings"] = [f.as_dict() for f in findings]
    report["verified"] = not findings
    return report


def verify_checkpoint(directory: Path | str, *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Verify a checkpoint in a fresh process (``python -m flightplan.trial.checkpoint_check DIR``).

    Returns:
        :func:`check_checkpoint`'s report; a child that crashes or times out is a finding
        with check ``process``.
    """
    directory = Path(directory).resolve()
    try:
        child = subprocess.run([sys.executable, "-m", "flightplan.trial.checkpoint_check",
                                str(directory)], capture_output=True, text=True, timeout=timeout_s)
        report: dict[str, Any] = json.loads(child.stdout)
        return report
    except subprocess.TimeoutExpired:
        message = f"the verifying process ran past {timeout_s:.0f} s"
    except json.JSONDecodeError:
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"the verifying process exited {child.returncode} without a report: {tail}"
    return {"directory": str(directory), "verified": False,
            "findings": [Finding("process", str(directory), message).as_dict()]}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m flightplan.trial.checkpoint_check CHECKPOINT_DIR", file=sys.stderr)
        sys.exit(2)
    result = check_checkpoint(Path(sys.argv[1]))
    print(json.dumps(result))
    sys.exit(0 if result["verified"] else 1)
