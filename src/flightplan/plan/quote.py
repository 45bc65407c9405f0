"""Package comparison: what each rental option costs and whether the planned work fits.

An option is (offer, package length, number of flights). Its price is the sum of its
flights' package prices, ``flights × price(days)``: a multi-GPU flight is priced once for
all its GPUs, and nothing is billed by the hour. Flights run side by side, so the window
is ``package_days × 24`` hours whatever their number; extra flights only help by running
independent work in parallel — they never shorten a single run nor pool GPUs or memory.

Which options are listed (:func:`quote_options`):

- every package length of every offer that has packages (the chosen one included),
  with 1, 2, … N flights, N = min(number of runs, 8): runs are the only thing extra
  flights can spread, and each count costs one more solve. The count stops growing as
  soon as one more flight no longer shortens the schedule, or once (from 2 flights on)
  the work fits the offer's shortest package — more flights would then only cost more.
  The chosen flight count is always listed;
- an offer on which some run cannot be placed (more GPUs than a flight has, more memory
  than its GPU has) is listed once per package with ``fits = false`` and the reason in
  ``notes``;
- every option has ``notes``: ``full protocol`` (with its flights, and the hours over the
  window when it does not fit), the reduced protocol's tiers left out, or why a run
  cannot be placed (:func:`quote_for_job`: ``the whole job`` or how much too long);
- when the chosen option does not fit, the reduced protocol on it: drop exploratory
  stages and runs, then useful ones too (and stages only they needed), re-plan, until it
  fits. Essential work is never dropped.

Order: fitting options first; among them the full protocol before reduced ones, then
the chosen offer's currency first, then price, fewer flights, shorter package. The first
fitting option is the recommendation (none when nothing fits).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from flightplan.errors import CatalogError
from flightplan.plan.catalog import Catalog, Offer, placement_problems
from flightplan.plan.problem import Task, topological_order
from flightplan.plan.schedule import Schedule, schedule
from flightplan.spec import CampaignSpec
from flightplan.units import Money, hours

__all__ = ["Option", "Quote", "quote_options", "quote_for_job", "reduce_tasks", "MAX_FLIGHTS"]

_DROP_ORDER = (("exploratory",), ("exploratory", "useful"))
#: most flights an option lists (each count is one more schedule to solve)
MAX_FLIGHTS = 8


@dataclass(frozen=True)
class Option:
    """One way to rent. ``reserved_s`` is None when the work cannot be placed on the offer.

    Attributes:
        offer, package_days, flights: what is bought.
        total_price: ``flights × package price`` (Money).
        window_s: ``package_days × 86400`` (flights run side by side).
        reserved_s: makespan of the schedule under this option (s), or None.
        dropped: names left out (reduced protocol). notes: one-line remarks.
        schedule: the schedule behind ``reserved_s`` (not in JSON).
    """

    offer: str
    package_days: int
    flights: int
    total_price: Money
    window_s: int
    reserved_s: int | None
    dropped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    schedule: Schedule | None = None

    @property
    def fits(self) -> bool:
        """The work can be placed and ends within the window."""
        return self.reserved_s is not None and self.reserved_s <= self.window_s

    def to_json(self) -> dict[str, Any]:
        """The option as the JSON contract spells it (money as a decimal string)."""
        return {
            "offer": self.offer,
            "package_days": self.package_days,
            "flights": self.flights,
            "total_price": str(self.total_price),
            "currency": self.total_price.currency,
            "reserved_hours": None if self.reserved_s is None else hours(self.reserved_s),
            "fits": self.fits,
            "uncommitted_hours": None if self.reserved_s is None
            else hours(self.window_s - self.reserved_s),
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Quote:
    """Options in recommendation order; ``recommendation`` is the first fitting one.
    ``unquoted`` names the catalog offers left out because they have no package prices."""

    options: tuple[Option, ...]
    unquoted: tuple[str, ...] = ()

    @property
    def recommendation(self) -> Option | None:
        """The cheapest fitting option (full protocol preferred), or None."""
        return next((o for o in self.options if o.fits), None)

    def to_json(self) -> dict[str, Any]:
        """``{"options": [...], "recommendation": {...} or null}``."""
        best = self.recommendation
        return {"options": [o.to_json() for o in self.options],
                "recommendation": best.to_json() if best else None}


def _order(options: list[Option], currency: str) -> tuple[Option, ...]:
    return tuple(sorted(options, key=lambda o: (
        not o.fits, bool(o.dropped), o.total_price.currency != currency,
        o.total_price.amount, o.flights, o.package_days, o.offer)))


def reduce_tasks(tasks: list[Task], tiers: tuple[str, ...]) -> tuple[list[Task], tuple[str, ...]]:
    """Drop the tasks of ``tiers`` (never essential ones) and the stages only they needed.

    A stage is kept when it has no dependents, when a kept task depends on it directly,
    or when a kept run depends on it through any chain (its set-up); otherwise only
    dropped work needed it and it goes too. A kept task that waited for a dropped one
    now waits for what that one waited for, so the order among kept tasks is unchanged.

    Returns:
        (kept tasks in the given order, dropped names in the given order).

    Raises:
        ValueError: ``tiers`` includes ``"essential"``.
    """
    if "essential" in tiers:
        raise ValueError("essential work is never dropped")
    by_name = {t.name: t for t in tasks}
    children: dict[str, list[str]] = {t.name: [] for t in tasks}
    for task in tasks:
        for dep in task.after:
            children[dep].append(task.name)
    order = topological_order(by_name)
    setup_of_kept_runs: set[str] = set()
    for name in order[::-1]:
        task = by_name[name]
        if (task.kind == "run" and task.tier not in tiers) or name in setup_of_kept_runs:
            setup_of_kept_runs.update(task.after)
    dropped: set[str] = set()
    for name in order[::-1]:                    # dependents before what they need
        task = by_name[name]
        if task.tier in tiers:
            dropped.add(name)
        elif task.kind == "stage" and children[name] and name not in setup_of_kept_runs \
                and all(c in dropped for c in children[name]):
            dropped.add(name)
    waits_for: dict[str, set[str]] = {}         # kept tasks each one must wait for
    for name in order:
        waits_for[name] = set()
        for dep in by_name[name].after:
            waits_for[name] |= waits_for[dep] if dep in dropped else {dep}
    kept = [replace(t, after=tuple(sorted(waits_for[t.name]))) for t in tasks if t.name not in dropped]
    return kept, tuple(t.name for t in tasks if t.name in dropped)


class _Solver:
    """Schedules shared between options: one per (GPUs per flight, flights, dropped)."""

    def __init__(self, people: int, budget_s: float, per_solve_s: float):
        self.people = people
        self.deadline = time.monotonic() + budget_s
        self.per_solve_s = per_solve_s
        self.cache: dict[tuple[Any, ...], Schedule] = {}

    def __call__(self, tasks: list[Task], gpus_per_flight: int, flights: int,
                 dropped: tuple[str, ...] = ()) -> Schedule:
        key = (gpus_per_flight, flights, dropped)
        if key not in self.cache:
            left = max(0.0, self.deadline - time.monotonic())
            self.cache[key] = schedule(tasks, flights=flights, gpus_per_flight=gpus_per_flight,
                                       people=self.people, time_limit_s=min(self.per_solve_s, left))
        return self.cache[key]


def quote_options(spec: CampaignSpec, tasks: list[Task], catalog: Catalog, *,
                  chosen: Schedule, budget_s: float = 2.0, per_solve_s: float = 0.5) -> Quote:
    """Every rental option for the planned ``tasks`` (see the module docstring).

    Args:
        spec: the campaign (rental choice, runs for the placement checks).
        tasks: the work as planned (durations already replaced or extended).
        catalog: offers and prices.
        chosen: the schedule already solved for the chosen offer and flight count.
        budget_s: wall-clock seconds for all other CP-SAT solves together; past it the
            list-scheduling result is used (``optimal`` false).
        per_solve_s: limit of one solve (s).
    """
    rental = spec.rental
    chosen_offer = catalog.offers[rental.offer]
    solve = _Solver(rental.people, budget_s, per_solve_s)
    solve.cache[(chosen_offer.gpus_per_flight, rental.flights, ())] = chosen
    flight_cap = min(len(spec.runs), MAX_FLIGHTS)
    options: list[Option] = []
    unquoted = tuple(o.name for o in catalog.offers.values() if not o.packages)
    for offer in catalog.offers.values():
        if not offer.packages:
            continue
        problems = placement_problems(spec, offer)
        if problems:
            options.extend(Option(offer.name, days, 1, price, days * 86400, None, (), tuple(problems))
                           for days, price in sorted(offer.packages.items()))
            continue
        shortest_s = min(offer.packages) * 86400
        previous = None
        for flights in range(1, flight_cap + 1):
            result = solve(tasks, offer.gpus_per_flight, flights)
            if previous is not None and result.makespan_s >= previous:
                break
            options.extend(_priced(offer, flights, result))
            if flights >= 2 and result.makespan_s <= shortest_s:
                break        # it fits the shortest package: more flights only cost more
            previous = result.makespan_s
        if offer is chosen_offer and not any(o.flights == rental.flights for o in options
                                             if o.offer == offer.name):
            options.extend(_priced(offer, rental.flights, chosen))
    chosen_option = next(o for o in options if o.offer == rental.offer and o.flights == rental.flights
                         and o.package_days == rental.package_days)
    if not chosen_option.fits:
        for tiers in _DROP_ORDER:
            kept, dropped = reduce_tasks(tasks, tiers)
            if not dropped or any(o.dropped == dropped for o in options):
                continue
            result = solve(kept, chosen_offer.gpus_per_flight, rental.flights, dropped)
            option = replace(chosen_option, reserved_s=result.makespan_s, dropped=dropped,
                             schedule=result, notes=(f"reduced: no {'/'.join(tiers)} work",))
            options.append(option)
            if option.fits:
                break
    return Quote(_order(options, chosen_offer.currency or ""), unquoted)


def _full_protocol_notes(flights: int, reserved_s: int, window_s: int) -> tuple[str, ...]:
    """What a full-protocol option does: every stage and run; how flights are used; by
    how much it misses its window."""
    note = "full protocol" + (f" on {flights} flights side by side" if flights > 1 else "")
    if reserved_s <= window_s:
        return (note,)
    return (note, f"{(reserved_s - window_s) / 3600:.1f} h over the window")


def _priced(offer: Offer, flights: int, result: Schedule) -> list[Option]:
    """One option per package length of ``offer`` for ``flights`` flights of ``result``."""
    extra = () if result.optimal else ("schedule not proven shortest (time limit)",)
    return [Option(offer.name, days, flights, price * flights, days * 86400, result.makespan_s,
                   (), _full_protocol_notes(flights, result.makespan_s, days * 86400) + extra,
                   result)
            for days, price in sorted(offer.packages.items())]


def quote_for_job(offer_name: str, job_hours: float, gpus: int, catalog: Catalog) -> Quote:
    """The packages of ``offer_name`` that cover one continuous job, cheapest first.

    A job runs on one flight (it never spans two), so every option has one flight; an
    option fits when ``job_hours <= package_days × 24`` and ``gpus`` GPUs fit one flight.

    Args:
        offer_name: a catalog offer. job_hours: length of the job (h, > 0).
        gpus: GPUs the job holds at once (>= 1).

    Raises:
        CatalogError: unknown offer (did you mean) or an offer without package prices.
        ValueError: ``job_hours`` or ``gpus`` not positive.
    """
    if job_hours <= 0 or gpus < 1:
        raise ValueError("hours and gpus must be positive")
    offer = catalog.offer(offer_name, field_name="--offer")
    if not offer.packages:
        raise CatalogError(f"the catalog has no package prices for {offer.name!r}; give them "
                           f"in a user catalog file (--catalog FILE)", file="catalog",
                           field="--offer", value=offer_name)
    job_s = round(job_hours * 3600)
    if gpus > offer.gpus_per_flight:
        notes = (f"the job needs {gpus} GPUs; a {offer.name} flight has {offer.gpus_per_flight} "
                 f"and a job never spans flights",)
        options = [Option(offer.name, days, 1, price, days * 86400, None, (), notes)
                   for days, price in sorted(offer.packages.items())]
    else:
        options = [Option(offer.name, days, 1, price, days * 86400, job_s, (),
                          (f"the job is {(job_s - days * 86400) / 3600:.1f} h too long",)
                          if job_s > days * 86400 else ("the whole job",))
                   for days, price in sorted(offer.packages.items())]
    return Quote(_order(options, offer.currency or ""))
