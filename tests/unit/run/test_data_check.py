"""The data check: hashes, counts, duplicates, labels counted by hand; the task hook's
figures merged (textclf's truncation counted by hand; a clash refused)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flightplan.errors import CorpusMismatch, TaskError
from flightplan.run.data_check import run_data_check
from flightplan.spec import load_spec, parse_spec
from flightplan.tasks.loader import load_task
from flightplan.tasks.textclf.data import truncation_summary

HEADER = "\tdrugName\tcondition\treview\trating\tdate\tusefulCount\n"
# (id, review, label); untruncated lengths with [CLS] and [SEP], counted by hand:
#   "good" 3, "the drug works well" 6, "bad side effects" 5, "" 2, "it helped" 4
TRAIN_ROWS = [("1", "good", "positive"), ("2", "the drug works well", "positive"),
              ("3", "bad side effects", "negative"), ("4", "good", "neutral"),
              ("5", "", "neutral")]
TEST_ROWS = [("10", "it helped", "positive"), ("11", "bad side effects", "negative")]
DRUG_COLUMNS = {"id_column": "", "input_columns": ["review"], "label_column": "rating"}

# a generic CSV corpus: id 2 twice in train, id 3's text empty, test 9 has train 1's
# inputs (content), test 2 has train 2's id with other inputs, one test row unlabelled
TRAIN_CSV = "id,title,body,y\n1,a,same,x\n2,b,two,y\n2,c,three,x\n3,d,,z\n"
TEST_CSV = "id,title,body,y\n9,a,same,x\n2,e,other,y\n12,f,new,\n"

TASK = '''
def train(trial):
    pass

def data_check(corpus, params_by_run, base_model):
    return {FIGURES}
'''


def _write(folder: Path, name: str, rows: list[tuple[str, str, str]]) -> str:
    text = HEADER + "".join(f'{i}\tDrug\tPain\t"""{review}"""\t{label}\tMay 1, 2011\t3\n'
                            for i, review, label in rows)
    (folder / name).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _tasks(spec):
    return {r.name: load_task(r.task, spec.campaign_dir) for r in spec.runs}


def _spec(tmp_path: Path, hashes: dict[str, str], *, corpus=DRUG_COLUMNS, task="textclf"):
    run = {"tier": "essential", "duration": "1m", "task": task}
    return parse_spec({
        "campaign": {"name": "t", "question": "q", "min_gain": 0.05},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "corpus": {"path": "data", "sha256": hashes} | corpus,
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


@pytest.fixture()
def generic(tmp_path):
    """A CSV corpus and a file task whose hook counts the runs it was given."""
    (tmp_path / "data").mkdir()
    hashes = {}
    for name, text in (("train.csv", TRAIN_CSV), ("test.csv", TEST_CSV)):
        (tmp_path / "data" / name).write_text(text)
        hashes[name] = hashlib.sha256(text.encode()).hexdigest()
    (tmp_path / "task.py").write_text(TASK.replace(
        "{FIGURES}", '{"runs_seen": sorted(params_by_run), "rows": len(corpus.train)}'))
    columns = {"id_column": "id", "input_columns": ["title", "body"], "label_column": "y"}
    return tmp_path, _spec(tmp_path, hashes, corpus=columns, task="task.py")


def test_generic_figures_by_hand(generic):
    tmp_path, spec = generic
    out = tmp_path / "data_check.json"
    report = run_data_check(spec, out=out, tasks=_tasks(spec)).to_json()
    assert json.loads(out.read_text()) == report
    assert report["columns"] == {"id": "id", "inputs": ["title", "body"], "label": "y"}
    assert report["files"]["train.csv"]["rows"] == 4 and report["files"]["test.csv"]["rows"] == 3
    assert report["files"]["train.csv"]["format"] == "csv"
    assert report["labels"] == ["x", "y", "z"] and report["distinct_labels"] == 3
    assert report["test_labels_not_in_train"] == []
    assert report["splits"]["train"] == {
        "rows": 4, "empty_inputs": ["3"], "duplicate_ids": ["2"], "duplicate_inputs": [],
        "missing_labels": [], "labels": {"x": 2, "y": 1, "z": 1}}
    assert report["splits"]["test"] == {
        "rows": 3, "empty_inputs": [], "duplicate_ids": [], "duplicate_inputs": [],
        "missing_labels": ["12"], "labels": {"x": 1, "y": 1, "z": 0}}
    assert report["cross_split_duplicates"] == [
        {"train_ids": ["1"], "test_ids": ["9"], "text": "a\nsame"}]
    assert report["cross_split_ids"] == ["2"]
    # the hook ran once, for the three runs of its task, and its keys are top-level
    assert report["runs_seen"] == ["also-long", "control", "long"] and report["rows"] == 4


def test_a_label_only_in_the_test_split_is_named(generic):
    tmp_path, spec = generic
    # test rows labelled w (twice) and v: no training row has either (train: x, y, x, z)
    text = "id,title,body,y\n9,a,same,w\n2,e,other,y\n12,f,new,w\n13,g,more,v\n"
    (tmp_path / "data" / "test.csv").write_text(text)
    corpus = spec.corpus.model_copy(update={"sha256": dict(
        spec.corpus.sha256, **{"test.csv": hashlib.sha256(text.encode()).hexdigest()})})
    report = run_data_check(spec.model_copy(update={"corpus": corpus}), tasks=_tasks(spec)).to_json()
    assert report["status"] == "ok"
    assert report["test_labels_not_in_train"] == ["v", "w"]
    assert report["splits"]["test"]["labels"] == {"v": 1, "w": 2, "x": 0, "y": 1, "z": 0}
    checked = run_data_check(spec.model_copy(update={"corpus": corpus}), tasks=_tasks(spec))
    assert checked.summary().test_labels_not_in_train == ["v", "w"]
    assert checked.to_json() == dict(report, wall_s=checked.wall_s)
    # a label column without a label list (a numeric target): nothing to name
    many = "".join(f"{i},t,b{i},{i}\n" for i in range(150))
    (tmp_path / "data" / "train.csv").write_text("id,title,body,y\n" + many)
    corpus = corpus.model_copy(update={"sha256": dict(
        corpus.sha256, **{"train.csv": hashlib.sha256(
            ("id,title,body,y\n" + many).encode()).hexdigest()})})
    report = run_data_check(spec.model_copy(update={"corpus": corpus}), tasks=_tasks(spec)).to_json()
    assert report["labels"] is None and report["test_labels_not_in_train"] is None


def test_a_hook_key_that_clashes_is_refused(generic):
    tmp_path, spec = generic
    (tmp_path / "task.py").write_text(TASK.replace("{FIGURES}", '{"splits": 1}'))
    with pytest.raises(TaskError, match="task 'task.py': its data_check returned key 'splits', "
                                        "which the generic data check already wrote; rename it"):
        run_data_check(spec, tasks=_tasks(spec))


def test_a_task_that_reads_its_files_gets_hashes_only(generic):
    tmp_path, spec = generic
    corpus = spec.corpus.model_copy(update={"id_column": None, "input_columns": None,
                                            "label_column": None})
    report = run_data_check(spec.model_copy(update={"corpus": corpus}), tasks=_tasks(spec)).to_json()
    assert report["columns"] is None and "splits" not in report
    assert "test_labels_not_in_train" not in report
    assert report["files"]["test.csv"]["matches"] is True and report["rows"] == 0


def test_textclf_hook_counts_lengths_and_truncation_by_hand(small):
    tmp_path, hashes = small
    spec = _spec(tmp_path, hashes)
    report = run_data_check(spec, tasks=_tasks(spec)).to_json()
    assert report["status"] == "ok"
    assert report["labels"] == ["negative", "neutral", "positive"]
    train = report["splits"]["train"]
    assert train["rows"] == 5 and train["empty_inputs"] == []    # '""' is a quoted empty review
    assert report["empty_texts"] == {"train": ["5"], "test": []}  # ... and empty once cleaned
    assert train["duplicate_inputs"] == [{"ids": ["1", "4"], "text": '"good"'}]
    assert train["labels"] == {"negative": 1, "neutral": 2, "positive": 2}
    assert report["splits"]["test"]["labels"] == {"negative": 1, "neutral": 0, "positive": 1}
    assert report["cross_split_duplicates"] == [
        {"train_ids": ["3"], "test_ids": ["11"], "text": '"bad side effects"'}]
    # lengths 3, 6, 5, 3, 2 | 4, 5 → sorted 2 3 3 4 5 5 6
    assert report["lengths"]["max"] == 6
    assert report["lengths"]["mean"] == pytest.approx(28 / 7)
    assert report["lengths"]["percentiles"]["50"] == 4.0
    assert report["lengths"]["percentiles"]["90"] == pytest.approx(5.4)   # 5 + 0.4 · (6 − 5)
    # kept at 4: 2 3 3 4 4 4 4 = 24 tokens; at 5: 2 3 3 4 5 5 5 = 27
    assert report["truncation"] == [
        {"max_length": 4, "truncated": 3, "total": 7, "fraction": 3 / 7, "kept_mean": 24 / 7,
         "runs": ["control"]},
        {"max_length": 5, "truncated": 1, "total": 7, "fraction": 1 / 7, "kept_mean": 27 / 7,
         "runs": ["long", "also-long"]}]
    assert report["summary"] == "43% of inputs cut at 4 tokens, 14% of inputs cut at 5 tokens"


def test_tampered_file_stops_and_is_reported(small):
    tmp_path, hashes = small
    good = hashes["test.tsv"]
    _write(tmp_path / "data", "test.tsv", [("10", "it helped a lot", "positive")])
    out = tmp_path / "data_check.json"
    spec = _spec(tmp_path, hashes)
    with pytest.raises(CorpusMismatch, match=f"test.tsv: sha256 [0-9a-f]{{64}} but the campaign "
                                             f"file froze {good}"):
        run_data_check(spec, out=out, tasks=_tasks(spec))
    written = json.loads(out.read_text())
    assert written["status"] == "corpus_mismatch"
    assert written["files"]["test.tsv"]["matches"] is False
    assert written["files"]["train.tsv"]["matches"] is True


def test_a_tampered_file_that_no_longer_reads_still_reports_every_hash(small):
    tmp_path, hashes = small
    (tmp_path / "data" / "test.tsv").write_text("only one column\n")
    out = tmp_path / "data_check.json"
    spec = _spec(tmp_path, hashes)
    with pytest.raises(CorpusMismatch, match="and it no longer reads"):
        run_data_check(spec, out=out, tasks=_tasks(spec))
    written = json.loads(out.read_text())
    assert written["status"] == "corpus_mismatch"
    assert [written["files"][n]["matches"] for n in ("test.tsv", "train.tsv")] == [False, True]


def test_truncation_summary_edges():
    assert truncation_summary([128, 129, 3], 128) == {"max_length": 128, "truncated": 1,
                                                      "total": 3, "fraction": 1 / 3,
                                                      "kept_mean": (128 + 128 + 3) / 3}
    assert truncation_summary([], 128)["fraction"] == 0.0
    assert truncation_summary([], 128)["kept_mean"] == 0.0


def test_drug_review_corpus():
    spec = load_spec(Path(__file__).parents[3] / "examples" / "drug-reviews" / "campaign.toml")
    report = run_data_check(spec, tasks=_tasks(spec)).to_json()
    assert report["splits"]["train"]["labels"] == {"negative": 161, "neutral": 54, "positive": 385}
    assert report["splits"]["test"]["labels"] == {"negative": 95, "neutral": 36, "positive": 248}
    assert report["splits"]["train"]["duplicate_inputs"] == []
    assert report["splits"]["test"]["empty_inputs"] == []
    assert [(d["train_ids"], d["test_ids"]) for d in report["cross_split_duplicates"]] == [
        (["227876"], ["107408"])]
    assert report["cross_split_ids"] == []
    by_length = {t["max_length"]: t for t in report["truncation"]}
    assert by_length[128]["total"] == 979
    assert by_length[128]["truncated"] == 400      # nearly half are longer than 128 tokens
    assert by_length[256]["truncated"] == 3
    # what a forward pass computes per review when it computes only real tokens
    assert by_length[128]["kept_mean"] == 92076 / 979        # 94.1 of 128
    assert by_length[256]["kept_mean"] == 107074 / 979       # 109.4 of 256
