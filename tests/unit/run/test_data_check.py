"""The data check: hashes, counts, duplicates, labels and truncation counted by hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flightplan.errors import CorpusMismatch
from flightplan.run.data_check import run_data_check, truncation_summary
from flightplan.spec import load_spec, parse_spec

HEADER = "\tdrugName\tcondition\treview\trating\tdate\tusefulCount\n"
# (id, review, label); untruncated lengths with [CLS] and [SEP], counted by hand:
#   "good" 3, "the drug works well" 6, "bad side effects" 5, "" 2, "it helped" 4
TRAIN_ROWS = [("1", "good", "positive"), ("2", "the drug works well", "positive"),
              ("3", "bad side effects", "negative"), ("4", "good", "neutral"),
              ("5", "", "neutral")]
TEST_ROWS = [("10", "it helped", "positive"), ("11", "bad side effects", "negative")]


def _write(folder: Path, name: str, rows: list[tuple[str, str, str]]) -> str:
    text = HEADER + "".join(f'{i}\tDrug\tPain\t"""{review}"""\t{label}\tMay 1, 2011\t3\n'
                            for i, review, label in rows)
    (folder / name).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _spec(tmp_path: Path, hashes: dict[str, str]):
    run = {"tier": "essential", "duration": "1m"}
    return parse_spec({
        "campaign": {"name": "t", "question": "q", "min_gain": 0.05},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "corpus": {"path": "data", "sha256": hashes},
        "run": [dict(run, name="control", params={"max_length": 4}),
                dict(run, name="long", reference="control", params={"max_length": 5}),
                dict(run, name="also-long", reference="control", params={"max_length": 5})],
    }, campaign_dir=tmp_path)


@pytest.fixture()
def small(tmp_path):
    (tmp_path / "data").mkdir()
    hashes = {"train.tsv": _write(tmp_path / "data", "train.tsv", TRAIN_ROWS),
              "test.tsv": _write(tmp_path / "data", "test.tsv", TEST_ROWS)}
    return tmp_path, hashes


def test_hand_counted_report(small):
    tmp_path, hashes = small
    out = tmp_path / ".flightplan" / "data_check.json"
    report = run_data_check(_spec(tmp_path, hashes), out=out)
    assert json.loads(out.read_text()) == report
    assert report["status"] == "ok"
    assert report["labels"] == ["negative", "neutral", "positive"]
    train = report["splits"]["train"]
    assert train["rows"] == 5 and train["empty_texts"] == ["5"]
    assert train["duplicates"] == [{"ids": ["1", "4"], "text": "good"}]
    assert train["labels"] == {"negative": 1, "neutral": 2, "positive": 2}
    assert report["splits"]["test"]["labels"] == {"negative": 1, "neutral": 0, "positive": 1}
    assert report["cross_split_duplicates"] == [
        {"train_ids": ["3"], "test_ids": ["11"], "text": "bad side effects"}]
    # lengths 3, 6, 5, 3, 2 | 4, 5 → sorted 2 3 3 4 5 5 6
    assert report["lengths"]["max"] == 6
    assert report["lengths"]["mean"] == pytest.approx(28 / 7)
    assert report["lengths"]["percentiles"]["50"] == 4.0
    assert report["lengths"]["percentiles"]["90"] == pytest.approx(5.4)   # 5 + 0.4 · (6 − 5)
    assert report["truncation"] == [
        {"max_length": 4, "truncated": 3, "total": 7, "fraction": 3 / 7, "runs": ["control"]},
        {"max_length": 5, "truncated": 1, "total": 7, "fraction": 1 / 7,
         "runs": ["long", "also-long"]}]


def test_tampered_file_stops_and_is_reported(small):
    tmp_path, hashes = small
    good = hashes["test.tsv"]
    _write(tmp_path / "data", "test.tsv", [("10", "it helped a lot", "positive")])
    out = tmp_path / "data_check.json"
    with pytest.raises(CorpusMismatch, match=f"test.tsv: sha256 [0-9a-f]{{64}} but the campaign "
                                             f"file froze {good}"):
        run_data_check(_spec(tmp_path, hashes), out=out)
    written = json.loads(out.read_text())
    assert written["status"] == "corpus_mismatch"
    assert written["files"]["test.tsv"]["matches"] is False
    assert written["files"]["train.tsv"]["matches"] is True


def test_truncation_summary_edges():
    assert truncation_summary([128, 129, 3], 128) == {"max_length": 128, "truncated": 1,
                                                      "total": 3, "fraction": 1 / 3}
    assert truncation_summary([], 128)["fraction"] == 0.0


def test_drug_review_corpus():
    spec = load_spec(Path(__file__).parents[3] / "examples" / "drug-reviews" / "campaign.toml")
    report = run_data_check(spec)
    assert report["splits"]["train"]["labels"] == {"negative": 161, "neutral": 54, "positive": 385}
    assert report["splits"]["test"]["labels"] == {"negative": 95, "neutral": 36, "positive": 248}
    assert report["splits"]["train"]["duplicates"] == [] and report["splits"]["test"]["empty_texts"] == []
    assert [(d["train_ids"], d["test_ids"]) for d in report["cross_split_duplicates"]] == [
        (["227876"], ["107408"])]
    by_length = {t["max_length"]: t for t in report["truncation"]}
    assert by_length[128]["total"] == 979
    assert by_length[128]["truncated"] == 400      # nearly half are longer than 128 tokens
    assert by_length[256]["truncated"] == 3
