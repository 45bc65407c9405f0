"""Plan a whole campaign: schedule on the chosen rental, quote the options, lint variants.

This is the entry point the runner calls (see docs/internals.md): the decision point
re-plans with measured ``durations``; ``flightplan plan --extend`` passes ``extend``.

Usage::

    result = plan_campaign(load_spec("examples/illustration/campaign.toml"))
    result.reserved_hours, result.uncommitted_hours, result.fits     # 48.0, 24.0, True
    result.to_json()                                                 # the `plan --json` object
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from flightplan.errors import ArgumentError
from flightplan.plan.catalog import (Catalog, Offer, catalog_for_spec, check_spec_against_catalog,
                                     rental_price, suggest)
from flightplan.plan.decision_rule import decision_rule
from flightplan.plan.frozen_rental import rental_terms
from flightplan.plan.lint import LintWarning, lint_variants
from flightplan.plan.quote import Quote, quote_options
from flightplan.plan.problem import Slot, Task
from flightplan.plan.schedule import Schedule, schedule
from flightplan.spec import CampaignSpec, Run, Stage
from flightplan.tasks.loader import lacks_reload
from flightplan.units import Duration, Money, hours

__all__ = ["PlanResult", "plan_campaign", "tasks_for_spec", "slot_json"]

#: wall-clock limits (s) of the CP-SAT solves: the chosen rental, then all other options
MAIN_SOLVE_S = 1.0
OPTIONS_BUDGET_S = 1.5
OPTION_SOLVE_S = 0.5


def tasks_for_spec(spec: CampaignSpec, *, durations: Mapping[str, Duration] | None = None,
                   extend: Mapping[str, Duration] | None = None) -> list[Task]:
    """The stages and runs of ``spec`` as schedule tasks (stages first, file order).

    A run with ``seeds`` = K ≥ 2 is K tasks, one per replicate (named ``<name>
    seed=<seed>``, :meth:`~flightplan.spec.CampaignSpec.replicates`), each of the run's
    duration: the window, the quote, the reduced protocols and the cuts count K
    executions. Whatever comes ``after`` such a run waits for all its replicates.

    Args:
        durations: name → duration that replaces the estimate (measured at the pilot); a
            run's name sets all its replicates, a replicate's name that one.
        extend: name → duration added to it (what-if), named the same way.

    Raises:
        ArgumentError: a name in ``durations`` or ``extend`` is not a stage, run or
            replicate.
    """
    expanded = {e.name: [rep.name for rep in spec.replicates(e)] if isinstance(e, Run)
                else [e.name] for e in spec.items}
    names = [*expanded, *(n for reps in expanded.values() for n in reps if n not in expanded)]
    for label, table in (("durations", durations), ("--extend", extend)):
        for name in table or {}:
            if name not in names:
                raise ArgumentError(f"{label} {name}: {name!r} is not a stage or run of "
                                    f"{spec.source}{suggest(name, names)}")
    tasks = []
    for entry in spec.items:
        after = tuple(name for dep in entry.after for name in expanded[dep])
        for name in expanded[entry.name]:
            seconds = (durations or {}).get(name, (durations or {}).get(
                entry.name, entry.duration)).seconds
            seconds += (extend or {}).get(name, (extend or {}).get(
                entry.name, Duration(0))).seconds
            is_run = isinstance(entry, Run)
            tasks.append(Task(
                name=name, kind="run" if is_run else "stage", tier=entry.tier,
                seconds=max(1, seconds),
                gpus=entry.gpus if "gpu" in entry.uses else 0,
                person="person" in entry.uses, after=after,
                each_flight=isinstance(entry, Stage) and entry.each_flight))
    return tasks


def ranks_warning(run: Run, offer: str, gpus_per_flight: int) -> LintWarning:
    """``ranks-exceed-gpus``: ``run`` starts more processes (ranks) than it holds GPUs. On a
    machine with GPUs each rank computes on a GPU of its own, so ``flightplan run`` refuses
    it there (exit 2, :func:`flightplan.run.executors.contract.check_processes`); on a
    machine without GPUs the ranks run on the CPU, which is why ``plan`` only warns."""
    fix = (f"give gpus = {run.processes} or processes = {run.gpus}"
           if run.processes <= gpus_per_flight else
           f"give processes = {run.gpus}: one {offer} flight has {gpus_per_flight} "
           f"GPU{'s' if gpus_per_flight > 1 else ''}, too few for {run.processes} ranks")
    return LintWarning(
        "ranks-exceed-gpus", run.name,
        f"{run.name} starts {run.processes} processes but holds {run.gpus} "
        f"GPU{'s' if run.gpus > 1 else ''} ([[run]] processes, gpus): on a {offer} flight "
        f"each rank needs a GPU of its own, so flightplan run refuses it there (as written, "
        f"its ranks run only on a machine without GPUs, on the CPU); {fix}")


def slot_json(slot: Slot) -> dict[str, Any]:
    """One placed stage/run as the JSON contract spells it.

    ``flight`` is 1-based (null for person-only work); ``gpus`` is the count held and
    ``gpu_ids`` the GPU indices inside the flight.
    """
    task = slot.task
    return {"name": task.name, "kind": task.kind, "tier": task.tier,
            "start_hours": hours(slot.start_s), "end_hours": hours(slot.end_s),
            "duration_hours": hours(slot.end_s - slot.start_s), "uses": list(task.uses),
            "flight": slot.flight, "gpus": len(slot.gpu_ids), "gpu_ids": list(slot.gpu_ids),
            "each_flight": task.each_flight}


@dataclass(frozen=True)
class PlanResult:
    """The plan of a campaign on its chosen rental, with the options and warnings.

    Attributes:
        spec: the campaign. offer: the chosen offer. schedule: its schedule.
        quote: every rental option, recommendation first. warnings: lint findings.
        extend, durations: the what-ifs and measured durations applied.
    """

    spec: CampaignSpec
    offer: Offer
    schedule: Schedule
    quote: Quote
    warnings: tuple[LintWarning, ...]
    extend: Mapping[str, Duration]
    durations: Mapping[str, Duration]

    @property
    def window_s(self) -> int:
        """The rental window: package days × 86400 s (flights run side by side)."""
        return self.spec.rental.package_days * 86400

    @property
    def reserved_hours(self) -> float:
        """Makespan (h): first start to last end."""
        return hours(self.schedule.makespan_s)

    @property
    def window_hours(self) -> float:
        """Package days × 24 (h)."""
        return hours(self.window_s)

    @property
    def uncommitted_hours(self) -> float:
        """Window − reserved (h); negative when the plan does not fit."""
        return hours(self.window_s - self.schedule.makespan_s)

    @property
    def fits(self) -> bool:
        """The schedule ends within the window."""
        return self.schedule.makespan_s <= self.window_s

    def time_left(self, *, now: float | None = None) -> dict[str, Any]:
        """With ``[rental] started``: ``{hours_left, fits_time_left}``, the hours left of
        the package at ``now`` (unix s; default now; 0 once it ended, the whole window
        before it starts) and whether the makespan fits in them; ``{}`` without a start
        (then the package starts at its first run)."""
        started = self.spec.rental.started
        if started is None:
            return {}
        now = time.time() if now is None else now
        left_s = min(self.window_s, max(0.0, started.timestamp() + self.window_s - now))
        return {"hours_left": round(left_s / 3600, 4),
                "fits_time_left": self.schedule.makespan_s <= left_s}

    @property
    def price(self) -> Money:
        """What the chosen rental costs: flights × package price."""
        return rental_price(self.spec, self.offer)

    def to_json(self) -> dict[str, Any]:
        """The ``flightplan plan --json`` object (keys of the JSON contract, plus
        ``total_price``, ``currency``, ``optimal``, ``lower_bound_hours``, ``people``,
        ``extended`` and ``measured`` in hours, ``unquoted_offers``, ``decision_rule``
        (:mod:`flightplan.plan.decision_rule`))."""
        rental = self.spec.rental
        best = self.quote.recommendation
        return {
            "campaign": self.spec.campaign.name,
            "decision_rule": decision_rule(self.spec),
            **rental_terms(self.spec, self.offer),   # offer, package days, flights, price
            "people": rental.people,
            "window_hours": self.window_hours,
            "reserved_hours": self.reserved_hours,
            "uncommitted_hours": self.uncommitted_hours,
            "fits": self.fits,
            "gpu_hours": hours(self.schedule.gpu_seconds),
            "person_hours": hours(self.schedule.person_seconds),
            "optimal": self.schedule.optimal,
            "lower_bound_hours": hours(self.schedule.lower_bound_s),
            "extended": {k: v.hours for k, v in self.extend.items()},
            "measured": {k: v.hours for k, v in self.durations.items()},
            "stages": [slot_json(s) for s in self.schedule.slots],
            "options": [o.to_json() for o in self.quote.options],
            "recommendation": best.to_json() if best else None,
            "warnings": [w.to_json() for w in self.warnings],
            "unquoted_offers": list(self.quote.unquoted),
        }


def plan_campaign(spec: CampaignSpec, *, catalog: Catalog | None = None,
                  durations: Mapping[str, Duration] | None = None,
                  extend: Mapping[str, Duration] | None = None) -> PlanResult:
    """Schedule ``spec`` on its rental, quote every option, and lint its variants.

    Args:
        spec: a validated campaign.
        catalog: offers to use; default: built-in merged with ``[rental] catalog``.
        durations: stage/run name → measured duration replacing the estimate.
        extend: stage/run name → duration added (``--extend NAME=+30h``).

    Returns:
        The plan; ``to_json()`` is the ``plan --json`` object.

    Raises:
        SpecError: the rental or a run does not match the catalog (unknown offer, package,
            too many GPUs or too much memory for one flight).
        CatalogError: the user catalog file is invalid.
        ArgumentError: ``durations``/``extend`` name an unknown stage or run.
    """
    catalog = catalog if catalog is not None else catalog_for_spec(spec)
    offer = check_spec_against_catalog(spec, catalog)
    tasks = tasks_for_spec(spec, durations=durations, extend=extend)
    rental = spec.rental
    chosen = schedule(tasks, flights=rental.flights, gpus_per_flight=offer.gpus_per_flight,
                      people=rental.people, time_limit_s=MAIN_SOLVE_S)
    quote = quote_options(spec, tasks, catalog, chosen=chosen, budget_s=OPTIONS_BUDGET_S,
                          per_solve_s=OPTION_SOLVE_S)
    warnings = list(lint_variants(spec))
    for ref in dict.fromkeys(run.task for run in spec.runs):
        if lacks_reload(ref, spec.campaign_dir):
            names = ", ".join(run.name for run in spec.runs if run.task == ref)
            warnings.append(LintWarning(
                "no-reload", names,
                f"task {ref!r} defines no reload_predictions, so close cannot reload its "
                f"artifacts and accepts none of {names}'s products; add reload_predictions "
                f"(docs/tasks.md)"))
    for run in spec.runs:
        if run.processes > run.gpus:
            warnings.append(ranks_warning(run, offer.name, offer.gpus_per_flight))
    if offer.gpu_memory_gb is None:
        for run in spec.runs:
            if run.gpu_memory_gb is not None:
                warnings.append(LintWarning(
                    "memory-unchecked", run.name,
                    f"{run.name} needs {run.gpu_memory_gb:g} GB per GPU but the catalog gives no "
                    f"GPU memory for {offer.name}; add gpu_memory_gb to your catalog to check it"))
    return PlanResult(spec, offer, chosen, quote, tuple(warnings), dict(extend or {}),
                      dict(durations or {}))
