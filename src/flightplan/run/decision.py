"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return. Each run is
re-estimated by its task's ``estimate_run`` hook, by default
:func:`flightplan.tasks.estimate.estimate_run_seconds`.

The decision: re-plan with the re-estimates; ``continue`` when it fits the window; else
``cut`` — drop the exploratory runs, then also the useful ones, re-planning each time —
at the first that fits; else ``stop``, naming the cheapest package option that fits the
full campaign.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Decision", "DECISIONS", "cut_steps", "choose", "replan_from_options"]

DECISIONS = ("continue", "cut", "stop")


@dataclass(frozen=True)
class Decision:
    """The outcome of the decision point.

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


def cut_steps(runs: list[tuple[str, str]], *, done: set[str] = frozenset()) -> list[list[str]]:
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


def choose(steps: list[list[str]], replan: Callable[[list[str]], dict[str, Any]]) -> Decision:
    """Decide from re-plans: ``replan(dropped)`` returns the plan JSON without ``dropped``.

    Returns:
        ``continue`` when the full plan fits; ``cut`` with the first step that fits;
        ``stop`` otherwise, with the cheapest fitting option of the full plan (its
        ``options`` are sorted cheapest first by the planner; the first that ``fits``
        and drops nothing is taken).
    """
    full = replan(steps[0])
    if full.get("fits"):
        return Decision("continue", [], _hours_line(full, "fits"))
    for dropped in steps[1:]:
        plan = replan(dropped)
        if plan.get("fits"):
            return Decision("cut", list(dropped),
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
    return Decision("stop", [], f"{_hours_line(full, 'does not fit')} even with only the "
                                f"essential runs; {tail}", option)


def replan_from_options(plan: dict[str, Any], run_names: set[str]
                        ) -> Callable[[list[str]], dict[str, Any]]:
    """``replan(dropped)`` for :func:`choose`, read off one plan JSON (``plan --json``).

    ``[]`` gives the plan itself. A cut gives the planner's reduced protocol: the option of
    the chosen rental (same offer, package_days, flights) whose dropped runs are exactly
    ``dropped`` (it may also drop stages only they needed). The planner adds reduced
    options only while the full plan does not fit and stops at the first that fits; a
    cut it did not compute counts as not fitting.
    """
    rental = (plan.get("offer"), plan.get("package_days"), plan.get("flights"))

    def replan(dropped: list[str]) -> dict[str, Any]:
        if not dropped:
            return plan
        for option in plan.get("options", []):
            same = (option.get("offer"), option.get("package_days"), option.get("flights"))
            runs_dropped = set(option.get("dropped") or []) & run_names
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
