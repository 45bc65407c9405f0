"""Tokenised splits, per-example prediction, the predictions file and the metrics.

Forward-only passes (evaluation, the control's embedding passes) take the split sorted
by length, cut by :func:`length_batches` into batches of at most :data:`EVAL_BATCH`
where padding would cost more than another forward call, each padded to its longest
input. The attention mask keeps the padding out of every real token's attention and out
of the mean pooling, and the encoder computes the real tokens only
(:class:`~flightplan.tasks.textclf.packed.RealTokenEncoder`). The batches are a pure
function of the inputs' lengths, so a reload in a fresh process reproduces the run's
file bit for bit on the same machine with the same thread count. Against one example at
a time (``batch=1``: no padding) the results promise agreement within 1e-5
(``tests/unit/tasks/test_textclf.py`` checks it).

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from flightplan.durable import write_atomic
from flightplan.corpus import Example
from flightplan.tasks.textclf.data import clean_text

__all__ = ["EncodedSplit", "encode_split", "collate", "pooled", "example_embeddings",
           "predict_probabilities", "prediction_rows", "write_predictions",
           "classification_metrics", "PREDICTION_COLUMNS", "EVAL_BATCH", "CALL_TOKENS",
           "length_batches"]

PREDICTION_COLUMNS: tuple[str, ...] = ("example_id", "gold", "predicted", "n_tokens", "truncated")
EVAL_BATCH = 32
"""Inputs per forward-only batch at most (evaluation, embedding passes). On this CPU,
MiniLM, 379 reviews at max_length 128: 32 took 0.94–0.95 of the CPU time of 64 (whose
activations outgrow the cache), equal at 256."""
CALL_TOKENS = 24
"""The price of one more forward call, in tokens (:func:`length_batches`). A call reads
every weight of the encoder whatever its batch: on this 2-core CPU (MiniLM, one thread)
the forward pass of one token took 11 ms and each further token about 0.5–0.8 ms, so a
call costs about as much as 15–25 tokens; larger prices give fewer, more padded calls."""


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
    gold = [-1 if e.label is None else index.get(e.label, -1) for e in examples]
    return EncodedSplit(ids=[e.id for e in examples], gold=gold,
                        input_ids=[list(ids) for ids in cut], n_tokens=[len(ids) for ids in full],
                        max_length=max_length, pad_id=int(tokenizer.pad_token_id or 0))


def collate(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token id lists to the longest: ``(input_ids (B, T) int64, attention_mask (B, T))``."""
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([[*r, *[pad_id] * (width - len(r))] for r in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    return input_ids, mask


def pooled(model: Any, split: EncodedSplit, indices: Sequence[int],
           device: torch.device) -> torch.Tensor:
    """The model's pooled embeddings (b, H) of ``split``'s examples ``indices`` in one
    forward call on ``device``, padded to the longest of them; the attention mask keeps
    padding out of every real token's attention and out of the mean, so a text's result
    does not depend on its padding beyond float rounding. Grad mode as the caller's."""
    input_ids, mask = collate([split.input_ids[i] for i in indices], split.pad_id)  # (b, T)
    pooled: torch.Tensor = model.embed(input_ids.to(device), mask.to(device))
    return pooled


def length_batches(lengths: Sequence[int], max_batch: int, *,
                   call_tokens: int = CALL_TOKENS) -> list[list[int]]:
    """Indices cut into batches that compute the fewest tokens, counting each forward call.

    The indices are sorted by ``(length, index)`` and cut into consecutive pieces of at
    most ``max_batch`` that minimise ``Σ (len(piece) · longest(piece) + call_tokens)``:
    the tokens computed when every piece is padded to its longest input, plus a fixed
    price per forward call (:data:`CALL_TOKENS`). Solved exactly by dynamic programming
    over the sorted order (O(n · max_batch)); of equal costs the longer last piece wins,
    so the result is a function of the lengths alone. ``call_tokens=0`` gives pieces of
    equal length (no padding at all).

    >>> length_batches([2, 1, 2, 2, 3], 2, call_tokens=0)     # lengths 1 | 2 | 2 2 | 3
    [[1], [0], [2, 3], [4]]
    >>> length_batches([2, 1, 2, 2, 3], 5, call_tokens=2)     # 4 · 2 + 2, then 3 + 2
    [[1, 0, 2, 3], [4]]
    >>> length_batches([2, 1, 2, 2, 3], 5, call_tokens=5)     # 5 · 3 + 5 < 4 · 2 + 5 + 3 + 5
    [[1, 0, 2, 3, 4]]

    Raises:
        ValueError: ``max_batch`` below 1.
    """
    if max_batch < 1:
        raise ValueError(f"batch {max_batch}: give a positive number of inputs")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    cost = [0] * (len(order) + 1)           # cost[j]: the cheapest cut of order[:j]
    start = [0] * (len(order) + 1)          # start[j]: where the last piece of that cut begins
    for end in range(1, len(order) + 1):
        width = lengths[order[end - 1]]     # the longest of any piece ending here
        options = range(max(0, end - max_batch), end)
        start[end] = min(options, key=lambda s: (cost[s] + (end - s) * width, s))
        cost[end] = cost[start[end]] + (end - start[end]) * width + call_tokens
    pieces: list[list[int]] = []
    end = len(order)
    while end:
        pieces.append(order[start[end]:end])
        end = start[end]
    return pieces[::-1]


def example_embeddings(model: Any, split: EncodedSplit, *, batch: int = EVAL_BATCH,
                       on_batch: Callable[[list[int], float], None] | None = None
                       ) -> torch.Tensor:
    """Pooled embeddings (N, H) float32 on the CPU, forward only (``torch.inference_mode``;
    the model's train/eval mode is left as it is), computed on the model's device in
    :func:`length_batches` of at most ``batch`` inputs (``batch=1``: one example at a
    time). ``on_batch(indices, seconds)`` is called after each batch with its examples
    and its wall time."""
    hidden = model.head.in_features
    out = torch.empty((len(split), hidden), dtype=torch.float32)
    dev = next(model.parameters()).device
    with torch.inference_mode():
        for piece in length_batches([len(ids) for ids in split.input_ids], batch):
            began = time.perf_counter()
            out[piece] = pooled(model, split, piece, dev).float().cpu()
            if on_batch is not None:
                on_batch(piece, time.perf_counter() - began)
    return out


@torch.inference_mode()
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
    # imported here: a reload, which computes no metric, does without scikit-learn's
    # import (about 1.2 s of CPU per process on this machine)
    from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

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
