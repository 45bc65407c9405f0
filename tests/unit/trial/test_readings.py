"""Rows read a step later (issue 31 item 5): a value the device has not produced yet makes
its row wait until the next row, checkpoint, evaluation or the end; the rows written are
those of values read at once, and a stop rule on a waiting row fires before any save of
the state after it. No GPU here: a reading is a small object of the protocol
:class:`~flightplan.trial.readings.DeviceReading` that counts when it is read, standing in
for a CUDA event (the CUDA kinds run in ``bench/gpu_check.py``)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from flightplan.errors import TrialStopped
from flightplan.trial import StepTimer
from flightplan.trial.readings import DeviceReading, PinnedScalars, read_later
from flightplan.trial.trial import Trial


class LateValue:
    """A number that is ready only when read (as a CUDA copy the GPU has not reached)."""

    reads: list[float] = []

    def __init__(self, value: float) -> None:
        self.value = value

    def ready(self) -> bool:
        return False

    def read(self) -> float:
        LateValue.reads.append(self.value)
        return self.value


def _rows(run_dir):
    lines = (run_dir / "measurements.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines]


def _started(run_dir, **kwargs):
    model = torch.nn.Linear(2, 2)
    trial = Trial.local(run_dir, **kwargs)
    trial.register(model, torch.optim.SGD(model.parameters(), lr=0.1))
    trial.restore()
    return trial


def test_late_readings_write_the_rows_of_values_read_at_once(tmp_path):
    LateValue.reads = []
    losses = [0.75, 0.5, 0.25]
    at_once, later = _started(tmp_path / "now"), _started(tmp_path / "later")
    for step, loss in enumerate(losses):
        at_once.log(step, loss=loss, step_s=0.125, tokens=7)
        later.log(step, loss=LateValue(loss), step_s=LateValue(0.125), tokens=7)
        # the row of this step waits; the one before it is written, and nothing else read
        assert [r["step"] for r in _rows(tmp_path / "later") if "loss" in r] == list(range(step))
        assert LateValue.reads == [v for x in losses[:step] for v in (x, 0.125)]
    later.evaluate(2, accuracy=0.5)
    at_once.evaluate(2, accuracy=0.5)
    later.finish()
    at_once.finish()
    assert _rows(tmp_path / "later") == _rows(tmp_path / "now")
    assert [r["loss"] for r in _rows(tmp_path / "later") if "loss" in r] == losses


def test_a_waiting_row_is_written_by_finish(tmp_path):
    trial = _started(tmp_path)
    trial.log(0, loss=LateValue(1.5))
    trial.finish()
    rows = [r for r in _rows(tmp_path) if r.get("event") != "restore"]
    assert rows[0] == {"step": 0, "loss": 1.5} and rows[-1]["event"] == "finished"
    assert json.loads((tmp_path / "done.json").read_text())["steps"] == 1


def test_a_stop_rule_on_a_waiting_row_fires_before_the_next_checkpoint(tmp_path):
    trial = _started(tmp_path)
    trial.log(0, loss=LateValue(0.5))
    trial.log(1, loss=LateValue(math.nan))   # the NaN step: its row waits
    with pytest.raises(TrialStopped):
        trial.checkpoint(2)                  # a save of the state after it is not made
    assert not (tmp_path / "checkpoints").exists() or \
        not any((tmp_path / "checkpoints").iterdir())
    stop = json.loads((tmp_path / "stop.json").read_text())
    assert (stop["rule"], stop["step"]) == ("non_finite_loss", 1)
    assert [r["loss"] for r in _rows(tmp_path) if "loss" in r] == [0.5, "nan"]


def test_a_stop_rule_on_a_waiting_row_fires_at_the_next_row(tmp_path):
    trial = _started(tmp_path)
    trial.log(0, loss=LateValue(math.inf))
    with pytest.raises(TrialStopped):
        trial.log(1, loss=LateValue(0.5))
    assert json.loads((tmp_path / "stop.json").read_text())["step"] == 0
    assert [r["step"] for r in _rows(tmp_path) if "loss" in r] == [0]  # step 1 never written


def test_flush_rows_judges_the_waiting_row_and_is_a_no_op_after(tmp_path):
    trial = _started(tmp_path)
    trial.log(0, loss=LateValue(2.0))
    trial.flush_rows()
    trial.flush_rows()
    assert [r for r in _rows(tmp_path) if "loss" in r] == [{"step": 0, "loss": 2.0}]


def test_on_a_cpu_nothing_waits():
    assert read_later(torch.tensor(0.5), PinnedScalars()) is None
    late = LateValue(1.0)
    assert read_later(late, PinnedScalars()) is late and isinstance(late, DeviceReading)
    timer = StepTimer(torch.device("cpu"))
    timer.start()
    seconds = timer.stop()
    assert isinstance(seconds, float) and 0.0 <= seconds < 1.0


def test_a_cpu_tensor_is_read_when_logged(tmp_path):
    trial = _started(tmp_path)
    loss = torch.tensor(0.25)
    trial.log(0, loss=loss)
    loss.add_(1.0)  # changed in place after logging: the row holds the value logged
    assert [r for r in _rows(tmp_path) if "loss" in r] == [{"step": 0, "loss": 0.25}]
