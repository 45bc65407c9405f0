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


def _trace_fsyncs(monkeypatch) -> list[tuple[int, int, bool]]:
    """Record (device, inode, is a folder) of every fd ``os.fsync`` is called on."""
    real_fsync, seen = os.fsync, []

    def traced(fd: int) -> None:
        info = os.fstat(fd)
        seen.append((info.st_dev, info.st_ino, stat.S_ISDIR(info.st_mode)))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", traced)
    return seen


def _identity(path: Path) -> tuple[int, int, bool]:
    info = path.stat()
    return info.st_dev, info.st_ino, stat.S_ISDIR(info.st_mode)


def test_append_durable_fsyncs_the_folder_of_a_file_it_creates_only(tmp_path: Path,
                                                                     monkeypatch) -> None:
    from flightplan.durable import append_durable

    seen = _trace_fsyncs(monkeypatch)
    path = tmp_path / "log.jsonl"
    append_durable(path, b"one\n")
    assert seen == [_identity(path), _identity(tmp_path)]   # the bytes, then the new name
    seen.clear()
    append_durable(path, b"two\n")
    assert seen == [_identity(path)]                        # the name is durable already
    assert path.read_bytes() == b"one\ntwo\n"


def test_fsync_tree_fsyncs_every_file_and_folder_innermost_first(tmp_path: Path,
                                                                 monkeypatch) -> None:
    from flightplan.durable import fsync_tree

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "w.bin").write_bytes(b"w")
    (tmp_path / "a" / "c.json").write_text("{}")
    (tmp_path / "a" / "link").symlink_to("/etc/hostname")   # not followed
    seen = _trace_fsyncs(monkeypatch)
    fsync_tree(tmp_path / "a")
    assert seen == [_identity(tmp_path / "a" / "b" / "w.bin"), _identity(tmp_path / "a" / "b"),
                    _identity(tmp_path / "a" / "c.json"), _identity(tmp_path / "a")]


def test_replace_path_puts_a_folder_or_a_file_in_place_and_leaves_nothing_aside(
        tmp_path: Path, monkeypatch) -> None:
    from flightplan.durable import replace_path

    old, new = tmp_path / "artifact", tmp_path / "artifact.tmp"
    old.mkdir()
    (old / "weights").write_text("old")
    new.mkdir()
    (new / "weights").write_text("new")
    (new / "artifact.json").write_text("{}")
    seen = _trace_fsyncs(monkeypatch)
    replace_path(old, new)
    assert seen == [_identity(tmp_path)]                    # the renames made durable
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]
    assert (old / "weights").read_text() == "new"
    (tmp_path / "m.tmp").write_text("2")
    (tmp_path / "m.json").write_text("1")
    replace_path(tmp_path / "m.json", tmp_path / "m.tmp")   # a file: one rename
    assert (tmp_path / "m.json").read_text() == "2" and not (tmp_path / "m.tmp").exists()
    replace_path(old)                                       # without new: deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_set_aside_for_a_restart_fsyncs_the_runs_folder_after_the_rename(
        tmp_path: Path, monkeypatch) -> None:
    from flightplan.rundir import RunDir

    run = RunDir.of(tmp_path, "control-0123456789")
    run.path.mkdir(parents=True)
    (run.path / "trial.json").write_text("{}")
    (run.path.with_name("control-0123456789.restarted-1")).mkdir()
    seen = _trace_fsyncs(monkeypatch)
    moved = run.set_aside()
    assert moved == run.path.with_name("control-0123456789.restarted-2")
    assert (moved / "trial.json").is_file() and not run.path.exists()
    assert seen == [_identity(tmp_path / "runs")]


def test_a_printed_path_opens_from_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    from flightplan.rundir import RunDir, shown_path

    log = RunDir.of(tmp_path / "camp", "lora-0123456789").log
    monkeypatch.chdir(tmp_path)
    assert shown_path(log) == "camp/runs/lora-0123456789/log.txt"
    (tmp_path / "camp").mkdir()
    monkeypatch.chdir(tmp_path / "camp")
    assert shown_path(log) == "runs/lora-0123456789/log.txt"
    assert shown_path(Path("runs") / "lora-0123456789" / "log.txt") == "runs/lora-0123456789/log.txt"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")               # outside the campaign: absolute
    assert shown_path(log) == f"{tmp_path.resolve()}/camp/runs/lora-0123456789/log.txt"
