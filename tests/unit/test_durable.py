"""durable.py: atomic writes leave readable files, never a temp file, and hash right."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

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
