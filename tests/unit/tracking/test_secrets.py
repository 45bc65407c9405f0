"""A tracking URI's credential stays secret: never on a command line, in a log, in a line
printed, or in a file under the campaign folder (``results/`` included).

A real MLflow server (``mlflow server`` on 127.0.0.1, its SQLite store in a temporary
folder) is reached through ``http://alice:<secret>@127.0.0.1:<port>``: the live mirror
sends the fixture campaign's rows into it (read back from the server), the campaign is
closed, and ``flightplan export mlflow`` sends the results. A server that is down is
reached through a URI with a user, a password and a ``?token=`` secret: the lines that
say it failed name the store with its credentials masked. Then ``ps``, the mirror's
``/proc/<pid>/cmdline``, every line printed and every file under the campaign folder are
searched for each secret.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from close_fixture import CONTROL, FAKES, make_campaign

from processes import wait_for  # tests/fixtures, put on the path by conftest.py
from flightplan.close.commands import close_campaign
from flightplan.errors import TrackingFailed
from flightplan.redact import redact
from flightplan.tracking.live import LiveMirror, mirror_runs

mlflow = pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
from mlflow.tracking import MlflowClient  # noqa: E402

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"
SECRETS = ("pw-Alice-5e1c9", "pw-Bob-77a0d", "tok-Q9z31x")


def test_redact_masks_user_info_and_secret_parameters_only():
    assert redact("MLflow at http://alice:pw@127.0.0.1:5000/x failed") == \
        "MLflow at http://***@127.0.0.1:5000/x failed"
    assert redact("postgresql://user:p%40ss@db.example:5432/mlflow") == \
        "postgresql://***@db.example:5432/mlflow"
    assert redact("https://h/api?experiment=3&access_token=abc&API_KEY=k1;Sig=z#frag") == \
        "https://h/api?experiment=3&access_token=***&API_KEY=***;Sig=***#frag"
    assert redact("'http://u@h' and 'sqlite:////tmp/m.db?mode=ro&password=x'") == \
        "'http://***@h' and 'sqlite:////tmp/m.db?mode=ro&password=***'"
    assert redact("MLflow at http://h/?token=t0k: failed") == "MLflow at http://h/?token=***: failed"
    plain = "sqlite:////tmp/mlflow.db, http://127.0.0.1:5000/a@b, git@host:repo, a=b&c=d"
    assert redact(plain) == plain
    failed = TrackingFailed("MLflow at http://a:pw@h: down", uri="http://a:pw@h?token=t")
    assert (str(failed), failed.uri, failed.reason) == (
        "MLflow at http://***@h: down", "http://***@h?token=***", "MLflow at http://***@h: down")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]




@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real MLflow tracking server on 127.0.0.1 (one worker): its plain URI."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
         f"sqlite:///{folder / 'server.db'}", "--default-artifact-root",
         (folder / "artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"))

    def healthy() -> bool:
        assert process.poll() is None, (folder / "server.log").read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False
    try:
        wait_for(healthy, timeout_s=300)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def _mirror_command_lines(pid: int) -> tuple[str, str]:
    """The mirror process's command line as /proc shows it, and ``ps``'s view of every
    process's arguments. The process starts as the tether program
    (:mod:`flightplan.run.executors.tether`), which then ``exec``s the mirror in place;
    ``/proc/PID/cmdline`` reads empty while that ``exec`` is under way, so this waits for
    the mirror's own command line (the tether's is checked by ``ps`` all the same)."""
    def mirror_line() -> str:
        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return line if line and "executors.tether" not in line else ""
    cmdline = wait_for(mirror_line, timeout_s=120, poll_s=0.01)
    ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True,
                        check=True).stdout
    return cmdline, ps


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKES), *sys.path]))
    return subprocess.run([str(FLIGHTPLAN), *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_no_secret_in_ps_logs_lines_or_results(server, tmp_path, monkeypatch):
    alice, bob, token = SECRETS
    spec, ledger = make_campaign(tmp_path, stopped=("variant",))
    campaign = Path(spec.campaign_dir)
    uri = f"http://alice:{alice}@{server}"
    lines: list[str] = []

    # live tracking into the real server: the rows arrive, the URI is on no command line
    with mirror_runs(campaign, uri, experiment="secret", say=lines.append) as mirror:
        assert mirror is not None and mirror._process is not None
        cmdline, ps = _mirror_command_lines(mirror._process.pid)
        assert "flightplan.tracking.mirror" in cmdline and server not in cmdline
        client = MlflowClient(tracking_uri=f"http://{server}")

        def control_losses():
            found = client.get_experiment_by_name("secret")
            runs = found and client.search_runs(
                [found.experiment_id], filter_string=f"tags.`flightplan.run_id` = '{CONTROL}'")
            history = runs and client.get_metric_history(runs[0].info.run_id, "loss")
            return sorted((m.step, m.value) for m in history or []) if history else None
        # the fixture's control run: loss = 1 / (step + 1) at steps 0..3
        assert wait_for(lambda: (h := control_losses()) and len(h) == 4 and h) == [
            (0, 1.0), (1, 0.5), (2, 1 / 3), (3, 0.25)]
    assert lines == []            # every point sent: nothing to say

    # a store that is down, with a user, a password and a token in its URI
    down = f"http://bob:{bob}@127.0.0.1:{_free_port()}/?token={token}"
    masked = f"http://***@127.0.0.1:{down.split('@')[1].split('/')[0].split(':')[1]}/?token=***"
    failing = LiveMirror(campaign, down, experiment="down", say=lines.append)
    failing.start()
    assert failing._process is not None
    cmdline_down, ps_down = _mirror_command_lines(failing._process.pid)
    wait_for(lambda: lines)
    outcome = failing.stop(timeout_s=60)
    assert lines[0].startswith(f"live tracking: MLflow at {masked}: opening experiment 'down' "
                               f"failed (unreachable: [Errno 111] Connection refused)")
    assert outcome.error == "unreachable: [Errno 111] Connection refused"

    # close, then export through the CLI to the server and to the store that is down
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), *sys.path]))
    closed = close_campaign(spec, ledger)
    assert closed["verified"], closed["findings"]
    results = Path(closed["results_dir"])
    exported = _cli("export", "mlflow", str(results), "--tracking-uri", uri, "--json")
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["tracking_uri"] == f"http://***@{server}"
    refused = _cli("export", "mlflow", str(results), "--tracking-uri", down)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: MLflow at {masked}: opening experiment")

    log = (campaign / ".flightplan" / "mlflow_mirror.log").read_text()
    assert f"live tracking into http://***@{server} started" in log
    assert f"live tracking into {masked} started" in log
    printed = "\n".join([*lines, cmdline, ps, cmdline_down, ps_down, exported.stdout,
                         exported.stderr, refused.stdout, refused.stderr])
    files = [p for p in campaign.rglob("*") if p.is_file()]
    assert results / "MANIFEST.json" in files and len(files) > 20
    for secret in SECRETS:
        assert secret not in printed
        holding = [str(p.relative_to(campaign)) for p in files if secret.encode() in p.read_bytes()]
        assert holding == [], (secret, holding)
