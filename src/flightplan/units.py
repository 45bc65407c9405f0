"""Units that carry their meaning: durations and money.

``Duration`` parses the strings of a campaign file (``"90m"``, ``"10h"``, ``"2d"``, and
``"1.5 min"`` as flightplan prints durations) and reports hours as numbers, as the JSON
contract asks. ``Money`` is a ``Decimal`` with a
currency; it never meets a float and is printed with two places (``"47.14"``).

Usage::

    Duration.parse("90m").hours          # 1.5
    Money.parse("47.14", "USD") * 2      # Money('94.28', 'USD')
    Money.parse("47.14", "USD").per(2)   # Money('23.57', 'USD'), half-up
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

__all__ = ["Duration", "Money", "hours", "parse_hours", "parse_extension", "time_unit", "counted",
           "SECONDS_PER_HOUR"]

_SECONDS_PER_UNIT = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
SECONDS_PER_HOUR = 3600.0
#: one number, optional spaces, one unit: s, m or min, h, d (``"90m"``, ``"1.5 min"``)
_DURATION_RE = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*(min|[smhd])\s*$")
_CENT = Decimal("0.01")
#: longest duration accepted (s): ten years, far beyond any rental package
MAX_SECONDS = 3650 * 86400
#: largest amount accepted: a trillion, far beyond any rental or expense
_MAX_AMOUNT = Decimal(10) ** 12


def counted(count: int, one: str, many: str) -> str:
    """``count`` with its noun, singular for 1: ``counted(2, "process", "processes")`` is
    ``"2 processes"``, ``counted(1, …)`` ``"1 process"``."""
    return f"{count} {one if count == 1 else many}"


def hours(seconds: float, *, places: int = 6) -> float:
    """``seconds`` as hours, rounded to ``places`` decimals: how JSON gives durations
    (6 places: 3.6 ms, finer than any duration flightplan plans, schedules or reports)."""
    return round(seconds / SECONDS_PER_HOUR, places)


@dataclass(frozen=True, order=True)
class Duration:
    """A non-negative span of time, held as whole seconds.

    Attributes:
        seconds: length in seconds (int).
    """

    seconds: int

    @classmethod
    def parse(cls, text: str, *, allow_zero: bool = False) -> "Duration":
        """Parse ``"<number><unit>"`` with unit s, m or min, h or d (``"90m"``, ``"1.5h"``),
        spaces allowed around the unit: whatever flightplan prints as a duration
        (``"7.9 s"``, ``"12.5 min"``, ``"3.2 h"``) parses back.

        Raises:
            ValueError: unparsable, negative, zero or rounding to zero seconds (unless
                ``allow_zero``), or longer than ten years; the message names the fix.
        """
        match = _DURATION_RE.match(str(text))
        if not match:
            raise ValueError(f"{text!r} is not a duration; write a number and a unit "
                             f"(s, m or min, h, d), like \"90s\", \"90m\", \"10h\" or \"2d\"")
        value = Decimal(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]
        if value < 0:
            raise ValueError(f"{text!r} is negative; a duration must be positive")
        if value == 0 and not allow_zero:
            raise ValueError(f"{text!r} is zero; a duration must be positive")
        if value > MAX_SECONDS:
            raise ValueError(f"{text!r} is longer than ten years; give a duration a rental can hold")
        seconds = int(value.to_integral_value(rounding=ROUND_HALF_UP))
        if seconds == 0 and not allow_zero:
            raise ValueError(f"{text!r} rounds to zero seconds; give at least \"1s\"")
        return cls(seconds)

    @classmethod
    def from_hours(cls, hours: float) -> "Duration":
        """Duration of ``hours`` hours, rounded to the second."""
        return cls(round(hours * 3600))

    @property
    def hours(self) -> float:
        """Length in hours (float)."""
        return self.seconds / 3600

    def __add__(self, other: "Duration") -> "Duration":
        return Duration(self.seconds + other.seconds)

    def __str__(self) -> str:
        for unit in ("d", "h", "m"):
            size = _SECONDS_PER_UNIT[unit]
            if self.seconds and self.seconds % size == 0:
                return f"{self.seconds // size}{unit}"
        return f"{self.seconds}s"


def time_unit(longest_hours: float) -> tuple[str, float]:
    """A readable unit for times (a chart's axis, a table's column) up to ``longest_hours``.

    Returns:
        ``(name, units per hour)``: ``("s", 3600.0)`` under 2 minutes, ``("min", 60.0)``
        under 2 hours, else ``("h", 1.0)``, so that the longest time reads as at least 2
        of its unit and one decimal place tells times apart.
    """
    if longest_hours < 2 / 60:
        return "s", 3600.0
    if longest_hours < 2:
        return "min", 60.0
    return "h", 1.0


_NUMBER_RE = re.compile(r"^\s*[+-]?\d+(?:\.\d+)?\s*$")


def parse_hours(text: str) -> float:
    """A length given in hours: a bare number is hours (``"78"``, ``"1.5"``), anything
    else a duration as campaign files write one (:meth:`Duration.parse`: ``"10h"``,
    ``"90m"``, ``"2d"``), in hours. Zero and negative bare numbers are returned as they
    are (the caller says what it accepts).

    Raises:
        ValueError: neither a number nor a duration (the message names the forms).
    """
    if _NUMBER_RE.match(str(text)):
        return float(text)
    try:
        return Duration.parse(text, allow_zero=True).hours
    except ValueError as exc:
        if _DURATION_RE.match(str(text)):       # a duration, but out of range
            raise
        raise ValueError(f"{text!r} is not a length of time; write hours as a number "
                         f"(\"78\", \"1.5\") or a duration with a unit (\"10h\", \"90m\", "
                         f"\"2d\")") from exc


def parse_extension(text: str) -> tuple[str, Duration]:
    """Parse a what-if extension ``NAME=+30h`` into ``(name, Duration)``.

    Raises:
        ValueError: the text is not ``NAME=+<duration>``.
    """
    name, sep, amount = text.rpartition("=")
    if not sep or not name.strip() or not amount.strip().startswith("+"):
        raise ValueError(f"{text!r} is not an extension; write NAME=+DURATION, like lora-r8=+30h")
    return name.strip(), Duration.parse(amount.strip()[1:])


@dataclass(frozen=True)
class Money:
    """An amount of money in one currency, exact to the cent.

    Attributes:
        amount: a ``Decimal`` with at most two places, never negative.
        currency: ISO-style code such as ``"USD"``.
    """

    amount: Decimal
    currency: str

    @classmethod
    def parse(cls, text: str | int | Decimal, currency: str) -> "Money":
        """Parse a decimal string (``"47.14"``); floats are refused.

        Raises:
            ValueError: a float, not a number, negative, 10**12 or more, or more than two
                decimals.
        """
        if isinstance(text, float) or isinstance(text, bool):
            raise ValueError(f"{text!r} is a float; write money as a decimal string like \"47.14\"")
        try:
            amount = Decimal(str(text).strip())
        except InvalidOperation:
            raise ValueError(f"{text!r} is not an amount; write a decimal string like \"47.14\"") from None
        if not amount.is_finite():
            raise ValueError(f"{text!r} is not a finite amount; write a decimal string like \"47.14\"")
        if amount < 0:
            raise ValueError(f"{text!r} is negative; an amount must be zero or more")
        if amount >= _MAX_AMOUNT:
            raise ValueError(f"{text!r} is too large; an amount must be below 1000000000000")
        if amount != amount.quantize(_CENT):
            raise ValueError(f"{text!r} has more than two decimals; round it to cents, like \"47.14\"")
        if not currency or not str(currency).strip():
            raise ValueError("the currency is empty; give a code like \"USD\"")
        return cls(amount.quantize(_CENT), str(currency).strip())

    @classmethod
    def zero(cls, currency: str) -> "Money":
        """Zero in ``currency``."""
        return cls(Decimal("0.00"), currency)

    def _same_currency(self, other: "Money") -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot add {other.currency} to {self.currency}; "
                             f"keep amounts in different currencies apart")

    def __add__(self, other: "Money") -> "Money":
        self._same_currency(other)
        return Money(self.amount + other.amount, self.currency)

    def __mul__(self, count: int) -> "Money":
        if not isinstance(count, int) or isinstance(count, bool):
            raise TypeError("money multiplies only by a whole count (flights, packages)")
        return Money(self.amount * count, self.currency)

    __rmul__ = __mul__

    def per(self, count: int) -> "Money":
        """This amount divided by ``count``, two places, rounded half-up.

        Raises:
            ZeroDivisionError: ``count`` is zero (the caller reports "undefined" instead).
        """
        if count == 0:
            raise ZeroDivisionError("money per zero products is undefined")
        return Money((self.amount / count).quantize(_CENT, rounding=ROUND_HALF_UP), self.currency)

    def __str__(self) -> str:
        return f"{self.amount.quantize(_CENT)}"

    def display(self) -> str:
        """``"47.14 USD"`` for tables."""
        return f"{self} {self.currency}"

    def __lt__(self, other: "Money") -> bool:
        self._same_currency(other)
        return self.amount < other.amount
