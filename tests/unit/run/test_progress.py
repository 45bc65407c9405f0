"""Progress bars only on a terminal; the summary table's columns and stop reasons."""

from __future__ import annotations

import io

from rich.console import Console

from flightplan.run.executor import RunProgress
from flightplan.run.progress import ProgressBoard, format_stop, summary_table

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


def test_summary_table_rows():
    assert format_stop(STOP) == "non_finite_loss at step 3: loss is nan at step 3"
    assert format_stop(None) == ""
    out = io.StringIO()
    Console(file=out, width=140).print(summary_table([
        {"name": "control", "run_id": "control-1", "tier": "essential", "status": "finished",
         "metric": 0.71234, "wall_s": 12.34, "stop": None, "reason": ""},
        {"name": "lora", "run_id": "lora-1", "tier": "essential", "status": "stopped",
         "metric": None, "wall_s": 3.0, "stop": STOP, "reason": ""},
        {"name": "wild", "run_id": "wild-1", "tier": "exploratory", "status": "cut",
         "metric": None, "wall_s": 0.0, "stop": None, "reason": "cut at the decision point"}],
        metric="macro_f1"))
    text = out.getvalue()
    for header in ("RUN", "TIER", "STATUS", "MACRO_F1", "WALL (s)", "STOP REASON"):
        assert header in text
    assert "0.7123" in text and "12.3" in text
    assert "non_finite_loss at step 3: loss is nan at step 3" in text
    assert "cut at the decision point" in text
