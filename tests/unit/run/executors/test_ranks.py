"""The ranks of one execution: torchrun's environment, a free loopback port, and a group
that ends together (real child processes: ``sleep`` and ``python -c`` with exit codes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from flightplan.run.executors.ranks import LOOPBACK, PortReservation, RankGroup, rank_env

HANG_S = 60.0


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _wait(group: RankGroup) -> int:
    deadline = time.monotonic() + HANG_S
    while group.poll() is None:
        assert time.monotonic() < deadline, "the group never ended"
        time.sleep(0.02)
    assert group.returncode is not None
    return group.returncode


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_rank_env_is_torchruns_on_loopback() -> None:
    assert rank_env(1, 2, 29511) == {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
                                     "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                     "MASTER_PORT": "29511"}
    with pytest.raises(ValueError, match="rank 2 is not in 0…1"):
        rank_env(2, 2, 29511)


def test_a_reserved_port_is_taken_by_no_other_bind_but_rank_zeros_store_listens_on_it() -> None:
    reservation = PortReservation()
    port = reservation.port
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        with pytest.raises(OSError):
            other.bind((LOOPBACK, port))                 # a process without SO_REUSEADDR
    store = ("import datetime, sys, torch.distributed as dist; "
             f"s = dist.TCPStore('127.0.0.1', {port}, 1, True, "
             "timeout=datetime.timedelta(seconds=30)); s.set('k', 'v'); "
             "sys.exit(0 if s.get('k') == b'v' else 1)")
    assert subprocess.run(_python(store), timeout=120).returncode == 0
    reservation.release()
    reservation.release()                                # idempotent
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as after:
        after.bind((LOOPBACK, port))                     # let go: anyone may have it now


def test_every_rank_gets_its_environment() -> None:
    seen = []

    def launch(extra: dict[str, str]) -> subprocess.Popen[bytes]:
        seen.append(extra)
        return subprocess.Popen(_python("pass"))
    group = RankGroup.start(3, launch, port=29512)
    assert _wait(group) == 0
    assert [e["RANK"] for e in seen] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in seen} == {"3"} and {e["MASTER_PORT"] for e in seen} == {"29512"}


def test_the_group_ends_with_zero_only_when_every_rank_did() -> None:
    codes = iter(["import time; time.sleep(0.5)", "pass"])
    group = RankGroup.start(2, lambda _: subprocess.Popen(_python(next(codes))), port=1)
    assert group.poll() is None or group.returncode == 0   # rank 1 may be done, rank 0 not
    assert _wait(group) == 0
    assert [p.returncode for p in group.processes] == [0, 0]


def test_a_rank_that_fails_ends_the_group_with_its_code_and_the_others_are_killed() -> None:
    codes = iter(["import time; time.sleep(600)", "import sys; sys.exit(3)"])
    group = RankGroup.start(2, lambda _: subprocess.Popen(_python(next(codes))), port=1)
    assert _wait(group) == 3
    assert group.processes[0].returncode == -signal.SIGKILL   # killed and reaped
    assert not _alive(group.pids[0])


def test_a_rank_killed_by_a_signal_ends_the_group_with_minus_the_signal() -> None:
    group = RankGroup.start(2, lambda _: subprocess.Popen(["sleep", "600"]), port=1)
    os.kill(group.pids[1], signal.SIGKILL)
    assert _wait(group) == -signal.SIGKILL
    assert not any(_alive(pid) for pid in group.pids)


def test_a_signal_reaches_every_rank_and_kill_reaps_all() -> None:
    group = RankGroup.start(2, lambda _: subprocess.Popen(["sleep", "600"]), port=1)
    group.send_signal(signal.SIGTERM)
    assert _wait(group) == -signal.SIGTERM
    assert [p.returncode for p in group.processes] == [-signal.SIGTERM, -signal.SIGTERM]


def test_a_rank_that_cannot_start_kills_those_already_started() -> None:
    started: list[subprocess.Popen[bytes]] = []

    def launch(extra: dict[str, str]) -> subprocess.Popen[bytes]:
        if extra["RANK"] == "1":
            raise OSError("no such program")
        started.append(subprocess.Popen(["sleep", "600"]))
        return started[-1]
    with pytest.raises(OSError, match="no such program"):
        RankGroup.start(2, launch, port=1)
    assert started[0].returncode == -signal.SIGKILL


def test_after_a_stop_the_other_ranks_end_on_their_own_with_the_same_code() -> None:
    codes = iter(["import sys, time; time.sleep(0.5); sys.exit(1)", "import sys; sys.exit(1)"])
    group = RankGroup.start(2, lambda _: subprocess.Popen(_python(next(codes))), port=1)
    assert _wait(group) == 1
    assert [p.returncode for p in group.processes] == [1, 1]       # rank 0 was not killed


def test_a_rank_that_does_not_follow_a_leave_is_killed_once_the_grace_passed() -> None:
    codes = iter(["import time; time.sleep(600)", "import sys; sys.exit(75)"])
    launched = [subprocess.Popen(_python(next(codes))) for _ in range(2)]
    group = RankGroup(launched, grace_s=0.2)
    assert _wait(group) == 75
    assert group.processes[0].returncode == -signal.SIGKILL
