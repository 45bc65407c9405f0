"""A bad newest checkpoint is reported, renamed aside, and the previous one is used."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from flightplan.errors import TrialStopped
from flightplan.trial.trial import Trial


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def _saved_twice(run_dir):
    """Checkpoints step-000001 and step-000002; the parameters at step-000001."""
    model, optimizer = _model()
    trial = Trial.local(run_dir, name="c", params={"k": 1})
    trial.register(model, optimizer)
    trial.restore()
    at_first = None
    for step in range(2):
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        trial.log(step, loss=0.5)
        trial.checkpoint(step)
        trial.wait_for_checkpoint()
        if step == 0:
            at_first = {k: v.clone() for k, v in model.state_dict().items()}
    trial.finish()
    return at_first


def _flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def _other_run(step_dir):
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["run_id"] = "someone-else-0123456789"
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


def _digest_mismatch(step_dir):
    manifest = json.loads((step_dir / "manifest.json").read_text())
    first = sorted(manifest["tensors"])[0]
    manifest["tensors"][first]["crc32"] = "00000000"
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


CASES = {
    "truncated": (lambda d: _truncate(d / "model.safetensors"), "size",
                  "model.safetensors: "),
    "flipped-byte": (lambda d: _flip_byte(d / "optimizer.safetensors", 200), "sha256",
                     "optimizer.safetensors: sha256 "),
    "missing-manifest": (lambda d: (d / "manifest.json").unlink(), "no-manifest",
                         "no manifest.json (the save never finished)"),
    "half-written": (lambda d: [(d / n).unlink() for n in ("manifest.json", "state.pt", "optimizer.safetensors")],
                     "no-manifest", "no manifest.json"),
    "missing-file": (lambda d: (d / "state.pt").unlink(), "missing-file",
                     "state.pt: listed in the manifest but absent"),
    "unlisted-file": (lambda d: (d / "notes.pkl").write_bytes(b"x"), "unlisted-file",
                      "notes.pkl: not in the manifest"),
    "tensor-digest": (_digest_mismatch, "tensor-digest", "model/0.bias: reloads with crc32 "),
    "other-run": (_other_run, "other-run", "belongs to run someone-else-0123456789"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_newest_checkpoint_falls_back_to_the_previous(case, tmp_path, capsys):
    damage, reason, says = CASES[case]
    at_first = _saved_twice(tmp_path)
    damage(tmp_path / "checkpoints" / "step-000002")
    capsys.readouterr()

    model, optimizer = _model()
    trial = Trial.local(tmp_path, name="c", params={"k": 1})
    trial.register(model, optimizer)
    assert trial.restore() == 1
    for key, value in at_first.items():
        assert torch.equal(model.state_dict()[key], value)

    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-000001", f"step-000002.corrupt-{reason}"]
    err = capsys.readouterr().err
    assert "checkpoint rejected: step-000002: " in err and says in err
    assert f"(renamed to step-000002.corrupt-{reason})" in err
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    rejected = [r for r in rows if r.get("event") == "checkpoint_rejected"]
    assert [(r["name"], r["reason"]) for r in rejected] == [("step-000002", reason)]


def test_no_valid_checkpoint_stops_with_no_usable_resume(tmp_path):
    _saved_twice(tmp_path)
    for name in ("step-000001", "step-000002"):
        _flip_byte(tmp_path / "checkpoints" / name / "model.safetensors", -1)
    model, optimizer = _model()
    trial = Trial.local(tmp_path, name="c", params={"k": 1}, resume=True)
    trial.register(model, optimizer)
    with pytest.raises(TrialStopped, match="no_usable_resume"):
        trial.restore()
    record = json.loads((tmp_path / "stop.json").read_text())
    assert record["rule"] == "no_usable_resume" and record["value"] == 2
    assert "step-000002: model.safetensors: sha256" in record["message"]
    assert "step-000001: model.safetensors: sha256" in record["message"]


def test_without_require_resume_a_bad_history_restarts_loudly(tmp_path):
    _saved_twice(tmp_path)
    shutil.rmtree(tmp_path / "checkpoints" / "step-000001")
    (tmp_path / "checkpoints" / "step-000002" / "manifest.json").unlink()
    model, optimizer = _model()
    trial = Trial.local(tmp_path, name="c", params={"k": 1}, stop={"require_resume": False})
    trial.register(model, optimizer)
    assert trial.restore() == 0
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert rows[-1]["event"] == "restore" and rows[-1]["rejected"] == ["step-000002"]
    assert not (tmp_path / "stop.json").exists()


def test_resume_requested_without_any_checkpoint_stops(tmp_path):
    """trial.json says resume (the runner saw a checkpoint) but none is there: no silent restart."""
    (tmp_path / "checkpoints" / "step-000003.tmp").mkdir(parents=True)
    model, optimizer = _model()
    trial = Trial.local(tmp_path, name="c", params={"k": 1}, resume=True)
    trial.register(model, optimizer)
    with pytest.raises(TrialStopped, match="no_usable_resume"):
        trial.restore()
    record = json.loads((tmp_path / "stop.json").read_text())
    assert record["value"] == 0
    assert "holds no finished one (partial saves removed: step-000003.tmp)" in record["message"]
    assert "run flightplan run CAMPAIGN_FILE --restart c" in record["message"]


def test_the_no_usable_resume_stop_names_no_path_of_the_machine(tmp_path):
    """The stop's message goes into stop.json, the measurement rows and results/."""
    model, optimizer = _model()
    trial = Trial.local(tmp_path, name="c", params={"k": 1}, resume=True)
    trial.register(model, optimizer)
    with pytest.raises(TrialStopped, match="no_usable_resume"):
        trial.restore()
    message = json.loads((tmp_path / "stop.json").read_text())["message"]
    assert message.startswith("no usable checkpoint to resume from (this run saved checkpoints "
                              "before, but its checkpoints/ folder "
                              "holds no finished one")
    assert "/" + tmp_path.parts[1] not in message and str(tmp_path) not in message
