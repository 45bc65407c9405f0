"""Progress bars only on a terminal; the summary table's columns and stop reasons."""

from __future__ import annotations

import io

from rich.console import Console

from flightplan.run.executors.contract import RunProgress
from flightplan.run.progress import ProgressBoard, format_stop
from flightplan.run.status import run_lines

STOP = {"run_id": "lora-1", "rule": "non_finite_loss", "step": 3, "value": "nan",
        "threshold": None, "message": "loss is nan at step 3", "time": 1.0}


def _render(enabled: bool, terminal: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=100)
    with ProgressBoard(console, enabled=enabled) as board:
        board.add("runs/lora-1", "lora-1")
        board.update("runs/lora-1", RunProgress(step=4, total=30, loss=0.6931))
        board.note("pilot ok")
    return out.getvalue()


def test_bars_show_run_steps_and_loss_only_when_enabled():
    drawn = _render(enabled=True, terminal=True)
    assert "lora-1" in drawn and "5/30" in drawn and "loss 0.6931" in drawn
    assert "pilot ok" in drawn
    assert _render(enabled=False, terminal=False) == ""


def test_the_end_of_run_table_has_one_line_per_run_with_its_full_id():
    assert format_stop(STOP) == "non_finite_loss at step 3: loss is nan at step 3"
    assert format_stop(None) == ""
    rows = [
        {"name": "control", "run_id": "control-1", "tier": "essential", "status": "finished",
         "metric": 0.71234, "wall_s": 12.34, "stop": None, "reason": ""},
        {"name": "lora", "run_id": "lora-1", "tier": "essential", "status": "stopped",
         "metric": None, "wall_s": 3.0, "stop": STOP, "reason": ""},
        {"name": "wild", "run_id": "wild-1", "tier": "exploratory", "status": "cut",
         "metric": None, "wall_s": 0.0, "stop": None, "reason": "cut at the decision point"}]
    assert run_lines(rows, metric="macro_f1", width=80, now=0.0, title="campaign runs") == [
        "campaign runs",
        "  RUN ID     STATUS    MACRO_F1  WALL (s)",
        " essential",
        "  control-1  finished    0.7123      12.3",
        "  lora-1     stopped          -       3.0",
        "    non_finite_loss at step 3: loss is nan at step 3",    # 91 columns on one line
        " exploratory",
        "  wild-1     cut              -       0.0  cut at the decision point",
    ]


def test_the_interruption_line_names_every_run_in_progress():
    from flightplan import activity
    from flightplan.interrupts import StopNotice
    from flightplan.run.progress import RunActivity

    notice = StopNotice("flightplan run campaign.toml", kept="checkpoints are kept",
                        again="to resume")
    running = RunActivity()
    try:
        running.update("control-1", "run control-1", RunProgress(step=4, total=8))
        running.update("lora-2", "run lora-2", RunProgress(step=2, total=8))
        running.update("control-1", "run control-1", RunProgress(step=5, total=8))
        assert notice.line() == (
            "interrupted: flightplan run stopped (run control-1, 6 of 8 steps done; run lora-2, "
            "3 of 8 steps done); nothing finished was lost: checkpoints are kept; run "
            "`flightplan run campaign.toml` again to resume")
        running.ended("control-1")
        assert activity.current().describe() == "run lora-2, 3 of 8 steps done"
        running.ended("lora-2")        # the last one: a Ctrl-C now names no finished run
        assert activity.current() is None
        assert notice.line() == (
            "interrupted: flightplan run stopped; nothing finished was lost: checkpoints are "
            "kept; run `flightplan run campaign.toml` again to resume")
        activity.doing("publishing")
        running.ended("lora-2")        # ended twice: what the runner does next stays named
        assert activity.current().describe() == "publishing"
    finally:
        activity.clear()


def test_the_interruption_line_says_a_run_without_a_checkpoint_starts_over(tmp_path):
    from flightplan import activity
    from flightplan.interrupts import StopNotice
    from flightplan.run.progress import RunActivity, pilot_started

    notice = StopNotice("flightplan run campaign.toml", kept="checkpoints are kept",
                        again="to go on")
    control, lora = tmp_path / "control-1", tmp_path / "lora-2"
    (lora / "checkpoints" / "step-000003.tmp").mkdir(parents=True)   # a save cut short
    control.mkdir()
    running = RunActivity()
    try:
        running.update("lora-2", "run lora-2", RunProgress(step=2, total=8), lora)
        assert notice.line() == (
            "interrupted: flightplan run stopped (run lora-2, 3 of 8 steps done); nothing "
            "finished was lost: checkpoints are kept; run `flightplan run campaign.toml` "
            "again to start lora-2 over from step 0 (it saved no checkpoint yet)")
        running.update("control-1", "run control-1", RunProgress(step=5, total=8), control)
        assert notice.line().endswith(
            "again to start lora-2, control-1 over from step 0 (they saved no checkpoint yet)")
        (control / "checkpoints" / "step-000004").mkdir(parents=True)     # asked when written
        assert notice.line().endswith(
            "again to resume control-1 from its last checkpoint and start lora-2 over from "
            "step 0 (it saved no checkpoint yet)")
        (lora / "checkpoints" / "step-000003").mkdir()
        assert notice.line().endswith("again to resume from the last checkpoint")
        running.ended("lora-2")
        running.ended("control-1")       # none in progress: the notice's own words
        assert notice.line().endswith("again to go on")
        running.update("pilot-control-1", "run pilot-control-1", RunProgress(step=1, total=4),
                       tmp_path / "pilot-control-1", pilot=True)
        assert notice.line().endswith("again to start the pilot over")
        running.ended("pilot-control-1")
        # before the pilot's first progress row: the runner's own activity says the same
        pilot_started("control")
        assert notice.line() == (
            "interrupted: flightplan run stopped (the pilot of control); nothing finished was "
            "lost: checkpoints are kept; run `flightplan run campaign.toml` again to start the "
            "pilot over")
    finally:
        activity.clear()
