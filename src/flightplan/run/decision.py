"""The decision point after the pilot: re-estimate every run, then continue, cut or stop.

Pure functions (no I/O, no torch): the runner (:mod:`flightplan.run.campaign`) feeds them
the pilot's figures and the plans it computes, and records what they return. Each run is
re-estimated by its task's ``estimate_run`` hook, by default
:func:`flightplan.tasks.estimate.estimate_run_seconds`.

The decision: re-plan with the re-estimates; ``continue`` when it fits the window; else
``cut`` — drop the exploratory runs, then also the useful ones, re-planning each time —
at the first that fits; else ``stop``, naming the cheapest package option that fits the
full campaign (:func:`choose`, a :class:`Choice`).

What the decision point decided is one :class:`Decision`, the same object whether it was
made now or kept from an earlier ``flightplan run`` (:meth:`Decision.from_ledger`): the
ledger keeps it, ``flightplan run --json`` prints :meth:`Decision.to_json`. A kept decision
serves only the control and the decision rule it was made for; when either changed, the
runner makes a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Mapping

__all__ = ["Choice", "Decision", "DECISIONS", "cut_steps", "choose", "replan_from_options"]

DECISIONS = ("continue", "cut", "stop")


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
    kept_from_earlier_run: bool = False

    @property
    def overridden(self) -> bool:
        """``--decide`` chose other than the figures."""
        return self.decision != self.computed

    def to_json(self) -> dict[str, Any]:
        """``flightplan run --json``'s ``decision``: ``{decision, computed, overridden,
        dropped, reason, plan_version, fitting_option, control_id, rule, at,
        kept_from_earlier_run}``."""
        return {"decision": self.decision, "computed": self.computed,
                "overridden": self.overridden, "dropped": list(self.dropped),
                "reason": self.reason, "plan_version": self.plan_version,
                "fitting_option": self.fitting_option, "control_id": self.control_id,
                "rule": self.rule, "at": self.at,
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
                "control_id": self.control_id, "decision_rule": self.rule}

    @classmethod
    def from_ledger(cls, row: Mapping[str, Any], *, control_id: str | None = None
                    ) -> "Decision":
        """A decision the ledger recorded (``Ledger.decisions()`` row), kept.

        Args:
            control_id: the control to assume when the record predates ``control_id``
                (the runner passes the pilot's that preceded it).
        """
        figures = row.get("figures") or {}
        return cls(decision=row["decision"], computed=row["computed"],
                   dropped=tuple(row.get("dropped") or ()), reason=figures.get("reason", ""),
                   plan_version=figures.get("plan_version"),
                   fitting_option=figures.get("fitting_option"),
                   control_id=figures.get("control_id", control_id),
                   rule=figures.get("decision_rule"), at=float(row["at"]),
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
