"""The CLI as a person meets it: the tiny campaign driven in a real pseudo-terminal.

One campaign (module fixture) is started in an 80-column pty and Ctrl-C is typed while
its lora-r4 run trains past its first checkpoint; `flightplan run` must print the
resume line and exit 130, and running it again (in a pipe) must finish the campaign.
Its lora-r4 run must then equal, byte for byte, the same trial run once uninterrupted.
`status` is then read in 80- and 120-column ptys, and `close` is interrupted in the pty
while it reloads artifacts, then run to the end in a pipe.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import ENV, FLIGHTPLAN
from pty_terminal import Terminal

from flightplan.run.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
HANG_S = 900
"""A command that takes longer has hung (a safety net, not a speed check)."""
NAN_RUN = """
[[run]]
name = "control-nan"
tier = "exploratory"
reference = "control"
params = { max_length = 64, lr = 1e-2, epochs = 2, batch_size = 16, seed = 0, \
inject_nan_at_step = 3 }
duration = "15s"
after = ["pilot"]
"""
# the step count shows once the runner has read the run's planned steps (it polls 5 times a s);
# every run still in progress is named (the control may be writing its outputs beside lora-r4);
# lora-r4 saved a checkpoint, so the line says it resumes from it (a run beside it that
# saved none is told it starts over from step 0)
_ID = r"[a-z0-9-]+-[0-9a-f]{10}"
_RUN = r"run " + _ID + r"(?:, \d+ of \d+ steps done)?"
RESUME_LINE = re.compile(r"^interrupted: flightplan run stopped \((?:" + _RUN + r"; )*"
                         r"run lora-r4-[0-9a-f]{10}(?:, \d+ of \d+ steps done)?(?:; " + _RUN +
                         r")*\); nothing finished was lost: finished runs "
                         r"and saved checkpoints are kept; run `flightplan run campaign.toml` "
                         r"again to (?:resume from the last checkpoint|resume (?:" + _ID + r", )*"
                         r"lora-r4-[0-9a-f]{10}(?:, " + _ID + r")* from (?:its|their) last "
                         r"checkpoints? and start " + _ID + r"(?:, " + _ID + r")* over from "
                         r"step 0 \((?:it|they) saved no checkpoint yet\))$")

pytestmark = pytest.mark.slow


def _campaign(folder: Path) -> Path:
    """The tiny campaign on 64 train / 16 test reviews without its useful run, with a
    lora-r4 of 25 epochs (100 steps, seconds) that saves every few seconds, and an
    exploratory run stopped by a NaN loss (a stop reason for `status`)."""
    text = (REPO / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8")
    text = text[:text.rindex("[[run]]")]
    lora = 'params = { max_length = 64, lr = 1e-2, epochs = 2, batch_size = 16, seed = 0, adapter'
    for old, new in (("train_limit = 240", "train_limit = 64"),
                     ("test_limit = 80", "test_limit = 16"),
                     ('tolerated_loss = "1m"', 'tolerated_loss = "2s"'),
                     (lora, lora.replace("epochs = 2", "epochs = 25"))):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "campaign.toml").write_text(text + NAN_RUN, encoding="utf-8")
    return folder / "campaign.toml"


def _checkpoints_saved(run_dirs: list[Path]) -> int:
    for run_dir in run_dirs:
        path = run_dir / "measurements.jsonl"
        if run_dir.name.startswith("lora-r4-") and path.is_file():
            return path.read_text(encoding="utf-8").count('"event": "checkpoint"')
    return 0


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """The campaign interrupted once by Ctrl-C in a pty, then run again in a pipe."""
    folder = tmp_path_factory.mktemp("terminal")
    _campaign(folder)
    term = Terminal([str(FLIGHTPLAN), "run", "campaign.toml"], cwd=folder, env=ENV, columns=80)
    trained = term.wait_for(lambda: _checkpoints_saved(list((folder / "runs").glob("*"))) >= 1,
                            timeout=HANG_S)
    term.type_ctrl_c()
    code = term.wait(timeout=120)
    again = subprocess.run([str(FLIGHTPLAN), "run", "campaign.toml"], cwd=folder, env=ENV,
                           capture_output=True, text=True, timeout=HANG_S)
    return {"folder": folder, "trained": trained, "interrupted": term, "code": code,
            "again": again}


def _ids(folder: Path) -> dict[str, str]:
    with Ledger.open(folder, create=False) as ledger:
        return {r.name: r.run_id for r in ledger.runs()}


def test_ctrl_c_prints_the_resume_line_exits_130_and_running_again_is_bitwise_identical(
        campaign, tmp_path):
    term, folder = campaign["interrupted"], campaign["folder"]
    assert campaign["trained"], term.text[-2000:]
    assert campaign["code"] == 130, term.text[-2000:]
    lines = [line for line in term.lines() if line.startswith("interrupted:")]
    assert len(lines) == 1 and RESUME_LINE.match(lines[0]), term.text[-2000:]
    again = campaign["again"]
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumes from its last checkpoint" in again.stdout
    assert "\x1b[" not in again.stdout + again.stderr       # no bars or colours in a pipe
    lora = folder / "runs" / _ids(folder)["lora-r4"]
    log = (lora / "log.txt").read_text(encoding="utf-8")
    assert "KeyboardInterrupt" not in log                   # the worker ignored the Ctrl-C
    resumed = [json.loads(row) for row in (lora / "measurements.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "restore" and r.get("source") for r in resumed)

    # the same trial, run once without interruption in a fresh folder
    reference = tmp_path / lora.name
    reference.mkdir()
    trial = json.loads((lora / "trial.json").read_text(encoding="utf-8"))
    (reference / "trial.json").write_text(json.dumps(dict(trial, resume=False)))
    done = subprocess.run([sys.executable, "-m", "flightplan.run.worker",
                           str(reference / "trial.json")], env=ENV, capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    for rel in ("predictions.csv", "metrics.json", "artifact/model.safetensors"):
        assert (lora / rel).read_bytes() == (reference / rel).read_bytes(), rel


@pytest.mark.parametrize("columns", [80, 120])
def test_status_shows_every_run_id_in_full_within_the_width(campaign, columns):
    folder = campaign["folder"]
    term = Terminal([str(FLIGHTPLAN), "status"], cwd=folder, env=ENV, columns=columns)
    assert term.wait(timeout=HANG_S) == 0, term.text
    lines = [line for line in term.lines() if line]
    assert max(len(line) for line in lines) <= columns
    with Ledger.open(folder, create=False) as ledger:
        runs = ledger.runs()
    assert len(runs) == 3
    for run in runs:                       # one line per run: its full id, then its status
        assert any(re.match(rf"^  {re.escape(run.run_id)}\s+{run.status}\s", line)
                   for line in lines), (run.run_id, term.text)
    stopped = next(r for r in runs if r.status == "stopped")    # a short reason: whole
    reason = f"non_finite_loss at step 3: {stopped.stop['message']}"
    assert any(line.endswith(reason) for line in lines), term.text


def test_close_shows_progress_on_a_terminal_stops_on_ctrl_c_and_is_quiet_in_a_pipe(campaign):
    """close in a pty: its steps with their counts, then Ctrl-C while it reloads the
    artifacts; the same close in a pipe afterwards: no progress, and it verifies."""
    folder = campaign["folder"]
    term = Terminal([str(FLIGHTPLAN), "close", "campaign.toml"], cwd=folder, env=ENV, columns=80)
    reloading = re.compile(r"reloading each artifact in a fresh process .* [0-9]/3 ")
    assert term.wait_for(lambda: any(reloading.search(line) for line in term.lines()),
                         timeout=HANG_S), term.text[-3000:]
    term.type_ctrl_c()
    assert term.wait(timeout=HANG_S) == 130, term.text[-3000:]
    shown = term.lines()
    # (publishing the runs, already published by the runner, is too quick to be drawn
    # reliably: the reloading step above is the one asserted with its count)
    stopped = [line for line in shown if line.startswith("interrupted:")]
    assert len(stopped) == 1 and re.fullmatch(
        r"interrupted: flightplan close stopped \(reloading each artifact in a fresh process, "
        r"[0-2] of 3 runs done\); nothing finished was lost: every file of results/ written so "
        r"far is kept; run `flightplan close campaign.toml` again to complete and verify "
        r"results/", stopped[0]), stopped

    piped = subprocess.run([str(FLIGHTPLAN), "close", "campaign.toml"], cwd=folder, env=ENV,
                           capture_output=True, text=True, timeout=HANG_S)
    assert piped.returncode == 0, piped.stdout + piped.stderr
    assert piped.stderr == "" and "\x1b[" not in piped.stdout
    assert "reloading" not in piped.stdout
    # lora-r4 resumed once after the Ctrl-C (the first test): results/ says so, bitwise
    readme = (folder / "results" / "README.md").read_text(encoding="utf-8")
    lora_id = _ids(folder)["lora-r4"]
    assert re.search(rf"^\| lora-r4 \| `{lora_id}` \| finished \| [^|]+ \| 1, bitwise \| ",
                     readme, re.M), readme
    assert f"| lora-r4 | `{lora_id}` | 1, bitwise |" in (
        folder / "results" / "plan_vs_execution.md").read_text(encoding="utf-8")
    assert piped.stdout.splitlines()[-1] == "verified"
