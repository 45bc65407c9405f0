"""An A/A check of the two-level interval over replicates, on the digits example.

A/A: every "variant" is the control itself with other seeds, so the true gain is 0; at
``min_gain = 0`` a sound rule says "meets" (the whole interval past 0) and "does not meet"
(the whole interval below 0) each at most 2.5 % of the time. Each comparison here is K
replicates a side (``--replicates``, default 3) compared by
:func:`flightplan.close.replicates.compare_replicated_runs`, the interval ``close`` gives a
campaign with ``[campaign] seeds = K``: replicates and test examples resampled in every
draw. The comparisons share no training run (seeds 0 … 2·K·N − 1, N = ``--comparisons``,
default 40), so they are independent and each rate's Clopper-Pearson interval (scipy) is
exact. The task is examples/digits' control (its model and data functions, the training
loop of ``tests/e2e/test_aa_digits.py``: AdamW decayed linearly to 0, dropout, seeded
shuffling; one thread), 360 test examples.

Prints one line per rate and exits 1 when a rate's point estimate is above 5 %; then, for
contrast, the same comparisons judged on the first replicate a side alone (the one-seed
paired bootstrap, which leaves the seed out).

Usage::

    .venv/bin/python bench/aa_replicates.py [--replicates 3] [--comparisons 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from scipy.stats import binomtest
from torch import nn

from flightplan.close.replicates import compare_replicated_runs
from flightplan.metrics import Predictions, metric_value

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("digits_train", DIGITS / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(digits: Any, train_x: torch.Tensor, train_y: torch.Tensor, seed: int, *,
           hidden: int = 32, lr: float = 1e-2, epochs: int = 5, batch_size: int = 32) -> nn.Module:
    """The example's control trained with ``seed`` (its campaign's hyperparameters)."""
    torch.manual_seed(seed)
    model: nn.Module = digits.build_model(hidden, 0.1)
    total = epochs * math.ceil(len(train_y) / batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / total))
    order = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(train_y), generator=order).split(batch_size):
            loss = nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
    return model


def control_predictions(seeds: Iterable[int]) -> list[Predictions]:
    """The digits control's predictions on the test split, one per seed (the example's
    training less its Trial calls: the same model, optimiser, schedule, dropout and seeded
    shuffling), on one thread. Also used by ``tests/e2e/test_aa_digits.py``."""
    digits = _example()
    torch.set_num_threads(1)
    _, train_x, train_y = digits.read_split(DIGITS / "data" / "digits_train.csv")
    ids, test_x, test_y = digits.read_split(DIGITS / "data" / "digits_test.csv")
    out = []
    for seed in seeds:
        probs, _ = digits.predict(_train(digits, train_x, train_y, seed), test_x, test_y)
        out.append(Predictions(ids=ids, labels=digits.LABELS, gold=test_y.numpy(),
                               predicted=probs.argmax(dim=1).numpy(), probs=None))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=3)
    parser.add_argument("--comparisons", type=int, default=40)
    args = parser.parse_args(argv)
    k, n = args.replicates, args.comparisons
    began = time.perf_counter()
    runs = control_predictions(range(2 * k * n))
    trained_s = time.perf_counter() - began
    scores = np.array([metric_value("macro_f1", p) for p in runs])
    counts = {"meets": 0, "does_not_meet": 0, "inconclusive": 0}
    one_seed = dict(counts)
    for c in range(n):
        reference = runs[2 * k * c: 2 * k * c + k]
        variant = runs[2 * k * c + k: 2 * k * (c + 1)]
        result = compare_replicated_runs(reference, variant, metric="macro_f1", goal="max",
                                         min_gain=0.0)
        counts[result["verdict"]] += 1
        alone = compare_replicated_runs(reference[:1], variant[:1], metric="macro_f1",
                                        goal="max", min_gain=0.0)
        one_seed[alone["verdict"]] += 1
    print(f"aa_replicates: digits control, {n} comparisons of {k} replicates a side "
          f"({2 * k * n} trainings in {trained_s:.0f} s), macro-F1 mean {scores.mean():.4f}, "
          f"sd {scores.std(ddof=1):.4f}")
    worst = 0.0
    for verdict in ("meets", "does_not_meet"):
        ci = binomtest(counts[verdict], n).proportion_ci(confidence_level=0.95, method="exact")
        rate = counts[verdict] / n
        worst = max(worst, rate)
        print(f"  {verdict}: {counts[verdict]}/{n} = {rate:.3f} "
              f"(95% Clopper-Pearson [{ci.low:.3f}, {ci.high:.3f}]; target ≤ 0.05)")
    print(f"  for contrast, the first replicate a side alone (the one-seed interval): meets "
          f"{one_seed['meets']}/{n}, does_not_meet {one_seed['does_not_meet']}/{n}")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
