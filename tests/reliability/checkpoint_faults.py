"""Damaged and hostile checkpoints, made from a valid one.

:func:`make_checkpoint` writes a real checkpoint (a small linear model, Adam state after
a few steps, RNG states and counters) with :func:`flightplan.trial.checkpoint_io.write_checkpoint`.
Each *corruption* damages it the way disks and interrupted copies do; each *hostile*
fault replaces a file with one built to run code or exhaust memory and, like an attacker
who controls the whole directory, rewrites the manifest so that the hashes agree. Every
fault returns the finding ``check`` names that may report it.

Usage::

    ckpt = make_checkpoint(tmp / "checkpoints", steps_done=4)
    expected = CORRUPTIONS["flip_byte"](ckpt, random.Random(0))   # {"sha256"}
    report = check_checkpoint(ckpt)                                # findings name it
"""

from __future__ import annotations

import builtins
import hashlib
import json
import pickle
import random
import shutil
import struct
from pathlib import Path
from typing import Callable

import torch

from flightplan.trial.checkpoint_io import (MANIFEST, MODEL_FILE, OPTIMIZER_FILE, STATE_FILE,
                                          write_checkpoint)

__all__ = ["make_checkpoint", "copy_checkpoint", "CORRUPTIONS", "HOSTILE", "Payload", "rewrite_record"]


def make_checkpoint(parent: Path, steps_done: int, *, run_id: str = "tiny-0123456789",
                    seed: int = 0) -> Path:
    """A valid checkpoint ``parent/step-NNNNNN`` of a 16→3 linear model after
    ``steps_done`` Adam steps (weights differ with ``steps_done`` and ``seed``)."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(16, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps_done):
        loss = model(torch.randn(8, 16)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    opt_state = optimizer.state_dict()
    state = {"rng": {"torch_cpu": torch.get_rng_state()}, "counters": {"steps_done": steps_done}}
    final, _ = write_checkpoint(parent, steps_done, model=tensors, optimizer=opt_state,
                                state=state, meta={"run_id": run_id, "config_hash": "0" * 64})
    return final


def _manifest(ckpt: Path) -> dict:
    return json.loads((ckpt / MANIFEST).read_text(encoding="utf-8"))


def _save_manifest(ckpt: Path, manifest: dict) -> None:
    (ckpt / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")


def rewrite_record(ckpt: Path, name: str) -> None:
    """Make the manifest agree with the current bytes of ``name`` (size and sha256)."""
    data = (ckpt / name).read_bytes()
    manifest = _manifest(ckpt)
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _save_manifest(ckpt, manifest)


def _listed(ckpt: Path) -> list[str]:
    return sorted(_manifest(ckpt)["files"])


# --- corruptions: what disks, copies and interrupted saves do ------------------------------

def _truncate(ckpt: Path, rng: random.Random) -> set[str]:
    path = ckpt / rng.choice(_listed(ckpt))
    data = path.read_bytes()
    path.write_bytes(data[:rng.randrange(len(data))])
    return {"size"}


def _flip_byte(ckpt: Path, rng: random.Random) -> set[str]:
    path = ckpt / rng.choice(_listed(ckpt))
    data = bytearray(path.read_bytes())
    data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return {"sha256"}


def _missing_manifest(ckpt: Path, rng: random.Random) -> set[str]:
    (ckpt / MANIFEST).unlink()
    return {"no_manifest", "manifest"}


def _truncated_manifest(ckpt: Path, rng: random.Random) -> set[str]:
    text = (ckpt / MANIFEST).read_bytes()
    (ckpt / MANIFEST).write_bytes(text[:rng.randrange(len(text) - 1)])
    return {"manifest"}


def _empty_directory(ckpt: Path, rng: random.Random) -> set[str]:
    for path in ckpt.iterdir():
        path.unlink()
    return {"no_manifest", "manifest"}


def _missing_file(ckpt: Path, rng: random.Random) -> set[str]:
    (ckpt / rng.choice(_listed(ckpt))).unlink()
    return {"missing"}


def _unlisted_file(ckpt: Path, rng: random.Random) -> set[str]:
    (ckpt / rng.choice(["notes.txt", "extra.pt", "model.bin"])).write_bytes(rng.randbytes(64))
    return {"unlisted"}


def _manifest_lies_sha(ckpt: Path, rng: random.Random) -> set[str]:
    manifest = _manifest(ckpt)
    name = rng.choice(sorted(manifest["files"]))
    manifest["files"][name]["sha256"] = hashlib.sha256(rng.randbytes(8)).hexdigest()
    _save_manifest(ckpt, manifest)
    return {"sha256"}


def _manifest_lies_size(ckpt: Path, rng: random.Random) -> set[str]:
    manifest = _manifest(ckpt)
    name = rng.choice(sorted(manifest["files"]))
    manifest["files"][name]["size"] += rng.choice([-1, 1, 4096])
    _save_manifest(ckpt, manifest)
    return {"size"}


def _manifest_lies_tensor(ckpt: Path, rng: random.Random) -> set[str]:
    manifest = _manifest(ckpt)
    name = rng.choice(sorted(manifest["tensors"]))
    crc = int(manifest["tensors"][name]["crc32"], 16) ^ rng.randrange(1, 1 << 32)
    manifest["tensors"][name]["crc32"] = f"{crc:08x}"
    _save_manifest(ckpt, manifest)
    return {"tensor_digest"}


def _weights_swapped(ckpt: Path, rng: random.Random) -> set[str]:
    """Other weights in a well-formed file whose size and sha256 the manifest agrees with:
    only the save-time tensor digests can tell."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(ckpt / MODEL_FILE)
    key = rng.choice(sorted(tensors))
    tensors[key] = tensors[key] + rng.choice([1e-3, -1.0, 7.0])
    save_file(tensors, str(ckpt / MODEL_FILE), metadata={"format": "pt"})
    rewrite_record(ckpt, MODEL_FILE)
    return {"tensor_digest"}


def _manifest_escapes(ckpt: Path, rng: random.Random) -> set[str]:
    manifest = _manifest(ckpt)
    outside = ckpt.parent / "outside.bin"
    outside.write_bytes(b"x" * 10)
    manifest["files"][rng.choice(["../outside.bin", "/etc/hostname", "sub/../../outside.bin"])] = \
        {"size": 10, "sha256": hashlib.sha256(b"x" * 10).hexdigest()}
    _save_manifest(ckpt, manifest)
    return {"unsafe"}


CORRUPTIONS: dict[str, Callable[[Path, random.Random], set[str]]] = {
    "truncated file": _truncate,
    "flipped byte": _flip_byte,
    "missing manifest": _missing_manifest,
    "truncated manifest": _truncated_manifest,
    "empty directory": _empty_directory,
    "missing file": _missing_file,
    "unlisted file": _unlisted_file,
    "manifest lies (sha256)": _manifest_lies_sha,
    "manifest lies (size)": _manifest_lies_size,
    "manifest lies (tensor crc)": _manifest_lies_tensor,
    "weights swapped, hashes rewritten": _weights_swapped,
    "manifest path escapes": _manifest_escapes,
}


# --- hostile files: built to run code or exhaust memory -------------------------------------

class Payload:
    """An object whose unpickling creates ``marker`` (a stand-in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.exec, (f"open({self.marker!r}, 'w').close()",))


def _raw_pickle(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    name = rng.choice([OPTIMIZER_FILE, STATE_FILE])
    (ckpt / name).write_bytes(pickle.dumps({"state": Payload(marker)}, protocol=rng.choice([2, 4, 5])))
    rewrite_record(ckpt, name)
    return {"unsafe", "load"}  # "load": the optimizer file is safetensors, which refuses it


def _pickle_in_torch_zip(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    name = rng.choice([OPTIMIZER_FILE, STATE_FILE])
    (ckpt / name).unlink()
    torch.save({"state": Payload(marker), "counters": {"steps_done": 1}}, ckpt / name)
    rewrite_record(ckpt, name)
    return {"unsafe", "load"}


def _pickle_as_safetensors(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    (ckpt / MODEL_FILE).write_bytes(pickle.dumps(Payload(marker)))
    rewrite_record(ckpt, MODEL_FILE)
    return {"load", "unsafe"}


def _safetensors_header(ckpt: Path, header_len: int, header: bytes, body: bytes = b"") -> None:
    (ckpt / MODEL_FILE).write_bytes(struct.pack("<Q", header_len) + header + body)
    rewrite_record(ckpt, MODEL_FILE)


def _huge_header(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    _safetensors_header(ckpt, rng.choice([1 << 62, (1 << 64) - 1, 1 << 40, 200 << 20]), b"{}")
    return {"load"}


def _header_past_end(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    _safetensors_header(ckpt, rng.randrange(64, 4096), b'{"__metadata__":{}}')
    return {"load"}


def _malformed_header(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    header = rng.choice([b"{" * 64, b"not json at all!", b'{"w":{"dtype":"F32"}}   ',
                         b'{"weight":{"dtype":"F32","shape":[3,16],"data_offsets":[0,1]}}'])
    header += b" " * (-len(header) % 8)
    _safetensors_header(ckpt, len(header), header, rng.randbytes(8))
    return {"load"}


def _offsets_past_end(ckpt: Path, rng: random.Random, marker: Path) -> set[str]:
    count = rng.choice([1 << 20, 1 << 30, 1 << 40])
    header = json.dumps({"weight": {"dtype": "F32", "shape": [count],
                                    "data_offsets": [0, 4 * count]}}).encode()
    header += b" " * (-len(header) % 8)
    _safetensors_header(ckpt, len(header), header, b"\0" * 16)
    return {"load"}


HOSTILE: dict[str, Callable[[Path, random.Random, Path], set[str]]] = {
    "raw pickle that runs code": _raw_pickle,
    "torch archive with a code pickle": _pickle_in_torch_zip,
    "pickle named .safetensors": _pickle_as_safetensors,
    "safetensors header length huge": _huge_header,
    "safetensors header past end": _header_past_end,
    "safetensors header malformed": _malformed_header,
    "safetensors offsets past end": _offsets_past_end,
}


def copy_checkpoint(source: Path, target: Path) -> Path:
    """A fresh copy of a checkpoint directory (faults damage copies, never the original)."""
    shutil.copytree(source, target)
    return target
