"""The generic reload entry ``python -m flightplan.tasks.reload``: a file task trained
through the Trial API reloads in a fresh process and re-creates its predictions byte for
byte; a task without a reload_predictions hook, a hook that refuses, and bad arguments exit
2, 1, 2; several artifacts in one process are each written or refused on their own.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from flightplan.trial.trial import Trial
from flightplan.tasks.loader import load_task
from flightplan.tasks.reload import NO_RELOAD_HOOK, main, reload_argv

# y = 2x + 1 on 8 points of [-1, 1]; a 1→1 linear model trained by SGD through the Trial API
TASK = textwrap.dedent('''
    """A tiny regression task: a linear model fits y = 2x + 1."""
    import csv
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file

    X = torch.linspace(-1, 1, 8).unsqueeze(1)     # (8, 1)
    Y = 2 * X + 1                                 # (8, 1)


    def _write(model, out, limit):
        n = len(X) if limit is None else min(limit, len(X))
        with torch.no_grad():
            predicted = model(X[:n])              # (n, 1)
        with open(out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["example_id", "target", "prediction", "abs_error"])
            for i in range(n):
                p, y = predicted[i, 0].item(), Y[i, 0].item()
                writer.writerow([f"x{i}", f"{y:.6f}", f"{p:.6f}", f"{abs(p - y):.6f}"])
        return n


    def train(trial):
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=float(trial.params["lr"]))
        trial.register(model=model, optimizer=optimizer)
        for step in range(trial.restore(), 30):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(X), Y)
            loss.backward()
            optimizer.step()
            trial.log(step, loss=loss.item())
        (trial.run_dir / "artifact").mkdir(exist_ok=True)
        save_file(model.state_dict(), str(trial.run_dir / "artifact" / "model.safetensors"))
        _write(model, trial.run_dir / "predictions.csv", None)


    def reload_predictions(artifact_dir, out, *, campaign_dir=None, limit=None):
        model = torch.nn.Linear(1, 1)
        model.load_state_dict(load_file(str(Path(artifact_dir) / "model.safetensors")))
        return _write(model, out, limit)
''')


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(campaign dir holding task.py, run dir after training through the Trial API)."""
    root = tmp_path_factory.mktemp("reload")
    (root / "task.py").write_text(TASK, encoding="utf-8")
    trial = Trial.local(root / "run", params={"lr": 0.3}, task="task.py")
    load_task("task.py", root).train(trial)
    trial.finish()
    return root, root / "run"


def test_a_file_task_reloads_in_a_fresh_process_byte_for_byte(trained, tmp_path):
    campaign, run_dir = trained
    out = tmp_path / "again.csv"
    done = subprocess.run(reload_argv("task.py", str(run_dir / "artifact"), str(out),
                                      campaign_dir=str(campaign)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote 8 predictions to {out}\n"
    assert out.read_bytes() == (run_dir / "predictions.csv").read_bytes()
    lines = out.read_text().splitlines()
    # targets 2x + 1 at x = -1 and x = 1; 30 SGD steps bring the fit within 0.05
    assert lines[1].startswith("x0,-1.000000,") and lines[8].startswith("x7,3.000000,")
    assert max(float(line.split(",")[3]) for line in lines[1:]) < 0.05


def test_limit_and_task_root(trained, tmp_path):
    campaign, run_dir = trained
    out = tmp_path / "three.csv"
    # the task is found in --task-root; the current directory is elsewhere
    assert main(["task.py", str(run_dir / "artifact"), "--out", str(out), "--limit", "3",
                 "--task-root", str(campaign)]) == 0
    assert out.read_text().splitlines() == \
        (run_dir / "predictions.csv").read_text().splitlines()[:4]


def test_a_task_without_reload_hook_exits_2(trained, tmp_path, capsys):
    campaign, run_dir = trained
    (tmp_path / "bare.py").write_text("def train(trial):\n    pass\n", encoding="utf-8")
    assert main(["bare.py", str(run_dir / "artifact"), "--out", str(tmp_path / "x.csv"),
                 "--task-root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {NO_RELOAD_HOOK}: task 'bare.py' does not define "
        f"reload_predictions(artifact_dir, out, *, campaign_dir, limit) -> rows written\n")
    assert not (tmp_path / "x.csv").exists()


def test_a_hook_that_refuses_exits_1(trained, tmp_path, capsys):
    campaign, _ = trained
    empty = tmp_path / "artifact"
    empty.mkdir()
    assert main(["task.py", str(empty), "--out", str(tmp_path / "x.csv"),
                 "--campaign-dir", str(campaign)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the task's reload_predictions failed: ") and "model.safetensors" in err


@pytest.mark.parametrize("args, message", [
    (["task.py", "ART", "--limit", "0"], "--limit 0: give a positive number of examples"),
    (["task.py", "nowhere"], "nowhere: no such artifact folder"),
    (["nosuch.py", "ART"], "TASK_REF: no task file"),
])
def test_bad_arguments_exit_2(trained, tmp_path, capsys, args, message):
    campaign, run_dir = trained
    args = [str(run_dir / "artifact") if a == "ART" else a for a in args]
    assert main([*args, "--out", str(tmp_path / "x.csv"), "--task-root", str(campaign)]) == 2
    assert message in capsys.readouterr().err


def test_a_task_split_over_modules_reloads_from_its_kept_copy_alone(tmp_path):
    from flightplan.tasks.archive import keep_task_source
    from flightplan.tasks.loader import resolve_task

    campaign = tmp_path / "camp"
    campaign.mkdir()
    (campaign / "regression_parts.py").write_text(TASK, encoding="utf-8")
    (campaign / "task.py").write_text("from regression_parts import reload_predictions, train\n",
                                      encoding="utf-8")
    trial = Trial.local(campaign / "run", params={"lr": 0.3}, task="task.py")
    load_task("task.py", campaign).train(trial)
    trial.finish()
    results = tmp_path / "results"
    record, written = keep_task_source(results, resolve_task("task.py", campaign).to_json(),
                                       "task.py")
    assert sorted(Path(w).name for w in written) == ["regression_parts.py", "task.py"]
    artifact = tmp_path / "artifact"
    (campaign / "run" / "artifact").rename(artifact)
    expected = (campaign / "run" / "predictions.csv").read_bytes()
    for path in sorted(campaign.rglob("*"), reverse=True):   # the campaign folder is gone
        path.unlink() if path.is_file() else path.rmdir()
    out = tmp_path / "again.csv"
    done = subprocess.run(reload_argv(record["entry"], str(artifact), str(out),
                                      task_root=str(results / record["source"])),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == expected


def test_several_artifacts_in_one_process_each_reported_on_its_own(trained, tmp_path):
    """One process, four artifacts of the task: two written byte for byte as each alone,
    one refused by the hook (exit 1), one not a folder (exit 2); the process exits 2, the
    highest, and ``--json`` gives one line per artifact in the order given."""
    campaign, run_dir = trained
    artifact = str(run_dir / "artifact")
    (tmp_path / "empty").mkdir()
    outs = [tmp_path / f"{i}.csv" for i in range(4)]
    argv = reload_argv("task.py", artifact, str(outs[0]), campaign_dir=str(campaign),
                       pairs=[(str(tmp_path / "empty"), str(outs[1])),
                              (str(tmp_path / "nowhere"), str(outs[2])),
                              (artifact, str(outs[3]))], as_json=True)
    assert argv[5:9] == [artifact, "--out", str(outs[0]), "--pair"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(s["artifact"], s["out"], s["exit"], s["rows"]) for s in said] == [
        (artifact, str(outs[0]), 0, 8), (str(tmp_path / "empty"), str(outs[1]), 1, None),
        (str(tmp_path / "nowhere"), str(outs[2]), 2, None), (artifact, str(outs[3]), 0, 8)]
    assert said[0]["error"] is None and said[3]["error"] is None
    assert said[1]["error"].startswith("the task's reload_predictions failed: ")
    assert said[2]["error"] == (f"{tmp_path / 'nowhere'}: no such artifact folder; give the "
                                f"run's artifact directory")
    expected = (run_dir / "predictions.csv").read_bytes()
    assert outs[0].read_bytes() == expected and outs[3].read_bytes() == expected
    assert not outs[1].exists() and not outs[2].exists()


def test_several_artifacts_said_in_lines_and_exit_1_when_only_refused(trained, tmp_path, capsys):
    campaign, run_dir = trained
    (tmp_path / "empty").mkdir()
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main(["task.py", "--pair", str(tmp_path / "empty"), str(a),
                 "--pair", str(run_dir / "artifact"), str(b), "--task-root", str(campaign)]) == 1
    out, err = capsys.readouterr()
    assert out == f"wrote 8 predictions to {b}\n"
    assert err.startswith(f"error: {tmp_path / 'empty'}: the task's reload_predictions failed: ")
    assert b.read_bytes() == (run_dir / "predictions.csv").read_bytes()


def test_a_task_that_cannot_load_fails_every_artifact_with_exit_2(trained, tmp_path, capsys):
    _, run_dir = trained
    (tmp_path / "bare.py").write_text("def train(trial):\n    pass\n", encoding="utf-8")
    assert main(["bare.py", "--pair", str(run_dir / "artifact"), str(tmp_path / "a.csv"),
                 "--pair", str(run_dir / "artifact"), str(tmp_path / "b.csv"), "--json",
                 "--task-root", str(tmp_path)]) == 2
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(s["out"], s["exit"]) for s in said] == [(str(tmp_path / "a.csv"), 2),
                                                    (str(tmp_path / "b.csv"), 2)]
    assert all(s["error"].startswith(NO_RELOAD_HOOK) for s in said)


def test_no_artifact_or_an_artifact_without_its_out_is_a_usage_error(tmp_path, capsys):
    for argv in (["task.py"], ["task.py", "ART"], ["task.py", "--out", "x.csv"]):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2
    assert "give ARTIFACT_DIR" in capsys.readouterr().err
