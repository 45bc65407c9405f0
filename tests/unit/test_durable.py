"""durable.py: atomic writes leave readable files, never a temp file, and hash right."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from flightplan.durable import hash_file, write_atomic, write_json_atomic


def test_atomic_write_follows_the_umask_not_mkstemps_0600(tmp_path: Path) -> None:
    target = tmp_path / "results" / "budget.json"
    write_json_atomic(target, {"committed_total": "47.14"})
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert target.read_text(encoding="utf-8") == '{\n  "committed_total": "47.14"\n}\n'
    assert sorted(p.name for p in target.parent.iterdir()) == ["budget.json"]


def test_hash_file_matches_hashlib(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # 2.2 MiB: more than one 1 MiB chunk
    path = tmp_path / "blob"
    write_atomic(path, data)
    assert hash_file(path) == (len(data), hashlib.sha256(data).hexdigest())


def test_append_durable_writes_the_rest_after_a_short_write(tmp_path: Path, monkeypatch) -> None:
    """A disk that takes at most 5 bytes per write(2): every byte is still appended."""
    import flightplan.durable as durable

    real_write, calls = os.write, []

    def short_write(fd: int, data) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:5]))

    path = tmp_path / "log.jsonl"
    path.write_bytes(b"first\n")
    monkeypatch.setattr(durable.os, "write", short_write)
    durable.append_durable(path, b'{"step": 12, "loss": 0.25}\n')
    assert path.read_bytes() == b'first\n{"step": 12, "loss": 0.25}\n'
    assert calls == [27, 22, 17, 12, 7, 2]


def test_append_durable_refuses_a_write_that_appends_nothing(tmp_path: Path,
                                                             monkeypatch) -> None:
    import flightplan.durable as durable

    monkeypatch.setattr(durable.os, "write", lambda fd, data: 0)
    with pytest.raises(OSError, match="a write appended nothing \\(4 of 4 bytes left\\)"):
        durable.append_durable(tmp_path / "log.txt", b"abc\n")
