"""Joining a Ray cluster safely: who may call the head, and what a loopback address needs.

Anyone who can send a call to a Ray head runs code as the user who started it, on the
machine that holds the ledger and ``results/``. So before ``flightplan run --executor ray``
joins a head, :func:`check_head` finds out, within seconds and before anything is
written:

1. **Does anything answer?** A TCP connection to ``HOST:PORT`` (``timeout_s``); none: a
   one-line error with the command that starts a head, instead of Ray's own retries
   (a quarter of an hour against a loopback address, seen with Ray 2.60).
2. **Does the head check a token?** The head is asked for its cluster id once without any
   token and once with this driver's (a fresh process each, so this one's Ray settings
   stay as they are): a head that answers the first has no token authentication; one that
   refuses the second refuses this driver (its token is missing or another).
3. **Who can reach it?** A loopback address (``127.0.0.1``, ``::1``, ``localhost``) whose
   port listens on no other address of this machine (``/proc/net/tcp*``) is reachable from
   this machine only; any other address is reachable from the network.

A head without token authentication that the network can reach is refused
(:class:`~flightplan.errors.ArgumentError`, exit 2) unless the user states that the
network is trusted (``--trusted-network``; the ledger records it). Ray's token
authentication (Ray ≥ 2.60): every node and the driver run with ``RAY_AUTH_MODE=token`` and
the same token in ``RAY_AUTH_TOKEN`` (or a file named by ``RAY_AUTH_TOKEN_PATH``, default
``~/.ray/auth_token``); ``docs/distributed.md`` gives the whole set-up.

A loopback address also needs Ray's multi-node switch off in the driver
(:func:`join_settings`): otherwise Ray swaps ``127.0.0.1`` for the machine's address and
waits for a head there that does not listen.

Usage::

    head = check_head("10.0.0.5:6379", trusted_network=False)   # raises with the fix
    with join_settings(head):
        ray.init(address=head.address, ...)
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from flightplan.errors import ArgumentError
from flightplan.run.executors.contract import ClusterJoined

__all__ = ["check_head", "join_settings", "refusal", "split_address",
           "is_loopback", "listens_beyond_loopback", "AUTH_ENV", "TOKEN_ENVS", "START_HEAD"]

AUTH_ENV = "RAY_AUTH_MODE"
"""``token`` turns Ray's token authentication on (every node and the driver)."""
TOKEN_ENVS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Where Ray reads the token (else ``~/.ray/auth_token``)."""
START_HEAD = ("RAY_AUTH_MODE=token RAY_AUTH_TOKEN=… ray start --head --node-ip-address HOST "
              "--port 6379 --num-cpus 1 --num-gpus 0")
"""The command that starts a head the secure way (docs/distributed.md, "Set-up")."""
_SET_UP = "docs/distributed.md, \"Set-up\""
_MULTI_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

_PROBE = """
import json, sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1])
except Exception as exc:
    print(json.dumps({"ok": False, "kind": type(exc).__name__, "error": str(exc)[:300]}))
else:
    print(json.dumps({"ok": True}))
"""
"""Asks the head at ``argv[1]`` for its cluster id (Ray's own client) and prints the
outcome as one JSON line; the environment decides which token, if any, goes with it."""


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` (``[v6]:PORT`` too).

    Raises:
        ArgumentError: not ``HOST:PORT`` with a port number.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ArgumentError(f"--address {address}: not HOST:PORT; give the head's address "
                            f"and port, e.g. 10.0.0.5:6379")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening(table: Path) -> list[tuple[str, int]]:
    """``(local address hex, port)`` of every listening socket in a ``/proc/net/tcp*``."""
    found = []
    for line in table.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":                      # LISTEN
            where, port = fields[1].split(":")
            found.append((where, int(port, 16)))
    return found


_LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000",
                 "0000000000000000FFFF00000100007F"}


def listens_beyond_loopback(port: int, *, proc: Path = Path("/proc/net")) -> bool | None:
    """Whether a socket of this machine listens on ``port`` at an address other than
    loopback (``0.0.0.0``, ``::``, the machine's own); None where ``/proc/net`` is missing."""
    tables = [proc / "tcp", proc / "tcp6"]
    if not any(t.is_file() for t in tables):
        return None
    return any(where not in _LOOPBACK_HEX and listened == port
               for table in tables if table.is_file() for where, listened in _listening(table))


def _probe(address: str, *, token: bool, timeout_s: float) -> dict[str, Any]:
    """Ask the head for its cluster id in a fresh process: with this driver's token
    settings (``token``) or with none. ``{"ok": bool, "kind", "error"}``; ``{"ok": False,
    "kind": "timeout"}`` when it did not answer within ``timeout_s``."""
    env = dict(os.environ)
    if not token:
        env[AUTH_ENV] = "disabled"
        for name in TOKEN_ENVS:
            env.pop(name, None)
    env[_MULTI_NODE_ENV] = "0" if is_loopback(split_address(address)[0]) else \
        env.get(_MULTI_NODE_ENV, "1")
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, address], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "kind": "timeout", "error": f"no answer in {timeout_s:g} s"}
    lines = done.stdout.strip().splitlines()
    try:
        outcome: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"ok": False, "kind": "crash", "error": (done.stderr.strip().splitlines()
                                                         or ["no output"])[-1][:300]}
    return outcome


def _driver_settings() -> str:
    """This driver's token settings in words (never the token)."""
    mode = os.environ.get(AUTH_ENV, "unset")
    where = next((name for name in TOKEN_ENVS if os.environ.get(name)), None)
    if where is None and (Path.home() / ".ray" / "auth_token").is_file():
        where = "~/.ray/auth_token"
    return f"{AUTH_ENV}={mode}, token from {where or 'nowhere'}"


def refusal(address: str, *, loopback: bool, token: bool, trusted_network: bool) -> str | None:
    """The one line that refuses a head, or None when it may be joined: a head without
    token authentication that the network can reach, unless the network is trusted."""
    if token or loopback or trusted_network:
        return None
    return (f"--address {address}: the Ray head there has no token authentication, so "
            f"anyone who reaches its ports runs code as you on this machine; start every "
            f"node and this driver with {AUTH_ENV}=token and the same RAY_AUTH_TOKEN "
            f"({_SET_UP}), or add --trusted-network if only your own machines can reach it")


def check_head(address: str, *, trusted_network: bool, timeout_s: float = 10.0) -> ClusterJoined:
    """Check the head at ``address`` before joining it (see the module docstring).

    Args:
        address: ``HOST:PORT`` of the head's GCS.
        trusted_network: the user stated that only their machines can reach the head.
        timeout_s: seconds each probe may take (the TCP connection: a third of it).

    Returns:
        What was found (:class:`~flightplan.run.executors.contract.ClusterJoined`; the
        ledger records it).

    Raises:
        ArgumentError: nothing answers; it answers but not as a Ray head; it needs a token
            this driver does not have (or has another one); it has no token
            authentication, the network can reach it and the network is not stated
            trusted. Each a line with the fix.
    """
    host, port = split_address(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s / 3).close()
    except OSError as exc:
        raise ArgumentError(f"--address {address}: no Ray cluster answers ({exc}); start "
                            f"the head first ({START_HEAD}) and give HOST:6379, or check "
                            f"the tunnel to it") from None
    exposed = listens_beyond_loopback(port) if is_loopback(host) else True
    loopback = is_loopback(host) and exposed is False
    anonymous = _probe(address, token=False, timeout_s=timeout_s)
    if not anonymous["ok"] and anonymous.get("kind") != "AuthenticationError":
        raise ArgumentError(f"--address {address}: something answers there but not as a "
                            f"Ray {_ray_version()} head ({anonymous.get('error')}); give "
                            f"the address and port of the head's `ray start --head`")
    token = not anonymous["ok"]
    if token and not _probe(address, token=True, timeout_s=timeout_s)["ok"]:
        raise ArgumentError(f"--address {address}: the Ray head there requires its token and "
                            f"refused this driver's ({_driver_settings()}); set "
                            f"{AUTH_ENV}=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to "
                            f"the token the head was started with")
    message = refusal(address, loopback=loopback, token=token, trusted_network=trusted_network)
    if message is not None:
        raise ArgumentError(message)
    return ClusterJoined(address, loopback, token, trusted_network)


def _ray_version() -> str:
    try:
        from importlib.metadata import version
        return version("ray")
    except Exception:  # noqa: BLE001 - only for the message
        return ""


@contextlib.contextmanager
def join_settings(head: ClusterJoined) -> Iterator[None]:
    """While joining a head at a loopback address: Ray's multi-node switch off (its
    environment variable for processes this one starts, its constant in this process,
    which read the variable when Ray was first imported), so that Ray keeps ``127.0.0.1``
    instead of replacing it with the machine's address. Nothing for other addresses."""
    if not is_loopback(split_address(head.address)[0]):
        yield
        return
    from ray._private import ray_constants

    saved = (os.environ.get(_MULTI_NODE_ENV), ray_constants.ENABLE_RAY_CLUSTER)
    os.environ[_MULTI_NODE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(_MULTI_NODE_ENV, None)
        else:
            os.environ[_MULTI_NODE_ENV] = saved[0]
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]
