"""textclf's cost model: its pilot figures and the re-estimate of a run from them.

The hooks ``estimate_run`` and ``pilot_examples`` of the task protocol
(:mod:`flightplan.tasks.protocol`) for the built-in task; the generic decision point
(:mod:`flightplan.run.decision`) calls them through the loaded task.

The pilot is a short run of the control on the first examples of the corpus
(``textclf``: a frozen encoder embeds the pilot's ``n'_train`` training examples and
its ``n'_test`` test examples in length-sorted batches, then a linear head trains). The
runner reads its generic figures once (:class:`~flightplan.tasks.estimate.PilotFigures`:
the load, the head's step time, an evaluation, checkpoint costs, output writing); this
model adds what only textclf logs: the encoder's forward time on length-sorted batches
(``encode_s`` rows: short and long inputs). A run on the whole corpus is re-estimated as
(seconds; the last lines are the formula every re-estimate shares,
:func:`flightplan.tasks.estimate.run_seconds`)::

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
                 (trial/interval.py: Young 1974, Daly 2006; without M: L_tol − D − X − R, ≥ D;
                 X: the pilot's transfer time home per checkpoint, 0 when it ran at home)

    frozen encoder (control):
        load_s  = setup_s + passes
        passes  = Σ encode_s · n_train / n'_train + n_test · one_s   the embedding passes
        train_s = steps · step_s                     the pilot's steady (head) step time
        eval_s  = epochs · eval_s · n_test / n'_test   the pilot's evaluation, scaled
    trained encoder (adapter):
        load_s  = setup_s
        train_s = steps · 3 · fwd_s(B · kept(L))        forward + backward ≈ 3 forwards
                                                      (2N vs 6N FLOPs per token, Kaplan
                                                      et al. 2020)
        eval_s  = epochs · n_test · one_s · kept(L) / kept(L0)
    data_s  = load_s                                 all of it is data preparation: the
                                                     corpus read and tokenized, the passes
    total_s = Σ of the parts by cause of flightplan.tasks.estimate.run_seconds: waiting,
              start/load (the pilot's process start and warm-up; load_s − data_s = 0), data,
              restore and lost work (expected interruptions), steps (train_s, plus the
              pilot's loop time per step), checkpoint (saves · C), evaluation, output
              (output_s and the process exit), transfer (the last checkpoint home: X)
    transfer_s = saves · X        beside total_s (a checkpoint travels home while the loop
                                  trains on); X is the control's checkpoint's, the pilot's:
                                  an adapter's larger checkpoint is not scaled

``setup_s`` (reading, hashing and tokenising the corpus, loading the tokenizer) is the
data check's wall time: the same work a run does before it builds its model.
``B · kept(L)`` counts the tokens a step computes, since textclf computes the real
tokens of a padded batch only (:class:`~flightplan.tasks.textclf.packed.RealTokenEncoder`);
attention's share, quadratic in each text's length, is left out. ``L0`` is the control's
max_length; ``mean_len`` the corpus's mean untruncated length (data check).

"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from flightplan.rows import Measurement, Row
from flightplan.tasks.estimate import PilotFigures, mean_or_zero, require_figure, run_seconds

__all__ = ["EncoderFigures", "RunShape", "TRAIN_FORWARDS", "DEFAULT_BATCH_SIZE",
           "forward_seconds", "estimate_run_seconds", "encoder_figures", "run_shape",
           "estimate_run", "pilot_examples"]

DEFAULT_BATCH_SIZE = 16
"""The batch size when a run's params give none (:class:`~.model.TaskParams`)."""


@dataclass(frozen=True)
class EncoderFigures:
    """What textclf's pilot of the control measured (seconds, tokens, examples): the generic
    figures and the encoder's own.

    Attributes:
        pilot: the generic figures (``step_s`` is the head's steady step time, ``eval_s``
            one evaluation of the control on the pilot's test examples, ``load_s`` setup,
            model and both embedding passes, ``setup_s`` the data check's wall time).
        max_length: the control's max_length ``L0`` (tokens).
        encode_total_s: the training set's embedding pass alone (Σ ``encode_s``).
        short_tokens, short_fwd_s: mean computed tokens and forward time of the shorter
            half of the encoder batches.
        long_tokens, long_fwd_s: the same for the longer half.
        mean_len: mean untruncated input length (tokens) from the data check.
        kept_len: the data check's ``kept_mean`` by ``max_length`` (tokens an input keeps
            when cut there); lengths it lacks fall back to ``min(mean_len, max_length)``.
    """

    pilot: PilotFigures
    max_length: int
    encode_total_s: float
    short_tokens: float
    short_fwd_s: float
    long_tokens: float
    long_fwd_s: float
    mean_len: float
    kept_len: Mapping[int, float] = field(default_factory=dict)

    def kept(self, max_length: int) -> float:
        """``kept(L)``: mean tokens an input keeps when cut at ``max_length``."""
        return float(self.kept_len.get(max_length, min(self.mean_len, max_length)))

    @property
    def one_example_s(self) -> float:
        """``one_s``: embedding one test example alone (s), from the pilot's load."""
        p = self.pilot
        rest = p.load_s - self.encode_total_s - p.setup_s
        return max(0.0, rest) / p.pilot_n_test if p.pilot_n_test else 0.0

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
                         mtbi_s: float | None = None) -> dict[str, Any]:
    """Re-estimate one run from the pilot (formula in the module docstring); the transfer
    time home per checkpoint X is the pilot's (0.0 when it ran at home).

    Returns:
        :func:`flightplan.tasks.estimate.run_seconds`' keys and ``tokens_per_batch``;
        ``eval_s`` is the sum over the run's evaluations.
    """
    p = figures.pilot
    steps = math.ceil(p.n_train / shape.batch_size) * shape.epochs
    one_s = figures.one_example_s
    if shape.trains_encoder:
        tokens = shape.batch_size * figures.kept(shape.max_length)
        step_s = TRAIN_FORWARDS * forward_seconds(tokens, figures)
        reference = figures.kept(figures.max_length)
        length_ratio = figures.kept(shape.max_length) / reference if reference else 1.0
        passes = 0.0
        one_eval = p.n_test * one_s * length_ratio
    else:
        tokens = 0.0
        step_s = p.step_s
        passes = p.n_test * one_s + figures.encode_total_s * p.n_train / max(1, p.pilot_n_train)
        one_eval = p.eval_s * p.n_test / max(1, p.pilot_n_test)
    return run_seconds(p, steps=steps, step_s=step_s, load_s=p.setup_s + passes,
                       eval_s=shape.epochs * one_eval, tolerated_loss_s=tolerated_loss_s,
                       mtbi_s=mtbi_s, data_s=p.setup_s + passes) | {"tokens_per_batch": tokens}


def encoder_figures(rows: Sequence[Row], figures: PilotFigures,
                    data_check: Mapping[str, Any]) -> EncoderFigures:
    """The encoder's figures from the pilot's measurement rows, beside the generic
    ``figures`` the runner read from the same rows (see :class:`EncoderFigures`).

    Short and long inputs: the ``encode_s`` batches but the first one logged (warm-up),
    sorted by ``tokens``, the shorter half and the longer half (the middle batch of an odd
    count goes to the longer half). ``max_length``: the steps' ``seq_len`` (the control
    pads to it). ``mean_len`` and ``kept_len`` (the
    ``truncation`` entries' ``kept_mean``) come from the data check.

    Raises:
        ValueError: a figure the re-estimate needs is missing (names it).
    """
    measured = [r for r in rows if isinstance(r, Measurement)]
    logged = [(r.values["tokens"], r.values["encode_s"]) for r in measured
              if "encode_s" in r.values]
    encode = sorted(logged[1:] or logged, key=lambda pair: pair[0])
    half = len(encode) // 2
    short, long = (encode[:half] or encode), encode[half:]
    return EncoderFigures(
        pilot=figures,
        max_length=int(require_figure("seq_len", [r.values["seq_len"] for r in measured
                                          if "step_s" in r.values and "seq_len" in r.values])[0]),
        encode_total_s=sum(e for _, e in logged),
        short_tokens=mean_or_zero([t for t, _ in short]),
        short_fwd_s=mean_or_zero([e for _, e in short]),
        long_tokens=mean_or_zero([t for t, _ in long]),
        long_fwd_s=mean_or_zero([e for _, e in long]),
        mean_len=float(data_check.get("lengths", {}).get("mean", 0.0)),
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
                 tolerated_loss_s: float, mtbi_s: float | None = None) -> dict[str, Any]:
    """Hook: one run's re-estimate (:func:`estimate_run_seconds`) from the pilot.

    Args:
        pilot: the pilot (:class:`~flightplan.tasks.estimate.PilotRecord`: its generic
            ``figures`` and its ``rows``).
        data_check: the data check's report (mean length).
        params: the run's params.
        tolerated_loss_s, mtbi_s: the campaign's checkpoint policy (seconds).

    Raises:
        ValueError: the pilot logged no figure the model needs (named).
    """
    figures = encoder_figures(pilot.rows, pilot.figures, data_check)
    return estimate_run_seconds(run_shape("run", "", params), figures,
                                tolerated_loss_s=tolerated_loss_s, mtbi_s=mtbi_s)
