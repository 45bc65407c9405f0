"""The ``flightplan plan`` and ``flightplan quote`` verbs (called by :mod:`flightplan.cli`).

Both print one JSON object with ``--json`` and rich tables otherwise (units in the
headers). A plan that does not fit is a report, not an error: exit 0, and the summary
says by how many hours it is over.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flightplan.corpus import check_columns
from flightplan.durable import write_atomic
from flightplan.errors import ArgumentError
from flightplan.plan.campaign_plan import PlanResult, plan_campaign
from flightplan.plan.catalog import builtin_catalog, load_catalog
from flightplan.plan.gantt import gantt_png, gantt_table
from flightplan.plan.quote import Quote, quote_for_job
from flightplan.spec import load_spec
from flightplan.tasks.loader import check_task
from flightplan.units import Duration, parse_extension

__all__ = ["plan_command", "quote_command", "parse_extensions"]


def parse_extensions(texts: list[str]) -> dict[str, Duration]:
    """``["lora-r8=+30h", ...]`` → ``{"lora-r8": Duration(108000)}`` (repeats add up).

    Raises:
        ArgumentError: a text is not ``NAME=+DURATION``.
    """
    out: dict[str, Duration] = {}
    for text in texts:
        try:
            name, amount = parse_extension(text)
        except ValueError as exc:
            raise ArgumentError(f"--extend: {exc}") from None
        out[name] = out.get(name, Duration(0)) + amount
    return out


def plan_command(spec_path: Path, *, extend: list[str], gantt: Path | None, as_json: bool) -> int:
    """Plan the campaign in ``spec_path``; print JSON or tables; write a PNG Gantt if asked.

    Returns:
        0, also when the plan does not fit the window (the output says so).

    Raises:
        SpecError, CatalogError: bad campaign or catalog, or a ``[corpus]`` column missing
            from the train or test file's header (:func:`flightplan.corpus.check_columns`).
            TaskError: a run's task is not found or binds no ``train`` (checked without
            running it). ArgumentError: a bad
            ``--extend`` (format or unknown name) or a ``--gantt`` path that cannot be written.
    """
    spec = load_spec(spec_path)
    for index, run in enumerate(spec.runs):
        check_task(run.task, spec.campaign_dir, field=f"run[{index}].task", source=spec.source)
    if spec.corpus is not None:
        check_columns(spec.corpus, spec.campaign_dir, source=spec.source)
    result = plan_campaign(spec, extend=parse_extensions(extend))
    if gantt is not None:
        png = gantt_png(result.schedule, window_s=result.window_s, title=spec.campaign.name)
        try:
            write_atomic(Path(gantt), png)
        except OSError as exc:
            raise ArgumentError(f"--gantt {gantt}: cannot write it ({exc.strerror or exc}); "
                                f"give a path in a writable folder") from None
    left = result.time_left()
    if as_json:
        print(json.dumps(result.to_json() | left))
        return 0
    console = _console()
    _print_plan(console, result, left)
    if gantt is not None:
        console.print(f"Gantt chart written to {escape(str(gantt))}")
    return 0


def _console() -> Console:
    """The terminal's console, or 120 columns when the output is a pipe or a file."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


def _hours(value: float) -> str:
    """Hours for reading: two decimals at most (``0.06``, ``71.9``, ``72``)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def fit_line(reserved_s: int, window_s: int) -> str:
    """``"fits: 24.0 h uncommitted"`` or ``"does not fit: 6.0 h over"``."""
    left = (window_s - reserved_s) / 3600
    return f"fits: {left:.1f} h uncommitted" if left >= 0 else f"does not fit: {-left:.1f} h over"


def _print_plan(console: Console, result: PlanResult, left: dict[str, Any]) -> None:
    spec, rental, schedule = result.spec, result.spec.rental, result.schedule
    flights = f"{rental.flights} flight" + ("s" if rental.flights > 1 else "")
    console.print(f"[bold]{escape(spec.campaign.name)}[/bold]: {escape(spec.campaign.question)}")
    console.print(f"rental: {escape(result.offer.name)}, {flights} × {rental.package_days}-day package "
                  f"= {result.price.display()}; {rental.people} "
                  f"{'person' if rental.people == 1 else 'people'}")
    for name, amount in result.extend.items():
        console.print(f"what-if: {escape(name)} extended by {amount.hours:g} h")
    console.print(gantt_table(schedule, window_s=result.window_s))
    verdict = fit_line(schedule.makespan_s, result.window_s)
    style = "green" if result.fits else "bold red"
    console.print(f"reserved {_hours(result.reserved_hours)} h of a "
                  f"{_hours(result.window_hours)} h window: [{style}]{verdict}[/{style}]")
    if left:
        over = result.reserved_hours - left["hours_left"]
        style = "green" if left["fits_time_left"] else "bold red"
        text = (f"fits: {_hours(-over)} h to spare" if left["fits_time_left"]
                else f"does not fit: {_hours(over)} h over")
        console.print(f"the package started {rental.started.isoformat()}: "
                      f"{_hours(left['hours_left'])} h left now: [{style}]{text}[/{style}]")
    console.print(f"GPU busy {_hours(schedule.gpu_seconds / 3600)} GPU·h; person "
                  f"{_hours(schedule.person_seconds / 3600)} h"
                  + ("" if schedule.optimal else f" (schedule not proven shortest; lower bound "
                                                 f"{_hours(schedule.lower_bound_s / 3600)} h)"))
    _print_options(console, result.quote, title="Options (→ recommended, * your rental)",
                   chosen=(rental.offer, rental.package_days, rental.flights))
    for name in result.quote.unquoted:
        console.print(f"{escape(name)}: no package prices in the catalog, not quoted "
                      f"(give them in a user catalog: \\[rental] catalog = \"offers.toml\")")
    if result.warnings:
        table = Table(title="Variant warnings", title_justify="left")
        for header in ("CODE", "SUBJECT", "MESSAGE"):
            table.add_column(header)
        for warning in result.warnings:
            table.add_row(warning.code, escape(warning.subject), escape(warning.message))
        console.print(table)
    else:
        console.print("variants: no warnings")


def _print_options(console: Console, quote: Quote, *, title: str,
                   chosen: tuple[str, int, int] | None = None) -> None:
    currencies = {o.total_price.currency for o in quote.options}
    one_currency = len(currencies) == 1
    price_header = f"PRICE ({next(iter(currencies))})" if one_currency else "PRICE"
    table = Table(title=title, title_justify="left")
    for header in ("", "OFFER", "PACKAGE (d)", "FLIGHTS", price_header, "RESERVED (h)",
                   "UNCOMMITTED (h)", "FITS"):
        table.add_column(header, no_wrap=True,
                         justify="right" if "(" in header or header == "FLIGHTS" else "left")
    table.add_column("DROPPED / NOTES")
    best = quote.recommendation
    for option in quote.options:
        reserved = option.reserved_s
        table.add_row(
            ("→" if option is best else "")
            + ("*" if (option.offer, option.package_days, option.flights) == chosen
               and not option.dropped else ""), escape(option.offer), str(option.package_days),
            str(option.flights),
            str(option.total_price) if one_currency else option.total_price.display(),
            "-" if reserved is None else f"{reserved / 3600:.1f}",
            "-" if reserved is None else f"{(option.window_s - reserved) / 3600:.1f}",
            "yes" if option.fits else "[red]no[/red]",
            escape("; ".join(([f"drops {', '.join(option.dropped)}"] if option.dropped else [])
                             + list(option.notes))))
    console.print(table)
    if best is None:
        console.print("[bold red]no option fits[/bold red]")
    else:
        console.print(f"recommendation: {escape(best.offer)}, {best.flights} × {best.package_days}-day "
                      f"= {best.total_price.display()}"
                      + (f", dropping {escape(', '.join(best.dropped))}" if best.dropped else ""))


def quote_command(*, offer: str, hours: float, gpus: int, catalog: Path | None, as_json: bool) -> int:
    """List the packages of ``offer`` that cover one continuous job of ``hours`` hours.

    Raises:
        ArgumentError: ``hours`` or ``gpus`` not positive.
        CatalogError: unknown offer, offer without prices, or a bad ``--catalog`` file.
    """
    if not hours > 0:
        raise ArgumentError(f"--hours {hours:g}: a job length must be more than 0 hours")
    if gpus < 1:
        raise ArgumentError(f"--gpus {gpus}: a job needs at least 1 GPU")
    offers = builtin_catalog()
    if catalog is not None:
        offers = offers.merged(load_catalog(catalog))
    quote = quote_for_job(offer, hours, gpus, offers)
    if as_json:
        print(json.dumps(quote.to_json()))
        return 0
    console = _console()
    console.print(f"one continuous job of {hours:g} h on {gpus} GPU{'s' if gpus > 1 else ''}")
    _print_options(console, quote, title=f"{escape(offer)} packages (cheapest fitting first)")
    return 0
