"""Plan versus execution on the fixture ledger, worked by hand."""

from __future__ import annotations

import dataclasses

from close_fixture import CONTROL, T0, VARIANT, make_campaign

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
    assert record["original_plan"]["plan_sha256"] == ledger.original_plan().plan_sha256
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
    assert f"- stopped: variant (`{VARIANT}`) by rule non_finite_loss" in markdown
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
    ledger.original_plan = lambda: dataclasses.replace(
        frozen, plan=dict(frozen.plan, reserved_hours=1.0))
    assert plan_vs_execution(ledger)["plan_intact"] is False


def _transferred(run_id, at, **data):
    return {"id": 100 + int(at), "run_id": run_id, "kind": "checkpoint_transferred",
            "at": T0 + at, "data": {"node": "abc (127.0.0.1)", **data}}


def test_checkpoint_transfer_is_a_stage_cost_planned_by_the_re_estimate(tmp_path):
    _, ledger = make_campaign(tmp_path, publish=False)
    ledger.decision_rows[0]["figures"] = {"plan_version": 2, "estimates": {
        "control": {"total_s": 20.0, "transfer_s": 36.0},
        "variant": {"total_s": 20.0, "transfer_s": 18.0}}}
    ledger.event_rows += [
        # control: 1.5 + 6 + 4.5 = 12 s and 0.5 + 3 + 2.5 = 6 s home
        _transferred(f"{CONTROL}", 20, step=1, name="step-000001", bytes=30_000_000,
                     wait_s=1.5, fetch_s=6.0, commit_s=4.5),
        _transferred(f"{CONTROL}", 30, step=3, name="step-000003", bytes=20_000_000,
                     wait_s=0.5, fetch_s=3.0, commit_s=2.5),
        # variant: a row from before wait_s was measured: 5 + 4 = 9 s
        _transferred(f"{VARIANT}", 50, step=2, name="step-000002", bytes=10_000_000,
                     fetch_s=5.0, commit_s=4.0)]
    record = plan_vs_execution(ledger)
    transfers = record["transfers"]
    assert transfers["planned_from"] == {"plan_version": 2}
    assert transfers["note"].startswith("the original plan has no transfer figure")
    # 18 s observed = 0.005 h against 36 s = 0.01 h planned; 9 s = 0.0025 h against 0.005 h
    assert transfers["runs"] == [
        {"name": "control", "run_id": f"{CONTROL}", "checkpoints": 2,
         "bytes": 50_000_000, "planned_hours": 0.01, "observed_hours": 0.005,
         "deviation_hours": -0.005},
        {"name": "variant", "run_id": f"{VARIANT}", "checkpoints": 1,
         "bytes": 10_000_000, "planned_hours": 0.005, "observed_hours": 0.0025,
         "deviation_hours": -0.0025}]
    # 27 s = 0.0075 h of 54 s = 0.015 h planned
    assert transfers["totals"] == {"checkpoints": 3, "bytes": 60_000_000,
                                   "planned_hours": 0.015, "observed_hours": 0.0075,
                                   "deviation_hours": -0.0075}
    # the stage table and its totals are those of a campaign without transfers
    assert [i["name"] for i in record["items"]] == ["data-check", "control", "variant"]
    assert record["totals"]["busy_hours"] == 0.02
    markdown = plan_vs_execution_markdown(record)
    assert "## Checkpoint transfer home" in markdown
    assert "planned as the decision point's re-estimate (plan version 2) gave it: the " \
        "original plan has no transfer figure." in markdown
    assert "| control | 2 | 50.0 | 36.00 | 18.00 | -18.00 |" in markdown
    assert "| variant | 1 | 10.0 | 18.00 | 9.00 | -9.00 |" in markdown
    assert "| total | 3 | 60.0 | 54.00 | 27.00 | -27.00 |" in markdown


def test_a_re_estimate_without_a_transfer_figure_plans_none(tmp_path):
    _, ledger = make_campaign(tmp_path, publish=False)
    ledger.event_rows.append(_transferred(f"{VARIANT}", 50, step=2,
                                          name="step-000002", bytes=1_000_000, wait_s=0.0,
                                          fetch_s=0.72, commit_s=0.18))
    transfers = plan_vs_execution(ledger)["transfers"]
    # the decision's figures hold no estimates: observed 0.9 s = 0.00025 h, planned unknown
    assert transfers["runs"][0]["planned_hours"] is None
    assert transfers["runs"][0]["observed_hours"] == 0.00025
    assert transfers["totals"]["deviation_hours"] is None
    assert "| variant | 1 | 1.0 | – | 0.90 | – |" in plan_vs_execution_markdown(
        plan_vs_execution(ledger))


def test_a_campaign_at_home_has_no_transfer_section(tmp_path):
    _, ledger = make_campaign(tmp_path, publish=False)
    ledger.decision_rows[0]["figures"] = {"estimates": {"control": {"transfer_s": 0.0}}}
    record = plan_vs_execution(ledger)
    assert record["transfers"]["runs"] == []
    assert record["transfers"]["totals"] == {"checkpoints": 0, "bytes": 0,
                                             "planned_hours": None, "observed_hours": 0.0,
                                             "deviation_hours": None}
    assert "Checkpoint transfer" not in plan_vs_execution_markdown(record)


def test_goodput_beside_the_re_estimate_by_cause_and_each_flights_hours(tmp_path):
    from flightplan.campaign_goodput import CampaignGoodput, FlightGoodput
    from flightplan.goodput import CAUSES, GoodputSplit

    _, ledger = make_campaign(tmp_path, publish=False)
    ledger.decision_rows[0]["figures"] = {"estimates": {"control": {"total_s": 20.0, "parts": {
        "start_load": 5.0, "steps": 10.0, "evaluation": 2.0, "output": 3.0}}}}

    def split(**seconds: float) -> GoodputSplit:
        return GoodputSplit({c: seconds.get(c, 0.0) for c in CAUSES})
    # control: 30 s, 12 of them steps (40 %); variant: 16 s, 8 of them steps (50 %), 2 lost
    runs = {f"{CONTROL}": split(waiting=1.0, start_load=9.0, steps=12.0,
                                        evaluation=3.0, output=5.0),
            f"{VARIANT}": split(start_load=4.0, steps=8.0, lost=2.0, output=2.0)}
    # one 3-day flight, one slot: 20 s of steps, 38 s of overheads (12 s of them stages)
    flight = FlightGoodput("local", 1, 72.0, 20.0, {
        "waiting": 1.0, "start_load": 13.0, "lost": 2.0, "evaluation": 3.0, "output": 7.0,
        "stages": 12.0}, tuple(runs))
    record = plan_vs_execution(ledger, goodput=CampaignGoodput(runs, {"data-check": 12.0},
                                                               (flight,)))
    goodput = record["goodput"]
    control, variant = goodput["runs"]
    assert (control["name"], control["observed"]["goodput"], variant["observed"]["goodput"]) \
        == ("control", 0.4, 0.5)
    assert control["planned_parts_hours"] == {c: round(s / 3600, 6) for c, s in {
        "waiting": 0, "start_load": 5, "data": 0, "restore": 0, "steps": 10, "lost": 0,
        "checkpoint": 0, "evaluation": 2, "output": 3, "transfer": 0}.items()}
    assert control["planned_hours"] == round(20 / 3600, 6)
    # the re-estimate has no figure for the variant
    assert variant["planned_parts_hours"] is None and variant["planned_hours"] is None
    assert goodput["flights"] == [flight.to_json()]
    assert goodput["totals"]["wall_hours"] == round(46 / 3600, 6)
    markdown = plan_vs_execution_markdown(record)
    assert "| control | finished | 30.0 | 40.0% | 1.0 | 9.0 | 0.0 | 0.0 | 12.0 | 0.0 | 0.0 | " \
        "3.0 | 5.0 | 0.0 |" in markdown
    assert "| ↳ re-estimate |  | 20.0 | 50.0% | 0.0 | 5.0 | 0.0 | 0.0 | 10.0 | 0.0 | 0.0 | " \
        "2.0 | 3.0 | 0.0 |" in markdown
    assert "| variant | finished | 16.0 | 50.0% | 0.0 | 4.0 | 0.0 | 0.0 | 8.0 | 2.0 | 0.0 | " \
        "0.0 | 2.0 | 0.0 |" in markdown
    # 72 h bought; 20 s = 0.0056 h of steps, 38 s = 0.0106 h of overheads, largest first;
    # 259200 − 58 s = 71.9839 h uncommitted
    assert "Flight `local`: 1 slot(s) × 72 h = 72.00 h bought; steps 0.0056 h, overheads " \
        "0.0106 h (start/load 0.0036 h, stages 0.0033 h, output 0.0019 h, evaluation " \
        "0.0008 h, lost 0.0006 h, waiting 0.0003 h), uncommitted 71.9839 h" in markdown
