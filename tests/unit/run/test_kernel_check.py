"""The kernel check (run/kernel_check.py): one step of each run through the real worker; an op
without a deterministic kernel, raising torch's own error, is found and named, and the
choice offered; a run with ``deterministic = false`` is not checked and computes with
torch's warning instead of its error."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch

from flightplan.run.data_check import DataCheckReport
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.kernel_check import (KERNEL_DIR, KernelCheck, kernel_check_due,
                                         nondeterministic_op, run_kernel_check)
from flightplan.tasks.loader import load_task
from flightplan.trial.accelerator import DETERMINISTIC_ENV

# A task whose step uses an op without a deterministic kernel, raising torch's own error
# (max_unpool has none, on the CPU too), under the setting set_deterministic turns on for a
# GPU run; ``warn_only`` mirrors $FLIGHTPLAN_DETERMINISTIC as set_deterministic reads it.
TASK = textwrap.dedent('''
    import os
    import torch

    def train(trial):
        torch.use_deterministic_algorithms(
            True, warn_only=os.environ.get("FLIGHTPLAN_DETERMINISTIC") == "0")
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        trial.register(model=model, optimizer=optimizer)
        trial.restore()
        hidden = model(torch.ones(1, 1, 2)).relu()                      # (1, 1, 2)
        spread = torch.nn.functional.max_unpool1d(hidden, torch.tensor([[[0, 3]]]), 2)
        loss = spread.sum()
        loss.backward()
        optimizer.step()
        trial.log(0, loss=float(loss))
''')
PLAIN = textwrap.dedent('''
    import torch

    def train(trial):
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        trial.register(model=model, optimizer=optimizer)
        trial.restore()
        loss = model(torch.ones(1, 2)).sum()
        loss.backward()
        optimizer.step()
        trial.log(0, loss=float(loss))
''')


def _check(campaign: Path, name: str, task_file: str, **extra) -> KernelCheck:
    trial = {"run_id": f"{name}-0123456789", "name": name, "task": task_file, "params": {},
             "campaign_dir": str(campaign), **extra}
    return KernelCheck(name, trial, load_task(task_file, campaign))


def test_the_op_without_a_deterministic_kernel_is_named_and_the_choice_given(tmp_path):
    (tmp_path / "scatter.py").write_text(TASK, encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN, encoding="utf-8")
    checks = [_check(tmp_path, "control", "plain.py"), _check(tmp_path, "pooled", "scatter.py"),
              _check(tmp_path, "allowed", "scatter.py", deterministic=False)]
    result = run_kernel_check(checks, tmp_path, DataCheckReport("ok", 0.0),
                              executor=LocalExecutor(gpus=0, poll_s=0.05))
    assert not result.ok and result.checked == ["control", "pooled"]
    assert result.skipped == ["allowed"] and result.failed == {}
    [finding] = result.findings
    assert (finding.name, finding.run_id, finding.op) == \
        ("pooled", "pooled-0123456789", "max_unpooling2d_forward_out")
    assert finding.log == str(KERNEL_DIR / "pooled-0123456789" / "log.txt")
    message = result.message()
    assert message.startswith("run 'pooled': op max_unpooling2d_forward_out has no deterministic "
                              "implementation on this device; set `deterministic = false` "
                              "in its [[run]]")
    assert "or change the op" in message
    # each check ran one step in its own scratch folder, outside runs/
    trial = json.loads((tmp_path / KERNEL_DIR / "control-0123456789" / "trial.json").read_text())
    assert trial["max_steps"] == 1 and trial["run_id"] == "kernels-control-0123456789"
    assert not (tmp_path / "runs").exists()
    assert result.to_json()["findings"][0]["op"] == "max_unpooling2d_forward_out"


def test_a_run_with_deterministic_false_computes_with_a_warning(tmp_path, monkeypatch):
    """What ``[[run]] deterministic = false`` does in the worker: the same op warns."""
    from flightplan.run.executors.local import LocalExecutor as Executor
    from flightplan.run.executors.contract import Job

    (tmp_path / "scatter.py").write_text(TASK, encoding="utf-8")
    results = {}
    for name, deterministic in (("strict", True), ("allowed", False)):
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "trial.json").write_text(json.dumps(
            {"run_id": f"{name}-0123456789", "task": "scatter.py",
             "campaign_dir": str(tmp_path), "deterministic": deterministic}))
        [done] = Executor(gpus=0, poll_s=0.05).run([Job(f"{name}-0123456789", run_dir)])
        results[name] = (done.exit_code, (run_dir / "log.txt").read_text())
    assert results["strict"][0] == 3
    assert nondeterministic_op(results["strict"][1]) == "max_unpooling2d_forward_out"
    assert results["allowed"][0] == 0
    assert "max_unpooling2d_forward_out does not have a deterministic implementation" in \
        results["allowed"][1]                                   # torch's warning, in the log
    assert DETERMINISTIC_ENV == "FLIGHTPLAN_DETERMINISTIC"
    assert not torch.are_deterministic_algorithms_enabled()     # this process untouched


def test_torchs_own_message_gives_the_op_and_the_check_is_due_on_gpus_only():
    from torch._prims_common import alert_not_deterministic

    try:
        torch.use_deterministic_algorithms(True)
        alert_not_deterministic("adaptive_avg_pool2d_backward_cuda")
    except RuntimeError as exc:
        text = f"Traceback (most recent call last):\n  ...\nRuntimeError: {exc}\n"
    finally:
        torch.use_deterministic_algorithms(False)
    assert nondeterministic_op(text) == "adaptive_avg_pool2d_backward_cuda"
    assert nondeterministic_op("RuntimeError: CUDA out of memory") is None
    assert kernel_check_due(LocalExecutor(gpus=1)) and not kernel_check_due(LocalExecutor(gpus=0))


def test_the_campaign_stops_before_the_pilot_naming_the_op(tmp_path):
    """The docs' regression campaign with a variant whose step uses max_unpool, on a
    machine that offers a GPU (here a stand-in: the workers compute on the CPU)."""
    import subprocess
    import sys

    from flightplan.run.campaign import run_campaign
    from flightplan.run.ledger import Ledger
    from flightplan.spec import load_spec

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
    from docs_examples import docs_files

    for name, body in docs_files().items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    subprocess.run([sys.executable, "make_data.py"], cwd=tmp_path, check=True, timeout=60)
    (tmp_path / "pooled.py").write_text(TASK, encoding="utf-8")
    with open(tmp_path / "campaign.toml", "a", encoding="utf-8") as out:
        out.write('\n[[run]]\nname = "pooled"\ntier = "useful"\nreference = "control"\n'
                  'task = "pooled.py"\nduration = "1m"\nafter = ["pilot"]\n')
    outcome = run_campaign(load_spec(tmp_path / "campaign.toml"),
                           executor=LocalExecutor(gpus=1, poll_s=0.05), quiet=True)
    assert (outcome.exit_code, outcome.stopped_by) == (1, "kernel_check")
    assert "run 'pooled': op max_unpooling2d_forward_out has no deterministic" in outcome.message
    assert "`deterministic = false`" in outcome.message
    assert not list((tmp_path / "runs").glob("pilot-*"))          # no pilot, no run began
    with Ledger.open(tmp_path, create=False) as ledger:
        [event] = ledger.events(kind="kernel_check")
    assert event.data["checked"] == ["control", "lr-0.2", "pooled"]
    assert event.data["resume_check"] == {"control": "bitwise", "lr-0.2": "bitwise",
                                          "pooled": "bitwise"}
    # the choice taken: deterministic = false; the check passes, the run is recorded as
    # no longer bitwise, and the campaign goes on to its pilot
    text = (tmp_path / "campaign.toml").read_text(encoding="utf-8")
    (tmp_path / "campaign.toml").write_text(
        text.replace('task = "pooled.py"\n', 'task = "pooled.py"\ndeterministic = false\n'),
        encoding="utf-8")
    again = run_campaign(load_spec(tmp_path / "campaign.toml"), decide="stop",
                         executor=LocalExecutor(gpus=1, poll_s=0.05), quiet=True)
    assert again.stopped_by == "decision"
    with Ledger.open(tmp_path, create=False) as ledger:
        last = ledger.events(kind="kernel_check")[-1].data
    assert last["ok"] and last["skipped"] == ["pooled"]
    assert last["resume_check"]["pooled"] == "not bitwise (deterministic = false)"
