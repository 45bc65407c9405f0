"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return. Each run is
re-estimated by its task's ``estimate_run`` hook, by default
:func:`flightplan.tasks.estimate.estimate_run_seconds`.

The decision: re-plan with the re-estimates; ``continue`` when it fits the window; else
``cut`` — drop the exploratory runs, then also the useful ones, re-planning each time —
at the first that fits; else ``stop``, naming the cheapest package option that fits the
full campaign (:func:`choose`, a :class:`Choice`).

Beside the window, the decision point asks which result would change the campaign's
answer (:func:`rank_variants`, from :mod:`flightplan.plan.power`): the power of every
comparison not yet made is computed again on the test split's size and class shares (the
data check's), with a reference whose accuracy is the pilot's few predictions weighed
against a prior worth :data:`~flightplan.plan.power.PILOT_PRIOR_EXAMPLES` examples
(:func:`~flightplan.plan.power.model_from_pilot`) and the campaign's disagreement, or the
one an earlier campaign measured with ``[calibrate] from``; those variants are ranked by
decision value (the probability that their result changes the choice) per GPU-hour of
their re-estimated duration. A variant whose result cannot change the answer (it cannot
reach a conclusive verdict, or every outcome leads to the same choice) at every plausible
disagreement, the favourable end of its range included, is proposed for cut with that
reason and its evidence, beside the window's reasons
(:func:`with_value_cuts`): an optional one is cut while some variant can change the answer
(an essential run, or one a kept variant is compared against, never is). ``--decide``
still has the last word.

What the decision point decided is one :class:`Decision`, the same object whether it was
made now or kept from an earlier ``flightplan run`` (:meth:`Decision.from_ledger`): the
ledger keeps it, ``flightplan run --json`` prints :meth:`Decision.to_json`. A kept decision
serves only the control and the decision rule it was made for; when either changed, the
runner makes a new one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Any, Callable, Mapping, Sequence

from flightplan.ledger_rows import DecisionRow
from flightplan.errors import CheckFailed
from flightplan.metrics import Predictions, parse_metric
from flightplan.plan.power import (DEFAULT_DISAGREEMENT, Z_INTERVAL, PairedModel, Ranked,
                                   TestSplit, campaign_power, default_model, gain_to_explain,
                                   model_from_pilot, rank_by_value)
from flightplan.spec import CampaignSpec

__all__ = ["Choice", "Decision", "DECISIONS", "ASSUMED_DISAGREEMENT_RANGE", "ValueRanking",
           "cut_steps", "choose", "runs_done",
           "replan_from_options", "rank_variants", "with_value_cuts"]

DECISIONS = ("continue", "cut", "stop")


@dataclass(frozen=True)
class ValueRanking:
    """The variants not yet run, by decision value per GPU-hour, highest first.

    Attributes:
        ranked: :class:`~flightplan.plan.power.Ranked` entries (``cut`` and ``reason``:
            proposed for cut, and why).
        model: the paired-outcome model's inputs and their sources (JSON values).
        not_computed: ``(variant, reason)`` of the variants without a computed value.
        answerable: some comparison of the campaign, made or not, can change the answer
            (ranked with all of them pending, one is not proposed for cut).
    """

    ranked: tuple[Ranked, ...] = ()
    model: Mapping[str, Any] = field(default_factory=dict)
    not_computed: tuple[tuple[str, str], ...] = ()
    answerable: bool = True

    @property
    def proposed_cuts(self) -> dict[str, str]:
        """Variant → why its result cannot change the answer."""
        return {r.variant: r.reason or "" for r in self.ranked if r.cut}

    def to_json(self) -> dict[str, Any]:
        """``{ranking: [{variant, decision_value, gpu_hours, value_per_gpu_hour, cut,
        reason}], model, not_computed: [{variant, reason}], answerable}``."""
        return {"ranking": [r.to_json() for r in self.ranked], "model": dict(self.model),
                "not_computed": [{"variant": v, "reason": why} for v, why in self.not_computed],
                "answerable": self.answerable}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> "ValueRanking":
        """What :meth:`to_json` wrote (an empty ranking for a decision recorded before
        rankings were)."""
        if not data:
            return cls(not_computed=(("", "recorded before decision values were computed"),))
        ranked = tuple(Ranked(r["variant"], float(r["decision_value"]), float(r["gpu_hours"]),
                              math.inf if r["value_per_gpu_hour"] is None
                              else float(r["value_per_gpu_hour"]), bool(r["cut"]), r["reason"])
                       for r in data.get("ranking") or [])
        return cls(ranked, dict(data.get("model") or {}),
                   tuple((n["variant"], n["reason"]) for n in data.get("not_computed") or []),
                   bool(data.get("answerable", True)))

    def line(self) -> str:
        """One line: the ranking, ``"1. lora-r8 0.250 (3.75 per GPU·h); 2. …"``."""
        if not self.ranked:
            return "no variant ranked by decision value" + (
                f" ({self.not_computed[0][1]})" if self.not_computed else "")
        return "by decision value per GPU·h: " + "; ".join(
            f"{i}. {r.variant} {r.decision_value:.3f}"
            + ("" if math.isinf(r.value_per_gpu_hour) else
               f" ({r.value_per_gpu_hour:.3g} per GPU·h)")
            + (" (proposed for cut)" if r.cut else "")
            for i, r in enumerate(self.ranked, 1))


@dataclass(frozen=True)
class Decision:
    """What the decision point decided: one shape whether made now or kept.

    Attributes:
        decision: what was applied: ``continue``, ``cut`` or ``stop``.
        computed: what the figures said (differs when ``--decide`` overrode it).
        dropped: run names left out when ``decision`` is ``cut``.
        reason: one line with the numbers behind ``computed``.
        plan_version: the re-estimated plan's version in the ledger (None: none recorded).
        fitting_option: for ``stop``, the cheapest option that fits the full campaign.
        control_id: the run id of the control whose pilot it was made from.
        rule: the decision rule (``{metric, goal, min_gain, accept_at_least}``) in force
            when it was made.
        at: when it was made (unix s).
        value: the variants not yet run, ranked by decision value (:class:`ValueRanking`).
        kept_from_earlier_run: made by an earlier ``flightplan run`` and kept.
    """

    decision: str
    computed: str
    dropped: tuple[str, ...]
    reason: str
    plan_version: int | None
    fitting_option: dict[str, Any] | None
    control_id: str | None
    rule: dict[str, Any] | None
    at: float
    value: ValueRanking = field(default_factory=ValueRanking)
    kept_from_earlier_run: bool = False

    @property
    def overridden(self) -> bool:
        """``--decide`` chose other than the figures."""
        return self.decision != self.computed

    def to_json(self) -> dict[str, Any]:
        """``flightplan run --json``'s ``decision``: ``{decision, computed, overridden,
        dropped, reason, plan_version, fitting_option, control_id, rule, at, value,
        kept_from_earlier_run}`` (``value``: :meth:`ValueRanking.to_json`)."""
        return {"decision": self.decision, "computed": self.computed,
                "overridden": self.overridden, "dropped": list(self.dropped),
                "reason": self.reason, "plan_version": self.plan_version,
                "fitting_option": self.fitting_option, "control_id": self.control_id,
                "rule": self.rule, "at": self.at, "value": self.value.to_json(),
                "kept_from_earlier_run": self.kept_from_earlier_run}

    def figures(self, *, pilot: Mapping[str, Any] | None, estimates: Mapping[str, Any],
                plan: Mapping[str, Any]) -> dict[str, Any]:
        """The ledger's ``figures`` of this decision (docs/internals.md, ``decisions()``):
        the pilot figures and the estimates it was made from, the re-planned hours, and
        what :meth:`from_ledger` reads back."""
        return {"pilot": pilot, "estimates": dict(estimates), "plan_version": self.plan_version,
                "reserved_hours": plan.get("reserved_hours"),
                "window_hours": plan.get("window_hours"), "fits": plan.get("fits"),
                "reason": self.reason, "fitting_option": self.fitting_option,
                "control_id": self.control_id, "decision_rule": self.rule,
                "value": self.value.to_json()}

    @classmethod
    def from_ledger(cls, row: DecisionRow, *, control_id: str | None = None) -> "Decision":
        """A decision the ledger recorded (``Ledger.decisions()`` row), kept.

        Args:
            control_id: the control to assume when the record predates ``control_id``
                (the runner passes the pilot's that preceded it).
        """
        figures = row.figures or {}
        return cls(decision=row.decision, computed=row.computed,
                   dropped=tuple(row.dropped or ()), reason=figures.get("reason", ""),
                   plan_version=figures.get("plan_version"),
                   fitting_option=figures.get("fitting_option"),
                   control_id=figures.get("control_id", control_id),
                   rule=figures.get("decision_rule"), at=float(row.at),
                   value=ValueRanking.from_json(figures.get("value")),
                   kept_from_earlier_run=True)


@dataclass(frozen=True)
class Choice:
    """What the figures say at the decision point (before any ``--decide``).

    Attributes:
        decision: ``continue``, ``cut`` or ``stop``.
        dropped: run names left out (``cut``), or ``[]``.
        reason: one line that gives the numbers behind it.
        fitting_option: for ``stop``, the cheapest option that fits the full campaign
            (an ``options`` entry of the plan JSON), or None when none fits.
    """

    decision: str
    dropped: list[str] = field(default_factory=list)
    reason: str = ""
    fitting_option: dict[str, Any] | None = None


def cut_steps(runs: list[tuple[str, str]], *, done: AbstractSet[str] = frozenset()
              ) -> list[list[str]]:
    """The run sets to try dropping, in order: none, the exploratory, then also the useful.

    Args:
        runs: ``(name, tier)`` of every run of the campaign.
        done: runs already finished or stopped (never dropped: their time is spent).

    Returns:
        Lists of names; a step that would drop nothing new is left out.
    """
    steps: list[list[str]] = [[]]
    dropped: list[str] = []
    for tier in ("exploratory", "useful"):
        more = [name for name, t in runs if t == tier and name not in done]
        if more:
            dropped = dropped + more
            steps.append(list(dropped))
    return steps


def runs_done(executions: Mapping[str, Sequence[str]], ended: AbstractSet[str]) -> set[str]:
    """The runs whose every execution ended (finished or stopped): ``executions`` maps a
    run's name to the ids of its executions (its replicates, or itself with one seed),
    ``ended`` holds the ids that ended. A run of several seeds with one replicate still to
    run is not done: its remaining replicates may still be cut."""
    return {name for name, ids in executions.items() if ids and all(i in ended for i in ids)}


def choose(steps: list[list[str]], replan: Callable[[list[str]], dict[str, Any]]) -> Choice:
    """Decide from re-plans: ``replan(dropped)`` returns the plan JSON without ``dropped``.

    Returns:
        ``continue`` when the full plan fits; ``cut`` with the first step that fits;
        ``stop`` otherwise, with the cheapest fitting option of the full plan (its
        ``options`` are sorted cheapest first by the planner; the first that ``fits``
        and drops nothing is taken).
    """
    full = replan(steps[0])
    if full.get("fits"):
        return Choice("continue", [], _hours_line(full, "fits"))
    for dropped in steps[1:]:
        plan = replan(dropped)
        if plan.get("fits"):
            return Choice("cut", list(dropped),
                            f"{_hours_line(full, 'does not fit')}; without {', '.join(dropped)} "
                            f"{_hours_line(plan, 'fits')}")
    option = next((o for o in full.get("options", [])
                   if o.get("fits") and not o.get("dropped")), None)
    if option is None:
        tail = "no package in the catalog fits it; change the question or split the campaign"
    else:
        tail = (f"the cheapest package that fits is {option['offer']} "
                f"{option['package_days']}-day × {option['flights']}: "
                f"{option['total_price']} {option['currency']}")
    return Choice("stop", [], f"{_hours_line(full, 'does not fit')} even with only the "
                                f"essential runs; {tail}", option)


def replan_from_options(plan: dict[str, Any], run_names: set[str], *,
                        replicates: Mapping[str, str] | None = None
                        ) -> Callable[[list[str]], dict[str, Any]]:
    """``replan(dropped)`` for :func:`choose`, read off one plan JSON (``plan --json``).

    ``[]`` gives the plan itself. A cut gives the planner's reduced protocol: the option of
    the chosen rental (same offer, package_days, flights) whose dropped runs are exactly
    ``dropped`` (it may also drop stages only they needed). The planner adds reduced
    options only while the full plan does not fit and stops at the first that fits; a
    cut it did not compute counts as not fitting.

    Args:
        run_names: the spec's run names (``dropped`` names runs, never replicates).
        replicates: execution name → the run it replicates (``lora-r8 seed=1`` →
            ``lora-r8``): the plan schedules each replicate of a run with ``seeds`` ≥ 2
            as its own task, so an option that drops them drops their run.
    """
    rental = (plan.get("offer"), plan.get("package_days"), plan.get("flights"))

    def replan(dropped: list[str]) -> dict[str, Any]:
        if not dropped:
            return plan
        for option in plan.get("options", []):
            same = (option.get("offer"), option.get("package_days"), option.get("flights"))
            runs_dropped = {(replicates or {}).get(name, name)
                            for name in option.get("dropped") or []} & run_names
            if same == rental and option.get("dropped") and runs_dropped == set(dropped):
                return {"fits": bool(option.get("fits")),
                        "reserved_hours": option.get("reserved_hours") or 0.0,
                        "window_hours": plan.get("window_hours", 0.0)}
        return {"fits": False, "reserved_hours": plan.get("reserved_hours", 0.0),
                "window_hours": plan.get("window_hours", 0.0)}

    return replan


def _hours_line(plan: dict[str, Any], verdict: str) -> str:
    return (f"{plan.get('reserved_hours', 0):.2f} h of {plan.get('window_hours', 0):.2f} h "
            f"{verdict}")


ASSUMED_DISAGREEMENT_RANGE = (0.5, 2.0)
"""An assumed disagreement d (the default or the campaign file's, nothing measured it) is
plausible from half to twice its value (0.125 to 0.5 for the default 0.25): an
assumption carries no evidence, so the range is wide on purpose."""


def _plausible(share: float, examples: int | None) -> tuple[float, float]:
    """The plausible range of a disagreement: for one measured on ``examples`` examples,
    its 95 % Wilson score interval (Wilson 1927; Agresti & Coull 1998 recommend it over the
    normal interval for small counts); for an assumed one (``examples`` None),
    :data:`ASSUMED_DISAGREEMENT_RANGE` times it, kept inside (0, 1)."""
    if examples is None or examples <= 0:
        low, high = (share * f for f in ASSUMED_DISAGREEMENT_RANGE)
        return max(low, 1e-3), min(high, 0.999)
    z = Z_INTERVAL
    centre = (share + z * z / (2 * examples)) / (1 + z * z / examples)
    half = z / (1 + z * z / examples) * math.sqrt(
        share * (1 - share) / examples + z * z / (4 * examples * examples))
    return max(centre - half, 1e-3), min(centre + half, 0.999)


def rank_variants(spec: CampaignSpec, *, pending: Sequence[str], gpu_hours: Mapping[str, float],
                  test: TestSplit | None, reference: Predictions | None,
                  reference_source: str, why_unknown: str = "",
                  measured: Mapping[str, PairedModel] | None = None,
                  seed_spread: Mapping[str, tuple[float, str]] | None = None) -> ValueRanking:
    """Rank the variants not yet run by decision value per GPU-hour (module docstring).

    A classification metric's comparisons are modelled with the reference of
    :func:`flightplan.plan.power.model_from_pilot`: the test split's class shares and the
    pilot's accuracy as evidence against a prior worth
    :data:`~flightplan.plan.power.PILOT_PRIOR_EXAMPLES` examples (without pilot
    predictions, the default reference). The disagreement is the one an earlier campaign
    measured for the comparison, else the campaign file's or the default (then raised to
    explain the campaign's largest expected gain). A variant is proposed for cut only when
    it is cut at every plausible disagreement, the point, and the low and high ends of
    :func:`_plausible`'s range (a favourable one is among them: the high end when the gain
    needs more disagreement, the low end when a narrower interval would decide), and the
    reason states the evidence (how many predictions, from which source, and the range).

    Args:
        spec: the campaign (metric, goal, min_gain, expected gains and disagreement).
        pending: names of the variants whose comparison is still to be made.
        gpu_hours: run name → GPU·h of its re-estimated run (duration × GPUs × its seeds).
        test: the whole test split (None: unknown, ``why_unknown`` says why).
        reference: the pilot's predictions (the control's); None when there are none
            (then the default reference serves, as in ``plan``).
        reference_source: where they came from, reported (``"pilot of control-…"``).
        measured: variant name → the model an earlier campaign measured for its
            comparison (``[calibrate] from``:
            :attr:`flightplan.plan.calibration.calibrate.Calibrated.models`).
            A label metric takes its measured disagreement (and how many examples
            measured it); a column metric takes the measured model as it is (the spread
            of its per-example differences). Comparisons without one take the campaign
            file's figures.
        seed_spread: variant name → (sd over seeds, source) an earlier campaign measured
            (:attr:`flightplan.plan.calibration.calibrate.Calibrated.seed_spread`); the
            others take the default (:func:`flightplan.plan.power.campaign_seeds`).

    Returns:
        The ranking; a variant whose power cannot be computed is in ``not_computed``.
    """
    section = spec.campaign
    measured = dict(measured or {})
    notes: list[str] = []
    variants = [run.name for run in spec.runs if run.reference is not None]
    evidence: dict[str, str] = {}
    model_sets: list[dict[str, PairedModel]] = [{}]
    if parse_metric(section.metric).kind != "labels":
        model_sets = [{name: measured[name] for name in variants if name in measured}]
        for name in model_sets[0]:
            inputs = model_sets[0][name].inputs
            evidence[name] = (f"per-example difference sd measured on "
                              f"{inputs.get('examples')} examples ({inputs.get('source')})")
    else:
        try:
            model_sets = _label_models(spec, variants, measured, test, reference,
                                       reference_source, evidence)
        except (CheckFailed, ValueError) as exc:
            model_sets = [{}]
            notes.append(f"the pilot's predictions give no model ({exc}); the campaign "
                         f"file's figures serve")
    waiting = set(pending)
    rankings, everyones = [], []
    for models in model_sets:
        power = campaign_power(spec, test, why_unknown=why_unknown, models=models or None,
                               seed_spread=seed_spread)
        comparisons = {c.variant: c for c in power.comparisons if c.variant in waiting}
        rankings.append((power, comparisons, rank_by_value(
            comparisons, {name: gpu_hours[name] for name in comparisons})))
        everyones.append(rank_by_value({c.variant: c for c in power.comparisons},
                                       {c.variant: 1.0 for c in power.comparisons}))
    power, comparisons, first = rankings[0]
    cut_everywhere = {name for name in comparisons
                      if all(any(r.variant == name and r.cut for r in ranked)
                             for _, _, ranked in rankings)}
    ranked = [replace(r, cut=r.variant in cut_everywhere,
                      reason=(f"{r.reason} (evidence: {evidence[r.variant]})"
                              if r.variant in evidence else r.reason)
                      if r.variant in cut_everywhere else None) for r in first]
    order = {name: i for i, name in enumerate(comparisons)}
    ranked.sort(key=lambda r: (r.cut, -r.value_per_gpu_hour, order[r.variant]))
    answerable = not everyones[0] or any(
        not all(any(r.variant == e.variant and r.cut for r in every) for every in everyones)
        for e in everyones[0])
    inputs = dict(next(iter(comparisons.values())).inputs) if comparisons else {}
    if notes:
        inputs["notes"] = list(inputs.get("notes", [])) + notes
    return ValueRanking(tuple(ranked), inputs,
                        tuple((v, why) for v, _, why in power.not_computed if v in waiting),
                        answerable=answerable)


def _label_models(spec: CampaignSpec, variants: Sequence[str],
                  measured: Mapping[str, PairedModel], test: TestSplit | None,
                  reference: Predictions | None, reference_source: str,
                  evidence: dict[str, str]) -> list[dict[str, PairedModel]]:
    """The models of a classification metric's comparisons at the point disagreement, then
    at the low and high ends of its plausible range (:func:`rank_variants`); fills
    ``evidence`` (variant → what its figures rest on, in words)."""
    section = spec.campaign
    given = section.expected_disagreement
    file_d = DEFAULT_DISAGREEMENT if given is None else given
    file_source = ("default; set [campaign] expected_disagreement" if given is None
                   else "campaign file ([campaign] expected_disagreement)")
    explain = gain_to_explain(spec)
    counts = None if test is None else test.label_counts
    cache: dict[tuple[float, str, bool], PairedModel] = {}

    def model(d: float, source: str, assumed: bool) -> PairedModel:
        if (d, source, assumed) not in cache:
            if reference is None:
                cache[(d, source, assumed)] = default_model(
                    section.metric, goal=section.goal, label_counts=counts, disagreement=d,
                    disagreement_source=source, explain=explain if assumed else 0.0)
            else:
                cache[(d, source, assumed)] = model_from_pilot(
                    section.metric, reference, goal=section.goal, label_counts=counts,
                    disagreement=d, disagreement_source=source, source=reference_source,
                    explain=explain if assumed else 0.0)
        return cache[(d, source, assumed)]

    sets: list[dict[str, PairedModel]] = [{}, {}, {}]
    for name in variants:
        inputs = measured[name].inputs if name in measured else {}
        if inputs.get("disagreement") == 0:
            for models in sets:
                models[name] = measured[name]     # measured: they never disagreed
            evidence[name] = (f"disagreement 0 measured on {inputs.get('examples')} "
                              f"examples ({inputs.get('source')})")
            continue
        if "disagreement" in inputs:
            d, source, examples = (float(inputs["disagreement"]), str(inputs["source"]),
                                   inputs.get("examples"))
        else:
            d, source, examples = file_d, file_source, None
        low, high = _plausible(d, None if examples is None else int(examples))
        for models, value in zip(sets, (d, low, high)):
            models[name] = model(value, source, examples is None)
        pilot = ("no pilot predictions (the assumed reference)" if reference is None else
                 f"{sets[0][name].inputs.get('examples')} predictions of {reference_source} "
                 f"and the test split's class shares")
        evidence[name] = (f"{pilot}; disagreement {d:.3g} "
                          + (f"measured on {examples} examples ({source})" if examples
                             else f"assumed ({source})")
                          + f", cut at every plausible value from {low:.3g} to {high:.3g}")
    return sets


def with_value_cuts(choice: Choice, value: ValueRanking,
                    runs: Sequence[tuple[str, str, str | None]]) -> Choice:
    """The window's choice with the optional variants whose result cannot change the
    answer dropped too (``cut``, each with its reason); a ``stop`` stays a stop.

    Cutting spends the hours on the variants that can change the answer, so it applies
    only while one can (``value.answerable``): when no comparison of the campaign, made or
    not, can (the test set cannot settle the question as asked, whichever runs), nothing
    is cut for it and the reason says so. An
    ``essential`` variant is never cut (it is needed to conclude), nor a run that another
    kept run is compared against (its ``reference``); both keep their reasons in the
    ranking.

    Args:
        choice: what the window says (:func:`choose`).
        value: the ranking (:func:`rank_variants`).
        runs: ``(name, tier, reference)`` of every run, in campaign order.
    """
    proposed = value.proposed_cuts
    if choice.decision == "stop" or not proposed:
        return choice
    if not value.answerable:
        return replace(choice, reason=f"{choice.reason}; no variant's result can change the "
                                      f"answer on these test examples, so none is cut for it: "
                                      f"the campaign cannot settle its question as asked "
                                      f"(--decide stop to change it)")
    tiers = {name: tier for name, tier, _ in runs}
    dropped = set(choice.dropped) | {n for n in proposed if tiers.get(n) != "essential"}
    needed = True
    while needed:               # keep what a kept run is compared against
        needed = False
        for name, _, reference in runs:
            if name not in dropped and reference in dropped:
                dropped.discard(reference)
                needed = True
    added = [name for name, _, _ in runs if name in dropped and name not in choice.dropped]
    if not added:
        return choice
    reasons = "; ".join(f"{name}: {proposed[name]}" for name in added)
    return replace(choice, decision="cut",
                   dropped=[name for name, _, _ in runs if name in dropped],
                   reason=f"{choice.reason}; its result cannot change the answer, so cut "
                          f"{reasons}")
