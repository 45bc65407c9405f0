"""The offer catalog: the built-in published facts, user catalog files, spec checks.

The built-in catalog holds exactly what IteraGPU publishes: the RTX 4090
(1 GPU of 24 GB per flight; 3, 7 and 30 days for 47.14, 110.00 and 390.00 USD) and the
B200 (2 GPUs per flight; nothing else is published, so it has no packages and cannot be
quoted until a user catalog gives them). A user catalog file adds offers or overrides
fields of known ones, merged by offer name::

    [[offer]]
    name = "B200"
    gpu_memory_gb = 180
    currency = "USD"
    [[offer.package]]
    days = 7
    price = "999.00"

A package price is the price of one whole flight for ``days`` days, all of its GPUs
included; nothing here is an hourly rate.

Usage::

    catalog = builtin_catalog().merged(load_catalog("my-offers.toml"))
    catalog.offer("RTX 4090").packages[3]       # Money('47.14', 'USD')
    check_spec_against_catalog(spec, catalog)   # raises SpecError on a mismatch
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from flightplan.errors import CatalogError, SpecError, did_you_mean
from flightplan.ledger_rows import ExpenseRow
from flightplan.spec import CampaignSpec, Run, Stage
from flightplan.units import Money

__all__ = ["Offer", "Catalog", "builtin_catalog", "load_catalog", "catalog_for_spec", "rental_price",
           "flight_gpus", "expense_rows", "check_spec_against_catalog", "placement_problems", "suggest"]

_OFFER_KEYS = ("name", "gpus_per_flight", "gpu_memory_gb", "currency", "package")
_PACKAGE_KEYS = ("days", "price")


@dataclass(frozen=True)
class Offer:
    """One rentable machine type.

    Attributes:
        name: the provider's name (``"RTX 4090"``).
        gpus_per_flight: GPUs in one flight (one rented machine).
        gpu_memory_gb: memory of one GPU in GB, or None where not published.
        currency: currency of the package prices, or None when there are none.
        packages: package length in days → price of one flight for that long.
    """

    name: str
    gpus_per_flight: int
    gpu_memory_gb: float | None = None
    currency: str | None = None
    packages: dict[int, Money] = field(default_factory=dict)

    @property
    def package_days(self) -> list[int]:
        """The package lengths in days, shortest first."""
        return sorted(self.packages)


def _loose(name: str) -> str:
    """``name`` in lower case without spaces and hyphens."""
    return "".join(name.lower().replace("-", " ").split())


@dataclass(frozen=True)
class Catalog:
    """Offers by name. ``sources`` lists where they came from (``"built-in"``, file paths)."""

    offers: dict[str, Offer]
    sources: tuple[str, ...] = ("built-in",)

    def offer(self, name: str, *, source: str = "catalog", field_name: str = "offer") -> Offer:
        """The offer called ``name``, or else the one offer whose name differs from it only
        in letter case, spaces and hyphens (``rtx4090`` for ``RTX 4090``).

        Raises:
            CatalogError: no such offer (with a "did you mean").
        """
        if name in self.offers:
            return self.offers[name]
        loose = self.loosely_named(name)
        if loose is not None:
            return self.offers[loose]
        raise CatalogError(f"{name!r} is not an offer in the catalog{suggest(name, list(self.offers))}",
                           file=source, field=field_name, value=name)

    def loosely_named(self, name: str) -> str | None:
        """The one offer name that differs from ``name`` only in letter case, spaces and
        hyphens (``RTX 4090`` for ``rtx4090``); None when there is none or more than one."""
        loose = [known for known in self.offers if _loose(known) == _loose(name)]
        return loose[0] if len(loose) == 1 else None

    def merged(self, other: "Catalog") -> "Catalog":
        """This catalog with ``other``'s offers added; for a known name, the fields
        ``other`` gives replace these and its packages are merged by length."""
        offers = dict(self.offers)
        for name, theirs in other.offers.items():
            offers[name] = theirs if name not in offers else _merge(offers[name], theirs)
        return Catalog(offers, self.sources + other.sources)


def _merge(ours: Offer, theirs: Offer) -> Offer:
    packages = {**ours.packages, **theirs.packages}
    return replace(ours,
                   gpus_per_flight=theirs.gpus_per_flight or ours.gpus_per_flight,
                   gpu_memory_gb=theirs.gpu_memory_gb if theirs.gpu_memory_gb is not None
                   else ours.gpu_memory_gb,
                   currency=theirs.currency or ours.currency,
                   packages=packages)


def suggest(bad: str, known: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known``
    (:func:`flightplan.errors.did_you_mean`), else the known names."""
    return did_you_mean(bad, known, otherwise=f"; known: {', '.join(repr(k) for k in sorted(known))}"
                        if known else "")


def builtin_catalog() -> Catalog:
    """The facts IteraGPU publishes (module docstring), nothing more."""
    return Catalog({
        "RTX 4090": Offer("RTX 4090", gpus_per_flight=1, gpu_memory_gb=24.0, currency="USD",
                          packages={3: Money.parse("47.14", "USD"),
                                    7: Money.parse("110.00", "USD"),
                                    30: Money.parse("390.00", "USD")}),
        "B200": Offer("B200", gpus_per_flight=2),
    })


def load_catalog(path: str | Path) -> Catalog:
    """Read a user catalog file (offers only; merge it with :func:`builtin_catalog`).

    Raises:
        CatalogError: missing file, bad TOML, unknown key, a bad value, or a new offer
            (not built in) without ``gpus_per_flight`` (one line naming the file and
            field, e.g. ``offer[0].package[1].price``).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise CatalogError("no such file; give the path of a catalog TOML file", file=source)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"not valid UTF-8 TOML ({exc}); fix the syntax", file=source) from None
    _no_unknown_keys(data, ("offer",), "", source)
    entries = data.get("offer", [])
    if not isinstance(entries, list) or not entries:
        raise CatalogError("has no [[offer]] tables; add at least one", file=source, field="offer")
    offers: dict[str, Offer] = {}
    for index, entry in enumerate(entries):
        offer = _parse_offer(entry, f"offer[{index}]", source)
        if offer.name in offers:
            raise CatalogError(f"duplicate offer {offer.name!r}; give each offer once",
                               file=source, field=f"offer[{index}].name", value=offer.name)
        offers[offer.name] = offer
    return Catalog(offers, (source,))


def _no_unknown_keys(table: Any, known: tuple[str, ...], where: str, source: str) -> None:
    if not isinstance(table, dict):
        raise CatalogError("must be a table", file=source, field=where or None)
    for key in table:
        if key not in known:
            raise CatalogError(f"unknown key {key!r}{suggest(key, list(known))}",
                               file=source, field=f"{where}.{key}" if where else key, value=key)


def _parse_offer(entry: Any, where: str, source: str) -> Offer:
    _no_unknown_keys(entry, _OFFER_KEYS, where, source)

    def bad(key: str, message: str) -> CatalogError:
        return CatalogError(message, file=source, field=f"{where}.{key}", value=entry.get(key))

    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise bad("name", "is required; give the offer's name as a string, like \"B200\"")
    if "gpus_per_flight" not in entry and name.strip() not in builtin_catalog().offers:
        raise bad("gpus_per_flight", f"is required for the new offer {name.strip()!r}; "
                                     f"give the number of GPUs in one flight")
    gpus = entry.get("gpus_per_flight", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0 or \
            ("gpus_per_flight" in entry and gpus == 0):
        raise bad("gpus_per_flight", f"{gpus!r} is not a whole number of GPUs >= 1")
    memory = entry.get("gpu_memory_gb")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))
                               or memory <= 0):
        raise bad("gpu_memory_gb", f"{memory!r} is not a positive number of GB")
    currency = entry.get("currency")
    if currency is not None and (not isinstance(currency, str) or not currency.strip()):
        raise bad("currency", f"{currency!r} is not a currency code; write one like \"USD\"")
    packages: dict[int, Money] = {}
    raw_packages = entry.get("package", [])
    if not isinstance(raw_packages, list):
        raise bad("package", "must be an array of [[offer.package]] tables")
    for index, package in enumerate(raw_packages):
        days, price = _parse_package(package, f"{where}.package[{index}]", source, currency)
        if days in packages:
            raise CatalogError(f"a {days}-day package is given twice; keep one",
                               file=source, field=f"{where}.package[{index}].days", value=days)
        packages[days] = price
    return Offer(name.strip(), gpus, float(memory) if memory is not None else None,
                 currency.strip() if currency else None, packages)


def _parse_package(package: Any, where: str, source: str, currency: str | None) -> tuple[int, Money]:
    _no_unknown_keys(package, _PACKAGE_KEYS, where, source)
    days = package.get("days")
    if isinstance(days, bool) or not isinstance(days, int) or days <= 0:
        raise CatalogError(f"{days!r} is not a whole number of days >= 1", file=source,
                           field=f"{where}.days", value=days)
    if currency is None:
        raise CatalogError("a package price needs the offer's currency; add currency = \"USD\"",
                           file=source, field=f"{where}.price")
    price = package.get("price")
    if isinstance(price, (int, float)) and not isinstance(price, bool):
        raise CatalogError(f"{price!r} is a number; write the price as a decimal string like \"47.14\"",
                           file=source, field=f"{where}.price", value=price)
    if price is None:
        raise CatalogError("is required; give the flight's price as a decimal string",
                           file=source, field=f"{where}.price")
    try:
        return days, Money.parse(price, currency)
    except ValueError as exc:
        raise CatalogError(str(exc), file=source, field=f"{where}.price", value=price) from None


def catalog_for_spec(spec: CampaignSpec) -> Catalog:
    """The built-in catalog merged with the user catalog named in ``[rental] catalog``.

    Raises:
        CatalogError: the user catalog file is missing or invalid.
    """
    catalog = builtin_catalog()
    path = spec.rental_catalog_path()
    if path is None:
        return catalog
    if not path.is_file():
        raise CatalogError(f"no such file (rental.catalog = {spec.rental.catalog!r} in "
                           f"{spec.source}, relative to the campaign file); correct the path or "
                           f"remove rental.catalog to use the built-in offers", file=str(path))
    return catalog.merged(load_catalog(path))


def flight_gpus(spec: CampaignSpec) -> int:
    """GPUs in one flight of the campaign's rental offer (``gpus_per_flight``); 1 for an
    offer the catalog does not hold (the campaign could not have planned with it).

    Raises:
        CatalogError: the user catalog file is missing or invalid.
    """
    offer = catalog_for_spec(spec).offers.get(spec.rental.offer)
    return offer.gpus_per_flight if offer is not None else 1


def rental_price(spec: CampaignSpec, offer: Offer) -> Money:
    """What the campaign's rental costs: ``[rental] flights`` × the offer's price for
    ``package_days`` (a multi-GPU flight's price already covers all its GPUs). The one
    place the rental is priced.

    Raises:
        SpecError: the offer has no package of that length (names the known ones).
    """
    price = offer.packages.get(spec.rental.package_days)
    if price is None:
        known = ", ".join(str(d) for d in offer.package_days) or "none"
        raise SpecError(f"{offer.name!r} has no {spec.rental.package_days}-day package with a "
                        f"price (known: {known}); choose one, or give the price in a user "
                        f"catalog", file=spec.source, field="rental.package_days",
                        value=spec.rental.package_days)
    return price * spec.rental.flights


def check_spec_against_catalog(spec: CampaignSpec, catalog: Catalog) -> Offer:
    """Check ``[rental]`` and every stage/run against the chosen offer; return the offer.

    Raises:
        SpecError: unknown offer (did you mean), a package length the offer does not sell
            (the known ones listed), an offer without packages, a stage or run needing more
            GPUs than one flight has, or more GPU memory than the offer's GPU has.
    """
    source = spec.source
    rental = spec.rental
    if rental.offer not in catalog.offers:
        loose = catalog.loosely_named(rental.offer)
        hint = (f"; did you mean {loose!r}? (the campaign file names the offer exactly, as "
                f"the catalog spells it)" if loose is not None
                else suggest(rental.offer, list(catalog.offers)))
        raise SpecError(f"{rental.offer!r} is not an offer in the catalog{hint}",
                        file=source, field="rental.offer", value=rental.offer)
    offer = catalog.offers[rental.offer]
    if not offer.packages:
        raise SpecError(f"the catalog has no package prices for {offer.name!r}; give them in a "
                        f"user catalog file ([rental] catalog = \"offers.toml\")",
                        file=source, field="rental.offer", value=rental.offer)
    if rental.package_days not in offer.packages:
        known = ", ".join(str(d) for d in offer.package_days)
        raise SpecError(f"{offer.name!r} has no {rental.package_days}-day package; "
                        f"choose one of {known} days", file=source, field="rental.package_days",
                        value=rental.package_days)
    faults = _placement_faults(spec, offer)
    if faults:
        where, value, message = faults[0]
        raise SpecError(f"{message}; choose a larger offer or shrink it",
                        file=source, field=where, value=value)
    return offer


def placement_problems(spec: CampaignSpec, offer: Offer) -> list[str]:
    """Why some stages/runs of ``spec`` cannot be placed on ``offer`` (empty if none).

    The quote uses it for every offer: more flights never help a run that needs more
    GPUs than one flight has, or more memory than one GPU has.
    """
    return [message for _, _, message in _placement_faults(spec, offer)]


def _placement_faults(spec: CampaignSpec, offer: Offer) -> list[tuple[str, Any, str]]:
    """(field, value, message) for every stage/run that does not fit one flight of ``offer``."""
    faults: list[tuple[str, Any, str]] = []
    groups: tuple[tuple[str, Sequence[Stage | Run]], ...] = (("stage", spec.stage), ("run", spec.run))
    for kind, entries in groups:
        for index, entry in enumerate(entries):
            if "gpu" in entry.uses and entry.gpus > offer.gpus_per_flight:
                faults.append((f"{kind}[{index}].gpus", entry.gpus,
                               f"{entry.name!r} needs {entry.gpus} GPUs but one {offer.name} flight "
                               f"has {offer.gpus_per_flight} (a run never spans flights)"))
    for index, run in enumerate(spec.run):
        if run.gpu_memory_gb is not None and offer.gpu_memory_gb is not None \
                and run.gpu_memory_gb > offer.gpu_memory_gb:
            faults.append((f"run[{index}].gpu_memory_gb", run.gpu_memory_gb,
                           f"{run.name!r} needs {run.gpu_memory_gb:g} GB per GPU but a {offer.name} "
                           f"GPU has {offer.gpu_memory_gb:g} GB (flights do not pool memory)"))
    return faults


def expense_rows(spec: CampaignSpec, offer: Offer) -> list[ExpenseRow]:
    """The ledger's expenses: the ``[rental]`` package(s) priced from the catalog's
    ``offer`` (amount = flights × package price) and each ``[[expense]]``."""
    rental = spec.rental
    price = rental_price(spec, offer)
    rows = [ExpenseRow(kind="package", offer=offer.name, package_days=rental.package_days,
                       flights=rental.flights, amount=str(price), currency=price.currency,
                       label=f"{offer.name} {rental.package_days}-day package × {rental.flights}"
                             + (f" (order {rental.order})" if rental.order else ""))]
    for expense in spec.expenses:
        rows.append(ExpenseRow(kind="external", label=expense.label, offer=None,
                               package_days=None, flights=None, amount=str(expense.money),
                               currency=expense.currency))
    return rows
