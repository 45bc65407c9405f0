"""textclf's tokenised corpus, prepared once per campaign (:mod:`flightplan.trial.data_cache`).

Every run of a campaign at the same ``max_length`` tokenises the same corpus with the same
tokenizer. The first run (or the pilot) builds both splits and stores them in the
campaign's cache; later runs and reloads load them (a sha256-checked file, about 0.1 s
where loading the tokenizer and tokenising took 2–3 s on this CPU). The stored token ids are
the tokenizer's own, so a loaded split equals a freshly tokenised one exactly and no
result moves (``tests/unit/tasks/test_textclf_prepared.py`` checks it).

The key (:func:`key_parts`) holds what the splits depend on: the corpus files' frozen
sha256 and how they are read (:func:`flightplan.ids.corpus_view`, without the limits: an
entry holds the whole corpus, and a run with ``train_limit``/``test_limit``, the pilot's
and the kernel check's, takes its first examples from it), the labels, the
tokenizer's files (sha256 of each) and the ``tokenizers``/``transformers`` versions,
``max_length``, and the task's ``CODE_VERSION`` (text clean-up). All but the library
versions are already in the run id (corpus, base model package and version, params,
code version), so the run ids do not change.

Stored form (one dict, what ``torch.load(weights_only=True)`` reads): ``labels``,
``pad_id`` and per split ``ids`` (strings), ``gold``, ``n_tokens`` (int64, (N,)),
``offsets`` ((N + 1,) int64) and ``tokens`` (the cut token ids of all examples end to
end, int64): example ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

Usage::

    labels, train, test = read_and_encode(trial.cached, corpus_section, base_section,
                                          campaign_dir, max_length=128,
                                          code_version=CODE_VERSION)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from typing import Any, Callable, Mapping

import torch

from pathlib import Path

from flightplan.corpus import Corpus
from flightplan.ids import corpus_view
from flightplan.spec import BaseModelSection, CorpusSection
from flightplan.tasks.textclf.data import read_corpus
from flightplan.tasks.textclf.inference import EncodedSplit, encode_split
from flightplan.tasks.textclf.model import load_tokenizer, model_dir

__all__ = ["TOKENIZER_FILES", "LIMITS", "key_parts", "encoded_splits", "read_and_encode",
           "prepare_campaign", "to_stored", "from_stored"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")
"""The files of the base model's folder that decide how the tokenizer cuts text."""

Cache = Callable[[Mapping[str, Any], Callable[[], Any]], Any]
"""``(key_parts, build) -> object``: :meth:`flightplan.trial.Trial.cached`, or
:func:`flightplan.trial.data_cache.cached` bound to a folder (its first element)."""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def key_parts(corpus_section: CorpusSection, base_section: BaseModelSection,
              labels: list[str], max_length: int, code_version: str) -> dict[str, Any]:
    """The cache key's parts for the splits of this corpus, tokenizer and ``max_length``
    (module docstring).

    Raises:
        SpecError: the base model package is not installed.
    """
    folder = model_dir(base_section)
    tokenizer = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
                 for name in TOKENIZER_FILES if (folder / name).is_file()}
    return {"what": "textclf.encoded_splits", "code_version": code_version,
            "corpus_sha256": dict(corpus_section.sha256),
            "corpus_view": corpus_view(corpus_section.model_dump()), "labels": list(labels),
            "tokenizer_files": tokenizer,
            "libraries": {name: _version(name) for name in ("tokenizers", "transformers")},
            "max_length": max_length}


def _split_to_stored(split: EncodedSplit) -> dict[str, Any]:
    lengths = torch.tensor([len(ids) for ids in split.input_ids], dtype=torch.long)
    offsets = torch.zeros(len(split) + 1, dtype=torch.long)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return {"ids": list(split.ids), "gold": torch.tensor(split.gold, dtype=torch.long),
            "n_tokens": torch.tensor(split.n_tokens, dtype=torch.long), "offsets": offsets,
            "tokens": torch.tensor([t for ids in split.input_ids for t in ids], dtype=torch.long)}


def _split_from_stored(stored: Mapping[str, Any], max_length: int, pad_id: int) -> EncodedSplit:
    tokens: list[int] = stored["tokens"].tolist()
    offsets: list[int] = stored["offsets"].tolist()
    return EncodedSplit(ids=list(stored["ids"]), gold=stored["gold"].tolist(),
                        input_ids=[tokens[a:b] for a, b in zip(offsets, offsets[1:])],
                        n_tokens=stored["n_tokens"].tolist(), max_length=max_length,
                        pad_id=pad_id)


def to_stored(train: EncodedSplit, test: EncodedSplit, labels: list[str]) -> dict[str, Any]:
    """Both splits in the stored form (module docstring)."""
    return {"labels": list(labels), "pad_id": train.pad_id,
            "train": _split_to_stored(train), "test": _split_to_stored(test)}


def from_stored(stored: Mapping[str, Any], max_length: int
                ) -> tuple[EncodedSplit, EncodedSplit]:
    """``(train, test)`` from the stored form: equal, field by field, to the splits it was
    made from."""
    pad_id = int(stored["pad_id"])
    return (_split_from_stored(stored["train"], max_length, pad_id),
            _split_from_stored(stored["test"], max_length, pad_id))


LIMITS = ("train_limit", "test_limit")
"""The ``[corpus]`` keys that cut a split to its first examples: not in the key, since a
cut split is the whole one's first examples (:func:`read_and_encode`)."""


def _whole(section: CorpusSection) -> CorpusSection:
    return section.model_copy(update=dict.fromkeys(LIMITS))


def encoded_splits(cache: Cache, corpus: Corpus, corpus_section: CorpusSection,
                   base_section: BaseModelSection, *, max_length: int, code_version: str
                   ) -> tuple[EncodedSplit, EncodedSplit]:
    """``(train, test)`` of the whole ``corpus`` (no ``train_limit``/``test_limit``)
    tokenised at ``max_length``: from the campaign's cache, or tokenised
    (:func:`~flightplan.tasks.textclf.inference.encode_split`, the tokenizer loaded only
    then) and stored by ``cache``.

    Args:
        cache: ``trial.cached`` (or a folder's :func:`~flightplan.trial.data_cache.cached`).
        corpus: the whole corpus, its hashes checked against ``corpus_section``.
        corpus_section, base_section: ``[corpus]`` without limits, and ``[base_model]``.
        max_length: tokens an input keeps (specials included).
        code_version: textclf's ``CODE_VERSION``.

    Raises:
        ValueError: ``corpus_section`` sets a limit (use :func:`read_and_encode`).
        SpecError: the base model package is not installed.
    """
    if any(getattr(corpus_section, key) is not None for key in LIMITS):
        raise ValueError("encoded_splits takes the whole corpus; read_and_encode cuts it")
    labels = corpus.labels

    def build() -> dict[str, Any]:
        tokenizer = load_tokenizer(base_section)
        return to_stored(encode_split(tokenizer, corpus.train, labels, max_length),
                         encode_split(tokenizer, corpus.test, labels, max_length), labels)

    stored = cache(key_parts(corpus_section, base_section, labels, max_length, code_version),
                   build)
    return from_stored(stored, max_length)


def _first(split: EncodedSplit, count: int | None, whole: list[str], labels: list[str]
           ) -> EncodedSplit:
    """The first ``count`` examples of ``split`` (all when None), their gold indices moved
    from the ``whole`` corpus's labels to ``labels`` (a cut corpus's, which may lack some)."""
    index = {label: i for i, label in enumerate(labels)}
    end = len(split) if count is None else count
    return EncodedSplit(ids=split.ids[:end],
                        gold=[-1 if g < 0 else index[whole[g]] for g in split.gold[:end]],
                        input_ids=split.input_ids[:end], n_tokens=split.n_tokens[:end],
                        max_length=split.max_length, pad_id=split.pad_id)


def read_and_encode(cache: Cache, corpus_section: CorpusSection, base_section: BaseModelSection,
                    campaign_dir: Path, *, max_length: int, code_version: str
                    ) -> tuple[list[str], EncodedSplit, EncodedSplit]:
    """A run's data preparation, as the training loop does it (its ``data_s``): the whole
    corpus read with its hashes checked (:func:`~flightplan.tasks.textclf.data.read_corpus`),
    :func:`encoded_splits` of it, then each split cut to ``train_limit``/``test_limit``
    (the pilot's and the kernel check's), as :func:`flightplan.corpus.load_corpus` cuts
    them: the first examples, labels those of the cut corpus. Equal to tokenising the cut
    corpus, since the tokenizer reads each text on its own. Returns ``(labels, train,
    test)``.

    Raises:
        SpecError: ``[corpus]`` declares no label column; the base model is not installed.
        CorpusMismatch: a corpus file differs from its frozen hash.
    """
    whole_section = _whole(corpus_section)
    corpus = read_corpus(whole_section, campaign_dir)
    train, test = encoded_splits(cache, corpus, whole_section, base_section,
                                 max_length=max_length, code_version=code_version)
    cut_train = corpus.train[:corpus_section.train_limit]
    cut_test = corpus.test[:corpus_section.test_limit]
    labels = sorted({e.label for e in (*cut_train, *cut_test) if e.label is not None})
    return (labels, _first(train, corpus_section.train_limit, corpus.labels, labels),
            _first(test, corpus_section.test_limit, corpus.labels, labels))


def prepare_campaign(corpus_section: Any, params_by_run: Mapping[str, Mapping[str, Any]],
                     base_model: Any, *, campaign_dir: Path, code_version: str) -> list[int]:
    """Build the campaign's tokenised splits at every ``max_length`` of ``params_by_run``
    (the task default where a run sets none) into ``campaign_dir``'s cache, as the runs'
    own :func:`read_and_encode` would (same key, so they, the pilot and the kernel check
    load them). Returns the lengths.

    Raises:
        SpecError: a run's ``max_length`` is not a token count; no label column; the base
            model is not installed.
        CorpusMismatch: a corpus file differs from its frozen hash.
    """
    from flightplan.tasks.textclf.data import max_lengths
    from flightplan.trial.data_cache import CACHE_DIR, cached

    section = corpus_section if isinstance(corpus_section, CorpusSection) else \
        CorpusSection.model_validate(dict(corpus_section))
    base = base_model if isinstance(base_model, BaseModelSection) else \
        BaseModelSection.model_validate(dict(base_model or {}))
    folder = Path(campaign_dir) / CACHE_DIR
    lengths = list(max_lengths(params_by_run))
    for max_length in lengths:
        read_and_encode(lambda parts, build: cached(folder, parts, build)[0], section, base,
                        Path(campaign_dir), max_length=max_length, code_version=code_version)
    return lengths
