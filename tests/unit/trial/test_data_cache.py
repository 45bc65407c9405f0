"""The campaign's data cache (flightplan.trial.data_cache, Trial.cached): built once and
loaded after, bitwise; a tampered or torn entry rebuilt, never used; two processes that
ask at once share one build."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from flightplan.canonical import canonical_json
from flightplan.trial.data_cache import CACHE_DIR, cache_key, cached
from flightplan.trial.trial import Trial

PARTS = {"what": "features", "corpus_sha256": {"train.csv": "ab" * 32}, "max_length": 8}


def _builder(calls: list[int]):
    def build() -> dict:
        calls.append(1)
        generator = torch.Generator().manual_seed(7)
        return {"x": torch.randn(5, 3, generator=generator), "ids": ["a", "b"], "n": 3}
    return build


def test_the_key_is_the_sha256_of_the_canonical_json_of_its_parts():
    expected = hashlib.sha256(b'{"corpus_sha256":{"train.csv":"' + b"ab" * 32
                              + b'"},"max_length":8,"what":"features"}').hexdigest()
    assert cache_key(PARTS) == expected == hashlib.sha256(canonical_json(PARTS)).hexdigest()
    assert cache_key({**PARTS, "max_length": 9}) != expected


def test_built_once_then_loaded_bitwise(tmp_path):
    calls: list[int] = []
    first, use1 = cached(tmp_path, PARTS, _builder(calls))
    second, use2 = cached(tmp_path, PARTS, _builder(calls))
    assert calls == [1]
    assert (use1.hit, use2.hit) == (False, True) and use1.key == use2.key == cache_key(PARTS)
    assert torch.equal(first["x"], second["x"]) and second["ids"] == ["a", "b"]
    assert second["n"] == 3
    meta = json.loads((tmp_path / f"{use1.key}.json").read_text())
    data = (tmp_path / f"{use1.key}.pt").read_bytes()
    assert meta["sha256"] == hashlib.sha256(data).hexdigest() and meta["bytes"] == len(data)
    assert meta["parts"] == PARTS
    # other parts, another entry
    _, other = cached(tmp_path, {**PARTS, "max_length": 9}, _builder(calls))
    assert not other.hit and calls == [1, 1]


def test_a_tampered_entry_is_rebuilt_never_used(tmp_path):
    calls: list[int] = []
    original, use = cached(tmp_path, PARTS, _builder(calls))
    data_path = tmp_path / f"{use.key}.pt"
    # a tensor value changed in place, same length: only the hash can tell
    forged = dict(original, x=original["x"] + 1)
    buffer = io.BytesIO()
    torch.save(forged, buffer)
    data_path.write_bytes(buffer.getvalue())
    again, use2 = cached(tmp_path, PARTS, _builder(calls))
    assert calls == [1, 1] and not use2.hit and "sha256" in (use2.rebuilt_because or "")
    assert torch.equal(again["x"], original["x"])
    third, use3 = cached(tmp_path, PARTS, _builder(calls))   # the rebuilt entry is good
    assert use3.hit and calls == [1, 1] and torch.equal(third["x"], original["x"])
    # a torn file (cut short) and a record that names another entry are rebuilt too
    data_path.write_bytes(data_path.read_bytes()[:100])
    assert not cached(tmp_path, PARTS, _builder(calls))[1].hit
    meta_path = tmp_path / f"{use.key}.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "key": "0" * 64}))
    _, use5 = cached(tmp_path, PARTS, _builder(calls))
    assert not use5.hit and "does not describe" in (use5.rebuilt_because or "")
    assert calls == [1, 1, 1, 1]


_RACER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from flightplan.trial.data_cache import cached
    folder, log = Path(sys.argv[1]), Path(sys.argv[2])
    def build():
        with open(log, "a") as out:
            out.write("built\\n")
        time.sleep(0.5)             # the other process asks while this one builds
        return {"value": [1, 2, 3]}
    obj, use = cached(folder, {"what": "race"}, build)
    assert obj == {"value": [1, 2, 3]}
    print("hit" if use.hit else "built")
""")


def test_two_processes_that_ask_at_once_share_one_build(tmp_path):
    log = tmp_path / "builds.txt"
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path / "cache"), str(log)],
                               stdout=subprocess.PIPE, text=True) for _ in range(2)]
    said = sorted(p.communicate(timeout=120)[0].strip() for p in racers)
    assert [p.returncode for p in racers] == [0, 0]
    assert log.read_text() == "built\n" and said == ["built", "hit"]


def test_trial_cached_stores_in_the_campaign_folder_and_logs_the_key(tmp_path):
    campaign = tmp_path / "campaign"
    rows_of = []
    for name in ("one", "two"):
        run_dir = campaign / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "trial.json").write_text(json.dumps(
            {"run_id": f"{name}-0000000000", "name": name, "task": "t.py", "params": {},
             "campaign_dir": str(campaign)}), encoding="utf-8")
        trial = Trial.from_file(run_dir / "trial.json")
        calls: list[int] = []
        obj = trial.cached(PARTS, _builder(calls))
        assert obj["ids"] == ["a", "b"]
        rows_of.append([json.loads(line) for line in
                        (run_dir / "measurements.jsonl").read_text().splitlines()])
    key = cache_key(PARTS)
    assert (campaign / CACHE_DIR / f"{key}.pt").is_file()
    assert [(r[0]["data_cache"], r[0]["data_cache_hit"]) for r in rows_of] == \
        [(key, False), (key, True)]


def test_the_example_of_docs_tasks_builds_once_and_loads_after(tmp_path):
    text = (Path(__file__).resolve().parents[3] / "docs" / "tasks.md").read_text(encoding="utf-8")
    source = re.search(r"<!-- snippet: cached -->\n```python\n(.*?)```", text, flags=re.S)[1]
    namespace: dict = {}
    exec(compile(source, "docs/tasks.md", "exec"), namespace)
    rows = ["a b c", "de", "f g"]
    got = []
    for name in ("one", "two"):
        trial = Trial.local(tmp_path / name, params={"window": 4})
        trial.campaign_dir = str(tmp_path)          # as a campaign's runs share it
        got.append(namespace["features"](trial, rows))
        rows_logged = [json.loads(line) for line in
                       (tmp_path / name / "measurements.jsonl").read_text().splitlines()]
        assert rows_logged[0]["data_cache_hit"] is (name == "two")
    assert got[1]["n"] == 3
    assert torch.equal(got[1]["x"], torch.tensor([[5.0, 2.0], [2.0, 0.0], [3.0, 1.0]]))
    assert torch.equal(got[0]["x"], got[1]["x"])
