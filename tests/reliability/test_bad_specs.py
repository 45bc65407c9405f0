"""Broken campaign files: every one is refused with one line naming the field, never a
traceback, and nothing is written.

Three layers: ``load_spec`` (hundreds of generated files), the ``flightplan plan`` CLI
in-process (the exit code and stderr the user sees), and a few real subprocesses of
``plan`` and ``run`` (the console script, and the campaign folder byte-identical after).
"""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flightplan.errors import SpecError
from flightplan.spec import load_spec, parse_spec

from .broken_specs import (BrokenSpec, base_spec, broken_spec, catalog_fault, dump_toml,
                           extreme_spec, raw_fault, renamed_spec)
from .cli_harness import TINY, assert_clean_input_error, run_inprocess, run_subprocess, snapshot

CI = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SAFE_RAW = ("bytes", "text", "empty", "nul")


def _write(case: BrokenSpec, folder: Path) -> Path:
    path = folder / "campaign.toml"
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text, encoding="utf-8")
    return path


def test_the_base_file_is_valid_and_the_writer_round_trips() -> None:
    doc = base_spec()
    assert tomllib.loads(dump_toml(doc)) == doc
    assert [r.name for r in parse_spec(doc).runs] == ["control", "lora-r8", "lora-r8-len256"]


@settings(CI, max_examples=400)
@given(broken_spec())
def test_load_spec_names_the_field_of_every_broken_file(case: BrokenSpec) -> None:
    tomllib.loads(case.text)  # the fault is in the campaign, not in the TOML syntax
    with tempfile.TemporaryDirectory() as folder:
        path = _write(case, Path(folder))
        with pytest.raises(SpecError) as caught:
            load_spec(path)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    assert message.startswith(str(path) + ": ")
    assert caught.value.field is not None and caught.value.field.startswith(case.field), \
        (caught.value.field, case.field, message)
    assert case.words in message


@settings(CI, max_examples=100)
@given(raw_fault(SAFE_RAW))
def test_load_spec_refuses_files_that_are_not_campaigns(case: BrokenSpec) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _write(case, Path(folder))
        with pytest.raises(SpecError) as caught:
            load_spec(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path) + ": ")


@settings(CI, max_examples=30)
@given(st.one_of(broken_spec(), raw_fault(SAFE_RAW)))
def test_plan_cli_exits_2_with_one_line_and_writes_nothing(case: BrokenSpec) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _write(case, Path(folder))
        before = snapshot(Path(folder))
        outcome = run_inprocess(["plan", str(path)])
        assert snapshot(Path(folder)) == before
    assert_clean_input_error(outcome, names=case.field)


@settings(CI, max_examples=20)
@given(catalog_fault())
def test_plan_cli_names_an_offer_or_package_the_catalog_lacks(case: BrokenSpec) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _write(case, Path(folder))
        load_spec(path)  # the file itself is valid
        before = snapshot(Path(folder))
        outcome = run_inprocess(["plan", str(path)])
        assert snapshot(Path(folder)) == before
    assert_clean_input_error(outcome, names=case.field)


@settings(CI, max_examples=12)
@given(renamed_spec())
def test_unicode_names_of_any_length_up_to_200_plan_cleanly(case: tuple[str, list[str]]) -> None:
    text, names = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.toml"
        path.write_text(text, encoding="utf-8")
        spec = load_spec(path)
        assert [e.name for e in (*spec.stages, *spec.runs)] == names
        outcome = run_inprocess(["plan", str(path), "--json"])
    assert outcome.code == 0, outcome.stderr
    assert "Traceback" not in outcome.stderr


@settings(CI, max_examples=15)
@given(extreme_spec())
def test_plan_answers_extreme_but_legal_values_without_crashing(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.toml"
        path.write_text(text, encoding="utf-8")
        outcome = run_inprocess(["plan", str(path), "--json"])
    assert "Traceback" not in outcome.stderr, outcome.stderr[-600:]
    assert outcome.code in (0, 2), (outcome.code, outcome.stderr)
    if outcome.code == 2:
        assert_clean_input_error(outcome, names=None)


# Real subprocesses: `plan` on the illustration file, `run` on the tiny one (it has the
# [corpus] a run needs, so the planted fault is the first thing wrong with it).
SUBPROCESS_CASES = {
    "wrong type": (("rental", "package_days"), "three", "rental.package_days"),
    "bad duration": (("run", 1, "duration"), "10 hours", "run[1].duration"),
    "unknown key": (("campaign", "qestion"), "x", "campaign.qestion"),
    "cycle": (("stage", 0, "after"), None, "after"),  # first stage after the last one
    "unknown offer": (("rental", "offer"), "H100 SXM", "rental.offer"),
}


@pytest.mark.parametrize("verb", ["plan", "run"])
@pytest.mark.parametrize("label", sorted(SUBPROCESS_CASES))
def test_console_script_refuses_broken_file_and_leaves_folder_byte_identical(
        tmp_path: Path, verb: str, label: str) -> None:
    where, value, field = SUBPROCESS_CASES[label]
    doc = base_spec() if verb == "plan" else tomllib.loads(TINY.read_text(encoding="utf-8"))
    holder = doc
    for part in where[:-1]:
        holder = holder[part]
    holder[where[-1]] = value if value is not None else [doc["stage"][-1]["name"]]
    path = tmp_path / "campaign.toml"
    path.write_text(dump_toml(doc), encoding="utf-8")
    before = snapshot(tmp_path)
    outcome = run_subprocess([verb, str(path)], cwd=tmp_path)
    assert snapshot(tmp_path) == before
    assert_clean_input_error(outcome, names=field)


def test_console_script_refuses_a_missing_file(tmp_path: Path) -> None:
    outcome = run_subprocess(["plan", str(tmp_path / "nope.toml")], cwd=tmp_path)
    assert_clean_input_error(outcome, names="nope.toml")
    assert list(tmp_path.iterdir()) == []


# Findings of this suite (fixed since in spec.py/units.py): kept as regression tests.

@pytest.mark.parametrize("where", [("rental", "package_days"), ("rental", "flights"),
                                   ("campaign", "min_gain")])
def test_a_boolean_is_not_a_number(where: tuple[str, str]) -> None:
    doc = base_spec()
    doc[where[0]][where[1]] = True
    with pytest.raises(SpecError, match=rf"{where[0]}\.{where[1]}"):
        parse_spec(doc)


@pytest.mark.parametrize("table,key,value", [("campaign", "min_gain", float("inf")),
                                             ("campaign", "accept_at_least", float("nan")),
                                             ("campaign", "accept_at_least", float("-inf"))])
def test_non_finite_thresholds_are_refused(table: str, key: str, value: float) -> None:
    doc = base_spec()
    doc[table][key] = value
    with pytest.raises(SpecError, match=rf"{table}\.{key}"):
        parse_spec(doc)


@pytest.mark.parametrize("text", ["0.4s", "0.0001s"])
def test_a_duration_that_rounds_to_zero_seconds_is_refused(text: str) -> None:
    doc = base_spec()
    doc["run"][0]["duration"] = text
    with pytest.raises(SpecError, match=r"run\[0\]\.duration"):
        parse_spec(doc)


@pytest.mark.parametrize("amount", ["1e400", "1E+30", "12345678901234567890123456789.00"])
def test_an_amount_too_large_for_cents_is_a_spec_error(amount: str) -> None:
    doc = base_spec()
    doc["expense"] = [{"label": "x", "amount": amount, "currency": "USD"}]
    with pytest.raises(SpecError, match=r"expense\[0\]\.amount"):
        parse_spec(doc)


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a=", "}")])
def test_a_deeply_nested_file_is_a_spec_error(tmp_path: Path, opener: str, closer: str) -> None:
    path = tmp_path / "campaign.toml"
    inner = "" if opener == "[" else "1"
    path.write_text(f"x = {opener * 5000}{inner}{closer * 5000}\n", encoding="utf-8")
    with pytest.raises(SpecError, match="campaign.toml"):
        load_spec(path)


def test_campaign_dir_is_not_a_key_of_the_file() -> None:
    doc = base_spec()
    doc["campaign_dir"] = "/etc"
    with pytest.raises(SpecError, match="unknown key 'campaign_dir'"):
        parse_spec(doc)


@pytest.mark.parametrize("key", ["a\nb", "x\r"])
def test_an_unknown_key_with_a_line_break_still_gives_one_line(key: str) -> None:
    doc = base_spec()
    doc["rental"][key] = 1
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    assert "\n" not in str(caught.value) and "\r" not in str(caught.value)
