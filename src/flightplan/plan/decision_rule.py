"""The decision rule, frozen with the plan: what a variant must show, written before the runs.

The rule is ``[campaign]``'s ``metric``, ``goal``, ``min_gain`` and ``accept_at_least``. It
goes into the plan (``plan --json`` key ``decision_rule``), so the original plan frozen in
the ledger before the first run keeps it under its sha256. ``flightplan run`` (again) and
``flightplan close`` compare the campaign file with it: a rule changed after the runs
started would let the results choose the threshold, so it is refused (exit 2) with the
field, both values and the fix. The question's wording may change; it decides nothing.

Until a run beyond the pilot has started, no result has been seen, so the rule may still
be corrected (a misspelt metric the pilot could not compute): ``flightplan run`` records
the correction as a :data:`RULE_CHANGED` event ``{from, to}`` in the ledger, and from then
on the rule in force is the latest correction's ``to`` (:func:`rule_in_force`).

Usage::

    plan["decision_rule"] = decision_rule(spec)
    check_rule_unchanged(spec, ledger.original_plan().plan,
                         ledger.events(kind=RULE_CHANGED))        # SpecError on a change
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from flightplan.ledger_rows import EventRow
from flightplan.errors import SpecError
from flightplan.spec import CampaignSpec

__all__ = ["RULE_KEYS", "RULE_CHANGED", "decision_rule", "rule_in_force",
           "check_rule_unchanged"]

RULE_KEYS = ("metric", "goal", "min_gain", "accept_at_least")
"""The ``[campaign]`` keys that decide the verdict and the products accepted."""

RULE_CHANGED = "decision_rule_changed"
"""The ledger event (no run id, data ``{from, to}``: two rules) of a rule corrected before
any run beyond the pilot started."""


def decision_rule(spec: CampaignSpec) -> dict[str, Any]:
    """``{metric, goal, min_gain, accept_at_least}`` of ``spec`` (JSON values)."""
    return {key: getattr(spec.campaign, key) for key in RULE_KEYS}


def rule_in_force(frozen_plan: Mapping[str, Any],
                  changes: Sequence[EventRow] = ()) -> Mapping[str, Any] | None:
    """The rule the results are judged by: the ``to`` of the last :data:`RULE_CHANGED`
    event in ``changes`` (ledger event rows, oldest first), else the frozen plan's
    ``decision_rule``; None for a plan frozen before the rule was part of plans."""
    for change in reversed(changes):
        data = change.data
        to = data.get("to") if isinstance(data, Mapping) else None
        if isinstance(to, Mapping):
            return to
    frozen = frozen_plan.get("decision_rule")
    return frozen if isinstance(frozen, Mapping) else None


def check_rule_unchanged(spec: CampaignSpec, frozen_plan: Mapping[str, Any],
                         changes: Sequence[EventRow] = ()) -> None:
    """Refuse a campaign file whose decision rule differs from the one in force
    (:func:`rule_in_force`). A plan frozen before the rule was part of plans (no
    ``decision_rule`` key) is not checked.

    Raises:
        SpecError: names the first changed key (``campaign.<key>``), the value in the file,
            the frozen one and the fix.
    """
    frozen = rule_in_force(frozen_plan, changes)
    if frozen is None:
        return
    now = decision_rule(spec)
    for key in RULE_KEYS:
        if key in frozen and frozen[key] != now[key]:
            raise SpecError(
                f"{now[key]!r} differs from {frozen[key]!r}, frozen with the plan before the "
                f"first run: the decision rule is written before the results are seen; restore "
                f"{frozen[key]!r}, or ask the new question in a new campaign folder",
                file=spec.source, field=f"campaign.{key}")
