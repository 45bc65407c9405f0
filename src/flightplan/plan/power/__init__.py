"""Resolution and power of the campaign's comparisons: what the test set can decide.

Before any run, for each comparison ``close`` will make (each variant against its
reference: :mod:`flightplan.close.conclusion`), this package predicts what the paired
bootstrap interval will be able to say, from the number of test examples, the decision
metric, ``goal``, ``min_gain`` and the confidence level ``close`` uses
(:data:`flightplan.metrics.CONFIDENCE`). Gains are signed by ``goal`` (positive is
better); ``t`` is ``min_gain``.

- **verdicts** (as ``close`` gives them): *meets* when the whole interval of the gain lies
  at or past t, *does_not_meet* when it lies wholly short of t, *inconclusive* when it
  straddles t;
- **resolution**: the expected half-width of the interval (metric units) when the true
  gain is t;
- **power curve**: the probability of each verdict against the true gain;
- **minimum detectable gain**: the smallest true gain that is confirmed (meets) with
  probability :data:`TARGET_POWER`;
- **examples needed**: the test-set size at which the expected gain (a run's
  ``expected_gain``, default twice ``min_gain``) is confirmed with that probability.

The model
---------
The measured gain ĝ on n test examples is taken as normal with mean μ(g) and standard
deviation σ(g) for a true gain g, and the bootstrap interval as ĝ ± z·σ(g), with
z = Φ⁻¹(1 − (1 − CONFIDENCE)/2) = 1.96. Then::

    P(meets)          = Φ((μ − t)/σ − z)
    P(does_not_meet)  = Φ((t − μ)/σ − z)
    P(inconclusive)   = 1 − P(meets) − P(does_not_meet)

and, σ shrinking as 1/√n, the test size at which a gain g > t is confirmed with
probability p is ``n · (σ(g) · (z + Φ⁻¹(p)) / (g − t))²``.

μ and σ come from a model of paired per-example outcomes.

**Classification metrics** (every name of :data:`flightplan.metrics.LABEL_METRICS`) are
simulated, as Card et al., "With Little Power Comes Great Responsibility" (EMNLP 2020)
recommend. An example is a triple (gold class, the reference's prediction, the variant's
prediction) drawn from a table of probabilities over such triples; a test set is a
multinomial draw of n triples; each run's metric is computed from the draw's confusion
matrices by :func:`flightplan.metrics.from_confusion`, the code ``close`` uses. At true
gain 0 the table is symmetric (swapping the two runs' predictions leaves it unchanged, so
the runs are equally good on every metric) and the runs disagree on a fraction d of the
examples, the **disagreement**. A true gain is made by tilting the table: each triple's
probability is multiplied by 1 + λ·s, s = +1 where only the variant is right, −1 where
only the reference is, 0 elsewhere; the true gain g(λ) is the metric difference of the
tilted table itself (an infinite test set). λ runs over :data:`LAMBDAS`, up to 1: the
largest gain the disagreement allows (for accuracy, g(1) is the share of examples on
which exactly one run is right). μ and σ are the mean and standard deviation of the
simulated measured gain, with the metric's linearisation (the delta method) as a control
variate (Davison & Hinkley, *Bootstrap Methods and their Application*, 1997, §9.3): the
linear part's mean and variance are exact (the multinomial's covariance), and
test sets simulated (seed :data:`flightplan.metrics.SEED`, so the figures repeat) at the
tilts :data:`SIMULATED_LAMBDAS` add what the linearisation misses
(for macro-F1 on a few hundred examples, under 1 % of σ). Accuracy is linear: its figures
are the closed form (up to the interpolation between tilts, under 0.1 % of σ). With many
classes the linearisation is skipped (:data:`LINEAR_BUDGET`) and σ carries the plain
simulation's noise, about 2 %. Between the computed points, μ and σ are interpolated
linearly in the true gain.

Where the table at gain 0 comes from, best first:

1. paired predictions of the two runs (a previous campaign's, a pilot's):
   :func:`model_from_predictions` symmetrises their triples;
2. one run's predictions: :func:`model_from_reference` keeps its confusion matrix and
   makes the other run from the disagreement; the decision point's pilot, a few dozen
   predictions of a few steps' control, is evidence, not the whole truth:
   :func:`model_from_pilot` takes the test split's class shares and the pilot's accuracy
   weighed against a prior worth :data:`PILOT_PRIOR_EXAMPLES` examples;
3. nothing measured: :func:`default_model` assumes a reference right on
   :data:`DEFAULT_REFERENCE_ACCURACY` of each class's examples, its errors spread evenly
   over the other classes, class shares from the test split's labels (two balanced
   classes when they are unknown), and the disagreement of ``[campaign]
   expected_disagreement``, else :data:`DEFAULT_DISAGREEMENT`.

In 2 and 3 the other run differs from the reference on a fraction d of the examples, each
time with one of the two right: d/2 taken from the examples the reference gets right
(the variant's error then follows the reference's own errors on that class) and d/2 from
those it gets wrong (the variant right); then the table is symmetrised. An assumed d
grows with the gain it must explain (:data:`EXPLAIN_TILT`), and a gain past the
reference's headroom (what a variant right on every example gains) is named, never a
reason to cut.

**Seeds and Holm.** Training randomness adds each side's per-replicate seed variance s²
over K replicates to the test sampling's: σ²(K) = σ_ex² + 2 s²/K
(:meth:`~flightplan.plan.power.comparison.Seeds.spread`; s measured by an earlier
campaign, else :data:`DEFAULT_SEED_SD` for a classification metric). Under Holm *meets*
is taken at the conservative Bonferroni level (:func:`z_meets`). The power is shown for
each K of :data:`SEED_COUNTS`.

**Column metrics** (``mean:<column>``) have a closed form: the gain is the mean of
per-example differences, so σ = sd/√n with sd the standard deviation of the per-example
difference (in the column's units), and μ = g (central limit theorem). sd comes from
paired predictions (:func:`model_from_predictions`) or ``[campaign]
expected_difference_sd``; without either nothing about the column's scale is known and
the power is not computed.

Assumptions worth knowing: the interval's half-width is z·σ at the true gain (a percentile
bootstrap's half-width varies a little from one test set to another); examples are
independent and drawn like the ones the model came from; the verdicts of different
comparisons are taken as independent (decision value); Holm's power is bounded below by
Bonferroni's.

Usage::

    model = default_model("macro_f1", goal="max", label_counts={"positive": 248, ...},
                          disagreement=0.25)
    power = comparison_power(model, model.moments(379), variant="lora-r8",
                             reference="control", min_gain=0.05, expected_gain=0.1)
    power.resolution, power.minimum_detectable_gain, power.examples_needed
    campaign_power(spec, TestSplit(379, counts, "corpus …")).to_json()   # plan --json "power"
    examples_to_settle(gain=0.0586, gain_low=0.0034, gain_high=0.1169, n_examples=379,
                       min_gain=0.05)                   # an inconclusive verdict's remedy
    rank_by_value(pending_powers, gpu_hours, concluded={"lora-r8": "inconclusive"})

The package's modules, one job each: :mod:`.model` (the paired-outcome models and the
measured gain's distribution), :mod:`.comparison` (what one comparison can decide from
them), :mod:`.campaign` (every comparison of a campaign file), :mod:`.value` (decision
value and the ranking of the variants not yet run), :mod:`.plot` (the power curves).
"""

from flightplan.plan.power.campaign import (CampaignPower, TestSplit, campaign_power,
                                            campaign_seeds, gain_to_explain)
from flightplan.plan.power.comparison import (DEFAULT_SEED_SD, DEFAULT_SEED_SD_SOURCE, SEED_COUNTS, ReplicatePower,
                                              Seeds, z_meets, MAX_COUNT, MIN_GAP_SHARE, NO_PRACTICAL_SIZE,
                                              PRACTICAL_FACTOR, TARGET_POWER, WARN_BELOW,
                                              Z_INTERVAL, ComparisonPower, Scenario,
                                              comparison_power, examples_to_settle,
                                              practical_size, rounded_count,
                                              verdict_probabilities)
from flightplan.plan.power.model import (DEFAULT_DISAGREEMENT, DEFAULT_REFERENCE_ACCURACY,
                                         EXPLAIN_TILT, LAMBDAS, LINEAR_BUDGET, N_CONTROLLED,
                                         N_SIMULATIONS, PILOT_PRIOR_EXAMPLES,
                                         SIMULATED_LAMBDAS, ColumnModel, LabelModel, Moments,
                                         PairedModel, default_model, model_from_pilot,
                                         model_from_predictions, model_from_reference)
from flightplan.plan.power.plot import power_png
from flightplan.plan.power.value import (MIN_CONCLUSIVE, MIN_DECISION_VALUE, Ranked,
                                         decision_values, rank_by_value)

__all__ = [
    "TARGET_POWER", "WARN_BELOW", "DEFAULT_DISAGREEMENT", "DEFAULT_REFERENCE_ACCURACY",
    "N_SIMULATIONS", "N_CONTROLLED", "LAMBDAS", "SIMULATED_LAMBDAS", "LINEAR_BUDGET",
    "MIN_DECISION_VALUE", "MIN_CONCLUSIVE",
    "Z_INTERVAL", "Moments", "PairedModel", "LabelModel", "ColumnModel",
    "EXPLAIN_TILT", "PILOT_PRIOR_EXAMPLES",
    "verdict_probabilities", "default_model", "model_from_reference", "model_from_pilot",
    "model_from_predictions",
    "Scenario", "ComparisonPower", "comparison_power", "TestSplit", "CampaignPower",
    "campaign_power", "gain_to_explain", "examples_to_settle", "rounded_count", "PRACTICAL_FACTOR",
    "MIN_GAP_SHARE", "MAX_COUNT", "NO_PRACTICAL_SIZE", "practical_size", "DEFAULT_SEED_SD", "DEFAULT_SEED_SD_SOURCE",
    "SEED_COUNTS", "ReplicatePower", "Seeds", "z_meets", "campaign_seeds", "decision_values", "Ranked",
    "rank_by_value", "power_png",
]
