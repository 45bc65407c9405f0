"""Choosing the executor (`flightplan run --executor/--address`, `[execution]`) and the
one-line errors around it. The Ray executor itself runs on a real cluster in
tests/e2e/test_ray_tiny.py."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from flightplan.errors import ArgumentError, SpecError
from flightplan.run.commands import make_executor
from flightplan.run.executor import LocalExecutor
from flightplan.run.ray_executor import RayExecutor
from flightplan.spec import parse_spec

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny" / "campaign.toml"


def _spec(execution: dict | None = None):
    data = tomllib.loads(TINY.read_text(encoding="utf-8"))
    if execution is not None:
        data["execution"] = execution
    return parse_spec(data)


def test_the_command_line_wins_over_the_campaign_file():
    assert isinstance(make_executor(_spec()), LocalExecutor)
    spec = _spec({"engine": "ray", "address": "127.0.0.1:6379"})
    chosen = make_executor(spec)
    assert isinstance(chosen, RayExecutor) and chosen.address == "127.0.0.1:6379"
    assert make_executor(spec, address="127.0.0.1:7000").address == "127.0.0.1:7000"
    assert isinstance(make_executor(spec, engine="local"), LocalExecutor)


def test_bad_choices_are_one_line_errors():
    with pytest.raises(ArgumentError, match=r"--executor slurm: not an executor; give local "
                                            r"or ray"):
        make_executor(_spec(), engine="slurm")
    with pytest.raises(ArgumentError, match=r"--address 10.0.0.5:6379: only the ray executor "
                                            r"takes an address; add --executor ray"):
        make_executor(_spec(), address="10.0.0.5:6379")
    with pytest.raises(SpecError, match=r"execution\.engine"):
        _spec({"engine": "rey"})
    with pytest.raises(SpecError, match=r"execution\.adress: unknown key 'adress'; did you mean "
                                        r"'address'\?"):
        _spec({"engine": "ray", "adress": "h:1"})


def test_the_cli_exits_2_naming_the_option(tmp_path):
    spec = tmp_path / "campaign.toml"
    spec.write_text(TINY.read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run([str(Path(sys.executable).parent / "flightplan"), "run", str(spec),
                           "--address", "10.0.0.5:6379"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --address 10.0.0.5:6379: only the ray executor takes an address; add "
        "--executor ray"]
    assert not (tmp_path / ".flightplan").exists()
