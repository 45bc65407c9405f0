"""docs/gpu.md followed on this machine, the local executor standing in for the rented one.

The session's closed tiny campaign is "the flight" (steps 1-3 and the first command of step
5 of the page: installed, copied, run and closed there). From another folder ("home") the
test watches it with ``status`` by its path (step 4, what ``ssh gpu`` runs), brings the
whole folder home as ``rsync -a`` does (step 5: a copy that keeps links, times and modes),
and verifies ``results/`` there; ``status`` of the copy shows what the flight's showed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_run import run_cli

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "gpu.md"
HANG_S = 1200
"""A command that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow


def test_the_page_names_the_commands_this_test_follows() -> None:
    page = PAGE.read_text()
    for command in ("flightplan run campaign.toml", "flightplan status work/my-campaign/campaign.toml",
                    "flightplan close campaign.toml", "rsync -a gpu:work/my-campaign/ my-campaign/",
                    "flightplan verify results"):
        assert command in page, command


def test_a_campaign_closed_on_the_flight_is_watched_brought_home_and_verifies(closed_tiny, tmp_path) -> None:
    flight = closed_tiny.folder
    home = tmp_path / "home"
    home.mkdir()
    watched = run_cli("status", str(flight / "campaign.toml"), "--json", cwd=home, hang_s=HANG_S)
    assert watched.returncode == 0, watched.stderr
    on_flight = json.loads(watched.stdout)
    assert {r["status"] for r in on_flight["runs"] if r["wall_s"] > 0} == {"finished"}

    mine = Path(shutil.copytree(flight, home / "my-campaign", symlinks=True,
                                copy_function=shutil.copy2))
    verified = run_cli("verify", "results", "--json", cwd=mine, hang_s=HANG_S)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    outcome = json.loads(verified.stdout)
    assert outcome["verified"] is True and outcome["findings"] == []

    at_home = run_cli("status", "campaign.toml", "--json", cwd=mine, hang_s=HANG_S)
    assert at_home.returncode == 0, at_home.stderr
    by_id = {r["run_id"]: (r["status"], r.get("metric")) for r in json.loads(at_home.stdout)["runs"]}
    assert by_id == {r["run_id"]: (r["status"], r.get("metric")) for r in on_flight["runs"]}
