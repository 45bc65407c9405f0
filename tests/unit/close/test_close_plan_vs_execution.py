"""Plan versus execution on the fixture ledger, worked by hand."""

from __future__ import annotations

from close_fixture import make_campaign

from flightplan.close.plan_vs_execution import (plan_vs_execution, plan_vs_execution_markdown,
                                                shown_hours)


def test_planned_observed_deviation_and_decisions(tmp_path):
    _, ledger = make_campaign(tmp_path, stopped=("variant",), publish=False)
    record = plan_vs_execution(ledger)
    items = {i["name"]: i for i in record["items"]}
    assert list(items) == ["data-check", "control", "variant"]
    # planned 20 s, observed 30 s (T0+12 .. T0+42): +10 s = +0.002778 h, +50 %
    control = items["control"]
    assert control["planned_hours"] == round(20 / 3600, 6)
    assert control["observed_hours"] == round(30 / 3600, 6)
    assert control["deviation_hours"] == round(10 / 3600, 6)
    assert control["deviation_fraction"] == 0.5
    assert control["observed_start_hours"] == round(12 / 3600, 6)
    assert items["data-check"]["deviation_hours"] == round(2 / 3600, 6)
    assert items["variant"]["explanation"] == ["ran 10 s late: the disk was slow"]
    assert items["variant"]["status"] == "stopped"
    # reserved 50 s; observed span 72 s (T0 .. T0+72)
    assert record["totals"] == {"reserved_hours": 50 / 3600, "observed_hours": 0.02,
                                "busy_hours": 0.02, "deviation_hours": round(22 / 3600, 6)}
    assert record["plan_intact"] is True
    assert record["original_plan"]["plan_sha256"] == ledger.original_plan()["plan_sha256"]
    assert [(d["kind"], d["decision"]) for d in record["decisions"]] == [
        ("pilot_check", "resume verified"), ("pilot", "continue"), ("stop", "stop")]
    assert record["decisions"][2]["rule"] == "non_finite_loss"
    markdown = plan_vs_execution_markdown(record)
    # the printed deviation is the printed observed − the printed planned (not 0.0028)
    assert "| control | run | essential | finished | 0.0056 | 0.0083 | +0.0027 | 1 | – |" \
        in markdown
    # 50 s reserved = 0.0139 h, 72 s observed = 0.0200 h: +0.0061 (22 s alone: 0.0061)
    assert "Reserved 0.0139 h; observed 0.0200 h from first start to last end (0.0200 h of " \
        "stage and run time); deviation +0.0061 h." in markdown
    assert "- stopped: variant (`variant-0000000001`) by rule non_finite_loss" in markdown
    assert "- pilot (short run, checkpoint, resume in a new process): passed: resumed; log in" \
        in markdown


def test_shown_hours_add_up_at_the_precision_shown():
    """Two places once every figure is 0.1 h or more; four for a tiny campaign."""
    item = {"planned_hours": 10.004, "observed_hours": 12.496}          # 10.00 and 12.50
    record = {"items": [item, {"planned_hours": 2.0, "observed_hours": None}],
              "totals": {"reserved_hours": 12.004, "observed_hours": 14.996,
                         "busy_hours": 14.5}}
    assert shown_hours(record) == {
        "places": 2,
        "items": [{"planned": "10.00", "observed": "12.50", "deviation": "+2.50"},
                  {"planned": "2.00", "observed": "–", "deviation": "–"}],
        "totals": {"reserved": "12.00", "observed": "15.00", "busy": "14.50",
                   "deviation": "+3.00"}}
    record["items"][1]["observed_hours"] = 1 / 3600                   # one second
    shown = shown_hours(record)
    assert shown["places"] == 4 and shown["items"][1] == {
        "planned": "2.0000", "observed": "0.0003", "deviation": "-1.9997"}


def test_a_tampered_original_plan_is_reported(tmp_path):
    _, ledger = make_campaign(tmp_path, publish=False)
    frozen = ledger.original_plan()
    ledger.original_plan = lambda: dict(frozen, plan=dict(frozen["plan"], reserved_hours=1.0))
    assert plan_vs_execution(ledger)["plan_intact"] is False
