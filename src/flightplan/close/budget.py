"""The budget at closing: what was committed, what else was spent, per accepted product.

The rental is a flat-rate package: one flight for ``package_days`` days costs its catalog
price, whatever the hours used; ``flights`` flights cost ``flights`` prices. Other real
expenses (``[[expense]]``) are kept apart and never folded into the rental; nothing here
adds a tax, fee or transfer cost that was not recorded.

``rental_per_accepted = committed_total / accepted_products`` (two places, half-up, see
:meth:`flightplan.units.Money.per`). With no accepted product it is undefined: ``null``
with ``undefined_reason`` naming the rejection reasons, while ``committed_total`` still
shows what was spent.

Known answers: one 47.14 USD package, two accepted products → ``"23.57"``;
two 3-day RTX 4090 flights → ``committed_total`` ``"94.28"``.

Usage::

    budget = build_budget(packages=[Package("RTX 4090", 3, 1, Money.parse("47.14", "USD"))],
                          external=[], accepted_products=2, rejections=[], stopped_runs=[])
    budget["rental_per_accepted"]          # "23.57"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flightplan.errors import SpecError
from flightplan.ledger_rows import ExpenseRow
from flightplan.spec import CampaignSpec
from flightplan.units import Money

__all__ = ["Package", "ExternalExpense", "build_budget", "budget_inputs"]


@dataclass(frozen=True)
class Package:
    """A committed rental: ``flights`` flights of ``offer`` for ``package_days`` days, each
    at ``price`` (the catalog price of one flight's package)."""

    offer: str
    package_days: int
    flights: int
    price: Money

    @property
    def total(self) -> Money:
        """``price × flights``."""
        return self.price * self.flights


@dataclass(frozen=True)
class ExternalExpense:
    """A real cost outside the rental (a licence, storage), as recorded."""

    label: str
    amount: Money


def build_budget(*, packages: list[Package], external: list[ExternalExpense],
                 accepted_products: int, rejections: list[dict[str, Any]],
                 stopped_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``budget.json`` object.

    Args:
        packages: committed rentals (at least one).
        external: other expenses, in the rental's currency.
        accepted_products: distinct accepted products (timing repeats count once; a run
            of several replicates counts once, when all of them are accepted:
            :func:`flightplan.close.acceptance.accepted_product_count`).
        rejections: ``[{run_id, reasons: [str]}]`` of the runs not accepted.
        stopped_runs: ``[{run_id, rule, reason}]``.

    Returns:
        ``{currency, committed: [{offer, package_days, flights, price}], committed_total,
        external_expenses: [{label, amount}], external_total, accepted_products,
        rental_per_accepted, undefined_reason, rejected, stopped_runs}``; money as
        two-place decimal strings.

    Raises:
        SpecError: no package, or an amount in another currency than the rental's.
    """
    if not packages:
        raise SpecError("the ledger records no committed package; flightplan run records the "
                        "rental before the first run: run the campaign before closing it",
                        field="rental")
    currency = packages[0].price.currency
    committed_total = Money.zero(currency)
    for package in packages:
        committed_total = committed_total + package.total
    external_total = Money.zero(currency)
    for expense in external:
        if expense.amount.currency != currency:
            raise SpecError(f"expense {expense.label!r} is in {expense.amount.currency}, the "
                            f"rental in {currency}; convert it to {currency} in the campaign file",
                            field="expense.currency", value=expense.amount.currency)
        external_total = external_total + expense.amount
    if accepted_products > 0:
        per_accepted: str | None = str(committed_total.per(accepted_products))
        undefined_reason = None
    else:
        per_accepted = None
        reasons = [f"{r['run_id']}: {'; '.join(r['reasons'])}" for r in rejections]
        undefined_reason = ("no product was accepted, so the rental per accepted product is "
                            "undefined (the rental is still spent); "
                            + (" | ".join(reasons) if reasons else "no run produced a product"))
    return {
        "currency": currency,
        "committed": [{"offer": p.offer, "package_days": p.package_days, "flights": p.flights,
                       "price": str(p.price)} for p in packages],
        "committed_total": str(committed_total),
        "external_expenses": [{"label": e.label, "amount": str(e.amount)} for e in external],
        "external_total": str(external_total),
        "accepted_products": accepted_products,
        "rental_per_accepted": per_accepted,
        "undefined_reason": undefined_reason,
        "rejected": rejections,
        "stopped_runs": stopped_runs,
    }


def budget_inputs(spec: CampaignSpec, expense_rows: list[ExpenseRow]
                  ) -> tuple[list[Package], list[ExternalExpense]]:
    """Committed packages and external expenses, from the ledger (external ones else the spec).

    Ledger rows (``Ledger.expenses()``) of kind ``package`` give ``amount`` as the whole
    price of the rental (``flights`` × the package price, as the runner records it before
    the first run: the rental frozen with the plan), so the price of one flight is
    ``amount / flights``; rows of kind ``external`` are other expenses. Without external
    rows, the ``[[expense]]`` entries.

    Raises:
        SpecError: an amount is not valid money.
    """
    packages: list[Package] = []
    external: list[ExternalExpense] = []
    for row in expense_rows:
        try:
            amount = Money.parse(str(row.amount), row.currency)
        except ValueError as exc:
            raise SpecError(f"ledger expense {row.label!r}: {exc}", field="expense.amount",
                            value=row.amount) from None
        if row.kind == "package":
            flights = int(row.flights or 1)
            packages.append(Package(str(row.offer or row.label), int(row.package_days or 0),
                                    flights, amount.per(flights)))
        else:
            external.append(ExternalExpense(row.label, amount))
    if not any(row.kind == "external" for row in expense_rows):
        external = [ExternalExpense(e.label, e.money) for e in spec.expenses]
    return packages, external
