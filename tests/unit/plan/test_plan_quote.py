"""The quote: prices of every option, the recommendation, the reduced protocol."""

from __future__ import annotations

import pytest

from flightplan.errors import CatalogError
from flightplan.plan import builtin_catalog, plan_campaign, quote_for_job
from flightplan.plan.quote import reduce_tasks
from flightplan.plan.problem import Task
from flightplan.units import Duration

B200 = """
[[offer]]
name = "B200"
gpu_memory_gb = 180
currency = "USD"
[[offer.package]]
days = 3
price = "500.00"
"""


def _option(plan, offer, days, flights, dropped=()):
    return next(o for o in plan.to_json()["options"] if o["offer"] == offer and
                o["package_days"] == days and o["flights"] == flights and o["dropped"] == list(dropped))


def test_illustration_fits_the_three_day_package_it_chose(illustration) -> None:
    plan = plan_campaign(illustration).to_json()
    assert plan["recommendation"] == _option(plan_campaign(illustration), "RTX 4090", 3, 1)
    assert plan["recommendation"]["total_price"] == "47.14"
    assert plan["options"][0] == plan["recommendation"]
    assert not any(o["dropped"] for o in plan["options"])     # it fits: no reduced protocol


def test_extended_by_30h_two_three_day_flights_are_cheapest(illustration) -> None:
    plan = plan_campaign(illustration, extend={"lora-r8": Duration.parse("30h")})
    data = plan.to_json()
    assert (data["reserved_hours"], data["uncommitted_hours"], data["fits"]) == (78.0, -6.0, False)
    chosen = _option(plan, "RTX 4090", 3, 1)
    assert (chosen["fits"], chosen["uncommitted_hours"]) == (False, -6.0)
    seven = _option(plan, "RTX 4090", 7, 1)
    assert (seven["total_price"], seven["fits"], seven["reserved_hours"]) == ("110.00", True, 78.0)
    single = [o for o in data["options"] if o["flights"] == 1 and o["fits"] and not o["dropped"]]
    assert single[0] == seven            # the cheapest single flight that fits
    # Two 3-day flights: lora-r8 (40 h) on one, control + len256 on the other, by hand 54 h.
    two = _option(plan, "RTX 4090", 3, 2)
    assert (two["total_price"], two["reserved_hours"], two["fits"]) == ("94.28", 54.0, True)
    assert data["recommendation"] == two
    assert data["options"][0] == two
    # reduced protocol on the chosen package: without the useful run, 64 h fit
    reduced = _option(plan, "RTX 4090", 3, 1, dropped=["lora-r8-len256"])
    assert (reduced["reserved_hours"], reduced["fits"], reduced["total_price"]) == (64.0, True, "47.14")
    prices = [o["total_price"] for o in data["options"] if o["fits"] and not o["dropped"]]
    assert prices == sorted(prices, key=float)


def test_a_two_gpu_flight_is_priced_once(make_spec) -> None:
    runs = [{"name": "control", "tier": "essential", "duration": "10h", "gpus": 2},
            {"name": "variant", "tier": "essential", "reference": "control", "duration": "10h",
             "gpus": 2, "params": {"lr": 0.1}}]
    plan = plan_campaign(make_spec(runs=runs, offer="B200", catalog=B200)).to_json()
    assert plan["total_price"] == "500.00"
    one = next(o for o in plan["options"] if o["offer"] == "B200" and o["flights"] == 1)
    assert (one["total_price"], one["reserved_hours"]) == ("500.00", 20.0)
    two = next(o for o in plan["options"] if o["offer"] == "B200" and o["flights"] == 2)
    assert (two["total_price"], two["reserved_hours"]) == ("1000.00", 10.0)
    # no number of 1-GPU RTX 4090 flights can hold a 2-GPU run
    rtx = [o for o in plan["options"] if o["offer"] == "RTX 4090"]
    assert [o["package_days"] for o in rtx] == [3, 7, 30]
    assert all(not o["fits"] and o["reserved_hours"] is None for o in rtx)
    assert all("needs 2 GPUs" in o["notes"][0] for o in rtx)


def test_memory_beyond_one_gpu_is_not_pooled_by_more_flights(make_spec) -> None:
    runs = [{"name": "control", "tier": "essential", "duration": "10h", "gpu_memory_gb": 80}]
    plan = plan_campaign(make_spec(runs=runs, offer="B200", catalog=B200)).to_json()
    rtx = [o for o in plan["options"] if o["offer"] == "RTX 4090"]
    assert rtx and all(not o["fits"] and "80 GB" in o["notes"][0] for o in rtx)


def test_reduced_protocol_drops_exploratory_first_and_never_essential(make_spec) -> None:
    stages = [{"name": "prep-long", "duration": "5h", "uses": ["gpu"]},
              {"name": "report", "duration": "2h", "uses": ["person"],
               "after": ["control", "wide", "long"]}]
    runs = [{"name": "control", "tier": "essential", "duration": "40h"},
            {"name": "wide", "tier": "exploratory", "reference": "control", "duration": "20h",
             "params": {"width": 2}},
            {"name": "long", "tier": "useful", "reference": "control", "duration": "20h",
             "params": {"len": 2}, "after": ["prep-long"]}]
    plan = plan_campaign(make_spec(runs=runs, stages=stages)).to_json()
    assert plan["reserved_hours"] == 87.0     # 40 + 20 + 5 + 20 on one GPU, then the report
    first = _option(plan_campaign(make_spec(runs=runs, stages=stages)), "RTX 4090", 3, 1, ["wide"])
    assert (first["reserved_hours"], first["fits"]) == (67.0, True)
    assert not any(o["dropped"] == ["prep-long", "long", "wide"] for o in plan["options"])


def test_reduce_tasks_keeps_the_order_through_dropped_work() -> None:
    tasks = [Task("a", "stage", "essential", 60, gpus=1),
             Task("b", "run", "useful", 60, gpus=1, after=("a",)),
             Task("only-b", "stage", "essential", 60, gpus=1, after=("a",)),
             Task("c", "run", "essential", 60, gpus=1, after=("b",))]
    tasks[1] = Task("b", "run", "useful", 60, gpus=1, after=("only-b",))
    kept, dropped = reduce_tasks(tasks, ("exploratory", "useful"))
    assert dropped == ("b",)                      # only-b still feeds c (through b)
    assert {t.name: t.after for t in kept}["c"] == ("only-b",)
    with pytest.raises(ValueError, match="essential"):
        reduce_tasks(tasks, ("essential",))


def test_quote_for_one_continuous_job_of_78_hours() -> None:
    quote = quote_for_job("RTX 4090", 78, 1, builtin_catalog()).to_json()
    rows = [(o["package_days"], o["total_price"], o["fits"], o["uncommitted_hours"]) for o in quote["options"]]
    assert rows == [(7, "110.00", True, 90.0), (30, "390.00", True, 642.0), (3, "47.14", False, -6.0)]
    assert quote["recommendation"]["total_price"] == "110.00"


def test_quote_for_a_job_wider_than_a_flight_fits_nowhere() -> None:
    quote = quote_for_job("RTX 4090", 10, 2, builtin_catalog()).to_json()
    assert quote["recommendation"] is None
    assert all("needs 2 GPUs" in o["notes"][0] for o in quote["options"])


def test_quote_refuses_unknown_or_unpriced_offers() -> None:
    with pytest.raises(CatalogError, match="did you mean 'RTX 4090'"):
        quote_for_job("RTX 4009", 10, 1, builtin_catalog())
    with pytest.raises(CatalogError, match="no package prices for 'B200'"):
        quote_for_job("B200", 10, 1, builtin_catalog())


def test_another_offer_from_a_user_catalog_is_quoted(illustration_doc, tmp_path) -> None:
    from flightplan.spec import parse_spec

    (tmp_path / "offers.toml").write_text(B200, encoding="utf-8")
    illustration_doc["rental"]["catalog"] = "offers.toml"
    spec = parse_spec(illustration_doc, source=str(tmp_path / "campaign.toml"), campaign_dir=tmp_path)
    data = plan_campaign(spec).to_json()
    assert data["unquoted_offers"] == []
    b200 = [o for o in data["options"] if o["offer"] == "B200"]
    # one B200 flight, two GPUs: control then lora-r8 on one GPU (4-24), len256 on the
    # other (4-18), error-analysis 14-24, report 24-34; priced once for both GPUs.
    assert [(o["flights"], o["total_price"], o["reserved_hours"]) for o in b200] == [(1, "500.00", 34.0)]


def test_the_chosen_flight_count_is_always_listed(make_spec) -> None:
    runs = [{"name": "control", "tier": "essential", "duration": "10h"}]
    data = plan_campaign(make_spec(runs=runs, flights=3)).to_json()
    assert (data["flights"], data["total_price"], data["reserved_hours"]) == (3, "141.42", 10.0)
    three = [o for o in data["options"] if o["flights"] == 3]
    assert [o["total_price"] for o in three] == ["141.42", "330.00", "1170.00"]
    assert data["recommendation"]["flights"] == 1      # one run: extra flights only cost more


def test_planning_twice_gives_the_same_plan(illustration) -> None:
    extend = {"lora-r8": Duration.parse("30h")}
    assert plan_campaign(illustration, extend=extend).to_json() == \
        plan_campaign(illustration, extend=extend).to_json()
