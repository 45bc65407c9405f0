"""Workers tied to their runner without code between fork and exec
(run/executors/tether.py): no ``preexec_fn`` in a runner that has threads; the worker
ignores SIGINT, dies with its parent, and does not start when its parent is already
gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.ray_host import RunHost
from flightplan.run.executors.tether import EXIT_ORPHANED, tethered
from processes import alive  # tests/fixtures, put on the path by conftest.py

TETHER = "flightplan.run.executors.tether"


class _Spy(subprocess.Popen):
    """The real Popen, noting how each process was started."""

    calls: list[tuple[list[str], dict]] = []

    def __init__(self, args, **kwargs):
        _Spy.calls.append((list(args), kwargs))
        super().__init__(args, **kwargs)


def test_workers_start_without_python_between_fork_and_exec(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(subprocess, "Popen", _Spy)
    _Spy.calls.clear()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps({"run_id": "r-1"}))
    worker = [sys.executable, "-c", "print('ran')"]
    [result] = LocalExecutor(slots=1, argv=lambda t: worker, poll_s=0.05).run(
        [Job("r-1", run_dir)])
    host = RunHost("r-2", str(tmp_path), {}, worker=worker)
    host.start(b"{}", None)
    host.proc.wait()
    assert result.exit_code == 0 and host.proc.returncode == 0
    assert "ran" in (run_dir / "log.txt").read_text()
    assert len(_Spy.calls) == 2
    for argv, kwargs in _Spy.calls:
        assert kwargs.get("preexec_fn") is None
        assert argv[:4] == [sys.executable, "-m", TETHER, str(os.getpid())]
    host.close()


def test_a_worker_whose_runner_is_gone_does_not_start(tmp_path: Path):
    marker = tmp_path / "ran"
    # its parent is this process: any other pid stands for a runner that died and left it
    # to another parent before it could tie itself to it
    done = subprocess.run([sys.executable, "-m", TETHER, str(os.getpid() + 10**6),
                           sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_ORPHANED and not marker.exists()
    assert "ended before this worker started; not starting it" in done.stderr
    started = subprocess.run(tethered([sys.executable, "-c", f"open({str(marker)!r}, 'w')"]),
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and marker.exists()


_PARENT = """
import subprocess, sys, time
from flightplan.run.executors.tether import tethered
ready = sys.argv[1]
child = subprocess.Popen(tethered([sys.executable, "-c",
                                   f"import time; open({ready!r}, 'w'); time.sleep(300)"]))
print(child.pid, flush=True)
time.sleep(300)
"""


def test_a_tethered_worker_ignores_sigint_and_dies_with_its_parent(tmp_path: Path):
    ready = tmp_path / "ready"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(ready)],
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        for _ in range(1200):          # until the tether has become the sleeping command
            if ready.exists():
                break
            time.sleep(0.05)
        assert ready.exists()
        os.kill(child, signal.SIGINT)
        time.sleep(0.2)
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        for _ in range(200):
            if not alive(child):
                break
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.kill()
        parent.wait()
