"""Verdicts over seeds and examples: a variant against its reference when either side ran
several replicates (``seeds`` ≥ 2), and each run's seed spread.

The difference is ``d = mean_k metric(V_k) - mean_k metric(R_k)``, the mean over each
side's replicates. Its 95 % interval is a two-level paired bootstrap (Davison & Hinkley
1997, §3.8, resampling both stages; the examples crossed with the replicates as in Owen
2007, "The pigeonhole bootstrap"): every draw

1. resamples the replicates of each side, with replacement, independently per side;
2. resamples the test examples, with replacement, one index draw shared by both sides
   (the pairing on examples);
3. computes the metric of each drawn replicate on the drawn examples, averages over the
   drawn replicates of each side, and takes variant − reference.

The interval is the percentile interval of :data:`~flightplan.metrics.N_RESAMPLES` draws,
from a generator seeded with :data:`~flightplan.metrics.SEED` (the same predictions
always give the same interval). Measured on synthetic campaigns (tests/unit/close/
test_close_replicates.py, docs/decisions.md "Replicates"): 94.5 % coverage with 10
replicates a side and a seed part two thirds of the examples' sampling; conservative
(99.5 %) when the replicates also disagree example by example, since that noise is counted
at both levels; short (88.75 %) when the seed spread is as large as the examples' sampling
and each side has 5 replicates.

A run's seed spread is the standard deviation (ddof = 1) and the range of the metric over
its replicates (:func:`seed_spread`).

Usage::

    statistic, arrays = aligned("macro_f1", [*reference_replicates, *variant_replicates])
    compare_replicates(statistic, arrays[:2], arrays[2:], goal="max", min_gain=0.05)
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from flightplan.close.conclusion import comparison_result
from flightplan.metrics import (CONFIDENCE, N_RESAMPLES, SEED, Metric, Predictions, aligned,
                                parse_metric)

__all__ = ["seed_spread", "two_level_draws", "compare_replicates",
           "compare_replicated_runs", "run_seed_spreads", "with_run_seed_spreads", "CHUNK_CELLS"]

CHUNK_CELLS = 2_000_000
"""At most this many drawn example indices are held at once (draws × examples): the
draws are computed in chunks, so memory stays bounded on a large test split."""

Arrays = tuple[np.ndarray, ...]


def seed_spread(values: Sequence[float]) -> dict[str, Any]:
    """The spread of a run's metric over its replicates.

    Returns:
        ``{replicates, values, mean, sd, min, max}``: ``sd`` the sample standard deviation
        (ddof = 1; None with one replicate), the range ``[min, max]``; rounded to 6 places.
    """
    data = np.asarray(values, dtype=float)
    return {"replicates": int(len(data)), "values": [round(float(v), 6) for v in data],
            "mean": round(float(data.mean()), 6),
            "sd": round(float(data.std(ddof=1)), 6) if len(data) >= 2 else None,
            "min": round(float(data.min()), 6), "max": round(float(data.max()), 6)}


def two_level_draws(statistic: Callable[..., np.ndarray], reference: Sequence[Arrays],
                    variant: Sequence[Arrays], *, n_resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
    """The bootstrap distribution of variant − reference over replicates and examples.

    Args:
        statistic: the metric of per-example arrays, ``statistic(*arrays, axis=-1)``:
            (..., N) → (...) (:func:`flightplan.metrics.aligned`).
        reference, variant: each replicate's arrays (N,), every replicate aligned on the
            same N examples.
        n_resamples: draws. rng: the generator (each chunk draws examples, then the
            reference's replicates, then the variant's).

    Returns:
        (n_resamples,) differences, one per draw (module docstring, steps 1-3).
    """
    n = len(reference[0][0])
    chunk = max(1, CHUNK_CELLS // max(n, 1))
    out = []
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        examples = rng.integers(0, n, size=(b, n))
        picks = []
        for side in (reference, variant):
            values = np.stack([np.asarray(statistic(*(a[examples] for a in arrays), axis=-1),
                                          dtype=float) for arrays in side])   # (K, b)
            drawn = rng.integers(0, len(side), size=(b, len(side)))            # (b, K)
            picks.append(values[drawn, np.arange(b)[:, None]].mean(axis=1))
        out.append(picks[1] - picks[0])
    return np.concatenate(out)


def compare_replicates(statistic: Callable[..., np.ndarray], reference: Sequence[Arrays],
                       variant: Sequence[Arrays], *, goal: str, min_gain: float,
                       n_resamples: int = N_RESAMPLES, seed: int = SEED) -> dict[str, Any]:
    """A variant against its reference over their replicates and the test examples.

    Args:
        statistic, reference, variant: as :func:`two_level_draws` (at least one replicate
            a side).
        goal: ``"max"`` or ``"min"``. min_gain: the threshold, in metric units.
        n_resamples, seed: the bootstrap's draws and generator seed.

    Returns:
        The keys of :func:`flightplan.close.conclusion.compare` (``reference_value`` and
        ``variant_value`` the means over replicates; the interval the two-level one, and
        ``p_value`` from its draws, as Holm's adjustment needs), plus
        ``interval: "replicates and examples"`` and ``seed_spread: {reference, variant}``
        (:func:`seed_spread` of each side).
    """
    ref_values = [float(statistic(*arrays)) for arrays in reference]
    var_values = [float(statistic(*arrays)) for arrays in variant]
    point = float(np.mean(var_values) - np.mean(ref_values))
    n = len(reference[0][0])
    draws = two_level_draws(statistic, reference, variant, n_resamples=n_resamples,
                            rng=np.random.default_rng(seed))
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = (float(q) for q in np.quantile(draws, [alpha, 1.0 - alpha]))
    low, high = min(low, point), max(high, point)      # a constant metric: the point
    return {**comparison_result(float(np.mean(ref_values)), float(np.mean(var_values)), point,
                                (low, high), draws, n_examples=n, goal=goal,
                                min_gain=min_gain, n_resamples=n_resamples, seed=seed),
            "interval": "replicates and examples",
            "seed_spread": {"reference": seed_spread(ref_values),
                            "variant": seed_spread(var_values)}}


def compare_replicated_runs(reference: Sequence[Predictions], variant: Sequence[Predictions],
                            *, metric: Metric | str, goal: str, min_gain: float
                            ) -> dict[str, Any]:
    """:func:`compare_replicates` on the replicates' predictions, all aligned on the
    example ids every replicate has (:func:`flightplan.metrics.aligned`).

    Raises:
        CheckFailed: a replicate lacks what the metric needs.
    """
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    statistic, arrays = aligned(metric, [*reference, *variant])
    k = len(reference)
    return compare_replicates(statistic, arrays[:k], arrays[k:], goal=goal, min_gain=min_gain)


def run_seed_spreads(values: Mapping[str, Sequence[tuple[str, float]]]
                     ) -> dict[str, dict[str, Any]]:
    """Run name → :func:`seed_spread` of its replicates' metric values plus ``run_ids``
    (whose predictions gave them), for each run with at least two (``values``: run name →
    ``(run_id, metric)`` of each usable replicate)."""
    return {name: seed_spread([v for _, v in pairs]) | {"run_ids": [r for r, _ in pairs]}
            for name, pairs in values.items() if len(pairs) >= 2}


def with_run_seed_spreads(conclusion: dict[str, Any], spreads: dict[str, dict[str, Any]]
                     ) -> dict[str, Any]:
    """The conclusion with ``seed_spread`` (run name → :func:`seed_spread` and its
    ``run_ids``) and a sentence after its verdict (unchanged when no run has two
    replicates): ``Seed spread of macro_f1: control sd
    0.0250, range [0.4217, 0.4930] over 5 replicates; …``."""
    if not spreads:              # one seed a run: the conclusion as it was
        return conclusion
    parts = [f"{name} sd {s['sd']:.4f}, range [{s['min']:.4f}, {s['max']:.4f}] over "
             f"{s['replicates']} replicates" for name, s in spreads.items()]
    sentence = f" Seed spread of {conclusion['metric']}: {'; '.join(parts)}."
    return conclusion | {"seed_spread": spreads, "verdict": conclusion["verdict"] + sentence}
