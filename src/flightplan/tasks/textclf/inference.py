"""Tokenised splits, per-example prediction, the predictions file and the metrics.

Predictions are computed in batches of inputs of *equal* token length (at most
:data:`EVAL_BATCH` each), in eval mode: no padding enters, so no attention mask changes
what a text sees and its probabilities depend on the text and the weights alone. The
batches are a pure function of the split (lengths ascending, then example order), so a
reload in a fresh process reproduces the run's file bit for bit on the same machine with
the same thread count. Against one example at a time (``batch=1``) the results promise
agreement within 1e-5 (``tests/unit/tasks/test_textclf.py`` checks it); on this CPU
(MiniLM, 150 reviews at 128 tokens, one thread) they were even bitwise equal.

Usage::

    split = encode_split(tokenizer, corpus.test, labels, max_length=128)
    probs = predict_probabilities(model, split)                 # (N, C) float32
    rows = prediction_rows(split, probs, labels)
    write_predictions(run_dir / "predictions.csv", rows, labels)
    metrics = classification_metrics(split.gold, probs.argmax(1).tolist(), labels)
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

from flightplan.durable import write_atomic
from flightplan.corpus import Example
from flightplan.tasks.textclf.data import clean_text

__all__ = ["EncodedSplit", "encode_split", "collate", "example_embeddings",
           "predict_probabilities", "prediction_rows", "write_predictions",
           "classification_metrics", "PREDICTION_COLUMNS", "EVAL_BATCH", "length_batches"]

PREDICTION_COLUMNS: tuple[str, ...] = ("example_id", "gold", "predicted", "n_tokens", "truncated")
EVAL_BATCH = 64            # inputs per no-grad prediction batch (all of one token length)


@dataclass(frozen=True)
class EncodedSplit:
    """A tokenised split. ``input_ids[i]`` is cut at ``max_length`` (specials included);
    ``n_tokens[i]`` is the untruncated length; ``gold[i]`` the label index (-1 when the
    label is not one of the model's labels)."""

    ids: list[str]
    gold: list[int]
    input_ids: list[list[int]]
    n_tokens: list[int]
    max_length: int
    pad_id: int

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def truncated(self) -> list[bool]:
        """Whether each input was cut at ``max_length``."""
        return [n > self.max_length for n in self.n_tokens]

    def truncated_fraction(self) -> float:
        """Fraction (0–1) of inputs longer than ``max_length`` (0.0 for an empty split)."""
        return sum(self.truncated) / len(self) if len(self) else 0.0


def encode_split(tokenizer: Any, examples: Sequence[Example], labels: Sequence[str],
                 max_length: int) -> EncodedSplit:
    """Tokenise ``examples`` twice in one batch each: untruncated (lengths) and cut at
    ``max_length`` (model inputs), so truncation is exactly the tokenizer's own. Texts are
    :func:`~flightplan.tasks.textclf.data.clean_text` of each example."""
    texts = [clean_text(e) for e in examples]
    index = {label: i for i, label in enumerate(labels)}
    if texts:
        full = tokenizer(texts, truncation=False, verbose=False)["input_ids"]
        cut = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    else:
        full, cut = [], []
    return EncodedSplit(ids=[e.id for e in examples], gold=[index.get(e.label, -1) for e in examples],
                        input_ids=[list(ids) for ids in cut], n_tokens=[len(ids) for ids in full],
                        max_length=max_length, pad_id=int(tokenizer.pad_token_id or 0))


def collate(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token id lists to the longest: ``(input_ids (B, T) int64, attention_mask (B, T))``."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return input_ids, mask


def length_batches(input_ids: Sequence[Sequence[int]], batch: int) -> list[list[int]]:
    """Indices grouped by token length (ascending), each group cut into pieces of at
    most ``batch`` in example order: every piece holds inputs of one length.

    >>> length_batches([[1, 2], [3], [4, 5], [6, 7]], 2)
    [[1], [0, 2], [3]]
    """
    if batch < 1:
        raise ValueError(f"batch {batch}: give a positive number of inputs")
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(input_ids):
        by_length.setdefault(len(ids), []).append(i)
    return [group[start:start + batch] for length in sorted(by_length)
            for group in [by_length[length]] for start in range(0, len(group), batch)]


@torch.no_grad()
def example_embeddings(model: Any, split: EncodedSplit, *, batch: int = EVAL_BATCH) -> torch.Tensor:
    """Pooled embeddings (N, H) float32 on the CPU, in batches of equal token length
    (:func:`length_batches`; ``batch=1`` is one example at a time), computed on the
    model's device. No padding: the attention mask is all ones."""
    hidden = model.head.in_features
    out = torch.empty((len(split), hidden), dtype=torch.float32)
    dev = next(model.parameters()).device
    for chunk in length_batches(split.input_ids, batch):
        input_ids = torch.tensor([split.input_ids[i] for i in chunk], dtype=torch.long,
                                 device=dev)                                 # (b, T)
        out[chunk] = model.embed(input_ids, torch.ones_like(input_ids)).float().cpu()
    return out


@torch.no_grad()
def predict_probabilities(model: Any, split: EncodedSplit,
                          embeddings: torch.Tensor | None = None, *,
                          batch: int = EVAL_BATCH) -> torch.Tensor:
    """Softmax probabilities (N, C) float32 on the CPU, in eval mode.

    ``embeddings`` (N, H) (from :func:`example_embeddings` on the same model) skips the
    encoder. ``batch`` as in :func:`example_embeddings`. The model is left in eval mode.
    """
    model.eval()
    if embeddings is None:
        embeddings = example_embeddings(model, split, batch=batch)
    if not len(embeddings):
        return torch.zeros((0, model.head.out_features))
    dev = next(model.parameters()).device
    logits = model.classify(embeddings.to(dev)).float().cpu()          # (N, C)
    return torch.softmax(logits, dim=-1)


def prediction_rows(split: EncodedSplit, probs: torch.Tensor,
                    labels: Sequence[str]) -> list[dict[str, Any]]:
    """One row per example: ``example_id, gold, predicted, n_tokens, truncated,
    prob_<label>...``; probabilities as Python floats (exact float32 values)."""
    predicted = probs.argmax(dim=1).tolist() if len(split) else []
    rows = []
    for i in range(len(split)):
        row: dict[str, Any] = {"example_id": split.ids[i],
                               "gold": labels[split.gold[i]] if split.gold[i] >= 0 else "",
                               "predicted": labels[predicted[i]], "n_tokens": split.n_tokens[i],
                               "truncated": split.n_tokens[i] > split.max_length}
        for j, label in enumerate(labels):
            row[f"prob_{label}"] = float(probs[i, j])
        rows.append(row)
    return rows


def write_predictions(path: Path, rows: Sequence[dict[str, Any]], labels: Sequence[str]) -> None:
    """Write the predictions CSV atomically; floats as ``repr`` (round-trips exactly),
    booleans as ``true``/``false``."""
    columns = [*PREDICTION_COLUMNS, *(f"prob_{label}" for label in labels)]
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([("true" if row[c] else "false") if isinstance(row[c], bool)
                         else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    write_atomic(Path(path), buffer.getvalue().encode("utf-8"))


def classification_metrics(gold: Sequence[int], predicted: Sequence[int],
                           labels: Sequence[str]) -> dict[str, Any]:
    """``{accuracy, macro_f1, per_class: {label: {precision, recall, f1, support}},
    labels, n_test}`` by scikit-learn (zero_division=0: a class never predicted has
    precision 0). ``per_class`` lists every one of ``labels``; macro-F1 is
    ``f1_score(average="macro")`` with scikit-learn's default labels (those gold or
    predicted at least once; a gold of -1, no label, is a class of its own), the value
    close computes from ``predictions.csv``."""
    indices = list(range(len(labels)))
    if not gold:
        return {"accuracy": 0.0, "macro_f1": 0.0, "per_class": {}, "labels": list(labels), "n_test": 0}
    precision, recall, f1, support = precision_recall_fscore_support(
        gold, predicted, labels=indices, zero_division=0)
    return {"accuracy": float(accuracy_score(gold, predicted)),
            "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
            "per_class": {label: {"precision": float(precision[i]), "recall": float(recall[i]),
                                  "f1": float(f1[i]), "support": int(support[i])}
                          for i, label in enumerate(labels)},
            "labels": list(labels), "n_test": len(gold)}
