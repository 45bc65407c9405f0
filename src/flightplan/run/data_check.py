"""The data check: the campaign's first essential stage.

It reads the frozen corpus and reports, as one JSON object (also ``data_check.json``):

- ``files``: per corpus file its split, rows, size and sha256 against the hash frozen in
  ``[corpus]``; any difference raises :class:`CorpusMismatch` (which stops the campaign)
  after the report, with ``status: "corpus_mismatch"``, has been written;
- ``splits``: rows, empty texts (ids), duplicate texts within the split (ids), labels;
- ``cross_split_duplicates``: texts found in both train and test, with both sets of ids;
- ``lengths``: untruncated token lengths (special tokens counted) of train + test:
  percentiles 50/90/95/99, mean and max;
- ``truncation``: for every ``max_length`` a run uses, how many of the essential inputs
  (train + test, after the limits) the tokenizer would cut, and which runs use it.

The tokenizer shipped with the base model truncates at 128 silently, so lengths are
measured with ``truncation=False``; one batched call over all texts (fast tokenizer).

Usage::

    report = run_data_check(spec, out=campaign_dir / ".flightplan" / "data_check.json")
    report["truncation"][0]["fraction"]       # e.g. 0.41 at max_length 128
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from flightplan.durable import write_json_atomic
from flightplan.corpus import Corpus, Example, load_corpus, verify_hashes
from flightplan.errors import CorpusMismatch, SpecError
from flightplan.spec import BaseModelSection, CampaignSpec

__all__ = ["run_data_check", "token_lengths", "truncation_summary", "PERCENTILES"]

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
PREVIEW_CHARS = 80


def token_lengths(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Untruncated token counts, special tokens ([CLS], [SEP]) included, one per text."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), truncation=False, add_special_tokens=True,
                        return_attention_mask=False, return_token_type_ids=False,
                        verbose=False)
    return [len(ids) for ids in encoded["input_ids"]]


def truncation_summary(lengths: Sequence[int], max_length: int) -> dict[str, Any]:
    """``{max_length, truncated, total, fraction}``: inputs longer than ``max_length``
    tokens are cut; ``fraction = truncated / total`` (0.0 when there are no inputs)."""
    cut = sum(1 for n in lengths if n > max_length)
    return {"max_length": max_length, "truncated": cut, "total": len(lengths),
            "fraction": cut / len(lengths) if lengths else 0.0}


def _percentile(sorted_values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear`` method)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low))


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _split_report(examples: list[Example], labels: list[str]) -> dict[str, Any]:
    by_text: dict[str, list[str]] = defaultdict(list)
    for example in examples:
        by_text[example.text].append(example.id)
    counts = {label: 0 for label in labels}
    for example in examples:
        counts[example.label] += 1
    return {"rows": len(examples),
            "empty_texts": [e.id for e in examples if not e.text.strip()],
            "duplicates": [{"ids": ids, "text": _preview(text)}
                           for text, ids in by_text.items() if len(ids) > 1],
            "labels": counts}


def _cross_split(corpus: Corpus) -> list[dict[str, Any]]:
    train_ids: dict[str, list[str]] = defaultdict(list)
    for example in corpus.train:
        train_ids[example.text].append(example.id)
    test_ids: dict[str, list[str]] = defaultdict(list)
    for example in corpus.test:
        if example.text in train_ids:
            test_ids[example.text].append(example.id)
    return [{"train_ids": train_ids[text], "test_ids": ids, "text": _preview(text)}
            for text, ids in test_ids.items()]


def _max_lengths(spec: CampaignSpec) -> dict[int, list[str]]:
    """``{max_length: [run names]}`` over the spec's runs (the task default when unset)."""
    from flightplan.tasks.textclf.model import TaskParams

    default = TaskParams().max_length
    out: dict[int, list[str]] = defaultdict(list)
    for index, run in enumerate(spec.runs):
        value = run.params.get("max_length", default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 3:
            raise SpecError(f"{value!r} is not a token count; give an integer of at least 3",
                            file=spec.source, field=f"run[{index}].params.max_length", value=value)
        out[value].append(run.name)
    return dict(sorted(out.items()))


def _file_rows(corpus: Corpus, expected: dict[str, str]) -> dict[str, Any]:
    return {name: {"split": f.split, "rows": f.rows, "size_bytes": f.size_bytes,
                   "sha256": f.sha256, "expected_sha256": expected.get(name),
                   "matches": f.sha256 == expected.get(name)}
            for name, f in sorted(corpus.files.items())}


def run_data_check(spec: CampaignSpec, *, out: Path | None = None) -> dict[str, Any]:
    """Check the campaign's corpus; write the report to ``out`` (atomically) if given.

    Args:
        spec: the campaign; needs ``[corpus]`` (``[base_model]`` defaults to the package).
        out: where to write ``data_check.json``; nothing is written when None.

    Returns:
        the report (see the module docstring); ``status`` is ``"ok"``.

    Raises:
        SpecError: the campaign has no ``[corpus]``, a package is missing, or a run's
            ``max_length`` is not a token count.
        CorpusMismatch: a file's sha256 differs from the frozen one (the report, with
            ``status: "corpus_mismatch"``, is written first) or a file is missing.
    """
    started = time.perf_counter()
    if spec.corpus is None:
        raise SpecError("the campaign has no [corpus]; add one with package or path and sha256",
                        file=spec.source, field="corpus")
    corpus = load_corpus(spec.corpus, spec.campaign_dir)
    report: dict[str, Any] = {"status": "ok", "source": corpus.source,
                              "files": _file_rows(corpus, dict(spec.corpus.sha256)),
                              "limits": {"train": spec.corpus.train_limit,
                                         "test": spec.corpus.test_limit}}
    try:
        verify_hashes(corpus, dict(spec.corpus.sha256))
    except CorpusMismatch as exc:
        report.update(status="corpus_mismatch", message=str(exc),
                      wall_s=time.perf_counter() - started)
        if out is not None:
            write_json_atomic(Path(out), report)
        raise
    report["labels"] = corpus.labels
    report["splits"] = {name: _split_report(corpus.split(name), corpus.labels)
                        for name in ("train", "test")}
    report["cross_split_duplicates"] = _cross_split(corpus)

    from flightplan.tasks.textclf.model import load_tokenizer
    tokenizer = load_tokenizer(spec.base_model or BaseModelSection())
    lengths = token_lengths(tokenizer, [e.text for e in (*corpus.train, *corpus.test)])
    ordered = sorted(lengths)
    report["lengths"] = {"count": len(lengths), "special_tokens_included": True,
                         "mean": sum(lengths) / len(lengths) if lengths else 0.0,
                         "max": ordered[-1] if ordered else 0,
                         "percentiles": {str(q): _percentile(ordered, q) for q in PERCENTILES}}
    report["truncation"] = [dict(truncation_summary(lengths, max_length), runs=runs)
                            for max_length, runs in _max_lengths(spec).items()]
    report["wall_s"] = time.perf_counter() - started
    if out is not None:
        write_json_atomic(Path(out), report)
    return report
