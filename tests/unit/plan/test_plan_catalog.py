"""The catalog: exactly the published facts, user files merged by name, one-line errors."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from flightplan.errors import CatalogError, SpecError
from flightplan.plan.catalog import (builtin_catalog, catalog_for_spec, check_spec_against_catalog,
                                     load_catalog)
from flightplan.units import Money

B200_FILE = """
[[offer]]
name = "B200"
gpu_memory_gb = 180
currency = "USD"
[[offer.package]]
days = 7
price = "1234.50"
"""


def test_builtin_catalog_holds_exactly_the_published_facts() -> None:
    catalog = builtin_catalog()
    assert set(catalog.offers) == {"RTX 4090", "B200"}
    rtx = catalog.offers["RTX 4090"]
    assert (rtx.gpus_per_flight, rtx.gpu_memory_gb, rtx.currency) == (1, 24.0, "USD")
    assert rtx.packages == {3: Money(Decimal("47.14"), "USD"), 7: Money(Decimal("110.00"), "USD"),
                            30: Money(Decimal("390.00"), "USD")}
    b200 = catalog.offers["B200"]
    assert (b200.gpus_per_flight, b200.gpu_memory_gb, b200.currency, b200.packages) == (2, None, None, {})


def test_user_catalog_fills_in_the_b200_and_keeps_its_two_gpus(tmp_path: Path) -> None:
    path = tmp_path / "offers.toml"
    path.write_text(B200_FILE, encoding="utf-8")
    merged = builtin_catalog().merged(load_catalog(path))
    b200 = merged.offers["B200"]
    assert b200.gpus_per_flight == 2            # from the built-in catalog
    assert b200.gpu_memory_gb == 180.0          # from the user file
    assert b200.packages == {7: Money(Decimal("1234.50"), "USD")}
    assert merged.offers["RTX 4090"].packages[3] == Money(Decimal("47.14"), "USD")
    assert merged.sources == ("built-in", str(path))


def test_user_catalog_overrides_one_package_price(tmp_path: Path) -> None:
    path = tmp_path / "offers.toml"
    path.write_text('[[offer]]\nname = "RTX 4090"\ncurrency = "USD"\n'
                    '[[offer.package]]\ndays = 3\nprice = "45.00"\n', encoding="utf-8")
    rtx = builtin_catalog().merged(load_catalog(path)).offers["RTX 4090"]
    assert rtx.packages[3] == Money(Decimal("45.00"), "USD")
    assert rtx.packages[7] == Money(Decimal("110.00"), "USD")


@pytest.mark.parametrize("text, field, words", [
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\ncurrncy = "USD"\n', "offer[0].currncy",
     "did you mean 'currency'"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 0\n', "offer[0].gpus_per_flight", "GPUs >= 1"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\ncurrency = "USD"\n'
     '[[offer.package]]\ndays = 3\nprice = 47.14\n', r"offer\[0\]\.package\[0\]\.price", "decimal string"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\ncurrency = "USD"\n'
     '[[offer.package]]\ndays = 3\nprice = "47.145"\n', r"package\[0\]\.price", "more than two decimals"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\ncurrency = "USD"\n'
     '[[offer.package]]\ndays = 3\nprice = "-1.00"\n', r"package\[0\]\.price", "negative"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\n[[offer.package]]\ndays = 3\nprice = "1.00"\n',
     r"package\[0\]\.price", "currency"),
    ('[[offer]]\nname = "X"\ngpus_per_flight = 1\ncurrency = "USD"\n'
     '[[offer.package]]\ndays = 0\nprice = "1.00"\n', r"package\[0\]\.days", "days >= 1"),
    ("offer = 3\n", "offer", "no \\[\\[offer\\]\\]"),
    ('[[offer]]\nname = "H100"\ncurrency = "USD"\n', "offer[0].gpus_per_flight",
     "required for the new offer 'H100'"),
    ("[[offer]\n", None, "not valid"),
])
def test_bad_user_catalog_is_one_line_naming_the_field(tmp_path: Path, text: str, field: str | None,
                                                       words: str) -> None:
    path = tmp_path / "offers.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=words) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    if field:
        assert caught.match(field.replace("[", r"\[").replace("]", r"\]") if "\\" not in field else field)


def test_missing_catalog_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no such file"):
        load_catalog(tmp_path / "nope.toml")


def test_a_missing_catalog_named_by_the_campaign_names_rental_catalog(make_spec, tmp_path) -> None:
    spec = make_spec(runs=[{"name": "control", "tier": "essential", "duration": "1h"}],
                     catalog="")
    (tmp_path / "offers.toml").unlink()
    with pytest.raises(CatalogError) as caught:
        catalog_for_spec(spec)
    assert str(caught.value) == (
        f"{tmp_path / 'offers.toml'}: no such file (rental.catalog = 'offers.toml' in "
        f"{tmp_path / 'campaign.toml'}, relative to the campaign file); correct the path or "
        f"remove rental.catalog to use the built-in offers")


def test_spec_checks_against_the_catalog(make_spec) -> None:
    run = {"name": "control", "tier": "essential", "duration": "10h"}
    with pytest.raises(SpecError, match=r"rental\.offer: 'RTX 4080' is not an offer.*did you mean 'RTX 4090'"):
        check_spec_against_catalog(make_spec(runs=[run], offer="RTX 4080"), builtin_catalog())
    with pytest.raises(SpecError, match=r"rental\.package_days: 'RTX 4090' has no 5-day package; "
                                        r"choose one of 3, 7, 30 days"):
        check_spec_against_catalog(make_spec(runs=[run], package_days=5), builtin_catalog())
    with pytest.raises(SpecError, match=r"rental\.offer: the catalog has no package prices for 'B200'"):
        check_spec_against_catalog(make_spec(runs=[run], offer="B200"), builtin_catalog())
    with pytest.raises(SpecError, match=r"run\[0\]\.gpus: 'control' needs 2 GPUs but one RTX 4090 "
                                        r"flight has 1"):
        check_spec_against_catalog(make_spec(runs=[{**run, "gpus": 2}]), builtin_catalog())
    with pytest.raises(SpecError, match=r"run\[0\]\.gpu_memory_gb: 'control' needs 40 GB per GPU "
                                        r"but a RTX 4090 GPU has 24 GB"):
        check_spec_against_catalog(make_spec(runs=[{**run, "gpu_memory_gb": 40}]), builtin_catalog())
    stage = {"name": "setup", "duration": "1h", "uses": ["gpu"], "gpus": 3}
    with pytest.raises(SpecError, match=r"stage\[0\]\.gpus"):
        check_spec_against_catalog(make_spec(runs=[run], stages=[stage]), builtin_catalog())
    offer = check_spec_against_catalog(make_spec(runs=[{**run, "gpu_memory_gb": 24}]), builtin_catalog())
    assert offer.name == "RTX 4090"
