"""A snapshot's copies from GPUs (issue 31 item 6) where there is none: a CPU state makes
no device copies, its save's stall is the loop's own and its row has no device fields.
The CUDA side (an end event per device, the next step's wait booked in ``stall_s``) runs in
``bench/gpu_check.py`` (check 2, and with two GPUs check 8), which prints its figures."""

from __future__ import annotations

import json

import torch

from flightplan.trial.checkpoint import Components, Snapshot
from flightplan.trial.trial import Trial


def test_a_cpu_state_is_copied_at_once_with_no_device_copies():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    captured = Snapshot().capture(Components(model=model, optimizer=optimizer), {"step": 1})
    assert captured.device_copies is None
    assert torch.equal(captured.model["weight"], model.weight.detach())
    with torch.no_grad():
        model.weight.add_(1.0)      # the buffer is a copy, complete when capture returns
    assert not torch.equal(captured.model["weight"], model.weight.detach())


def test_a_cpu_save_row_has_its_stall_and_no_device_fields(tmp_path):
    model = torch.nn.Linear(3, 2)
    trial = Trial.local(tmp_path)
    trial.register(model, torch.optim.SGD(model.parameters(), lr=0.1))
    trial.restore()
    trial.log(0, loss=1.0)
    trial.checkpoint(0)
    trial.finish()
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    saved = [r for r in rows if r.get("event") == "checkpoint"]
    assert len(saved) == 1 and saved[0]["stall_s"] > 0
    assert "device_wait_s" not in saved[0] and "copy_s" not in saved[0]
