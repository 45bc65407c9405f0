"""The campaign file: the examples load; each bad input is one SpecError naming its field."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flightplan.errors import SpecError
from flightplan.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
BASE = tomllib.loads((ROOT / "examples" / "illustration" / "campaign.toml").read_text(encoding="utf-8"))
TINY = tomllib.loads((ROOT / "examples" / "tiny" / "campaign.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("example", ["illustration", "drug-reviews", "tiny"])
def test_examples_load(example: str) -> None:
    spec = load_spec(ROOT / "examples" / example / "campaign.toml")
    assert spec.control.name == "control"
    assert spec.campaign_dir == (ROOT / "examples" / example).resolve()


def test_defaults_of_the_illustration() -> None:
    spec = parse_spec(BASE)
    assert (spec.rental.flights, spec.rental.people) == (1, 1)
    install = spec.item("install")
    assert install.each_flight and install.gpus == 1 and install.tier == "essential"
    assert spec.item("lora-r8").params["adapter"] == {"kind": "lora", "rank": 8, "alpha": 16}


def _edit(path: tuple, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    holder = doc
    for part in path[:-1]:
        holder = holder.setdefault(part, {}) if isinstance(part, str) else holder[part]
    holder[path[-1]] = value
    return doc


CASES = [
    (("stage", 1, "after"), ["instal"], r"stage\[1\]\.after: 'instal' is not a stage or run; did you mean 'install'\?"),
    (("stage", 0, "after"), ["report"], r"after: dependency cycle (install|report|data-check).* -> "),
    (("run", 1, "name"), "control", r"run\[1\]\.name: duplicate name 'control'"),
    (("run", 0, "duration"), "0h", r"run\[0\]\.duration: '0h' is zero"),
    (("run", 0, "duration"), "-2h", r"run\[0\]\.duration: '-2h' is negative"),
    (("run", 0, "duration"), "ten hours", r"run\[0\]\.duration: 'ten hours' is not a duration"),
    (("run", 0, "duration"), 10, r"run\[0\]\.duration: 10 is not a duration string"),
    (("run", 2, "reference"), "lora-r9", r"run\[2\]\.reference: 'lora-r9' is not a run; did you mean 'lora-r8'\?"),
    (("expense",), [{"label": "x", "amount": "1.005", "currency": "USD"}],
     r"expense\[0\]\.amount: .*more than two decimals"),
    (("expense",), [{"label": "x", "amount": "-1.00", "currency": "USD"}], r"expense\[0\]\.amount: .*negative"),
    (("expense",), [{"label": "x", "amount": 12.5, "currency": "USD"}], r"expense\[0\]\.amount: .*decimal string"),
    (("rental", "flight"), 2, r"rental\.flight: unknown key 'flight'; did you mean 'flights'\?"),
    (("rental", "package_days"), True, r"rental\.package_days: true is a boolean"),
    (("campaign", "min_gain"), float("inf"), r"campaign\.min_gain"),
    (("stage", 0, "uses"), ["gpu", "cpu"], r"stage\[0\]\.uses\[1\]: 'cpu' is not allowed"),
    (("run", 0, "tier"), "vital", r"run\[0\]\.tier: 'vital' is not allowed"),
    (("campaign_dir",), "/etc", r"unknown key 'campaign_dir'"),
    (("campaign", "expected_disagreement"), 0,
     r"campaign\.expected_disagreement: 0 is not a share in \(0, 1\): at 0 the two "
     r"runs always predict the same"),
    (("campaign", "expected_disagreement"), 1,
     r"campaign\.expected_disagreement: 1 is not a share in \(0, 1\).*at 1 they never "
     r"agree; give the share"),
    (("campaign", "expected_disagreement"), 1.5,
     r"campaign\.expected_disagreement: 1\.5 is not a share in \(0, 1\)"),
    (("campaign", "expected_difference_sd"), 0.2,
     r"campaign: expected_difference_sd is for a mean:<column> metric, and macro_f1 is a "
     r"classification metric; give expected_disagreement"),
    (("run", 0, "expected_gain"), 0.1,
     r"run\[0\]\.expected_gain: run 'control' has no reference, so no gain to expect"),
    (("run", 1, "expected_gain"), -0.1, r"run\[1\]\.expected_gain: -0\.1: input should be greater than or equal to 0"),
    (("campaign", "accept_at_least"), 1.8,
     r"campaign\.accept_at_least: 1\.8 is outside the values macro_f1 takes \(0 to 1\), so no "
     r"product could ever be accepted"),
    (("campaign", "min_gain"), 1, r"campaign\.min_gain: 1 is at least the whole range of "
     r"macro_f1 \(0 to 1\), so no variant could ever meet it"),
    # pydantic's lax mode would read these as numbers; the docs say integer and number
    (("campaign", "seeds"), "2", r"campaign\.seeds: '2' is text, not a number; write it without quotes"),
    (("campaign", "seeds"), 2.0, r"campaign\.seeds: 2\.0 is not a whole number; write an integer such as 2"),
    (("campaign", "min_gain"), "0.05", r"campaign\.min_gain: '0\.05' is text, not a number"),
    (("run", 0, "gpus"), 1.5, r"run\[0\]\.gpus: 1\.5 is not a whole number"),
    # and these as booleans; the docs say boolean
    (("run", 0, "reshard"), "yes", r'run\[0\]\.reshard: "yes" is not a boolean; write true or '
     r"false, unquoted"),
    (("run", 0, "deterministic"), "false", r'run\[0\]\.deterministic: "false" is not a boolean'),
    (("run", 1, "reshard"), 1, r"run\[1\]\.reshard: 1 is not a boolean"),
    (("run", 0, "reshard"), [True], r"run\[0\]\.reshard: \[true\] is not a boolean"),
    (("stop", "require_resume"), 0, r"stop\.require_resume: 0 is not a boolean"),
]


@pytest.mark.parametrize("path, value, pattern", CASES, ids=[c[2][:30] for c in CASES])
def test_bad_input_is_one_line_naming_the_field(path: tuple, value: Any, pattern: str) -> None:
    with pytest.raises(SpecError, match=pattern) as caught:
        parse_spec(_edit(path, value), source="campaign.toml")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("campaign.toml: ")


def test_a_misspelt_required_key_is_named_not_reported_missing() -> None:
    doc = copy.deepcopy(BASE)
    doc["rental"]["pakage_days"] = doc["rental"].pop("package_days")
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    assert str(caught.value) == ("campaign.toml: rental.pakage_days: unknown key 'pakage_days'; "
                                 "did you mean 'package_days'?")


def test_thresholds_may_use_the_whole_range_of_their_metric() -> None:
    doc = copy.deepcopy(BASE)
    doc["campaign"] |= {"metric": "matthews_corrcoef", "accept_at_least": -0.5, "min_gain": 1.5}
    assert parse_spec(doc).campaign.accept_at_least == -0.5          # MCC takes -1 to 1
    doc["campaign"] |= {"metric": "mean:abs_error", "goal": "min", "accept_at_least": 40.0,
                        "min_gain": 3.0}
    assert parse_spec(doc).campaign.min_gain == 3.0                   # a column: any number


def test_planning_assumptions_load_and_fit_their_metric() -> None:
    doc = copy.deepcopy(BASE)
    doc["campaign"]["expected_disagreement"] = 0.1
    doc["run"][1]["expected_gain"] = 0.08
    spec = parse_spec(doc)
    assert spec.campaign.expected_disagreement == 0.1 and spec.item("lora-r8").expected_gain == 0.08
    doc["campaign"] |= {"metric": "mean:abs_error", "goal": "min"}
    with pytest.raises(SpecError, match=r"campaign: expected_disagreement is for a "
                                        r"classification metric, and mean:abs_error is a "
                                        r"column's mean; give expected_difference_sd"):
        parse_spec(doc)
    del doc["campaign"]["expected_disagreement"]
    doc["campaign"]["expected_difference_sd"] = 0.3
    assert parse_spec(doc).campaign.expected_difference_sd == 0.3


def test_calibrate_from_is_relative_to_the_campaign_file(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["calibrate"] = {"from": "../first/results"}
    spec = parse_spec(doc, campaign_dir=tmp_path / "next")
    assert spec.calibrate is not None and spec.calibrate.source == "../first/results"
    assert spec.calibrate.results_dir(spec.campaign_dir) == (tmp_path / "first" / "results").resolve()
    doc["calibrate"] = {"form": "../first/results"}
    with pytest.raises(SpecError, match=r"calibrate\.form: unknown key 'form'; did you mean "
                                        r"'from'\?"):
        parse_spec(doc)


def test_no_control_is_an_error() -> None:
    doc = copy.deepcopy(BASE)
    doc["run"][0]["reference"] = "lora-r8"
    with pytest.raises(SpecError, match="no run is a control"):
        parse_spec(doc)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[campaign\n", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match="nested too deeply"):
        load_spec(deep)


def test_replicates_replace_the_seed_and_one_seed_keeps_the_params() -> None:
    doc = copy.deepcopy(TINY)
    doc["campaign"]["seeds"] = 3
    doc["run"][1]["seeds"] = 2
    spec = parse_spec(doc)
    control, variant = spec.runs[0], spec.runs[1]
    assert (spec.seeds_of(control), spec.seeds_of(variant)) == (3, 2)
    assert spec.campaign.multiple == "holm"
    assert control.replicate_params(0) == control.params
    assert [control.replicate_params(i)["seed"] for i in range(3)] == [0, 1, 2]
    assert {k: v for k, v in control.replicate_params(2).items() if k != "seed"} == {
        k: v for k, v in control.params.items() if k != "seed"}


def test_replicates_need_an_integer_seed_to_replace() -> None:
    doc = copy.deepcopy(TINY)
    doc["campaign"]["seeds"] = 2
    del doc["run"][0]["params"]["seed"]
    with pytest.raises(SpecError,
                       match=r"run\[0\]\.params\.seed: run 'control' executes 2 replicates.*no integer seed"):
        parse_spec(doc)
    doc["run"][0]["seeds"] = 1
    assert parse_spec(doc).seeds_of(parse_spec(doc).runs[0]) == 1


@pytest.mark.parametrize("value", [0, 21, True])
def test_seeds_out_of_range_is_refused(value: Any) -> None:
    doc = copy.deepcopy(TINY)
    doc["campaign"]["seeds"] = value
    with pytest.raises(SpecError, match="seeds"):
        parse_spec(doc)
