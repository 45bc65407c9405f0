"""textclf's cost model: its pilot figures and the re-estimate of a run from them.

The hooks ``estimate_run`` and ``pilot_examples`` of the task protocol
(:mod:`flightplan.tasks.protocol`) for the built-in task; the generic decision point
(:mod:`flightplan.run.decision`) calls them through the loaded task.

The pilot is a short run of the control on the first examples of the corpus
(``textclf``: a frozen encoder embeds the pilot's ``n'_train`` training examples and its
``n'_test`` test examples in length-sorted batches, then a linear head trains). It
measures the encoder's forward time on those batches (``encode_s`` rows: short and long
inputs), the load, the head's step time, an evaluation, checkpoint costs and output
writing. A run on the whole corpus is re-estimated as (seconds)::

    fwd_s(T)   = f1 + (T − t1) · (f2 − f1) / (t2 − t1)    forward time of a batch of T ≥ t1
                 computed tokens: the line through the pilot's short (t1, f1) and long
                 (t2, f2) encoder batches; f1 · T / t1 below t1; T · (f1 + f2) / (t1 + t2)
                 when the line does not rise (t2 = t1, or noise)
    one_s      = (load_s − Σ encode_s − setup_s) / n'_test   one test example's share of
                 the pilot's test embedding pass (with the model's build)
    kept(L)    = the data check's ``kept_mean`` at L: mean tokens an input keeps when cut
                 at L; without it min(mean_len, L), an upper bound (E min(n, L) ≤ min(E n, L))
    steps      = ceil(n_train / B) · epochs
    saves      = 1 + floor(train_s / interval)      the runtime saves once early to measure
                 C and D, then every ``interval`` = choose_interval(C, D, R, L_tol, M, X)
                 (run/interval.py: Young 1974, Daly 2006; without M: L_tol − D − X − R, ≥ D;
                 X: the pilot's transfer time home per checkpoint, 0 when it ran at home)

    frozen encoder (control):
        load_s  = setup_s + Σ encode_s · n_train / n'_train + n_test · one_s
        train_s = steps · head_step_s
        eval_s  = epochs · head_eval_s · n_test / n'_test
    trained encoder (adapter):
        load_s  = setup_s
        train_s = steps · 3 · fwd_s(B · kept(L))        forward + backward ≈ 3 forwards
                                                      (2N vs 6N FLOPs per token, Kaplan
                                                      et al. 2020)
        eval_s  = epochs · n_test · one_s · kept(L) / kept(L0)
    total_s = load_s + train_s + eval_s + saves · C + output_s
    transfer_s = saves · X        beside total_s, not in it (a checkpoint travels home while
                                  the loop trains on); X is the control's checkpoint's, the
                                  pilot's: an adapter's larger checkpoint is not scaled

``setup_s`` (reading, hashing and tokenising the corpus, loading the tokenizer) is the
data check's wall time: the same work a run does before it builds its model.
``B · kept(L)`` counts the tokens a step computes, since textclf's linear layers compute
the real tokens of a padded batch only (:class:`~flightplan.tasks.textclf.model.RealTokenLinears`);
the attention over the padding is left out. ``L0`` is the control's
max_length; ``mean_len`` the corpus's mean untruncated length (data check).

"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from flightplan.run.decision import require_figure
from flightplan.run.interval import choose_interval

__all__ = ["EncoderFigures", "RunShape", "TRAIN_FORWARDS", "DEFAULT_BATCH_SIZE",
           "forward_seconds", "estimate_run_seconds", "encoder_figures", "run_shape",
           "estimate_run", "pilot_examples"]

DEFAULT_BATCH_SIZE = 16
"""The batch size when a run's params give none (:class:`~.model.TaskParams`)."""


@dataclass(frozen=True)
class EncoderFigures:
    """What textclf's pilot of the control measured (seconds, tokens, examples).

    Attributes:
        max_length: the control's max_length ``L0`` (tokens).
        n_train, n_test: examples in the campaign's training and test sets.
        pilot_n_train, pilot_n_test: the pilot's (the first examples of each).
        setup_s: the data check's wall time (corpus and tokenizer work of a run's start).
        load_s: the pilot's load: setup, model, both embedding passes.
        encode_total_s: the training set's embedding pass alone (Σ ``encode_s``).
        short_tokens, short_fwd_s: mean computed tokens and forward time of the shorter
            half of the encoder batches.
        long_tokens, long_fwd_s: the same for the longer half.
        head_step_s: the control's steady step time (first step left out).
        head_eval_s: one evaluation of the control on the pilot's test examples.
        mean_len: mean untruncated input length (tokens) from the data check.
        kept_len: the data check's ``kept_mean`` by ``max_length`` (tokens an input keeps
            when cut there); lengths it lacks fall back to ``min(mean_len, max_length)``.
        save_stall_s: ``C``, the loop's stall per checkpoint.
        persist_s: ``D``, until a checkpoint is durable.
        restore_s: ``R``, to restore a checkpoint in a new process.
        output_s: writing predictions, metrics and the artifact.
    """

    max_length: int
    n_train: int
    n_test: int
    pilot_n_train: int
    pilot_n_test: int
    setup_s: float
    load_s: float
    encode_total_s: float
    short_tokens: float
    short_fwd_s: float
    long_tokens: float
    long_fwd_s: float
    head_step_s: float
    head_eval_s: float
    mean_len: float
    save_stall_s: float
    persist_s: float
    restore_s: float
    output_s: float
    kept_len: Mapping[int, float] = field(default_factory=dict)

    def kept(self, max_length: int) -> float:
        """``kept(L)``: mean tokens an input keeps when cut at ``max_length``."""
        return float(self.kept_len.get(max_length, min(self.mean_len, max_length)))

    @property
    def one_example_s(self) -> float:
        """``one_s``: embedding one test example alone (s), from the pilot's load."""
        rest = self.load_s - self.encode_total_s - self.setup_s
        return max(0.0, rest) / self.pilot_n_test if self.pilot_n_test else 0.0

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (keys as the attribute names)."""
        return asdict(self)


@dataclass(frozen=True)
class RunShape:
    """What a run's duration depends on (from its params); ``trains_encoder`` is true
    for adapter variants, false for the frozen-encoder control."""

    name: str
    tier: str
    max_length: int
    batch_size: int
    epochs: int
    trains_encoder: bool


TRAIN_FORWARDS = 3
"""A training step costs about three forward passes (forward + backward ≈ 2N + 4N FLOPs
per token against 2N for the forward alone; Kaplan et al. 2020)."""


def forward_seconds(tokens: float, figures: EncoderFigures) -> float:
    """Forward time (s) of a batch of ``tokens`` computed tokens (module docstring): the line
    through the pilot's short and long encoder batches from ``t1`` up, proportional below
    it, and proportional to the pooled seconds per token when the line does not rise."""
    t1, f1, t2, f2 = (figures.short_tokens, figures.short_fwd_s,
                      figures.long_tokens, figures.long_fwd_s)
    if t2 > t1 and f2 > f1:
        if tokens < t1:
            return f1 * tokens / t1
        return f1 + (tokens - t1) * (f2 - f1) / (t2 - t1)
    return tokens * (f1 + f2) / (t1 + t2) if t1 + t2 > 0 else f1


def estimate_run_seconds(shape: RunShape, figures: EncoderFigures, *, tolerated_loss_s: float,
                         mtbi_s: float | None = None, transfer_s: float = 0.0
                         ) -> dict[str, float]:
    """Re-estimate one run from the pilot (formula in the module docstring).

    Args:
        transfer_s: X, seconds per checkpoint to come home from a flight (0.0: at home).

    Returns:
        ``{steps, tokens_per_batch, step_s, train_s, eval_s, interval_s, checkpoints,
        checkpoint_s, load_s, output_s, total_s, transfer_s}`` (seconds, counts, tokens);
        ``eval_s`` is the sum over the run's evaluations; ``transfer_s`` the run's total
        transfer time home, not part of ``total_s``.
    """
    steps = math.ceil(figures.n_train / shape.batch_size) * shape.epochs
    one_s = figures.one_example_s
    if shape.trains_encoder:
        tokens = shape.batch_size * figures.kept(shape.max_length)
        step_s = TRAIN_FORWARDS * forward_seconds(tokens, figures)
        reference = figures.kept(figures.max_length)
        length_ratio = figures.kept(shape.max_length) / reference if reference else 1.0
        load_s = figures.setup_s
        one_eval = figures.n_test * one_s * length_ratio
    else:
        tokens = 0.0
        step_s = figures.head_step_s
        load_s = (figures.setup_s + figures.n_test * one_s + figures.encode_total_s
                  * figures.n_train / max(1, figures.pilot_n_train))
        one_eval = figures.head_eval_s * figures.n_test / max(1, figures.pilot_n_test)
    train_s = steps * step_s
    eval_s = shape.epochs * one_eval
    interval = choose_interval(save_stall_s=figures.save_stall_s, persist_s=figures.persist_s,
                               restore_s=figures.restore_s, tolerated_loss_s=tolerated_loss_s,
                               mtbi_s=mtbi_s, transfer_s=transfer_s).interval_s
    checkpoints = 1 + (math.floor(train_s / interval) if interval > 0 else 0)
    checkpoint_s = checkpoints * figures.save_stall_s
    total = load_s + train_s + eval_s + checkpoint_s + figures.output_s
    return {"steps": steps, "tokens_per_batch": tokens, "step_s": step_s, "train_s": train_s,
            "eval_s": eval_s, "interval_s": interval, "checkpoints": checkpoints,
            "checkpoint_s": checkpoint_s, "load_s": load_s, "output_s": figures.output_s,
            "total_s": total, "transfer_s": checkpoints * transfer_s}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def encoder_figures(rows: list[dict[str, Any]], resumed_rows: list[dict[str, Any]],
                      data_check: dict[str, Any], *, pilot_n_train: int,
                      pilot_n_test: int) -> EncoderFigures:
    """The pilot's figures from its measurement rows (see :class:`EncoderFigures`).

    Short and long inputs: the ``encode_s`` batches but the first one logged (warm-up),
    sorted by ``tokens``, the shorter half and the longer half (the middle batch of an odd
    count goes to the longer half). Steady step time: the mean ``step_s`` without the
    first step; ``max_length``: the steps' ``seq_len`` (the control logs its max_length).
    C and D: means over the ``checkpoint`` rows; R: the resumed process's ``restore`` row.
    ``n_train``, ``n_test``, ``mean_len``, ``kept_len`` (the ``truncation`` entries'
    ``kept_mean``) and ``setup_s`` (its wall time) come from the data check;
    ``pilot_n_train``/``pilot_n_test`` are the pilot's corpus limits.

    Raises:
        ValueError: a figure the re-estimate needs is missing (names it).
    """
    logged = [(r["tokens"], r["encode_s"]) for r in rows if "encode_s" in r]
    encode = sorted(logged[1:] or logged, key=lambda pair: pair[0])
    half = len(encode) // 2
    short, long = (encode[:half] or encode), encode[half:]
    steps = sorted(((r["step"], r["step_s"]) for r in rows
                    if "step_s" in r and "event" not in r), key=lambda pair: pair[0])
    steady = [s for _, s in steps[1:]] or [s for _, s in steps]
    saves = [r for r in rows if r.get("event") == "checkpoint"]
    restores = [r["restore_s"] for r in resumed_rows
                if r.get("event") == "restore" and r.get("restore_s") is not None]
    splits = data_check.get("splits", {})
    return EncoderFigures(
        max_length=int(require_figure("seq_len", [r["seq_len"] for r in rows
                                          if "step_s" in r and "seq_len" in r])[0]),
        n_train=int(splits.get("train", {}).get("rows", 0)),
        n_test=int(splits.get("test", {}).get("rows", 0)),
        pilot_n_train=pilot_n_train, pilot_n_test=pilot_n_test,
        setup_s=float(data_check.get("wall_s", 0.0)),
        load_s=require_figure("load_s", [r["load_s"] for r in rows if "load_s" in r])[0],
        encode_total_s=sum(e for _, e in logged),
        short_tokens=_mean([t for t, _ in short]), short_fwd_s=_mean([e for _, e in short]),
        long_tokens=_mean([t for t, _ in long]), long_fwd_s=_mean([e for _, e in long]),
        head_step_s=_mean(require_figure("step_s", steady)),
        head_eval_s=_mean(require_figure("eval_s", [r["eval_s"] for r in rows if "eval_s" in r])),
        mean_len=float(data_check.get("lengths", {}).get("mean", 0.0)),
        save_stall_s=_mean(require_figure("checkpoint stall_s", [r["stall_s"] for r in saves])),
        persist_s=_mean([r["persist_s"] for r in saves]),
        restore_s=require_figure("restore_s", restores)[0],
        output_s=sum(r["output_s"] for r in rows if "output_s" in r),
        kept_len={int(t["max_length"]): float(t["kept_mean"])
                  for t in data_check.get("truncation", []) if "kept_mean" in t})


def run_shape(name: str, tier: str, params: Mapping[str, Any]) -> RunShape:
    """The :class:`RunShape` of a run from its params (the task's defaults where unset)."""
    from flightplan.tasks.textclf.model import TaskParams

    defaults = TaskParams()
    adapter = params.get("adapter") or {}
    return RunShape(name, tier, int(params.get("max_length", defaults.max_length)),
                    int(params.get("batch_size", defaults.batch_size)),
                    int(params.get("epochs", defaults.epochs)),
                    trains_encoder=adapter.get("kind", "none") != "none")


def pilot_examples(params: Mapping[str, Any], steps: int) -> int:
    """Hook: the training examples the pilot's ``steps`` steps read (steps × batch)."""
    return steps * int(params.get("batch_size", DEFAULT_BATCH_SIZE))


def estimate_run(pilot: Any, data_check: Mapping[str, Any], params: Mapping[str, Any], *,
                 tolerated_loss_s: float, mtbi_s: float | None = None) -> dict[str, float]:
    """Hook: one run's re-estimate (:func:`estimate_run_seconds`) from the pilot's rows.

    Args:
        pilot: the pilot's measurements (``rows``, ``resumed_rows``, ``figures`` with
            ``pilot_n_train``/``pilot_n_test``/``transfer_s``).
        data_check: the data check's report (rows per split, mean length, wall time).
        params: the run's params.
        tolerated_loss_s, mtbi_s: the campaign's checkpoint policy (seconds).

    Raises:
        ValueError: the pilot logged no figure the model needs (named).
    """
    figures = encoder_figures(pilot.rows, pilot.resumed_rows, data_check,
                              pilot_n_train=pilot.figures.pilot_n_train,
                              pilot_n_test=pilot.figures.pilot_n_test)
    return estimate_run_seconds(run_shape("run", "", params), figures,
                                tolerated_loss_s=tolerated_loss_s, mtbi_s=mtbi_s,
                                transfer_s=pilot.figures.transfer_s)
