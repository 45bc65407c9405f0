"""budget.json: the known answers of DESIGN.md, worked by hand."""

from __future__ import annotations

import pytest

from flightplan.close.budget import ExternalExpense, Package, build_budget
from flightplan.errors import SpecError
from flightplan.units import Money

USD = "USD"
RTX_3D = Package("RTX 4090", 3, 1, Money.parse("47.14", USD))


def test_two_accepted_products_cost_23_57_each():
    budget = build_budget(packages=[RTX_3D], external=[ExternalExpense(
        "dataset licence", Money.parse("12.50", USD))], accepted_products=2, rejections=[],
        stopped_runs=[])
    assert budget == {
        "currency": "USD",
        "committed": [{"offer": "RTX 4090", "package_days": 3, "flights": 1, "price": "47.14"}],
        "committed_total": "47.14",
        "external_expenses": [{"label": "dataset licence", "amount": "12.50"}],
        "external_total": "12.50",
        "accepted_products": 2,
        "rental_per_accepted": "23.57",
        "undefined_reason": None,
        "rejected": [],
        "stopped_runs": [],
    }


def test_three_accepted_round_half_up():
    # 47.14 / 3 = 15.71333… → 15.71
    budget = build_budget(packages=[RTX_3D], external=[], accepted_products=3, rejections=[],
                          stopped_runs=[])
    assert budget["rental_per_accepted"] == "15.71"
    # 0.05 / 2 = 0.025 → 0.03 (half-up, not banker's 0.02)
    cheap = Package("tiny", 1, 1, Money.parse("0.05", USD))
    assert build_budget(packages=[cheap], external=[], accepted_products=2, rejections=[],
                        stopped_runs=[])["rental_per_accepted"] == "0.03"


def test_two_flights_commit_94_28():
    two = Package("RTX 4090", 3, 2, Money.parse("47.14", USD))
    budget = build_budget(packages=[two], external=[], accepted_products=1, rejections=[],
                          stopped_runs=[])
    assert budget["committed"] == [{"offer": "RTX 4090", "package_days": 3, "flights": 2,
                                    "price": "47.14"}]
    assert budget["committed_total"] == "94.28"
    assert budget["rental_per_accepted"] == "94.28"


def test_zero_accepted_is_undefined_with_the_reasons_and_the_cost_still_shown():
    rejections = [{"run_id": "control-1", "reasons": ["stopped by rule non_finite_loss"]},
                  {"run_id": "lora-2", "reasons": ["macro_f1 0.21 is below accept_at_least 0.3"]}]
    stopped = [{"run_id": "control-1", "rule": "non_finite_loss", "reason": "loss is nan"}]
    budget = build_budget(packages=[RTX_3D], external=[], accepted_products=0,
                          rejections=rejections, stopped_runs=stopped)
    assert budget["rental_per_accepted"] is None
    assert budget["committed_total"] == "47.14"
    assert budget["undefined_reason"] == (
        "no product was accepted, so the rental per accepted product is undefined (the rental "
        "is still spent); control-1: stopped by rule non_finite_loss | lora-2: macro_f1 0.21 "
        "is below accept_at_least 0.3")
    assert budget["stopped_runs"] == stopped


def test_an_expense_in_another_currency_is_refused():
    with pytest.raises(SpecError, match="expense 'licence' is in EUR, the rental in USD"):
        build_budget(packages=[RTX_3D], external=[ExternalExpense(
            "licence", Money.parse("1.00", "EUR"))], accepted_products=1, rejections=[],
            stopped_runs=[])


def test_ledger_package_rows_hold_the_whole_rental(tmp_path):
    # the runner records amount = flights × package price (plan/catalog.py expense_rows)
    from close_fixture import make_campaign

    from flightplan.close.budget import budget_inputs
    from flightplan.ledger_rows import ExpenseRow
    spec, _ = make_campaign(tmp_path, publish=False)
    rows = [ExpenseRow(kind="package", label="RTX 4090 3-day package × 2", offer="RTX 4090",
                       package_days=3, flights=2, amount="94.28", currency="USD")]
    packages, external = budget_inputs(spec, rows)
    assert packages == [Package("RTX 4090", 3, 2, Money.parse("47.14", USD))]
    # no external row in the ledger: the spec's [[expense]] entries
    assert external == [ExternalExpense("dataset licence", Money.parse("12.50", USD))]
    budget = build_budget(packages=packages, external=external, accepted_products=4,
                          rejections=[], stopped_runs=[])
    assert (budget["committed_total"], budget["rental_per_accepted"]) == ("94.28", "23.57")


def test_timing_repeats_of_one_configuration_are_one_product():
    from flightplan.close.acceptance import Verdict, accepted_product_count

    def verdict(run_id, config_hash, accepted):
        return Verdict(run_id, run_id.rsplit("-", 1)[0], "essential", "finished", config_hash,
                       0.5, accepted, True, [] if accepted else ["below"], [])

    verdicts = [verdict("control-aaaaaaaaaa", "a" * 64, True),
                verdict("control-again-aaaaaaaaaa", "a" * 64, True),
                verdict("lora-bbbbbbbbbb", "b" * 64, True),
                verdict("len-cccccccccc", "c" * 64, False)]
    assert accepted_product_count(verdicts) == 2
    budget = build_budget(packages=[RTX_3D], external=[], accepted_products=2, rejections=[],
                          stopped_runs=[])
    assert budget["rental_per_accepted"] == "23.57"
