"""plan stage of flightplan: catalog, end-to-end schedule (CP-SAT), package quote, variant lint.

No torch here, and no I/O beyond reading a user catalog file. The runner calls
:func:`plan_campaign`; ``flightplan plan`` and ``flightplan quote`` live in
:mod:`flightplan.plan.commands`.

Usage::

    from flightplan.plan import plan_campaign
    result = plan_campaign(spec, durations={"control": Duration.parse("25m")})
    result.to_json()["reserved_hours"]
"""

from flightplan.plan.campaign_plan import PlanResult, plan_campaign, tasks_for_spec
from flightplan.plan.catalog import (Catalog, Offer, builtin_catalog, catalog_for_spec,
                                     check_spec_against_catalog, load_catalog)
from flightplan.plan.lint import LintWarning, lint_variants
from flightplan.plan.quote import Option, Quote, quote_for_job
from flightplan.plan.problem import Slot, Task
from flightplan.plan.schedule import Schedule, schedule

__all__ = [
    "PlanResult",
    "plan_campaign",
    "tasks_for_spec",
    "Catalog",
    "Offer",
    "builtin_catalog",
    "catalog_for_spec",
    "check_spec_against_catalog",
    "load_catalog",
    "LintWarning",
    "lint_variants",
    "Option",
    "Quote",
    "quote_for_job",
    "Schedule",
    "Slot",
    "Task",
    "schedule",
]
