"""The power of every comparison of a campaign file on its test split (``plan``'s
``power``), each with the model of the best source given.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping

from flightplan.metrics import CONFIDENCE, parse_metric
from flightplan.plan.power.comparison import (DEFAULT_SEED_SD, DEFAULT_SEED_SD_SOURCE, TARGET_POWER, WARN_BELOW,
                                              ComparisonPower, Seeds, comparison_power)
from flightplan.plan.power.model import (DEFAULT_DISAGREEMENT, ColumnModel, Moments,
                                         PairedModel, default_model)
from flightplan.spec import CampaignSpec, Run

__all__ = ["TestSplit", "CampaignPower", "campaign_power", "campaign_seeds", "gain_to_explain"]

@dataclass(frozen=True)
class TestSplit:
    """The test split as the plan knows it: ``n_examples`` (after ``test_limit``),
    ``label_counts`` (class → examples; None without a label column) and ``source``
    (one line: where the figures were read)."""

    n_examples: int
    label_counts: Mapping[str, int] | None
    source: str


@dataclass(frozen=True)
class CampaignPower:
    """The power of every comparison of a campaign.

    Attributes:
        test: the test split (None: unknown). comparisons: the computed ones, file order.
        not_computed: ``(variant, reference, reason)`` of the others.
    """

    test: TestSplit | None
    comparisons: tuple[ComparisonPower, ...]
    not_computed: tuple[tuple[str, str, str], ...] = ()

    @property
    def warnings(self) -> tuple[ComparisonPower, ...]:
        """The comparisons whose expected gain would be confirmed with less than
        :data:`WARN_BELOW`."""
        return tuple(c for c in self.comparisons if c.warn)

    def to_json(self) -> dict[str, Any]:
        """``plan --json`` key ``power``: ``{test_examples, test_source, confidence_level,
        target_power, warn_below, comparisons, not_computed}``."""
        return {"test_examples": None if self.test is None else self.test.n_examples,
                "test_source": None if self.test is None else self.test.source,
                "confidence_level": CONFIDENCE, "target_power": TARGET_POWER,
                "warn_below": WARN_BELOW,
                "comparisons": [c.to_json() for c in self.comparisons],
                "not_computed": [{"variant": v, "reference": r, "reason": why}
                                 for v, r, why in self.not_computed]}


def gain_to_explain(spec: CampaignSpec) -> float:
    """The largest gain an assumed model of ``spec``'s comparisons must explain: each
    run's expected gain (twice ``min_gain`` when it gives none), the largest over the runs
    with a reference (0 when none has one)."""
    section = spec.campaign
    return max((run.expected_gain if run.expected_gain is not None
                else min(2 * section.min_gain, sys.float_info.max)
                for run in spec.runs if run.reference is not None), default=0.0)


def campaign_seeds(spec: CampaignSpec, run: Run,
                   measured: Mapping[str, tuple[float, str]] | None = None) -> Seeds:
    """The seed spread, replicates and Holm count of ``run``'s comparison, best source first.

    s: the per-replicate standard deviation an earlier campaign measured for the run
    (``measured``, run name → (sd, source)), else for a classification metric
    :data:`~flightplan.plan.power.comparison.DEFAULT_SEED_SD` (its reference named), else
    none (a column's units are unknown: left out, said so). K: the fewer of the two
    sides' ``seeds`` (the spread of the side with fewer replicates dominates; taking it
    for both is conservative). m: the campaign's comparisons when ``multiple = "holm"``,
    else 1. GPU·h: one replicate of the run, its ``duration`` × ``gpus``.
    """
    section = spec.campaign
    reference = next((r for r in spec.runs if r.name == run.reference), run)
    if measured and run.name in measured:
        sd, source = measured[run.name]
    elif parse_metric(section.metric).kind == "labels":
        sd, source = DEFAULT_SEED_SD, DEFAULT_SEED_SD_SOURCE
    else:
        sd, source = 0.0, (f"not included: no earlier campaign measured {section.metric}'s "
                           f"spread over seeds (plan --from one that ran replicates)")
    count = sum(1 for r in spec.runs if r.reference is not None)
    return Seeds(sd=sd, source=source,
                 replicates=min(spec.seeds_of(run), spec.seeds_of(reference)),
                 comparisons=count if section.multiple == "holm" else 1,
                 gpu_hours=run.duration.seconds / 3600.0 * run.gpus)


def campaign_power(spec: CampaignSpec, test: TestSplit | None, *, why_unknown: str = "",
                   models: Mapping[str, PairedModel] | None = None,
                   seed_spread: Mapping[str, tuple[float, str]] | None = None
                   ) -> CampaignPower:
    """The power of each comparison of ``spec`` on its test split.

    Args:
        spec: the campaign (metric, goal, min_gain, runs' ``expected_gain``,
            ``expected_disagreement``, ``expected_difference_sd``).
        test: the test split, or None when it is unknown (``why_unknown`` says why).
        models: variant name → a model measured elsewhere (:func:`model_from_predictions`,
            :func:`model_from_reference`), used in place of the campaign file's figures.
        seed_spread: variant name → (per-replicate sd over seeds, source) an earlier
            campaign measured (:func:`campaign_seeds`).

    Returns:
        one :class:`ComparisonPower` per run with a reference that has a model, the
        others in ``not_computed`` with the reason.
    """
    section = spec.campaign
    pairs = [(i, run) for i, run in enumerate(spec.runs) if run.reference is not None]
    if test is None or test.n_examples < 2:
        why = why_unknown or "the test split has fewer than 2 examples"
        return CampaignPower(test, (), tuple((r.name, r.reference or "", why) for _, r in pairs))
    metric = parse_metric(section.metric)
    explain = gain_to_explain(spec)
    default: PairedModel | None = None
    missing = ""
    if metric.kind == "labels":
        given = section.expected_disagreement
        default = default_model(
            metric.name, goal=section.goal, label_counts=test.label_counts,
            disagreement=DEFAULT_DISAGREEMENT if given is None else given,
            disagreement_source="default; set [campaign] expected_disagreement"
            if given is None
            else "campaign file ([campaign] expected_disagreement)", explain=explain)
    elif section.expected_difference_sd is not None:
        default = ColumnModel(sd=section.expected_difference_sd, inputs={
            "kind": "column", "source": "campaign file",
            "difference_sd": section.expected_difference_sd,
            "difference_sd_source": "campaign file ([campaign] expected_difference_sd)"})
    else:
        missing = (f"the spread of {section.metric}'s per-example differences is unknown "
                   f"before any run; set [campaign] expected_difference_sd (in the column's "
                   f"units) or plan from paired predictions")
    chosen: list[tuple[int, Any, PairedModel]] = []
    skipped = []
    for index, run in pairs:
        model = (models or {}).get(run.name, default)
        if model is None:
            skipped.append((run.name, run.reference or "", missing))
        else:
            chosen.append((index, run, model))
    moments: dict[int, Moments] = {}
    out = []
    for index, run, model in chosen:
        expected = run.expected_gain if run.expected_gain is not None \
            else min(2 * section.min_gain, sys.float_info.max)
        if id(model) not in moments:
            upto = max(max(min(2 * section.min_gain, sys.float_info.max), r.expected_gain or 0.0)
                       for _, r, m in chosen if m is model)
            moments[id(model)] = model.moments(test.n_examples, upto=upto)
        out.append(comparison_power(
            model, moments[id(model)], variant=run.name, reference=run.reference or "",
            metric=section.metric, goal=section.goal, min_gain=section.min_gain,
            expected_gain=expected,
            expected_gain_source=f"campaign file (run[{index}].expected_gain)"
            if run.expected_gain is not None else "default: 2 × min_gain",
            seeds=campaign_seeds(spec, run, seed_spread) if model.inputs.get("disagreement") != 0
            else Seeds(source="not included: the runs measured never disagree, so a seed "
                              "cannot make a gain either")))
    return CampaignPower(test, tuple(out), tuple(skipped))
