"""The committed rental, frozen with the plan: what was bought does not change afterwards.

The plan (``plan --json``) holds the rental it was made for: ``offer``, ``package_days``,
``flights``, ``total_price`` (flights × the catalog's package price) and ``currency``. The
original plan is frozen in the ledger before the first run, and the ledger's expense rows
(:func:`flightplan.plan.catalog.expense_rows`) are written from the campaign file and the
catalog on every ``flightplan run``; so ``run`` compares the two first, as it does the
decision rule (:mod:`flightplan.plan.decision_rule`). A ``[rental]`` or a package price
changed after the runs started would silently change the committed total and the rental
per accepted product: it is refused (exit 2) with the field, both values and the fix. A
package bought later (to extend the rental) is a cost of its own: an ``[[expense]]``. The
order number and ``[rental] started`` may change; they price nothing.

Usage::

    check_rental_unchanged(spec, offer, ledger.original_plan().plan)   # SpecError on a change
"""

from __future__ import annotations

from typing import Any, Mapping

from flightplan.errors import SpecError
from flightplan.plan.catalog import Offer, rental_price
from flightplan.spec import CampaignSpec

__all__ = ["RENTAL_KEYS", "rental_terms", "check_rental_unchanged"]

RENTAL_KEYS = ("offer", "package_days", "flights", "total_price", "currency")
"""The plan's keys that say what rental was committed."""

_LATER = ("a package bought later to extend the rental is an [[expense]] with its amount, "
          "not a change of [rental]")


def rental_terms(spec: CampaignSpec, offer: Offer) -> dict[str, Any]:
    """``{offer, package_days, flights, total_price, currency}`` of ``spec``'s rental priced
    from ``offer`` (the values :meth:`PlanResult.to_json` writes; money a decimal string).

    Raises:
        SpecError: the offer has no package of that length (:func:`rental_price`).
    """
    price = rental_price(spec, offer)
    return {"offer": offer.name, "package_days": spec.rental.package_days,
            "flights": spec.rental.flights, "total_price": str(price),
            "currency": price.currency}


def check_rental_unchanged(spec: CampaignSpec, offer: Offer,
                           frozen_plan: Mapping[str, Any]) -> None:
    """Refuse a rental that differs from the one frozen with the original plan.

    A key the frozen plan lacks is not compared.

    Args:
        spec: the campaign file as it is now.
        offer: ``[rental] offer`` in the catalog as it is now (its prices).
        frozen_plan: the version-1 plan of the ledger.

    Raises:
        SpecError: names the first changed ``rental.<key>`` (or the package's price), the
            value now, the frozen one and the fix.
    """
    now = rental_terms(spec, offer)
    for key in RENTAL_KEYS:
        if key not in frozen_plan or frozen_plan[key] == now[key]:
            continue
        if key in ("total_price", "currency"):
            was = f"{frozen_plan.get('total_price')} {frozen_plan.get('currency')}"
            raise SpecError(
                f"the catalog now prices the rental ({now['flights']} × {now['offer']} "
                f"{now['package_days']}-day package) at {now['total_price']} "
                f"{now['currency']}, but it was committed at {was} when the plan was frozen "
                f"before the first run; restore that price in the catalog (rental.catalog); "
                f"{_LATER}", file=spec.source, field="rental.catalog")
        raise SpecError(
            f"{now[key]!r} differs from {frozen_plan[key]!r}, the rental committed with the "
            f"plan before the first run; restore {frozen_plan[key]!r} ({_LATER}), or plan "
            f"the new rental in a new campaign folder",
            file=spec.source, field=f"rental.{key}")
