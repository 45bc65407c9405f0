"""`flightplan status` as text: 80 columns, 120 columns, full run ids, cut reasons.

The snapshot is written by hand; the expected lines were checked column by column: run
ids whole, times of today without their date, a reason at the end of its line when it
fits and else on the next line, cut with "…" at the width.
"""

from __future__ import annotations

import time

import pytest
from rich.cells import cell_len

from flightplan.run.status import clock, cut, status_lines

def at(day: int, hh: int, mm: int, ss: int, month: int = 12) -> float:
    """Unix seconds of a local time in 2026 (the tests hold in every time zone)."""
    return time.mktime((2026, month, day, hh, mm, ss, 0, 0, -1))


NOW = at(1, 10, 0, 0)
"""The status is read at 10:00 on 1 December: earlier times today show without a date."""
SNAPSHOT = {
    "campaign": {"name": "tiny", "spec_path": "campaign.toml", "created_at": at(1, 5, 6, 57)},
    "runner": None,
    "plan_versions": [
        {"version": 1, "kind": "original", "plan_sha256": "d3633997e1e8" + "0" * 52,
         "created_at": at(1, 5, 6, 57), "reason": "planned before the first run",
         "reserved_hours": 0.015278, "window_hours": 72.0, "fits": True},
        {"version": 2, "kind": "re-estimate", "plan_sha256": "9f34169b70a8" + "1" * 52,
         "created_at": at(1, 5, 7, 19), "reason": "re-estimated from the pilot",
         "reserved_hours": 80.5, "window_hours": 72.0, "fits": False}],
    "runs": [
        {"run_id": "control-2c7856a97f", "name": "control", "tier": "essential",
         "status": "finished", "started_at": at(1, 5, 7, 19), "wall_s": 7.866, "stop": None,
         "superseded_by": None, "metric": 0.2988505747},
        {"run_id": "control-nan-0123456789", "name": "control-nan", "tier": "exploratory",
         "status": "stopped", "started_at": at(30, 23, 59, 0, month=11), "wall_s": 3.14,
         "stop": {"rule": "non_finite_loss", "step": 3,
                  "message": "loss is nan at step 3; the run stopped before its first evaluation"},
         "superseded_by": None, "metric": None},
        {"run_id": "lora-r4-len128-abcdef0123", "name": "lora-r4-len128", "tier": "useful",
         "status": "superseded", "started_at": at(1, 5, 8, 0), "wall_s": 12.0, "stop": None,
         "superseded_by": "lora-r4-len128-9999999999", "metric": None},
        {"run_id": "lora-r4-62e1d953a6", "name": "lora-r4", "tier": "essential",
         "status": "interrupted", "started_at": at(1, 5, 7, 27), "wall_s": 0.0, "stop": None,
         "superseded_by": None, "metric": None}],
    "decisions": [{"at": at(1, 5, 7, 19), "decision": "cut", "computed": "continue",
                   "dropped": ["lora-r4-len128"],
                   "figures": {"reason": "0.01 h of 72.00 h fits"}}],
    "expenses": [{"kind": "package", "label": "RTX 4090 3-day package × 1", "amount": "47.14",
                  "currency": "USD"},
                 {"kind": "external", "label": "dataset licence", "amount": "12.50",
                  "currency": "USD"}],
    "notes": [{"name": "lora-r4", "text": "Ctrl-C by mistake\nwhile checking the logs",
               "at": at(1, 5, 9, 0)}],
    "events": [{"at": at(1, 5, 7, 1), "run_id": None, "kind": "data_check"},
               {"at": at(1, 5, 7, 19), "run_id": "control-2c7856a97f", "kind": "started"}],
}


HEAD = [
    "campaign tiny (campaign.toml), created 05:06:57; no runner active",
    "",
    "plan versions",
]
RUNS = [
    "runs",
    "  RUN ID                     STATUS       MACRO_F1  WALL (s)  STARTED",
    " essential",
    "  control-2c7856a97f         finished       0.2989       7.9  05:07:19",
    "  lora-r4-62e1d953a6         interrupted         -       0.0  05:07:27",
    " useful",
]
TAIL = [
    "",
    "decisions",
    "  05:07:19  cut (computed: continue)  0.01 h of 72.00 h fits",
    "      dropped: lora-r4-len128",
    "",
    "expenses",
    "  package   RTX 4090 3-day package × 1  47.14 USD",
    "  external  dataset licence             12.50 USD",
    "",
    "notes",
    "  05:09:00  lora-r4  Ctrl-C by mistake while checking the logs",
    "",
    "last events",
    "  05:07:01  -                   data_check",
    "  05:07:19  control-2c7856a97f  started",
]


def test_status_at_80_columns() -> None:
    assert status_lines(SNAPSHOT, metric="macro_f1", width=80, now=NOW) == HEAD + [
        "  v1  original     0.02 h of 72 h   fits  d3633997e1e8  05:06:57",
        "      planned before the first run",
        "  v2  re-estimate  80.50 h of 72 h  over  9f34169b70a8  05:07:19",
        "      re-estimated from the pilot",
        "",
    ] + RUNS + [
        "  lora-r4-len128-abcdef0123  superseded          -      12.0  05:08:00",
        "    superseded by lora-r4-len128-9999999999",
        " exploratory",
        "  control-nan-0123456789     stopped             -       3.1  2026-11-30 23:59",
        "    non_finite_loss at step 3: loss is nan at step 3; the run stopped before it…",
    ] + TAIL


def test_status_at_120_columns_puts_the_reasons_that_fit_on_their_line() -> None:
    assert status_lines(SNAPSHOT, metric="macro_f1", width=120, now=NOW) == HEAD + [
        "  v1  original     0.02 h of 72 h   fits  d3633997e1e8  05:06:57  planned before the "
        "first run",
        "  v2  re-estimate  80.50 h of 72 h  over  9f34169b70a8  05:07:19  re-estimated from "
        "the pilot",
        "",
    ] + RUNS + [
        "  lora-r4-len128-abcdef0123  superseded          -      12.0  05:08:00  superseded by "
        "lora-r4-len128-9999999999",
        " exploratory",
        "  control-nan-0123456789     stopped             -       3.1  2026-11-30 23:59",
        "    non_finite_loss at step 3: loss is nan at step 3; the run stopped before its first "
        "evaluation",
    ] + TAIL


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_no_line_is_wider_than_the_terminal_unless_a_run_id_needs_it(width: int) -> None:
    lines = status_lines(SNAPSHOT, metric="macro_f1", width=width, now=NOW)
    for run in SNAPSHOT["runs"]:
        assert sum(line == f"  {run['run_id']}" or line.startswith(f"  {run['run_id']}  ")
                   for line in lines) == 1
    for line in lines:
        ids = [r["run_id"] for r in SNAPSHOT["runs"] if line.startswith(f"  {r['run_id']}")]
        assert cell_len(line) <= width or ids, line


def test_clock_and_cut() -> None:
    assert clock(at(1, 0, 0, 0), now=NOW) == "00:00:00"
    assert clock(at(30, 23, 59, 59, month=11), now=NOW) == "2026-11-30 23:59"
    assert clock(None, now=NOW) == "-"
    assert cut("a\nb\tc", 10) == "a b c"
    assert cut("abcdefghij", 5) == "abcd…"
    assert cut("日本語のテキスト", 7) == "日本語…"          # wide characters count as two cells


def test_the_flights_section_shows_each_package_and_the_hours_left():
    # two flights: one from [rental] started at 05:06:57 today (3 days: ends on the 4th),
    # one whose package (started 3 days and 1 h ago) ended at 09:00 today
    flights = [{"flight": "local", "started_at": at(1, 5, 6, 57), "ends_at": at(4, 5, 6, 57),
                "source": "spec", "hours_left": 67.12},
               {"flight": "0a1b2c3d4e5f (127.0.0.1)", "started_at": at(27, 9, 0, 0, month=11),
                "ends_at": at(1, 9, 0, 0), "source": "first_run", "hours_left": 0.0}]
    lines = status_lines(dict(SNAPSHOT, flights=flights), metric="macro_f1", width=80, now=NOW)
    start = lines.index("flights (packages)")
    assert lines[start:start + 3] == [
        "flights (packages)",
        # 65 cells before the last column: 14 of it and "…" fit in 80
        "  local                     67.12 h left  ends 2026-12-04 05:06  started 05:06:…",
        "  0a1b2c3d4e5f (127.0.0.1)         ended  at 09:00:00            started 2026-1…"]
    wide = status_lines(dict(SNAPSHOT, flights=flights), metric="macro_f1", width=120, now=NOW)
    start = wide.index("flights (packages)")
    assert wide[start + 1:start + 3] == [
        "  local                     67.12 h left  ends 2026-12-04 05:06  started 05:06:57 "
        "([rental] started)",
        "  0a1b2c3d4e5f (127.0.0.1)         ended  at 09:00:00            started 2026-11-27 "
        "09:00 (its first run)"]


def test_a_lost_flight_and_the_cluster_joined_show_in_text():
    flights = [{"flight": "0a1b2c3d4e5f (10.0.0.7)", "started_at": at(1, 5, 6, 57),
                "ends_at": at(4, 5, 6, 57), "source": "first_run", "hours_left": 0.0,
                "lost_at": at(1, 5, 40, 2), "lost_reason": "ActorDiedError: node died"}]
    cluster = {"address": "10.0.0.5:6379", "loopback": False, "token": True,
               "trusted_network": False}
    lines = status_lines(dict(SNAPSHOT, flights=flights, cluster=cluster), metric="macro_f1",
                         width=120, now=NOW)
    assert lines[1] == "ray cluster 10.0.0.5:6379: token authentication, reachable from the network"
    start = lines.index("flights (packages)")
    assert lines[start + 1:start + 2] == [
        "  0a1b2c3d4e5f (10.0.0.7)  lost  at 05:40:02  started 05:06:57 (its first run)  "
        "ActorDiedError: node died"]
    open_one = dict(cluster, token=False, trusted_network=True)
    assert status_lines(dict(SNAPSHOT, cluster=open_one), metric="macro_f1", width=120,
                        now=NOW)[1] == ("ray cluster 10.0.0.5:6379: no token authentication, "
                                        "network stated trusted (--trusted-network)")


def test_last_events_are_shown_in_time_order():
    # a run's checkpoint event reaches the ledger when the run ends, after a later start
    late = {"at": at(1, 5, 7, 10), "run_id": "lora-r4-d38c81b171", "kind": "checkpoint_saved"}
    snapshot = dict(SNAPSHOT, events=SNAPSHOT["events"] + [late])
    lines = status_lines(snapshot, metric="macro_f1", width=120, now=NOW)
    shown = lines[lines.index("last events") + 1:]
    kinds = [line.split()[-1] for line in shown if line.strip()]
    assert kinds[-3:] == ["data_check", "checkpoint_saved", "started"]


def test_one_long_run_id_at_80_columns_leaves_the_header_and_the_other_runs_whole():
    long_id = "lora-r4-with-a-very-long-descriptive-name-f00dfeed01"       # 51 characters
    runs = SNAPSHOT["runs"][:2] + [dict(SNAPSHOT["runs"][3], run_id=long_id, name="long",
                                        status="pending")]
    lines = status_lines(dict(SNAPSHOT, runs=runs), metric="macro_f1", width=80, now=NOW)
    start = lines.index("runs")
    assert lines[start:start + 9] == [
        "runs",
        "  RUN ID                  STATUS    MACRO_F1  WALL (s)  STARTED",
        " essential",
        "  control-2c7856a97f      finished    0.2989       7.9  05:07:19",
        f"  {long_id}",
        "    pending          -       0.0  05:07:27",
        " exploratory",
        "  control-nan-0123456789  stopped          -       3.1  2026-11-30 23:59",
        "    non_finite_loss at step 3: loss is nan at step 3; the run stopped before it…"]


def _split(**seconds: float) -> dict:
    from flightplan.goodput import CAUSES, GoodputSplit

    return GoodputSplit({c: float(seconds.get(c, 0.0)) for c in CAUSES}).to_json()


def _with_goodput() -> dict:
    """SNAPSHOT with each run's wall time by cause (adding up to its WALL) and one flight."""
    from flightplan.campaign_goodput import FlightGoodput

    runs = [dict(r) for r in SNAPSHOT["runs"]]
    runs[0]["goodput"] = _split(waiting=0.166, start_load=2.5, steps=3.1, evaluation=1.2,
                                output=0.9)                       # 7.866 s
    runs[1]["goodput"] = _split(start_load=1.5, steps=1.04, lost=0.6)          # 3.14 s
    runs[2]["goodput"] = _split(start_load=6.0, steps=6.0)                     # 12.0 s
    runs[3]["goodput"] = None                                                  # never ran
    # 2 slots of a 3-day package; the runs' slot-seconds: 10.14 productive, 12.866 of
    # overheads, and 14 s of stages
    flight = FlightGoodput("local", 2, 72.0, 10.14, {
        "waiting": 0.166, "start_load": 10.0, "lost": 0.6, "evaluation": 1.2, "output": 0.9,
        "stages": 14.0}, ("control-2c7856a97f",)).to_json()
    return dict(SNAPSHOT, runs=runs, goodput={"flights": [flight]})


def test_goodput_per_run_and_hours_bought_per_flight_at_80_and_120_columns():
    # control: 3.1 / 7.866 = 39.4 %; len128: 6 / 12 = 50.0 %; nan: 1.04 / 3.14 = 33.1 %;
    # the flight: 10.14 s = 0.0028 h of steps, 26.866 s = 0.0075 h of overheads, 144 h
    # bought (2 × 72), 143.9897 h uncommitted; waiting (0.166 s = 0.00005 h) shows as 0
    narrow = status_lines(_with_goodput(), metric="macro_f1", width=80, now=NOW)
    start = narrow.index("goodput (productive steps / wall time; the rest by cause, "
                         "largest first)")
    assert narrow[start + 1:start + 8] == [
        "  RUN ID                     GOODPUT    WALL",
        "  control-2c7856a97f           39.4%   7.9 s",
        "    steps 3.1 s; start/load 2.5 s, evaluation 1.2 s, output 0.9 s, waiting 0.2 s",
        "  lora-r4-len128-abcdef0123    50.0%  12.0 s  steps 6.0 s; start/load 6.0 s",
        "  control-nan-0123456789       33.1%   3.1 s",
        "    steps 1.0 s; start/load 1.5 s, lost 0.6 s",
        ""]
    start = narrow.index("hours bought per flight (slot-hours)")
    assert narrow[start + 1:start + 4] == [
        "  local  2 slots × 72 h = 144.00 h",
        "    steps 0.0028 h, overheads 0.0075 h, uncommitted 143.9897 h",
        "    overheads: stages 0.0039 h, start/load 0.0028 h, evaluation 0.0003 h, outpu…"]
    wide = status_lines(_with_goodput(), metric="macro_f1", width=120, now=NOW)
    start = wide.index("hours bought per flight (slot-hours)")
    assert wide[start + 1:start + 3] == [
        "  local  2 slots × 72 h = 144.00 h  steps 0.0028 h, overheads 0.0075 h, uncommitted "
        "143.9897 h",
        "    overheads: stages 0.0039 h, start/load 0.0028 h, evaluation 0.0003 h, output "
        "0.0003 h, lost 0.0002 h"]
    assert "  control-nan-0123456789       33.1%   3.1 s  steps 1.0 s; start/load 1.5 s, " \
        "lost 0.6 s" in wide
    for width in (40, 60, 80, 100):
        for line in status_lines(_with_goodput(), metric="macro_f1", width=width, now=NOW):
            ids = [r["run_id"] for r in SNAPSHOT["runs"] if line.startswith(f"  {r['run_id']}")]
            assert cell_len(line) <= width or ids, line


def test_the_replicates_of_a_run_come_under_a_line_naming_it() -> None:
    from flightplan.run.status import run_lines
    rows = [{"run_id": "control-f36b1c050a", "tier": "essential", "status": "finished",
             "metric": 0.40, "wall_s": 10.0, "stop": None},
            *({"run_id": f"lora-seed-{i}-000000000{i}", "tier": "essential",
               "replicate_of": "lora", "status": status, "metric": metric, "wall_s": 9.0,
               "stop": None}
              for i, (status, metric) in enumerate([("finished", 0.45), ("finished", 0.47),
                                                    ("running", None)]))]
    lines = run_lines(rows, metric="macro_f1", width=80, now=NOW)
    # mean of 0.45 and 0.47 = 0.46; sd (ddof 1) = 0.02/√2 = 0.014142
    assert lines[2:] == [
        " essential",
        "  control-f36b1c050a      finished    0.4000      10.0",
        "  lora: 3 replicates (2 finished, 1 running); macro_f1 mean 0.4600, sd 0.0141",
        "  lora-seed-0-0000000000  finished    0.4500       9.0",
        "  lora-seed-1-0000000001  finished    0.4700       9.0",
        "  lora-seed-2-0000000002  running          -       9.0"]


def test_a_run_in_progress_shows_its_steps_but_never_a_bare_zero() -> None:
    from flightplan.run.status import run_lines
    rows = [{"run_id": f"r{i}-000000000{i}", "tier": "essential", "status": status,
             "metric": None, "wall_s": 2.0, "stop": None,
             "progress": {"steps_done": done, "planned_steps": planned}}
            for i, (status, done, planned) in enumerate([
                ("interrupted", 0, None), ("running", 0, None), ("interrupted", 5, None),
                ("interrupted", 0, 76), ("running", 5, 76)])]
    assert [line.split()[1:3] for line in run_lines(rows, metric="macro_f1", width=80,
                                                     now=NOW)[3:]] == [
        ["interrupted", "-"],          # no step done, none planned: no "interrupted 0"
        ["running", "-"],
        ["interrupted", "5"],          # 5 steps done, the task has not said how many
        ["interrupted", "0/76"],       # done / planned: a fraction reads with its zero
        ["running", "5/76"]]


def test_results_line_after_a_fault_stopped_the_campaign_says_to_fix_it_and_run_again():
    from flightplan.run.status import results_lines

    results = {"dir": "/c/results", "exists": True, "report": None, "closed": None}
    assert results_lines(results, spec="/c/campaign.toml", width=300, now=0.0,
                         stopped_by="pilot") == [
        "results: /c/results holds what was published so far; the pilot stopped the "
        "campaign (last events below): fix that, then `flightplan run /c/campaign.toml` "
        "goes on"]
    assert results_lines(results, spec="/c/campaign.toml", width=300, now=0.0,
                         stopped_by="data_check")[0].count("the data check stopped") == 1
    for by in (None, "decision"):    # nothing to fix: closing completes results/
        assert results_lines(results, spec="/c/campaign.toml", width=300, now=0.0,
                             stopped_by=by) == [
            "results: /c/results holds what the runs published so far; `flightplan close "
            "/c/campaign.toml` completes it"]
