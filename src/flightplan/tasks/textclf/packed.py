"""The BERT encoder's forward pass on the real tokens of a padded batch only.

A batch padded to ``T`` tokens holds ``R = Σ l_i`` real tokens of ``B`` examples of lengths
``l_i``. :class:`RealTokenEncoder` runs the encoder (a ``transformers`` ``BertModel``, with
or without peft LoRA layers inside) on the ``R`` real tokens packed as rows ``(R, H)``,
example after example, and never builds a padded activation:

- embeddings: word + token type 0 + absolute position of each real token (its column in
  the padded batch, as ``BertEmbeddings`` numbers it), layer norm, dropout, on ``R`` rows;
- every layer: query, key and value on the ``R`` rows; attention within each example
  over its own ``l_i`` tokens (consecutive examples of equal length share one batched
  product), softmax, attention dropout, the context; then ``BertSelfOutput``,
  ``BertIntermediate`` and ``BertOutput`` (linear, dropout, residual, layer norm) on the
  ``R`` rows;
- pooling: the mean of each example's rows.

The work is that of ``B`` separate forward passes of the unpadded examples (what a
varlen attention kernel computes), so a batch costs its real tokens: on the drug-review
runs at ``max_length`` 256 a padded batch holds about 2.3 times its real tokens, and
the attention dropout of a padded batch alone (``B · heads · T²`` random draws per layer)
was a fifth of a training step. Each example's values equal the padded computation's
(``BertModel`` under the attention mask) mathematically; dropout draws its masks for the
real positions only, so a training run's random stream differs from a padded one's.
Results are a function of the batch's inputs alone, so the same batches give the same
bits on the same machine with the same thread count (a reload reproduces a run's file).

The module reads the submodules of ``transformers``' BERT (``embeddings``,
``encoder.layer[i].attention.self/output``, ``intermediate``, ``output``) by name; a model
whose structure differs is refused when the encoder is built, not mid-run.

Usage::

    encoder = RealTokenEncoder(bert)                       # bert: BertModel (peft inside or not)
    pooled = encoder.pooled(input_ids, attention_mask)     # (B, T) → (B, H)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from flightplan.errors import TaskError

__all__ = ["RealTokenEncoder"]

_LAYER_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value",
                "attention.self.scaling",
                "attention.self.dropout", "attention.output.dense",
                "attention.output.dropout", "attention.output.LayerNorm",
                "intermediate.dense", "output.dense", "output.dropout", "output.LayerNorm")
_EMBEDDING_PARTS = ("word_embeddings", "position_embeddings", "token_type_embeddings",
                    "LayerNorm", "dropout")


class RealTokenEncoder:
    """A BERT encoder's forward pass over the real tokens of padded batches (module
    docstring). Holds no weights of its own: it calls the model's modules, so training,
    ``train()``/``eval()`` and state dicts stay the model's.

    Raises:
        TaskError: ``bert`` lacks a submodule this pass calls, or is configured for
            something it does not compute (a decoder, cross-attention, chunked
            feed-forward, non-absolute positions).
    """

    def __init__(self, bert: nn.Module) -> None:
        config: Any = bert.config
        missing = [f"embeddings.{part}" for part in _EMBEDDING_PARTS
                   if not _has(bert, f"embeddings.{part}")]
        layers = list(getattr(getattr(bert, "encoder", None), "layer", []))
        missing += [f"encoder.layer[{i}].{part}" for i, layer in enumerate(layers)
                    for part in _LAYER_PARTS if not _has(layer, part)]
        unsupported = [name for name, bad in (
            ("is_decoder", bool(getattr(config, "is_decoder", False))),
            ("add_cross_attention", bool(getattr(config, "add_cross_attention", False))),
            ("chunk_size_feed_forward", bool(getattr(config, "chunk_size_feed_forward", 0))),
            ("position_embedding_type",
             getattr(config, "position_embedding_type", "absolute") != "absolute"))
            if bad]
        if not layers or missing or unsupported:
            raise TaskError(
                f"textclf: the base model is not a BERT encoder this task computes "
                f"(missing {', '.join(missing) or 'no part'}; unsupported config "
                f"{', '.join(unsupported) or 'none'}); use a BertModel checkpoint and the "
                f"pinned transformers")
        self.bert = bert
        self.layers = layers
        self.heads = int(config.num_attention_heads)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean of the last hidden states over each example's real tokens.

        Args:
            input_ids: (B, T) int64 token ids, padding anywhere the mask is 0.
            attention_mask: (B, T), 1 on real tokens.

        Returns:
            (B, H) in the activations' dtype; an example without real tokens pools to 0.
        """
        batch, width = int(input_ids.shape[0]), int(input_ids.shape[1])
        real = attention_mask != 0                                        # (B, T)
        rows = real.reshape(-1).nonzero().squeeze(1)                      # (R,) flat indices
        lengths = real.sum(dim=1)                                         # (B,)
        hidden = self._embed(input_ids.reshape(-1).index_select(0, rows), rows % width)
        spans = _equal_length_runs(lengths.tolist())
        for layer in self.layers:
            hidden = self._layer(layer, hidden, spans)
        example = rows // width                                           # (R,) row → example
        sums = hidden.new_zeros(batch, hidden.shape[1]).index_add_(0, example, hidden)
        return sums / lengths.clamp(min=1).unsqueeze(1).to(hidden.dtype)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``BertEmbeddings`` on packed tokens: (R,) ids and positions → (R, H)."""
        emb: Any = self.bert.embeddings
        x = emb.word_embeddings(ids) + emb.token_type_embeddings(torch.zeros_like(ids))
        x = x + emb.position_embeddings(positions)
        out: torch.Tensor = emb.dropout(emb.LayerNorm(x))
        return out

    def _layer(self, layer: Any, x: torch.Tensor, spans: list[tuple[int, int, int]]
               ) -> torch.Tensor:
        """One ``BertLayer`` on packed rows (R, H) → (R, H)."""
        attention = layer.attention
        context = self._attention(attention.self, x, spans)
        out = attention.output
        x = out.LayerNorm(out.dropout(out.dense(context)) + x)
        inner = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(x))
        y: torch.Tensor = layer.output.LayerNorm(
            layer.output.dropout(layer.output.dense(inner)) + x)
        return y

    def _attention(self, self_attention: Any, x: torch.Tensor,
                   spans: list[tuple[int, int, int]]) -> torch.Tensor:
        """Scaled dot-product attention within each example: (R, H) → context (R, H).

        ``spans``: (first row, examples, length) of consecutive examples of one length;
        each span is one batched product of shape (examples, heads, length, length)."""
        query, key, value = (self_attention.query(x), self_attention.key(x),
                             self_attention.value(x))
        heads, size = self.heads, x.shape[1] // self.heads
        scale = float(self_attention.scaling)         # BERT's own: head size ** -0.5
        dropout = float(self_attention.dropout.p) if self_attention.training else 0.0
        pieces = []
        for first, count, length in spans:
            shape = (count, length, heads, size)
            rows = slice(first, first + count * length)
            q, k, v = (t[rows].view(shape).transpose(1, 2) for t in (query, key, value))
            context = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout,
                                                     scale=scale)            # (n, heads, l, d)
            pieces.append(context.transpose(1, 2).reshape(count * length, heads * size))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _equal_length_runs(lengths: list[int]) -> list[tuple[int, int, int]]:
    """Consecutive examples of equal length, as (first packed row, examples, length);
    examples without tokens are left out.

    >>> _equal_length_runs([3, 3, 2, 0, 2])
    [(0, 2, 3), (6, 1, 2), (8, 1, 2)]
    """
    runs: list[tuple[int, int, int]] = []
    row = 0
    previous = -1
    for length in lengths:
        if length and length == previous and runs:
            first, count, _ = runs[-1]
            runs[-1] = (first, count + 1, length)
        elif length:
            runs.append((row, 1, length))
        previous = length
        row += length
    return runs


def _has(module: nn.Module, dotted: str) -> bool:
    """Whether ``module`` has the attribute path ``dotted`` (``"a.b.c"``)."""
    target: Any = module
    for part in dotted.split("."):
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True
