"""Checkpoint files: safe format, manifest, RNG capture, verification in a fresh process,
and refusal of pickles that would run code."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import pickle
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from flightplan.errors import ArgumentError, UnsafeFileError
from flightplan.trial.checkpoint import capture_rng, restore_rng
from flightplan.trial.checkpoint_check import verify_checkpoint
from flightplan.trial.checkpoint_io import (MANIFEST, load_checkpoint, tensor_digests,
                                          write_checkpoint)
from flightplan.run.commands import checkpoint_verify_command
from flightplan.ids import run_id
from flightplan.trial.trial import Trial


class Odd(torch.nn.Module):
    """Parameters and buffers in several dtypes, a 0-dim buffer and a transposed parameter."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, 3).t())  # not contiguous
        self.register_buffer("low", torch.randn(4).to(torch.bfloat16))
        self.register_buffer("count", torch.tensor(7, dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("empty", torch.zeros(0, 2))


def _saved(run_dir):
    torch.manual_seed(0)
    model = Odd()
    optimizer = torch.optim.AdamW(model.parameters())
    model.weight.sum().backward()
    optimizer.step()
    trial = Trial.local(run_dir, name="io", params={})
    trial.register(model, optimizer)
    trial.restore()
    trial.checkpoint(4)
    trial.finish()
    return model, optimizer, run_dir / "checkpoints" / "step-000005"


def test_numpy_rng_state_is_refused_by_the_safe_loader_but_ours_loads():
    raw = io.BytesIO()
    torch.save({"numpy": np.random.get_state()}, raw)
    raw.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(raw, weights_only=True)

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    np.random.randn(), random.gauss(0, 1)  # leave a cached gaussian in numpy and random
    ours = io.BytesIO()
    torch.save(capture_rng(), ours)
    first = (random.random(), random.gauss(0, 1), np.random.randn(3).tolist(), torch.rand(3))
    ours.seek(0)
    restore_rng(torch.load(ours, weights_only=True))
    again = (random.random(), random.gauss(0, 1), np.random.randn(3).tolist(), torch.rand(3))
    assert first[:3] == again[:3] and torch.equal(first[3], again[3])


def test_files_manifest_and_safetensors_content(tmp_path):
    model, optimizer, step_dir = _saved(tmp_path)
    assert sorted(p.name for p in step_dir.iterdir()) == \
        ["manifest.json", "model.safetensors", "optimizer.safetensors", "state.pt"]
    assert [p.name for p in step_dir.parent.iterdir()] == ["step-000005"]  # no .tmp left
    manifest = json.loads((step_dir / "manifest.json").read_text())
    assert (manifest["step"], manifest["epoch"], manifest["micro_step"]) == (5, 0, 0)
    assert manifest["run_id"] == run_id("io", "local", {}, {}, None, "local")
    for name, record in manifest["files"].items():
        data = (step_dir / name).read_bytes()
        assert record == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    tensors = load_file(step_dir / "model.safetensors")
    for name, value in model.state_dict().items():
        assert tensors[name].dtype == value.dtype and torch.equal(tensors[name], value)
    assert manifest["tensors"]["model/low"]["dtype"] == "bfloat16"
    assert "optimizer/state/0/exp_avg_sq" in manifest["tensors"]
    assert "state/rng/numpy/keys" in manifest["tensors"]
    files = load_checkpoint(step_dir)
    assert torch.equal(files.optimizer["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert files.state["counters"] == {"step": 5, "epoch": 0, "micro_step": 0}


def test_verify_command_in_a_fresh_process(tmp_path, capsys):
    _, _, step_dir = _saved(tmp_path)
    assert checkpoint_verify_command(step_dir, as_json=True) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] is True and report["findings"] == [] and report["step"] == 5

    data = bytearray((step_dir / "optimizer.safetensors").read_bytes())
    data[-300] ^= 0x01
    (step_dir / "optimizer.safetensors").write_bytes(bytes(data))
    assert checkpoint_verify_command(step_dir, as_json=False) == 1
    out = capsys.readouterr().out
    assert f"{step_dir}: sha256: optimizer.safetensors: sha256 " in out


STEP_10 = "runs/<run_id>/checkpoints/step-000010"


def _checkpoints_folder(step_dir):
    return step_dir.parent, (f"{step_dir.parent} holds checkpoints (step-000005), it is not "
                             f"one; give one of them, e.g. {step_dir}")


def _no_such_folder(step_dir):
    nowhere = step_dir.parents[1] / "nowhere"
    return nowhere, (f"{nowhere}: no such directory; give a checkpoint folder such as "
                     f"{STEP_10}")


def _no_checkpoint_at_all(step_dir):
    results = step_dir.parents[1] / "results"          # a folder that is no checkpoint at all
    results.mkdir()
    (results / "MANIFEST.json").write_text("{}")
    return results, (f"{results} is not a checkpoint (it holds no manifest.json and none of "
                     f"model.safetensors, optimizer.safetensors, state.pt); give a checkpoint "
                     f"folder such as {STEP_10}")


def _run_folder(step_dir):
    run_dir = step_dir.parents[1]
    (run_dir / "checkpoints" / "step-000009.tmp").mkdir()        # a save never finished
    return run_dir, (f"{run_dir} is a run folder, not a checkpoint; give one of its checkpoints "
                     f"(step-000005 in {run_dir / 'checkpoints'}), e.g. "
                     f"{run_dir / 'checkpoints' / 'step-000005'}")


def _run_folder_with_no_finished_checkpoint(step_dir):
    run_dir = _run_folder(step_dir)[0]
    shutil.rmtree(step_dir)
    return run_dir, (f"{run_dir} is a run folder, not a checkpoint, and its checkpoints/ holds "
                     f"no finished checkpoint to verify")


def _artifact(step_dir):
    artifact = step_dir.parents[1] / "artifact"
    artifact.mkdir()
    (artifact / "model.safetensors").write_bytes(b"weights")
    (artifact / "artifact.json").write_text("{}")
    return artifact, (f"{artifact} is a run's artifact (artifact.json), not a checkpoint; "
                      f"flightplan verify RESULTS_DIR reloads artifacts and checks their "
                      f"predictions, and checkpoint verify takes a folder such as {STEP_10}")


def _file_of_a_checkpoint(step_dir):
    return step_dir / "model.safetensors", (f"{step_dir / 'model.safetensors'} is a file, not a "
                                            f"checkpoint; give the checkpoint folder that holds "
                                            f"it: {step_dir}")


def _file_of_an_artifact(step_dir):
    given = _artifact(step_dir)[0] / "artifact.json"
    return given, (f"{given} is a file, not a checkpoint; give the checkpoint folder that "
                   f"holds it, such as {STEP_10}")


@pytest.mark.parametrize("given", [
    _checkpoints_folder, _no_such_folder, _no_checkpoint_at_all, _run_folder,
    _run_folder_with_no_finished_checkpoint, _artifact, _file_of_a_checkpoint,
    _file_of_an_artifact], ids=lambda given: given.__name__.strip("_").replace("_", "-"))
def test_verify_command_given_no_checkpoint_says_what_it_was_given(tmp_path, given):
    """A checkpoints/ folder, a run folder or a file names the checkpoint to give instead;
    an artifact, a folder that is none of these, or none at all is named for what it is."""
    _, _, step_dir = _saved(tmp_path)
    directory, message = given(step_dir)
    with pytest.raises(ArgumentError) as refused:
        checkpoint_verify_command(directory, as_json=False)
    assert str(refused.value) == message


class Payload:
    """Unpickling this would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _plant(step_dir, data: bytes) -> None:
    """Replace state.pt and fix the manifest so that only the loader can catch it."""
    (step_dir / "state.pt").write_bytes(data)
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind", ["torch-archive", "raw-pickle"])
def test_a_pickle_that_runs_code_is_refused_and_never_runs(kind, tmp_path):
    _, _, step_dir = _saved(tmp_path / "run")
    marker = tmp_path / "pwned"
    if kind == "torch-archive":
        buffer = io.BytesIO()
        torch.save({"counters": Payload(marker)}, buffer)
        data = buffer.getvalue()
    else:
        data = pickle.dumps({"counters": Payload(marker)})
    _plant(step_dir, data)

    with pytest.raises(UnsafeFileError, match="state.pt"):
        load_checkpoint(step_dir)
    report = verify_checkpoint(step_dir)
    assert report["verified"] is False
    assert [(f["check"], f["path"]) for f in report["findings"]] == [("unsafe", "state.pt")]

    trial = Trial.local(tmp_path / "run", name="io", params={}, stop={"require_resume": False})
    trial.register(Odd())
    assert trial.restore() == 0
    assert (tmp_path / "run" / "checkpoints" / "step-000005.corrupt-unsafe").is_dir()
    assert not marker.exists()


def test_loader_with_its_own_generators_resumes_mid_epoch(tmp_path):
    """The textclf set-up: the sampler and the loader each own a seeded generator."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    def build():
        model = torch.nn.Linear(1, 1)
        sampler = RandomSampler(range(10), generator=torch.Generator().manual_seed(5))
        loader = StatefulDataLoader(list(range(10)), batch_size=3, sampler=sampler,
                                    generator=torch.Generator().manual_seed(6))
        trial = Trial.local(tmp_path, name="loader", params={})
        trial.register(model, loader=loader)
        return trial, loader

    def batches(loader, count, trial=None, save_after=None):
        seen = []
        while len(seen) < count:
            for batch in loader:
                seen.append(batch.tolist())
                if len(seen) == save_after:
                    trial.checkpoint(len(seen) - 1)
                    trial.wait_for_checkpoint()
                if len(seen) == count:
                    break
        return seen

    trial, loader = build()
    trial.restore()
    straight = batches(loader, 14, trial, save_after=6)  # 4 batches per epoch: mid epoch 2
    straight_state = loader.generator.get_state()
    trial.finish()

    trial, loader = build()
    assert trial.restore() == 6
    resumed = batches(loader, 8)
    assert resumed == straight[6:]
    assert torch.equal(loader.generator.get_state(), straight_state)


def test_tensor_digests_taken_while_writing_equal_a_separate_pass(tmp_path):
    # 5 MiB of float32: more than one 4 MiB piece, so the crc32 is folded over pieces
    big = torch.arange(5 * (1 << 18), dtype=torch.float32)
    model = {"big": big, "empty": torch.zeros(0), "half": torch.ones(3, dtype=torch.float16)}
    optimizer = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": big * 2}},
                 "param_groups": [{"lr": 0.1, "params": [0]}]}
    state = {"rng": {"torch_cpu": torch.get_rng_state()}, "counters": {"steps_done": 3}}
    final, size = write_checkpoint(tmp_path, 3, model=model, optimizer=optimizer, state=state,
                                   meta={"run_id": "r", "config_hash": "0" * 64})
    manifest = json.loads((final / MANIFEST).read_text())
    assert manifest["tensors"] == tensor_digests(model, optimizer, state)
    assert "optimizer/state/0/exp_avg" in manifest["tensors"]
    assert size == sum(f["size"] for f in manifest["files"].values())
    loaded = load_checkpoint(final)          # re-checks every crc32 against the files
    assert torch.equal(loaded.model["big"], big)
