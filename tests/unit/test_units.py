"""Duration and Money: parsing, limits, exact cents."""

from __future__ import annotations

from decimal import Decimal

import pytest

from flightplan.units import Duration, Money, parse_extension


@pytest.mark.parametrize("text, seconds", [("90m", 5400), ("10h", 36000), ("2d", 172800),
                                           ("1.5h", 5400), (" 30s ", 30), ("0.5s", 1)])
def test_duration_parses_units(text: str, seconds: int) -> None:
    assert Duration.parse(text).seconds == seconds


@pytest.mark.parametrize("text, seconds", [("2min", 120), ("1.5 min", 90), ("12.5 min", 750),
                                           ("7.9 s", 8), ("3.2 h", 11520), ("2 d", 172800)])
def test_duration_parses_what_flightplan_prints(text: str, seconds: int) -> None:
    # `plan` and `run` print "1.5 min", "7.9 s", "3.2 h": a campaign file takes them back
    assert Duration.parse(text).seconds == seconds


def test_durations_the_run_summary_prints_parse_back() -> None:
    from flightplan.run.job_events import _duration
    # 0.0022 h = 7.92 s; 0.2 h = 12 min; 3.25 h; each printed with one decimal
    assert [_duration(h) for h in (0.0022, 0.2, 3.25)] == ["7.9 s", "12.0 min", "3.2 h"]
    assert [Duration.parse(_duration(h)).seconds for h in (0.0022, 0.2, 3.25)] == [8, 720, 11520]


def test_duration_hours_and_text() -> None:
    assert Duration.parse("90m").hours == 1.5
    assert str(Duration.parse("48h")) == "2d" and str(Duration.parse("90m")) == "90m"
    assert Duration.parse("2h") + Duration.parse("30m") == Duration(9000)
    assert Duration.from_hours(78).seconds == 280800


@pytest.mark.parametrize("text, words", [("0h", "is zero"), ("-3h", "negative"), ("10 hours", "not a duration"),
                                         ("h", "not a duration"), ("2mins", "not a duration"),
                                         ("5 ms", "not a duration"), ("0.4s", "rounds to zero seconds"),
                                         ("3651d", "longer than ten years")])
def test_duration_refuses(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Duration.parse(text)
    assert Duration.parse("0s", allow_zero=True).seconds == 0


def test_two_three_day_packages_and_price_per_product() -> None:
    price = Money.parse("47.14", "USD")
    assert price * 2 == Money(Decimal("94.28"), "USD")
    assert str(2 * price) == "94.28" and (2 * price).display() == "94.28 USD"
    assert price.per(2) == Money(Decimal("23.57"), "USD")
    assert Money.parse("110", "USD").amount == Decimal("110.00")
    with pytest.raises(ZeroDivisionError):
        price.per(0)


@pytest.mark.parametrize("text, words", [(47.14, "float"), ("47.145", "more than two decimals"),
                                         ("-1.00", "negative"), ("abc", "not an amount"),
                                         ("1e400", "too large"), ("nan", "not a finite")])
def test_money_refuses(text, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Money.parse(text, "USD")


def test_money_keeps_currencies_apart() -> None:
    with pytest.raises(ValueError, match="cannot add EUR to USD"):
        Money.parse("1.00", "USD") + Money.parse("1.00", "EUR")
    with pytest.raises(TypeError):
        Money.parse("1.00", "USD") * 1.5


def test_parse_extension() -> None:
    assert parse_extension("lora-r8=+30h") == ("lora-r8", Duration(108000))
    for bad in ("lora-r8=30h", "=+3h", "lora-r8"):
        with pytest.raises(ValueError, match="NAME=\\+DURATION"):
            parse_extension(bad)
