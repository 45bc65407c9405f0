"""The decision rule, frozen with the plan: what a variant must show, written before the runs.

The rule is ``[campaign]``'s ``metric``, ``goal``, ``min_gain`` and ``accept_at_least``. It
goes into the plan (``plan --json`` key ``decision_rule``), so the original plan frozen in
the ledger before the first run keeps it under its sha256. ``flightplan run`` (again) and
``flightplan close`` compare the campaign file with it: a rule changed after the runs
started would let the results choose the threshold, so it is refused (exit 2) with the
field, both values and the fix. The question's wording may change; it decides nothing.

Usage::

    plan["decision_rule"] = decision_rule(spec)
    check_rule_unchanged(spec, ledger.original_plan().plan)   # SpecError on a change
"""

from __future__ import annotations

from typing import Any, Mapping

from flightplan.errors import SpecError
from flightplan.spec import CampaignSpec

__all__ = ["RULE_KEYS", "decision_rule", "check_rule_unchanged"]

RULE_KEYS = ("metric", "goal", "min_gain", "accept_at_least")
"""The ``[campaign]`` keys that decide the verdict and the products accepted."""


def decision_rule(spec: CampaignSpec) -> dict[str, Any]:
    """``{metric, goal, min_gain, accept_at_least}`` of ``spec`` (JSON values)."""
    return {key: getattr(spec.campaign, key) for key in RULE_KEYS}


def check_rule_unchanged(spec: CampaignSpec, frozen_plan: Mapping[str, Any]) -> None:
    """Refuse a campaign file whose decision rule differs from the frozen plan's.

    A plan frozen before the rule was part of plans (no ``decision_rule`` key) is not
    checked.

    Raises:
        SpecError: names the first changed key (``campaign.<key>``), the value in the file,
            the frozen one and the fix.
    """
    frozen = frozen_plan.get("decision_rule")
    if not isinstance(frozen, Mapping):
        return
    now = decision_rule(spec)
    for key in RULE_KEYS:
        if key in frozen and frozen[key] != now[key]:
            raise SpecError(
                f"{now[key]!r} differs from {frozen[key]!r}, frozen with the plan before the "
                f"first run: the decision rule is written before the results are seen; restore "
                f"{frozen[key]!r}, or ask the new question in a new campaign folder",
                file=spec.source, field=f"campaign.{key}")
