"""close holds the campaign lock: refused while a runner holds it, results/ untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from close_fixture import make_campaign

from flightplan.campaign_lock import CampaignLock, lock_holder
from flightplan.close.commands import close_command
from flightplan.errors import LockHeld

_RUNNER = """
import sys, time
from flightplan.campaign_lock import CampaignLock
with CampaignLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_close_refuses_while_a_runner_holds_the_campaign(tmp_path, capsys):
    spec, ledger = make_campaign(tmp_path)
    results = spec.campaign_dir / "results"
    before = _snapshot(results)
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(spec.campaign_dir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as refused:
            close_command(spec.source, as_json=True, open_ledger=lambda _: ledger)
        line = str(refused.value)
        assert "\n" not in line
        assert f"the campaign is being run by process {runner.pid}; wait for it to finish" in line
        assert line.endswith("then close again")
        assert _snapshot(results) == before                 # nothing written or removed
        assert capsys.readouterr().out == ""
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
    assert close_command(spec.source, as_json=True, open_ledger=lambda _: ledger) == 0
    assert lock_holder(spec.campaign_dir) is None           # close let go of it


def test_a_run_started_while_close_holds_the_campaign_is_refused(tmp_path):
    with CampaignLock(tmp_path, verb="close"):
        assert lock_holder(tmp_path)["verb"] == "close"
        with pytest.raises(LockHeld, match=rf"being closed by process {os.getpid()}; wait .*"
                                           rf"then run again$"):
            with CampaignLock(tmp_path):
                pass
