"""The rental's end (run/rental.py) on a real ledger with a fixed clock: windows recorded
once per flight, a run refused with the time left, ``--past-end``, a changed start."""

from __future__ import annotations

import datetime as dt

import pytest

from flightplan.run.ledger import Ledger
from flightplan.ledger_rows import DecisionRow
from flightplan.run.rental import RentalClock, flight_windows, run_needs_s, waiting_reasons
from flightplan.spec import Run

T0 = 1796083200.0       # 2026-12-01 00:00:00 UTC


@pytest.fixture
def ledger(tmp_path):
    with Ledger.open(tmp_path) as opened:
        yield opened


def test_a_flight_starts_at_its_first_run_and_refuses_what_cannot_finish(ledger):
    now = [T0]
    clock = RentalClock(ledger, package_days=3, started=None, past_end=False,
                        now=lambda: now[0])
    assert clock.admit("a-1", needs_s=3600.0, flight="n1") is True
    # 71.5 h later: 0.5 h left; a run of 45 min does not fit, one of 30 min does
    now[0] = T0 + 71.5 * 3600
    assert clock.admit("b-2", needs_s=2700.0, flight="n1") is False
    assert clock.admit("c-3", needs_s=1800.0, flight="n1") is True
    # a second flight starts its own package now: 72 h left
    assert clock.admit("b-2", needs_s=2700.0, flight="n2") is True
    windows = flight_windows(ledger.events(kind="flight_started"))
    assert [(w.flight, w.started_at, w.ends_at, w.source) for w in windows.values()] == [
        ("n1", T0, T0 + 259200.0, "first_run"),
        ("n2", T0 + 257400.0, T0 + 516600.0, "first_run")]
    assert windows["n1"].hours_left(now[0]) == 0.5
    [refused] = ledger.events(kind="not_started")
    assert refused.run_id == "b-2"
    assert refused.data == {
        "flight": "n1", "needs_hours": 0.75, "hours_left": 0.5,
        "message": "not started: needs 0.75 h but flight n1 has 0.50 h left (its package "
                   "ends 2026-12-04 00:00 UTC); --past-end starts it anyway"}
    # b-2 then started elsewhere: it is no longer waiting
    assert waiting_reasons(ledger.events()) == {"b-2": refused.data["message"]}
    ledger.add_event("started", run_id="b-2")
    assert waiting_reasons(ledger.events()) == {}


def test_past_end_and_a_start_given_in_the_spec(ledger):
    started = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)   # T0 + 9 h
    now = T0 + 82 * 3600          # 73 h after the start: the package ended 1 h ago
    clock = RentalClock(ledger, package_days=3, started=started, past_end=True,
                        now=lambda: now)
    assert clock.admit("a-1", needs_s=90.0, flight="local") is True
    [event] = ledger.events(kind="past_end")
    assert event.data["hours_left"] == 0.0 and event.data["needs_hours"] == 0.025
    assert event.data["message"] == (
        "started with --past-end: needs 0.03 h but flight local has 0.00 h left (its "
        "package ended 2026-12-04 09:00 UTC)")
    # the same start is not recorded twice; a changed one is
    clock.window("local")
    assert len(ledger.events(kind="flight_started")) == 1
    later = RentalClock(ledger, package_days=7, started=started + dt.timedelta(days=1),
                        past_end=False, now=lambda: now)
    window = later.window("local")
    # 2026-12-02 09:00 + 7 days = T0 + 201 h; now is T0 + 82 h: 119 h left
    assert (window.started_at, window.hours_left(now)) == (T0 + 33 * 3600, 119.0)
    assert len(ledger.events(kind="flight_started")) == 2


def test_a_run_needs_its_re_estimate_else_its_planned_duration():
    run = Run(name="control", tier="essential", duration="2h", params={})
    assert run_needs_s(run, []) == 7200.0
    def decided(estimates):
        return [DecisionRow(at=0.0, decision="continue", computed="continue", overridden=False,
                            figures={"estimates": estimates}, dropped=[])]

    assert run_needs_s(run, decided({"control": {"total_s": 5400.5}})) == 5400.5
    assert run_needs_s(run, decided({"other": {"total_s": 1.0}})) == 7200.0


def test_a_start_without_utc_offset_is_refused():
    from pydantic import ValidationError

    from flightplan.spec import RentalSection

    with pytest.raises(ValidationError, match="has no UTC offset; write it as "
                                              '"2026-12-01T09:00:00Z"'):
        RentalSection(offer="RTX 4090", package_days=3, started="2026-12-01T09:00:00")
    assert RentalSection(offer="RTX 4090", package_days=3,
                         started="2026-12-01T09:00:00Z").started.timestamp() == T0 + 9 * 3600


def test_a_lost_flight_has_no_hours_left_and_results_say_so(ledger, tmp_path):
    import json

    now = [T0]
    clock = RentalClock(ledger, package_days=3, started=None, past_end=False,
                        now=lambda: now[0])
    assert clock.admit("a-1", needs_s=3600.0, flight="n1 (127.0.0.1)") is True
    assert clock.admit("b-2", needs_s=3600.0, flight="n2 (127.0.0.1)") is True
    clock.lost("n1 (127.0.0.1)", at=T0 + 600.0, reason="ActorDiedError: node died")
    windows = flight_windows(ledger.events())
    lost, there = windows["n1 (127.0.0.1)"], windows["n2 (127.0.0.1)"]
    assert (lost.lost_at, lost.lost_reason, lost.hours_left(T0 + 700.0)) == (
        T0 + 600.0, "ActorDiedError: node died", 0.0)
    assert there.lost_at is None and there.hours_left(T0 + 3600.0) == 71.0
    published = json.loads((tmp_path / "results" / "flights.json").read_text())
    assert published == [
        {"flight": "n1 (127.0.0.1)", "started_at": T0, "ends_at": T0 + 72 * 3600.0,
         "source": "first_run", "hours_left": 0.0, "lost_at": T0 + 600.0,
         "lost_reason": "ActorDiedError: node died"},
        {"flight": "n2 (127.0.0.1)", "started_at": T0, "ends_at": T0 + 72 * 3600.0,
         "source": "first_run", "hours_left": 71.83, "lost_at": None, "lost_reason": None}]
    manifest = json.loads((tmp_path / "results" / "MANIFEST.json").read_text())
    assert "flights.json" in [f["path"] for f in manifest["files"]]
    # a run that ends on it later shows it is there after all
    ledger.add_event("finished", run_id="a-1", data={"node": "n1 (127.0.0.1)"})
    assert flight_windows(ledger.events())["n1 (127.0.0.1)"].lost_at is None
