"""bench/gpu_campaign.py and bench/peer_step.py, run on the CPU at their smallest so that
the scripts ``bench/gpu_check.py`` calls on a GPU cannot rot: exit 0, each line in its
place, every time and ratio a positive number."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
NUMBER = r"(\d+\.\d+)"


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(NUMBER, line)]


@pytest.mark.slow
def test_gpu_campaign_on_the_cpu_prints_its_figures(tmp_path):
    """The tiny campaign (32 train / 16 test reviews, one epoch) through ``flightplan run``,
    ``close`` and ``verify`` against the bare loop: the run phase and the floor positive,
    their ratio the quotient of the two printed times (to the printed rounding), one
    start → first step line per run whose parts add up to it, no device share on a CPU."""
    done = subprocess.run([sys.executable, str(BENCH / "gpu_campaign.py"), "--cpu", "--tiny",
                           "--train-limit", "32", "--test-limit", "16", "--epochs", "1",
                           "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == [
        "gpu_campaign", "flightplan", "floor,", "->", "start", "start", "start", "device", "close"]
    assert lines[0].startswith("gpu_campaign on the CPU, torch ")
    assert "runs control, lora-r4, lora-r4-len128" in lines[0]
    run_s = float(re.match(r"flightplan run: (\d+\.\d) s", lines[1]).group(1))
    floor_s = float(re.match(r"floor, one process: (\d+\.\d) s", lines[2]).group(1))
    assert run_s > 0 and floor_s > 0
    ratio, after = (float(x) for x in re.match(
        r"-> run phase / floor = (\d+\.\d\d); the runs after the decision / floor = (\d+\.\d\d)$",
        lines[3]).groups())
    # the printed times are rounded to 0.1 s: the ratio of the unrounded ones lies between
    assert (run_s - 0.05) / (floor_s + 0.05) - 0.005 <= ratio <= (run_s + 0.05) / (floor_s - 0.05) + 0.005
    assert 0 < after < ratio
    for name, line in zip(["control", "lora-r4", "lora-r4-len128"], lines[4:7]):
        match = re.match(rf"start -> first step, {name}: (\d+\.\d) s \(waiting (\d+\.\d), "
                         rf"start_load (\d+\.\d), data (\d+\.\d)\); steps (\d+\.\d) s, goodput "
                         rf"(\d+\.\d)%$", line)
        assert match, line
        total, waiting, start_load, data, steps, goodput = (float(x) for x in match.groups())
        # data may round to 0.0 s: the campaign's token cache is built once, then loaded
        assert total > 0 and start_load > 0 and data >= 0 and steps >= 0 and 0 <= goodput <= 100
        assert abs(total - (waiting + start_load + data)) <= 0.151, line
    assert lines[7] == "device busy: n/a (CPU)"
    close_s, verify_s, both = (float(x) for x in re.match(
        r"close (\d+\.\d) s \(exit 0\) \+ verify (\d+\.\d) s \(exit 0\) = (\d+\.\d) s$",
        lines[8]).groups())
    assert close_s > 0 and verify_s > 0 and abs(both - (close_s + verify_s)) <= 0.101


@pytest.mark.slow
def test_peer_step_on_the_cpu_prints_its_ratios():
    """``peer_step.py --device cpu`` at one round and 4 test reviews: its eight lines, the
    four ``->`` ratios and every time positive."""
    done = subprocess.run([sys.executable, str(BENCH / "peer_step.py"), "--device", "cpu",
                           "--rounds", "1", "--examples", "4"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == [
        "load", "training", "->", "a", "->", "forward", "->", "->"]
    assert lines[2].startswith("-> textclf step / bare PEFT step = ")
    assert lines[2].endswith(" (target ≤ 1.05)")
    for line in lines[1:]:
        assert _numbers(line) and all(x > 0 for x in _numbers(line)), line
