"""Running ``flightplan`` in-process or as a subprocess, and proving nothing was written.

Usage::

    before = snapshot(campaign_dir)
    result = run_inprocess(["plan", str(spec)])      # CliOutcome(code, stdout, stderr)
    assert snapshot(campaign_dir) == before
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "FLIGHTPLAN", "TINY", "CliOutcome", "run_inprocess", "run_subprocess", "snapshot",
           "assert_clean_input_error", "child_env"]

ROOT = Path(__file__).resolve().parents[2]
FLIGHTPLAN = [str(Path(sys.executable).with_name("flightplan"))]  # the venv's console script
TINY = ROOT / "examples" / "tiny" / "campaign.toml"


@dataclass(frozen=True)
class CliOutcome:
    """What one ``flightplan`` call did: exit code and the two streams as text."""

    code: int
    stdout: str
    stderr: str


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child ``flightplan``: offline, one torch thread per core."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "0",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    env.update(extra)
    return env


def run_inprocess(args: list[str]) -> CliOutcome:
    """Call the CLI app in this process (fast; the app's error mapping still applies)."""
    from typer.testing import CliRunner

    from flightplan.cli import app

    result = CliRunner().invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # an exception the CLI did not turn into an exit code: the user sees a traceback
        import traceback
        text = "".join(traceback.format_exception(result.exception))
        return CliOutcome(result.exit_code, result.stdout, result.stderr + text)
    return CliOutcome(result.exit_code, result.stdout, result.stderr)


def run_subprocess(args: list[str], *, cwd: Path | None = None, timeout_s: float = 120,
                   env: dict[str, str] | None = None) -> CliOutcome:
    """Run the installed ``flightplan`` console script as a child process."""
    proc = subprocess.run(FLIGHTPLAN + args, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s, env=env or child_env())
    return CliOutcome(proc.returncode, proc.stdout, proc.stderr)


def snapshot(directory: Path) -> dict[str, str]:
    """Every path under ``directory`` (relative, sorted) mapped to its sha256, or ``"dir"``."""
    out: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_clean_input_error(outcome: CliOutcome, *, names: str | None) -> None:
    """Exit 2, exactly one line on stderr starting ``error:``, no traceback, and the line
    names ``names`` (a field such as ``run[1].duration``) when given."""
    lines = outcome.stderr.strip().splitlines()
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code == 2, (outcome.code, outcome.stderr)
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("error: "), lines[0]
    if names is not None:
        assert names in lines[0], (names, lines[0])
