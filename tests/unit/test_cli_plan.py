"""`flightplan plan` and `flightplan quote` through the CLI: JSON, tables, exit codes.

Every bad input the issue lists exits 2 with one line naming the field and the fix.
The cases edit the illustration campaign's text (line numbers in its comments).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flightplan.cli import app

ROOT = Path(__file__).resolve().parents[2]
ILLUSTRATION = (ROOT / "examples" / "illustration" / "campaign.toml").read_text(encoding="utf-8")
CONTROL = 'name = "control"\ntier = "essential"\nparams = { max_length = 128 }\nduration = "10h"\n'
EXPENSE = '\n[[expense]]\nlabel = "dataset licence"\ncurrency = "USD"\namount = '


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args)


def _write(tmp_path: Path, text: str, name: str = "campaign.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_plan_json_of_the_illustration(tmp_path: Path) -> None:
    result = _invoke(["plan", str(_write(tmp_path, ILLUSTRATION)), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["reserved_hours"], data["uncommitted_hours"], data["fits"]) == (48.0, 24.0, True)
    assert data["recommendation"]["total_price"] == "47.14"


def test_plan_takes_a_duration_in_the_unit_it_prints(tmp_path: Path) -> None:
    # install: "2h" → "90 min" (how plan prints a duration), half an hour off the 48 h
    text = ILLUSTRATION.replace('name = "install"\nduration = "2h"',
                                'name = "install"\nduration = "90 min"')
    assert text != ILLUSTRATION
    result = _invoke(["plan", str(_write(tmp_path, text)), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [s["duration_hours"] for s in data["stages"] if s["name"] == "install"] == [1.5]
    assert data["reserved_hours"] == 47.5


@pytest.mark.parametrize("hours, printed, seconds", [
    (0.5 / 3600, "0.5 s", 1), (1.5 / 60, "1.5 min", 90), (2.0, "2 h", 7200),
    (1234.5, "1230 h", 4428000)])            # 3 digits, never "1.23e+03 h"
def test_plan_prints_estimated_durations_as_a_campaign_file_takes_them(
        hours: float, printed: str, seconds: int) -> None:
    from flightplan.plan.commands import _figure
    from flightplan.units import Duration
    assert _figure(hours, "duration") == printed
    assert Duration.parse(printed).seconds == seconds


def test_plan_warns_that_the_main_job_cannot_confirm_its_threshold(tmp_path: Path) -> None:
    """Before any run, with the default disagreement: +0.05 macro-F1 on 379 test reviews."""
    spec = ROOT / "examples" / "drug-reviews" / "campaign.toml"
    data = json.loads(_invoke(["plan", str(spec), "--json"]).stdout)["power"]
    assert data["test_examples"] == 379 and "drugsComTest.tsv" in data["test_source"]
    first = data["comparisons"][0]
    assert (first["variant"], first["reference"], first["expected_gain"]) == \
        ("lora-r8", "control", 0.1)
    assert first["model"]["disagreement"] == 0.25
    assert first["model"]["class_shares"] == {"negative": round(95 / 379, 4),
                                              "neutral": round(36 / 379, 4),
                                              "positive": round(248 / 379, 4)}
    assert first["warning"] and first["confirm_probability"] < 0.5
    # the resolution adds the default seed spread of both sides to the test sampling's:
    # 1.96 · √(σ_ex² + 2 · 0.025²), σ_ex ≈ 0.028 → about ±0.088
    assert first["seed_sd"] == 0.025 and first["seeds"] == 1
    assert 0.08 < first["resolution"] < 0.095
    # Holm over the 2 comparisons: meets at Φ⁻¹(1 − 0.025/2) = 2.2414; then the seed
    # spread alone (2 · 0.025² = 0.00125) is more than (0.05 / (2.2414 + 0.8416))² =
    # 0.00026: no test size confirms +0.1 with one seed
    assert first["comparisons_controlled"] == 2 and first["z_meets"] == 2.2414
    assert first["examples_needed"] is None and "more replicates, not examples" in \
        first["examples_needed_reason"]
    assert [r["seeds"] for r in first["by_seeds"]] == [1, 3, 5]
    assert [s["case"] for s in first["verdict_probabilities"]] == \
        ["no gain", "threshold", "expected gain"]
    plot = tmp_path / "power.png"
    result = _invoke(["plan", str(spec), "--power-plot", str(plot)])
    assert result.exit_code == 0, result.stderr
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "POWER WARNING" in result.stdout
    text = " ".join(line.strip("│ ") for line in result.stdout.splitlines())
    assert ("lora-r8 − control: a gain of at least +0.05 macro_f1 cannot be confirmed reliably "
            "with 379 test examples.") in text
    assert f"Resolution ±{first['resolution']:.3f}" in text
    shown = re.search(r"minimum detectable gain ([+-]\d\.\d{3})", text)
    assert float(shown.group(1)) == pytest.approx(first["minimum_detectable_gain"], abs=6e-4)
    # the power with K = 1, 3, 5 seeds side by side, and the K that confirms +0.1
    assert "POWER WITH SEEDS" in text and "K=1" in text and "K=5" in text
    assert ("for +0.1: no test set of practical size settles it (gap +0.05 to the "
            "threshold") in text and "more replicates, not examples" in text
    assert "Fixes: more test examples" not in text          # a fix that does not help
    assert "a larger threshold" in text and "fewer comparisons" in text
    # the seed spread is what blocks it: replicates are offered (K = 5 holds a false
    # 'meets' to its table's figure), and a cut variant's hours go to replicates
    five = next(r for r in first["by_seeds"] if r["seeds"] == 5)
    one = next(r for r in first["by_seeds"] if r["seeds"] == 1)
    offered = re.search(r"more replicates \(no K up to 5 confirms it, but \[campaign\] seeds = 5 "
                        r"holds a false 'meets' to (\d+\.\d)% from (\d+\.\d)% with 1", text)
    assert offered, text
    assert float(offered.group(1)) == pytest.approx(100 * five["false_meets"], abs=0.051)
    assert float(offered.group(2)) == pytest.approx(100 * one["false_meets"], abs=0.051)
    assert "spend its hours on replicates of the others" in text


def test_a_campaign_of_one_comparison_is_not_told_to_make_fewer(tmp_path: Path) -> None:
    source = ROOT / "examples" / "drug-reviews" / "campaign.toml"
    text = source.read_text(encoding="utf-8")
    one = text[:text.index('[[run]]\nname = "lora-r8-len256"')]
    result = _invoke(["plan", str(_write(tmp_path, one))])
    assert result.exit_code == 0, result.stderr
    shown = " ".join(line.strip("│ ") for line in result.stdout.splitlines())
    assert "POWER WARNING" in result.stdout and "Fixes: more replicates" in shown
    assert "fewer comparisons" not in shown


def test_power_plot_without_a_test_split_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, ILLUSTRATION)
    data = json.loads(_invoke(["plan", str(path), "--json"]).stdout)["power"]
    assert data["comparisons"] == [] and data["test_examples"] is None
    assert data["not_computed"][0]["reason"] == ("the campaign has no [corpus], so the test "
                                                 "split's size is unknown")
    result = _invoke(["plan", str(path), "--power-plot", str(tmp_path / "p.png")])
    assert result.exit_code == 2
    assert "--power-plot" in result.stderr and "no comparison's power is known" in result.stderr
    assert not (tmp_path / "p.png").exists()


def test_plan_extend_does_not_fit_but_exits_0_and_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, ILLUSTRATION)
    gantt = tmp_path / "gantt.png"
    result = _invoke(["plan", str(path), "--extend", "lora-r8=+30h", "--gantt", str(gantt)])
    assert result.exit_code == 0, result.stderr
    assert "does not fit: 6.0 h over" in result.stdout
    assert "recommendation: RTX 4090, 2 × 3-day = 94.28 USD" in result.stdout
    assert "PRICE (USD)" in result.stdout and "START (h)" in result.stdout
    assert gantt.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml", "gantt.png"]
    data = json.loads(_invoke(["plan", str(path), "--json", "--extend", "lora-r8=+20h",
                               "--extend", "lora-r8=+10h"]).stdout)
    assert (data["reserved_hours"], data["uncommitted_hours"], data["fits"]) == (78.0, -6.0, False)
    assert data["recommendation"]["total_price"] == "94.28"


def test_a_package_that_started_says_how_much_is_left_and_whether_the_plan_fits_it(
        tmp_path: Path) -> None:
    import datetime as dt

    from flightplan.plan.campaign_plan import plan_campaign
    from flightplan.spec import load_spec

    # the illustration needs 48 h of its 72 h package; the package started 30 h ago
    started = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
    text = ILLUSTRATION.replace("package_days = 3",
                                f'package_days = 3\nstarted = "{started.isoformat()}"')
    spec = load_spec(_write(tmp_path, text))
    plan = plan_campaign(spec)
    at = started.timestamp() + 30 * 3600
    assert plan.time_left(now=at) == {"hours_left": 42.0, "fits_time_left": False}
    assert plan.time_left(now=at - 10 * 3600) == {"hours_left": 52.0,
                                                         "fits_time_left": True}
    assert plan.time_left(now=started.timestamp() - 3600) == {"hours_left": 72.0,
                                                                     "fits_time_left": True}
    assert plan.time_left(now=at + 100 * 3600)["hours_left"] == 0.0
    assert plan_campaign(load_spec(_write(tmp_path, ILLUSTRATION, "plain.toml"))).time_left() == {}
    # the command prints it, with the hours left at the real clock
    result = _invoke(["plan", str(tmp_path / "campaign.toml")])
    assert result.exit_code == 0, result.stderr
    assert "the package started 2026-12-01T09:00:00+00:00: " in result.stdout
    data = json.loads(_invoke(["plan", str(tmp_path / "campaign.toml"), "--json"]).stdout)
    assert set(data) >= {"hours_left", "fits_time_left", "decision_rule"}


def test_plan_finds_a_missing_task_file_or_train_without_running_the_task(tmp_path: Path
                                                                          ) -> None:
    text = ILLUSTRATION.replace('name = "control"\n', 'name = "control"\ntask = "train.py"\n', 1)
    path = _write(tmp_path, text)
    result = _invoke(["plan", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {path}: run[0].task: no task file {tmp_path.resolve() / 'train.py'}; give a "
        f"Python file relative to the campaign file, a module name, or a built-in task "
        f"(textclf)")
    # it binds no train: found by parsing; the marker proves nothing of it ran
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\ndef trian(trial):\n    pass\n")
    result = _invoke(["plan", str(path)])
    assert result.exit_code == 2 and "defines no function train(trial)" in result.stderr
    assert not (tmp_path / "ran").exists()
    (tmp_path / "train.py").write_text("from helpers import train\n")
    assert _invoke(["plan", str(path)]).exit_code == 0
    # a syntax error is found by parsing too, with its line, nothing run
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\ndef train(trial)\n    pass\n")
    result = _invoke(["plan", str(path)])
    assert result.exit_code == 2 and not (tmp_path / "ran").exists()
    assert result.stderr.strip() == (
        f"error: {path}: run[0].task: task 'train.py' cannot be imported: train.py, "
        f"line 2: SyntaxError: expected ':'; fix the file")


def test_plan_warns_that_a_task_without_reload_predictions_gets_nothing_accepted(
        tmp_path: Path) -> None:
    text = ILLUSTRATION.replace('name = "control"\n', 'name = "control"\ntask = "train.py"\n', 1)
    path = _write(tmp_path, text)
    (tmp_path / "train.py").write_text("def train(trial):\n    pass\n")
    result = _invoke(["plan", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    warnings = [w for w in json.loads(result.stdout)["warnings"] if w["code"] == "no-reload"]
    assert warnings == [{"code": "no-reload", "subject": "control", "message": (
        "task 'train.py' defines no reload_predictions, so close cannot reload its artifacts "
        "and accepts none of control's products; add reload_predictions (docs/tasks.md)")}]
    (tmp_path / "train.py").write_text("def train(trial):\n    pass\n\n\n"
                                       "def reload_predictions(artifact_dir, out, **kw):\n"
                                       "    return 0\n")
    result = _invoke(["plan", str(path), "--json"])
    assert not [w for w in json.loads(result.stdout)["warnings"] if w["code"] == "no-reload"]


def test_plan_finds_a_metric_column_the_tasks_predictions_cannot_have(tmp_path: Path) -> None:
    # the built-in task declares its columns: a misspelt column is found before any run
    text = ILLUSTRATION.replace('metric = "macro_f1"\ngoal = "max"',
                                'metric = "mean:n_token"\ngoal = "min"')
    assert "mean:n_token" in text
    path = _write(tmp_path, text)
    result = _invoke(["plan", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {path}: campaign.metric: 'mean:n_token': task 'textclf' declares the columns "
        f"of its predictions.csv (PREDICTION_COLUMNS: example_id, gold, predicted, n_tokens, "
        f"truncated, prob_*), and none is 'n_token'; fix the metric's spelling or give "
        f"mean:<one of its numeric columns>")
    for good in ("mean:n_tokens", "mean:prob_positive"):           # prob_* is one per class
        assert _invoke(["plan", str(_write(tmp_path, text.replace("mean:n_token", good)))]
                       ).exit_code == 0
    # a file task declares them in its text, read without running it
    task = ("open('ran', 'w').close()\nPREDICTION_COLUMNS = ('example_id', 'y', 'abs_error')\n"
            "def train(trial):\n    pass\n")
    (tmp_path / "train.py").write_text(task)
    text = text.replace("[[run]]\n", '[[run]]\ntask = "train.py"\n')
    path = _write(tmp_path, text.replace("mean:n_token", "mean:abs_eror"))
    result = _invoke(["plan", str(path)])
    assert result.exit_code == 2 and "none is 'abs_eror'" in result.stderr
    assert not (tmp_path / "ran").exists()
    assert _invoke(["plan", str(_write(tmp_path, text.replace("mean:n_token", "mean:abs_error")))]
                   ).exit_code == 0
    # a classification metric needs gold and predicted
    result = _invoke(["plan", str(_write(tmp_path, text.replace(
        'metric = "mean:n_token"\ngoal = "min"', 'metric = "macro_f1"\ngoal = "max"')))])
    assert result.exit_code == 2 and "none is 'gold' or 'predicted'" in result.stderr
    # without a declaration nothing can be said before the pilot
    (tmp_path / "train.py").write_text("def train(trial):\n    pass\n")
    assert _invoke(["plan", str(_write(tmp_path, text.replace("mean:n_token", "mean:x")))]
                   ).exit_code == 0


BAD_SPECS = {
    "after names an unknown stage": ('after = ["install"]', 'after = ["instal"]',
                                     "stage[1].after: 'instal' is not a stage or run; did you mean 'install'?"),
    "dependency cycle": ('uses = ["gpu", "person"]\n', 'uses = ["gpu", "person"]\nafter = ["report"]\n',
                         "dependency cycle"),
    "duplicate names": ('name = "lora-r8"\n', 'name = "control"\n', "run[1].name: duplicate name 'control'"),
    "zero duration": ('duration = "14h"', 'duration = "0h"', "run[2].duration"),
    "negative duration": ('duration = "14h"', 'duration = "-3h"', "run[2].duration"),
    "unparsable duration": ('duration = "14h"', 'duration = "14 hours"', "run[2].duration"),
    "unknown offer": ('offer = "RTX 4090"', 'offer = "RTX 4080"',
                      "rental.offer: 'RTX 4080' is not an offer in the catalog; did you mean 'RTX 4090'?"),
    "offer spelt as quote accepts it": ('offer = "RTX 4090"', 'offer = "rtx4090"',
                                        "rental.offer: 'rtx4090' is not an offer in the catalog; "
                                        "did you mean 'RTX 4090'? (the campaign file names the "
                                        "offer exactly, as the catalog spells it)"),
    "unknown package length": ("package_days = 3", "package_days = 5",
                               "rental.package_days: 'RTX 4090' has no 5-day package; choose one of 3, 7, 30 days"),
    "more GPUs than a flight": (CONTROL, CONTROL + "gpus = 2\n", "run[0].gpus: 'control' needs 2 GPUs"),
    "more memory than a GPU": (CONTROL, CONTROL + "gpu_memory_gb = 48\n",
                               "run[0].gpu_memory_gb: 'control' needs 48 GB per GPU but a RTX 4090 GPU has 24 GB"),
    "money with three decimals": ("", EXPENSE + '"12.345"\n', "expense[0].amount"),
    "negative money": ("", EXPENSE + '"-5.00"\n', "expense[0].amount"),
    "unknown reference": ('reference = "lora-r8"', 'reference = "lora-r9"',
                          "run[2].reference: 'lora-r9' is not a run; did you mean 'lora-r8'?"),
    "unknown key": ("package_days = 3", "package_days = 3\nflight = 2", "did you mean 'flights'?"),
}


@pytest.mark.parametrize("label", sorted(BAD_SPECS))
def test_every_bad_input_exits_2_with_one_line(tmp_path: Path, label: str) -> None:
    old, new, expected = BAD_SPECS[label]
    text = ILLUSTRATION.replace(old, new, 1) if old else ILLUSTRATION + new
    assert text != ILLUSTRATION
    result = _invoke(["plan", str(_write(tmp_path, text))])
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr
    assert expected in lines[0]
    assert str(tmp_path / "campaign.toml") in lines[0]


@pytest.mark.parametrize("args, expected", [
    (["--extend", "lora-r9=+30h"], "--extend lora-r9: 'lora-r9' is not a stage or run"),
    (["--extend", "lora-r8=30h"], "--extend: 'lora-r8=30h' is not an extension; write NAME=+DURATION"),
    (["--extend", "lora-r8=+0h"], "is zero"),
    (["--gantt", "{tmp}/campaign.toml/g.png"], "--gantt {tmp}/campaign.toml/g.png: "
     "{tmp}/campaign.toml is a file, not a folder; give a path in a folder"),
    (["--gantt", "{tmp}/no/such/g.png"], "--gantt {tmp}/no/such/g.png: the folder {tmp}/no/such "
     "does not exist; create it or give a path in an existing folder"),
])
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    expected = expected.replace("{tmp}", str(tmp_path))
    result = _invoke(["plan", str(_write(tmp_path, ILLUSTRATION)), *args])
    assert result.exit_code == 2
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_bad_user_catalog_exits_2(tmp_path: Path) -> None:
    _write(tmp_path, '[[offer]]\nname = "B200"\ncurrency = "USD"\n[[offer.package]]\ndays = 7\n'
                     'price = 99.5\n', "offers.toml")
    text = ILLUSTRATION.replace("package_days = 3", 'package_days = 3\ncatalog = "offers.toml"')
    result = _invoke(["plan", str(_write(tmp_path, text))])
    assert result.exit_code == 2
    assert "offers.toml: offer[0].package[0].price: 99.5 is a number" in result.stderr


def test_quote_json_for_78_hours() -> None:
    result = _invoke(["quote", "--offer", "RTX 4090", "--hours", "78", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["recommendation"]["package_days"] == 7 and data["recommendation"]["total_price"] == "110.00"
    assert [o["total_price"] for o in data["options"]] == ["110.00", "390.00", "47.14"]


def test_quote_takes_an_offer_written_in_another_case_or_spacing() -> None:
    exact = _invoke(["quote", "--offer", "RTX 4090", "--hours", "78", "--json"])
    for written in ("rtx 4090", "rtx4090", "RTX-4090"):
        result = _invoke(["quote", "--offer", written, "--hours", "78", "--json"])
        assert result.exit_code == 0 and result.stdout == exact.stdout
    result = _invoke(["quote", "--offer", "rtx4090", "--hours", "78"])
    assert "RTX 4090 packages (cheapest fitting first)" in result.stdout


def test_quote_with_a_user_catalog_prices_a_two_gpu_flight_once(tmp_path: Path) -> None:
    catalog = _write(tmp_path, '[[offer]]\nname = "B200"\ncurrency = "USD"\n'
                               '[[offer.package]]\ndays = 3\nprice = "500.00"\n', "offers.toml")
    result = _invoke(["quote", "--offer", "B200", "--hours", "60", "--gpus", "2",
                      "--catalog", str(catalog)])
    assert result.exit_code == 0, result.stderr
    assert "B200, 1 × 3-day = 500.00 USD" in result.stdout


@pytest.mark.parametrize("written, hours", [("10h", "10"), ("90m", "1.5"), ("1.5 h", "1.5"),
                                             ("2d", "48"), ("36000s", "10")])
def test_quote_hours_take_a_duration_as_campaign_files_write_one(written: str,
                                                                 hours: str) -> None:
    as_duration = _invoke(["quote", "--offer", "RTX 4090", "--hours", written, "--json"])
    as_hours = _invoke(["quote", "--offer", "RTX 4090", "--hours", hours, "--json"])
    assert as_duration.exit_code == 0, as_duration.stderr
    assert as_duration.stdout == as_hours.stdout
    shown = _invoke(["quote", "--offer", "RTX 4090", "--hours", written])
    assert shown.stdout.startswith(f"one continuous job of {float(hours):g} h on 1 GPU\n")


@pytest.mark.parametrize("args, expected", [
    (["--offer", "RTX 4090", "--hours", "10x"],
     "error: --hours: '10x' is not a length of time; write hours as a number (\"78\", "
     "\"1.5\") or a duration with a unit (\"10h\", \"90m\", \"2d\")\n"),
    (["--offer", "RTX 4090", "--hours", "0h"],
     "error: --hours 0: a job length must be more than 0 hours\n"),
])
def test_quote_bad_hours_is_one_line_with_the_forms(args: list[str], expected: str) -> None:
    result = _invoke(["quote", *args])
    assert result.exit_code == 2 and result.stderr == expected


@pytest.mark.parametrize("args, expected", [
    (["--offer", "RTX 4009", "--hours", "5"],
     "--offer: 'RTX 4009' is not an offer in the catalog; did you mean 'RTX 4090'?"),
    # one digit in common is no misspelling: the offers are listed instead
    (["--offer", "H100", "--hours", "5"],
     "--offer: 'H100' is not an offer in the catalog; known: 'B200', 'RTX 4090'"),
    (["--offer", "B200", "--hours", "5"], "no package prices for 'B200'"),
    (["--offer", "RTX 4090", "--hours", "0"], "--hours 0: a job length must be more than 0 hours"),
    (["--offer", "RTX 4090", "--hours", "5", "--gpus", "0"], "--gpus 0"),
])
def test_quote_bad_input_exits_2(args: list[str], expected: str) -> None:
    result = _invoke(["quote", *args])
    assert result.exit_code == 2
    assert expected in result.stderr


def test_console_script_exit_code(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("flightplan")
    bad = _write(tmp_path, ILLUSTRATION.replace("package_days = 3", "package_days = 4"))
    proc = subprocess.run([str(script), "plan", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "choose one of 3, 7, 30 days" in proc.stderr


def test_a_usage_error_names_the_help_that_lists_what_the_verb_takes() -> None:
    """A misspelt option, a word too many, an unknown verb: one line each, exit 2, ending
    with the ``--help`` of the verb (or of flightplan) that was asked."""
    script = Path(sys.executable).with_name("flightplan")
    for args, line in (
            (["run", "x.toml", "--frobnicate"],
             "error: No such option: --frobnicate; `flightplan run --help` lists what it takes"),
            (["stage", "done", "review", "--took", "2", "hours"],
             "error: Got unexpected extra argument(s) (hours); `flightplan stage done --help` "
             "lists what it takes"),
            (["frob"], "error: No such command 'frob'; `flightplan --help` lists what it takes")):
        proc = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


def test_an_error_with_json_is_one_json_object_on_stdout_too(tmp_path: Path) -> None:
    """A verb's error and a usage error, each with --json: the line on stderr, and on
    stdout the one object --json promises, naming the same error and exit code."""
    script = Path(sys.executable).with_name("flightplan")
    bad = _write(tmp_path, ILLUSTRATION.replace("package_days = 3", "package_days = 4"))
    for args in (["plan", str(bad), "--json"], ["quote", "--offer", "RTX 4090", "--json"]):
        proc = subprocess.run([str(script), *args], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, proc.stderr
        [line] = proc.stderr.splitlines()
        assert json.loads(proc.stdout) == {"error": line.removeprefix("error: "),
                                           "exit_code": 2}
    # without --json, stdout stays empty
    proc = subprocess.run([str(script), "plan", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""


def test_names_that_look_like_markup_or_tex_print_as_written(tmp_path: Path) -> None:
    text = ILLUSTRATION.replace('name = "illustration"', 'name = "$\\\\foo{$ [bold]"') \
        .replace('"lora-r8"', '"[red]lora-r8[/]"')
    gantt = tmp_path / "g.png"
    result = _invoke(["plan", str(_write(tmp_path, text)), "--gantt", str(gantt)])
    assert result.exit_code == 0, result.stderr
    assert "$\\foo{$ [bold]: Does a LoRA" in result.stdout
    assert "│ [red]lora-r8[/]" in result.stdout
    assert gantt.read_bytes().startswith(b"\x89PNG")


def test_plan_finds_a_corpus_column_the_files_lack_before_writing_anything(tmp_path: Path) -> None:
    """The digits campaign with ``p64`` among its inputs (the files have p0 … p63): one line
    naming the campaign file, the key, the corpus file and the column; exit 2."""
    shutil.copytree(ROOT / "examples" / "digits", tmp_path / "digits")
    spec = tmp_path / "digits" / "campaign.toml"
    text = spec.read_text(encoding="utf-8")
    assert '"p63"]' in text
    spec.write_text(text.replace('"p63"]', '"p63", "p64"]'), encoding="utf-8")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = _invoke(["plan", str(spec), "--gantt", str(tmp_path / "gantt.png")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {spec}: corpus.input_columns: digits_test.csv has no column 'p64' (did you "
        f"mean 'p6'? its columns: 'id', 'p0', ")
    assert lines[0].endswith("'p10' and 54 more); fix corpus.input_columns")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    spec.write_text(text.replace('label_column = "label"', 'label_column = "digit"'),
                    encoding="utf-8")
    result = _invoke(["plan", str(spec)])
    assert result.exit_code == 2 and "digits_test.csv has no column 'digit'" in result.stderr
    spec.write_text(text, encoding="utf-8")
    assert _invoke(["plan", str(spec)]).exit_code == 0


def test_plan_finds_a_corpus_file_that_differs_from_its_frozen_hash(tmp_path: Path) -> None:
    """The digits campaign with one row of its test file changed: one line naming the
    campaign file, ``corpus.sha256``, the file and both hashes, exit 2, nothing written
    (``run``'s data check would stop the campaign with ``corpus_mismatch``)."""
    shutil.copytree(ROOT / "examples" / "digits", tmp_path / "digits")
    spec = tmp_path / "digits" / "campaign.toml"
    test_file = next((tmp_path / "digits").rglob("digits_test.csv"))
    frozen = hashlib.sha256(test_file.read_bytes()).hexdigest()
    assert frozen in spec.read_text(encoding="utf-8")
    test_file.write_bytes(test_file.read_bytes() + b"\n")
    changed = hashlib.sha256(test_file.read_bytes()).hexdigest()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = _invoke(["plan", str(spec)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}: corpus.sha256: corpus "
                                                   f"files differ from the hashes frozen here")
    assert (f"digits_test.csv: sha256 {changed} but the campaign file froze {frozen}"
            in lines[0])
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("missing", ["folder", "file"])
def test_plan_warns_where_the_corpus_folder_or_a_file_is_not_there_yet(tmp_path: Path,
                                                                       missing: str) -> None:
    """The digits campaign without its data folder, or without its test file: plan exits
    0 (run checks the files), with a warning line of its own in the text and a
    ``corpus-missing`` entry in the JSON ``warnings``; nothing is written."""
    shutil.copytree(ROOT / "examples" / "digits", tmp_path / "digits")
    spec = tmp_path / "digits" / "campaign.toml"
    data = (tmp_path / "digits" / "data").resolve()
    if missing == "folder":
        shutil.rmtree(data)
        expected = (f"corpus.path: {data} is not a folder; give the folder that holds the "
                    f"corpus files, relative to the campaign file (flightplan run refuses to "
                    f"start until it is there)")
    else:
        (data / "digits_test.csv").unlink()
        expected = (f"corpus file(s) ['digits_test.csv'] not found in folder {data}; restore "
                    f"them or fix corpus.sha256 (flightplan run's data check stops the "
                    f"campaign until they are there)")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = _invoke(["plan", str(spec), "--json"])
    assert result.exit_code == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    assert {"code": "corpus-missing", "subject": "corpus", "message": expected} in warnings
    text = _invoke(["plan", str(spec)])
    assert text.exit_code == 0, text.stderr
    # the first thing printed (wrapped at 120 columns)
    assert " ".join(text.stdout.split()).startswith(
        f"warning: corpus not there yet: {expected} digits: ")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_plan_from_a_folder_and_another_calibrate_from_is_refused(tmp_path: Path) -> None:
    """``--from X`` while the file says ``[calibrate] from = "Y"``: exit 2, one line naming
    both folders and the fix, before either is read (neither exists here)."""
    spec = _write(tmp_path, ILLUSTRATION + '\n[calibrate]\nfrom = "../first/results"\n')
    result = _invoke(["plan", str(spec), "--from", str(tmp_path / "other")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: --from {tmp_path / 'other'}: {spec} has [calibrate] from = "
        f"'../first/results' ({(tmp_path.parent / 'first' / 'results').resolve()}), another "
        f"folder, and flightplan run freezes the plan from that one; drop --from to plan "
        f"from it, or drop [calibrate] from (or set it to this folder) to plan from "
        f"{(tmp_path / 'other').resolve()}\n")
    # the same folder, named otherwise: it goes on to read it (and finds nothing there)
    same = tmp_path / "x" / ".." / ".." / "first" / "results"
    result = _invoke(["plan", str(spec), "--from", str(same)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --from {same}: is not a directory")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_before_or_after_the_verb_shows_the_traceback_and_keeps_exit_2(
        tmp_path: Path, where: str) -> None:
    """Through the console script: the traceback, then the one error line, exit 2."""
    script = Path(sys.executable).with_name("flightplan")
    bad = _write(tmp_path, ILLUSTRATION.replace("package_days = 3", "package_days = 4"))
    args = ["--debug", "plan", str(bad)] if where == "before" else ["plan", str(bad), "--debug"]
    proc = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1].startswith("error: ") and "choose one of 3, 7, 30 days" in lines[-1]


def test_plan_of_a_folder_takes_its_campaign_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, ILLUSTRATION)
    by_file = json.loads(_invoke(["plan", str(path), "--json"]).stdout)
    by_folder = _invoke(["plan", str(tmp_path), "--json"])
    assert by_folder.exit_code == 0, by_folder.stderr
    assert json.loads(by_folder.stdout) == by_file
    assert (by_file["reserved_hours"], by_file["recommendation"]["total_price"]) == (48.0, "47.14")
    (tmp_path / "empty").mkdir()
    script = Path(sys.executable).with_name("flightplan")     # the console script's line
    bare = subprocess.run([str(script), "plan", str(tmp_path / "empty")], capture_output=True,
                          text=True, timeout=300)
    assert (bare.returncode, bare.stdout) == (2, "")
    assert bare.stderr == (f"error: {tmp_path / 'empty'}: a folder without a campaign.toml; "
                           f"give the campaign file, or the folder holding its campaign.toml\n")


def test_plan_after_the_campaign_ran_says_what_from_results_would_use(tmp_path: Path) -> None:
    path = _write(tmp_path, ILLUSTRATION)
    results = tmp_path / "results"

    def noted() -> list[dict[str, str]]:
        data = json.loads(_invoke(["plan", str(path), "--json"]).stdout)
        return [w for w in data["warnings"] if w["code"] == "measured-figures"]

    assert noted() == []                                   # it never ran
    instead = ("plans from its measured durations and disagreements instead of the file's "
               "guesses and the default disagreement")
    results.mkdir()
    (results / "MANIFEST.json").write_text("{}")           # the runner has published
    assert noted() == [{"code": "measured-figures", "subject": "calibrate", "message": (
        f"this campaign has run: once `flightplan close {path}` has written "
        f"{results / 'calibration.json'}, `flightplan plan {path} --from {results}` {instead}")}]
    (results / "calibration.json").write_text("{}")        # close has written it
    closed = (f"this campaign was closed: `flightplan plan {path} --from {results}` {instead}")
    assert noted() == [{"code": "measured-figures", "subject": "calibrate", "message": closed}]
    text = _invoke(["plan", str(path)])
    assert f"note: {closed}" in " ".join(text.stdout.split())


def test_quote_list_shows_every_offer_and_the_documented_catalog_adds_to_it(tmp_path: Path
                                                                            ) -> None:
    builtin = _invoke(["quote", "--list", "--json"])
    assert builtin.exit_code == 0, builtin.stderr
    assert json.loads(builtin.stdout) == {"sources": ["built-in"], "offers": [
        {"name": "B200", "gpus_per_flight": 2, "gpu_memory_gb": None, "currency": None,
         "packages": []},
        {"name": "RTX 4090", "gpus_per_flight": 1, "gpu_memory_gb": 24.0, "currency": "USD",
         "packages": [{"days": 3, "price": "47.14"}, {"days": 7, "price": "110.00"},
                      {"days": 30, "price": "390.00"}]}]}
    text = " ".join(_invoke(["quote", "--list"]).stdout.split())
    assert "RTX 4090 │ 1 │ 24 GB │ 3 d 47.14 USD, 7 d 110.00 USD, 30 d 390.00 USD" in text
    assert "B200 │ 2 │ not given │ no prices given: a --catalog file can add them" in text

    # the example of docs/campaign.md, as written there
    doc = (ROOT / "docs" / "campaign.md").read_text(encoding="utf-8")
    example = doc[doc.index("## The catalog file"):].split("```toml\n")[1].split("```")[0]
    catalog = _write(tmp_path, example, "offers.toml")
    listed = json.loads(_invoke(["quote", "--list", "--catalog", str(catalog), "--json"]).stdout)
    assert listed["sources"] == ["built-in", str(catalog)]
    assert [(o["name"], o["gpus_per_flight"], o["gpu_memory_gb"], o["packages"])
            for o in listed["offers"]] == [
        ("B200", 2, 180.0, [{"days": 7, "price": "999.00"}]),
        ("L40S", 1, 48.0, [{"days": 3, "price": "60.00"}]),
        ("RTX 4090", 1, 24.0, [{"days": 3, "price": "47.14"}, {"days": 7, "price": "110.00"},
                               {"days": 30, "price": "390.00"}])]
    neither = _invoke(["quote", "--hours", "5"])
    assert neither.exit_code == 2
    assert neither.stderr == ("error: quote needs --offer and --hours (one job to price), or "
                              "--list (every offer of the catalog with its packages)\n")
