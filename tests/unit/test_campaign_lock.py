"""The campaign lock: a second runner refuses; a killed holder frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from flightplan.errors import LockHeld
from flightplan.campaign_lock import CampaignLock, lock_holder

_HOLDER = """
import sys, time
from flightplan.campaign_lock import CampaignLock
with CampaignLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_second_lock_in_the_same_process_refuses(tmp_path):
    with CampaignLock(tmp_path):
        assert lock_holder(tmp_path)["pid"] == os.getpid()
        with pytest.raises(LockHeld, match=rf"being run by process {os.getpid()}; wait"):
            with CampaignLock(tmp_path):
                pass
    assert lock_holder(tmp_path) is None
    with CampaignLock(tmp_path):          # free again after release
        pass


def test_lock_held_by_another_process_is_freed_when_it_is_killed(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match=f"process {proc.pid}"):
            with CampaignLock(tmp_path):
                pass
        assert lock_holder(tmp_path)["pid"] == proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lock_holder(tmp_path) is None             # its pid is left, but no process
    with CampaignLock(tmp_path):
        assert lock_holder(tmp_path)["pid"] == os.getpid()
