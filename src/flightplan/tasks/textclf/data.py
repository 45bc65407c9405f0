"""The corpus as ``textclf`` reads it: its text clean-up and its data-check figures.

Text: an example's inputs joined by newlines (:attr:`flightplan.corpus.Example.text`),
then cleaned the way the drug-review files need: one pair of surrounding ``"`` removed
(the files quote each review with three, which the TSV reader turns into one), HTML
entities unescaped (``&#039;`` → ``'``), surrounding whitespace stripped.

The data-check hook (:func:`data_check`, the task protocol's ``data_check``) adds:

- ``lengths``: untruncated token lengths (special tokens counted) of train + test after
  the limits: ``count``, ``mean``, ``max``, ``percentiles`` 50/90/95/99;
- ``truncation``: for every ``max_length`` a run uses, how many of those inputs the
  tokenizer would cut (``truncated``, ``total``, ``fraction``), the mean tokens an input
  keeps (``kept_mean``) and which ``runs`` use it;
- ``empty_texts``: ``{train, test}`` ids whose cleaned text is empty (a quoted empty
  review is not blank in the file, so the generic ``empty_inputs`` misses it).

The tokenizer shipped with the base model truncates at 128 silently, so lengths are
measured with ``truncation=False``; one batched call over all texts (fast tokenizer).

Usage::

    corpus = read_corpus(section, campaign_dir)        # hashes checked, columns required
    texts = [clean_text(e) for e in corpus.test]
    figures = data_check(corpus, {"control": {"max_length": 128}}, base_model)
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from flightplan.corpus import Corpus, Example, load_corpus, verify_hashes
from flightplan.errors import SpecError
from flightplan.spec import BaseModelSection, CorpusSection

__all__ = ["clean_text", "read_corpus", "data_check", "token_lengths", "truncation_summary",
           "max_lengths", "PERCENTILES"]

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def clean_text(example: Example) -> str:
    """The text textclf tokenises: ``example.text`` unquoted once, HTML-unescaped, stripped."""
    text = example.text
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    return html.unescape(text).strip()


def read_corpus(section: CorpusSection, campaign_dir: Path) -> Corpus:
    """The corpus with its hashes checked; textclf needs ids, inputs and labels.

    Raises:
        SpecError: ``[corpus]`` declares no ``label_column`` (or no columns at all).
        CorpusMismatch: a file differs from its frozen hash or does not read.
    """
    if section.label_column is None:
        raise SpecError("textclf reads the examples itself through flightplan: declare "
                        "id_column, input_columns and label_column in [corpus]",
                        field="corpus.label_column")
    corpus = load_corpus(section, campaign_dir)
    verify_hashes(corpus, dict(section.sha256))
    return corpus


def token_lengths(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Untruncated token counts, special tokens ([CLS], [SEP]) included, one per text."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), truncation=False, add_special_tokens=True,
                        return_attention_mask=False, return_token_type_ids=False,
                        verbose=False)
    return [len(ids) for ids in encoded["input_ids"]]


def truncation_summary(lengths: Sequence[int], max_length: int) -> dict[str, Any]:
    """``{max_length, truncated, total, fraction, kept_mean}``: inputs longer than
    ``max_length`` tokens are cut; ``fraction = truncated / total``; ``kept_mean`` the
    mean tokens an input keeps, ``Σ min(n, max_length) / total`` (what a forward pass
    computes per input when it computes only real tokens). Both 0.0 without inputs."""
    cut = sum(1 for n in lengths if n > max_length)
    kept = sum(min(n, max_length) for n in lengths)
    return {"max_length": max_length, "truncated": cut, "total": len(lengths),
            "fraction": cut / len(lengths) if lengths else 0.0,
            "kept_mean": kept / len(lengths) if lengths else 0.0}


def _percentile(sorted_values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear`` method)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low))


def max_lengths(params_by_run: Mapping[str, Mapping[str, Any]]) -> dict[int, list[str]]:
    """``{max_length: [run names]}`` (the task default when a run sets none).

    Raises:
        SpecError: a run's ``max_length`` is not an integer of at least 3.
    """
    from flightplan.tasks.textclf.model import TaskParams

    default = TaskParams().max_length
    out: dict[int, list[str]] = defaultdict(list)
    for name, params in params_by_run.items():
        value = params.get("max_length", default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 3:
            raise SpecError(f"{value!r} is not a token count; give an integer of at least 3",
                            field=f"run {name!r}: params.max_length", value=value)
        out[value].append(name)
    return dict(sorted(out.items()))


def data_check(corpus: Corpus, params_by_run: Mapping[str, Mapping[str, Any]],
               base_model: BaseModelSection | Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
    """textclf's figures for the data check: ``{summary, lengths, truncation, empty_texts}``
    (module docstring).

    Args:
        corpus: the checked corpus (train + test after the limits are measured).
        params_by_run: run name → params, for the runs of this task.
        base_model: ``[base_model]`` (its package's tokenizer); the default package if None.

    Raises:
        SpecError: a run's ``max_length`` is not a token count; the base model package is
            not installed.
    """
    from flightplan.tasks.textclf.model import load_tokenizer

    by_length = max_lengths(params_by_run)
    section = base_model if isinstance(base_model, BaseModelSection) else \
        BaseModelSection.model_validate(dict(base_model or {}))
    texts = {name: [clean_text(e) for e in corpus.split(name)] for name in ("train", "test")}
    lengths = token_lengths(load_tokenizer(section), texts["train"] + texts["test"])
    ordered = sorted(lengths)
    truncation = [dict(truncation_summary(lengths, max_length), runs=runs)
                  for max_length, runs in by_length.items()]
    return {"summary": ", ".join(f"{t['fraction']:.0%} of inputs cut at {t['max_length']} "
                                 f"tokens" for t in truncation),
            "lengths": {"count": len(lengths), "special_tokens_included": True,
                        "mean": sum(lengths) / len(lengths) if lengths else 0.0,
                        "max": ordered[-1] if ordered else 0,
                        "percentiles": {str(q): _percentile(ordered, q) for q in PERCENTILES}},
            "truncation": truncation,
            "empty_texts": {name: [e.id for e, text in zip(corpus.split(name), texts[name])
                                   if not text] for name in ("train", "test")}}
