"""plan_campaign: the `plan --json` object, measured durations, what-ifs, Gantt views."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from flightplan.errors import ArgumentError
from flightplan.plan import plan_campaign
from flightplan.plan.gantt import gantt_png, gantt_table
from flightplan.spec import load_spec
from flightplan.units import Duration

ROOT = Path(__file__).resolve().parents[3]
PLAN_KEYS = {"campaign", "offer", "package_days", "flights", "window_hours", "reserved_hours",
             "uncommitted_hours", "fits", "gpu_hours", "person_hours", "stages", "options",
             "recommendation", "warnings"}
STAGE_KEYS = {"name", "kind", "tier", "start_hours", "end_hours", "uses", "flight", "gpus"}
OPTION_KEYS = {"offer", "package_days", "flights", "total_price", "currency", "reserved_hours",
               "fits", "uncommitted_hours", "dropped", "notes"}


def test_json_contract_of_the_illustration(illustration) -> None:
    data = plan_campaign(illustration).to_json()
    assert PLAN_KEYS <= set(data)
    assert (data["campaign"], data["offer"], data["package_days"], data["flights"]) == \
        ("illustration", "RTX 4090", 3, 1)
    assert (data["window_hours"], data["reserved_hours"], data["uncommitted_hours"], data["fits"]) == \
        (72.0, 48.0, 24.0, True)
    assert (data["gpu_hours"], data["person_hours"]) == (38.0, 22.0)
    assert all(STAGE_KEYS <= set(s) for s in data["stages"])
    assert all(OPTION_KEYS == set(o) for o in data["options"])
    report = next(s for s in data["stages"] if s["name"] == "report")
    assert report == {**report, "kind": "stage", "tier": "essential", "start_hours": 38.0,
                      "end_hours": 48.0, "uses": ["person"], "flight": None, "gpus": 0}
    control = next(s for s in data["stages"] if s["name"] == "control")
    assert (control["kind"], control["flight"], control["gpus"], control["gpu_ids"]) == ("run", 1, 1, [0])
    assert data["warnings"] == [] and data["unquoted_offers"] == ["B200"]


def test_measured_durations_replace_estimates_and_extensions_add(illustration) -> None:
    measured = plan_campaign(illustration, durations={"lora-r8-len256": Duration.parse("2h")})
    assert measured.reserved_hours == 36.0                  # 48 − 14 + 2
    both = plan_campaign(illustration, durations={"control": Duration.parse("5h")},
                         extend={"control": Duration.parse("1h")})
    assert both.reserved_hours == 44.0                      # control 6 h instead of 10 h
    assert both.to_json()["measured"] == {"control": 5.0}


def test_unknown_names_are_argument_errors(illustration) -> None:
    with pytest.raises(ArgumentError, match=r"--extend lora-r9: 'lora-r9' is not a stage or run.*"
                                            r"did you mean 'lora-r8'"):
        plan_campaign(illustration, extend={"lora-r9": Duration.parse("1h")})
    with pytest.raises(ArgumentError, match="durations nope"):
        plan_campaign(illustration, durations={"nope": Duration.parse("1h")})


@pytest.mark.parametrize("example, hours", [("drug-reviews", 0.469444), ("tiny", 0.023611)])
def test_the_other_examples_plan_cleanly(example: str, hours: float) -> None:
    data = plan_campaign(load_spec(ROOT / "examples" / example / "campaign.toml")).to_json()
    # drug-reviews: 10 s + 2 + 1 + 4 + 6 min on the GPU, then a 15 min review = 1690 s;
    # tiny: 10 + 10 + 15 + 20 + 30 s = 85 s.
    assert (data["reserved_hours"], data["fits"], data["warnings"]) == (hours, True, [])
    assert data["recommendation"]["total_price"] == "47.14"


def test_a_run_with_more_ranks_than_gpus_is_warned_of_before_the_flight(make_spec) -> None:
    # a B200 flight has 2 GPUs: 2 ranks on 1 GPU are refused there (each rank takes a GPU),
    # so plan names both fixes; 2 ranks on 2 GPUs, or 1 on 1, say nothing
    b200 = '[[offer]]\nname = "B200"\ncurrency = "USD"\n[[offer.package]]\ndays = 3\nprice = "500.00"\n'
    runs = [{"name": "control", "tier": "essential", "duration": "1h"},
            {"name": "ddp", "tier": "essential", "reference": "control", "duration": "1h",
             "gpus": 1, "processes": 2, "params": {"wide": True}},
            {"name": "ddp2", "tier": "essential", "reference": "control", "duration": "1h",
             "gpus": 2, "processes": 2, "params": {"deep": True}}]
    data = plan_campaign(make_spec(runs=runs, offer="B200", catalog=b200)).to_json()
    assert [w for w in data["warnings"] if w["code"] == "ranks-exceed-gpus"] == [
        {"code": "ranks-exceed-gpus", "subject": "ddp",
         "message": "ddp starts 2 processes but holds 1 GPU ([[run]] processes, gpus): on a B200 "
                    "flight each rank needs a GPU of its own, so flightplan run refuses it there "
                    "(as written, its ranks run only on a machine without GPUs, on the CPU); "
                    "give gpus = 2 or processes = 1"}]
    # the digits-ddp example (2 ranks, 1 GPU, RTX 4090 flights of 1 GPU) runs on a CPU only
    example = plan_campaign(load_spec(ROOT / "examples" / "digits-ddp" / "campaign.toml"))
    assert [(w.code, w.subject) for w in example.warnings] == [
        ("ranks-exceed-gpus", "control"), ("ranks-exceed-gpus", "hidden-128")]
    assert example.warnings[0].message.endswith(
        "give processes = 1: one RTX 4090 flight has 1 GPU, too few for 2 ranks")


def test_gantt_views(illustration) -> None:
    result = plan_campaign(illustration, extend={"lora-r8": Duration.parse("30h")})
    png = gantt_png(result.schedule, window_s=result.window_s, title="illustration")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    console = Console(width=140, record=True, color_system=None)
    console.print(gantt_table(result.schedule, window_s=result.window_s))
    text = console.export_text()
    assert "0 … 78 h" in text and "START (h)" in text and "F1 G0 +person" in text
    assert [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")][:3] == \
        ["install", "data-check", "control"]


GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("args, golden", [
    (["plan", str(ROOT / "examples" / "illustration" / "campaign.toml"), "--extend", "lora-r8=+30h"],
     "illustration_extend_30h.txt"),
    (["quote", "--offer", "RTX 4090", "--hours", "78"], "quote_78h.txt"),
])
def test_human_output_matches_its_golden_file(monkeypatch, args: list[str], golden: str) -> None:
    """The tables a person reads (120 columns, no colour when piped). After an intended
    change, rewrite the file with: .venv/bin/flightplan ARGS > tests/unit/plan/golden/FILE"""
    from typer.testing import CliRunner

    from flightplan.cli import app

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (GOLDEN / golden).read_text(encoding="utf-8")
