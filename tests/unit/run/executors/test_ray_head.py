"""Joining a Ray head safely (run/executors/ray_head.py): a head nobody answers for is
given up at once; on the loopback cluster with token authentication (``conftest.py``) a
driver without the token is refused in one line and one with it joins; a loopback address
joins without the caller's multi-node setting; what the cluster binds is loopback only;
the refusal of a head without token authentication that the network can reach."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flightplan.errors import ArgumentError
from flightplan.run.commands import make_executor
from flightplan.run.executors.contract import ClusterJoined
from flightplan.run.executors.ray_head import (check_head, is_loopback,
                                               listens_beyond_loopback, refusal,
                                               split_address)
from flightplan.spec import load_spec

REPO = Path(__file__).resolve().parents[4]
FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from ray_cluster import descendants, exposed_listeners  # noqa: E402 (fixtures on the path)

WITHOUT_TOKEN = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def test_a_head_without_token_authentication_that_the_network_reaches_is_refused() -> None:
    assert refusal("10.0.0.5:6379", loopback=False, token=False, trusted_network=False) == (
        "--address 10.0.0.5:6379: the Ray head there has no token authentication, so anyone "
        "who reaches its ports runs code as you on this machine; start every node and this "
        "driver with RAY_AUTH_MODE=token and the same RAY_AUTH_TOKEN (docs/distributed.md, "
        "\"Set-up\"), or add --trusted-network if only your own machines can reach it")
    for allowed in ({"token": True}, {"loopback": True}, {"trusted_network": True}):
        given = {"loopback": False, "token": False, "trusted_network": False, **allowed}
        assert refusal("10.0.0.5:6379", **given) is None
    with pytest.raises(ArgumentError, match=r"--trusted-network: only the ray executor"):
        make_executor(load_spec(REPO / "examples" / "tiny" / "campaign.toml"),
                      trusted_network=True)


def test_addresses_and_what_listens_beyond_loopback(tmp_path: Path) -> None:
    assert split_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert split_address("[::1]:6390") == ("::1", 6390)
    with pytest.raises(ArgumentError, match=r"--address 10\.0\.0\.5: not HOST:PORT"):
        split_address("10.0.0.5")
    assert [is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost",
                                     "10.0.0.5", "home.lan")] == [True] * 4 + [False] * 2
    header = "  sl  local_address rem_address   st\n"
    (tmp_path / "tcp").write_text(header + "   0: 0100007F:18EB 00000000:0000 0A\n"
                                           "   1: 00000000:18EC 00000000:0000 0A\n"
                                           "   2: 0500000A:18ED 0100007F:1234 01\n")
    (tmp_path / "tcp6").write_text(header + "   0: 00000000000000000000000000000000:18EE "
                                            "00000000000000000000000000000000:0000 0A\n")
    # 6379 (0x18EB) on 127.0.0.1 only; 6380 on 0.0.0.0; 6381 connected, not listening;
    # 6382 on ::
    assert [listens_beyond_loopback(p, proc=tmp_path) for p in (6379, 6380, 6381, 6382)] \
        == [False, True, False, True]
    assert listens_beyond_loopback(6379, proc=tmp_path / "none") is None


def test_nothing_answering_is_given_up_at_once_with_the_fix() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(ArgumentError) as refused:
        check_head(f"127.0.0.1:{port}", trusted_network=False, timeout_s=3.0)
    assert str(refused.value).startswith(f"--address 127.0.0.1:{port}: no Ray cluster answers (")
    assert "start the head first (RAY_AUTH_MODE=token RAY_AUTH_TOKEN=… ray start --head" \
        in str(refused.value)


def test_the_cluster_listens_on_loopback_only(cluster: Any) -> None:
    made, _, _ = cluster
    pids = descendants([p.process.pid for node in made.list_all_nodes()
                        for procs in node.all_processes.values() for p in procs])
    assert pids and exposed_listeners(pids) == {}         # pid → listeners not on loopback
    _, port = split_address(made.address)
    assert listens_beyond_loopback(port) is False


def test_a_driver_with_the_token_joins_the_head(cluster: Any) -> None:
    made, _, _ = cluster
    assert check_head(made.address, trusted_network=False) == ClusterJoined(
        made.address, loopback=True, token=True, trusted_network=False)
    assert ClusterJoined(made.address, True, True, False).line() == (
        f"ray cluster {made.address}: token authentication, loopback only")


def _campaign(folder: Path) -> Path:
    folder.mkdir()
    shutil.copy(REPO / "examples" / "tiny" / "campaign.toml", folder / "campaign.toml")
    return folder / "campaign.toml"


def test_a_driver_without_the_token_is_refused_in_one_line(cluster: Any,
                                                           tmp_path: Path) -> None:
    made, _, _ = cluster
    spec = _campaign(tmp_path / "camp")
    env = {k: v for k, v in os.environ.items() if k not in WITHOUT_TOKEN}
    done = subprocess.run([str(FLIGHTPLAN), "run", str(spec), "--executor", "ray",
                           "--address", made.address], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --address {made.address}: the Ray head there requires its token and refused "
        f"this driver's (RAY_AUTH_MODE=unset, token from "
        f"{'~/.ray/auth_token' if (Path.home() / '.ray' / 'auth_token').is_file() else 'nowhere'}"
        f"); set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the token "
        f"the head was started with"]
    assert sorted(p.name for p in spec.parent.iterdir()) == ["campaign.toml"]   # nothing written


_JOIN = """
import json, sys
from flightplan.run.executors.ray_executor import RayExecutor
import ray
executor = RayExecutor(address=sys.argv[1])
joined = executor.connect()
print(json.dumps({"joined": joined.to_json(),
                  "flights": ray.cluster_resources().get("flight")}))
executor.close()
"""


def test_a_loopback_head_joins_without_the_callers_multi_node_setting(cluster: Any) -> None:
    """Without Ray's multi-node switch off, Ray 2.60 swaps 127.0.0.1 for the machine's
    address and waits there (a quarter of an hour); the executor turns it off itself."""
    made, _, _ = cluster
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    done = subprocess.run([sys.executable, "-c", _JOIN, made.address], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"joined": {"address": made.address, "loopback": True, "token": True,
                                 "trusted_network": False}, "flights": 2.0}
