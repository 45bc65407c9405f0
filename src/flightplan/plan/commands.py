"""The ``flightplan plan`` and ``flightplan quote`` verbs (called by :mod:`flightplan.cli`).

Both print one JSON object with ``--json`` and rich tables otherwise (units in the
headers). A plan that does not fit is a report, not an error: exit 0, and the summary
says by how many hours it is over.

``plan`` also says what the test set can decide (:mod:`flightplan.plan.power`): it reads
the test split's size and labels from the corpus (only that file, here in the command
layer; ``plan/`` modules do no I/O), prints each comparison's resolution and power, and a
warning a reader cannot miss when a variant's expected gain would be confirmed with less
than :data:`~flightplan.plan.power.WARN_BELOW` probability; ``--json`` carries it all
under ``power``; ``--power-plot FILE`` draws the power curves.

``plan --from RESULTS_DIR`` (or ``[calibrate] from``) plans from an earlier campaign's
measurements (:mod:`flightplan.plan.calibration`): the directory must verify (the command
line hands in ``close``'s verifier, which ``plan/`` may not import; artifacts are not
reloaded), then its ``calibration.json`` and predictions are read here. Every plan prints
its **uncertainties**: each estimate not measured in this configuration, with its source,
range and the hours of the schedule it can move, largest first (``--json``:
``uncertainties``, and the measured ones under ``measured``).
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Mapping

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from flightplan.corpus import load_split
from flightplan.corpus import check_corpus
from flightplan.durable import write_atomic
from flightplan.errors import ArgumentError, CheckFailed, CorpusMismatch, InputError, SpecError
from flightplan.metrics import Predictions, read_predictions
from flightplan.plan.calibration.calibrate import Calibrated, calibrate
from flightplan.plan.calibration.estimate import GUESS_FACTOR
from flightplan.plan.calibration.record import FILE_NAME, Calibration
from flightplan.plan.calibration.retime import Uncertainty, uncertainties
from flightplan.plan.campaign_plan import PlanResult, plan_campaign
from flightplan.plan.catalog import Catalog, builtin_catalog, load_catalog
from flightplan.plan.gantt import gantt_png, gantt_table
from flightplan.plan.lint import LintWarning
from flightplan.plan.power import (PRACTICAL_FACTOR, TARGET_POWER, CampaignPower, ComparisonPower, TestSplit,
                                   campaign_power, power_png, rounded_count)
from flightplan.plan.quote import Quote, quote_for_job
from flightplan.spec import CampaignSpec, load_spec
from flightplan.tasks.loader import check_task, resolve_task
from flightplan.units import Duration, parse_extension, parse_hours

__all__ = ["plan_command", "RuleDrift", "RULE_DRIFT", "quote_command", "parse_extensions", "read_test_split",
           "ResultsVerifier", "read_calibration", "calibrated_estimates"]

CORPUS_MISSING = "corpus-missing"
"""Code of the ``plan --json`` warning that the corpus folder, package or a file is not
there yet (``run`` refuses a missing folder or package, its data check missing files)."""

MEASURED_FIGURES = "measured-figures"
"""Code of the ``plan --json`` warning that the campaign has run (or was closed) and that
``--from`` its ``results/`` would plan from the measured figures instead of the guesses."""

RULE_DRIFT = "decision-rule-changed"
"""Code of the ``plan --json`` warning that the file's decision rule differs from the one
frozen with the plan after runs started: ``run`` and ``close`` will refuse the file."""

RuleDrift = Callable[[CampaignSpec], "str | None"]
"""Says what ``run`` and ``close`` would refuse in a campaign file's decision rule, else
None (the command line passes :func:`flightplan.run.commands.frozen_rule_drift`: the
ledger belongs to a later layer than this one)."""

ResultsVerifier = Callable[[Path], Mapping[str, Any]]
"""Verifies a results directory: ``verify(dir)`` → ``{"verified": bool, "findings":
[{check, path, message}, ...]}`` (the command line passes
:func:`flightplan.close.verify.verify_results` without reloads)."""


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


def read_test_split(spec: CampaignSpec) -> tuple[TestSplit | None, str]:
    """The test split's size and label counts, for the power of the comparisons.

    Reads only the test file (:func:`flightplan.corpus.load_split`); a corpus that cannot
    be read here is the data check's business, so it is a reason, not an error.

    Returns:
        ``(split, "")``, or ``(None, why it is unknown)``.
    """
    if spec.corpus is None:
        return None, "the campaign has no [corpus], so the test split's size is unknown"
    try:
        examples, source = load_split(spec.corpus, spec.campaign_dir, "test")
    except (SpecError, CorpusMismatch, OSError) as exc:
        return None, f"the test split could not be read: {exc}"
    counts = None
    if spec.corpus.label_column is not None:
        counts = dict(sorted(Counter(e.label for e in examples if e.label is not None).items()))
    return TestSplit(len(examples), counts, source), ""


def read_calibration(results: Path, *, verify: ResultsVerifier, spec: CampaignSpec,
                     given: str | None) -> tuple[Calibration, dict[str, Predictions]]:
    """Read an earlier campaign's ``calibration.json`` and predictions, once its results
    directory verifies.

    Args:
        results: the results directory. verify: its verifier (:data:`ResultsVerifier`).
        spec: the campaign planned (names the file in errors).
        given: ``--from``'s text, or None when the directory comes from ``[calibrate]
            from`` (errors then name that field).

    Returns:
        The calibration and the predictions of its runs (run id → predictions).

    Raises:
        ArgumentError (``--from``) or SpecError (``[calibrate] from``): the directory is
            missing, does not verify (the first finding, with the fix), has no
            ``calibration.json`` or an unreadable one.
    """
    def refuse(message: str) -> InputError:
        if given is not None:
            return ArgumentError(f"--from {given}: {message}")
        source = spec.calibrate.source if spec.calibrate else str(results)
        return SpecError(f"{source!r} {message}", file=spec.source, field="calibrate.from",
                         value=source)

    if not results.is_dir():
        raise refuse(f"is not a directory ({results}); give the results/ folder of a "
                     f"campaign that flightplan close completed")
    findings = list(verify(results)["findings"])
    if findings:
        first = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise refuse(f"does not verify: {first['check']}: {first['path']}: "
                     f"{first['message']}{more}; plan only from results that `flightplan "
                     f"verify {results}` passes (close that campaign again to rewrite them), "
                     f"or plan without them")
    path = results / FILE_NAME
    if not path.is_file():
        raise refuse(f"has no {FILE_NAME} (its campaign was closed by an earlier "
                     f"flightplan); run `flightplan close` on that campaign again to write it")
    try:
        calibration = Calibration.from_json(json.loads(path.read_text(encoding="utf-8")),
                                            source=str(path))
        predictions = {r.run_id: read_predictions(results / r.predictions)
                       for r in calibration.runs if r.predictions}
    except (ValueError, CheckFailed) as exc:
        raise refuse(f"{exc}; run `flightplan close` on that campaign again") from None
    return calibration, predictions


def calibrated_estimates(spec: CampaignSpec, calibrate_from: Path | None,
                         verify: ResultsVerifier) -> tuple[Calibrated, Path | None]:
    """Every estimate of ``spec``, from ``--from`` (``calibrate_from``) or ``[calibrate]
    from`` when given, and the results directory they came from (None: all guesses).

    Raises:
        ArgumentError: ``--from`` names another folder than ``[calibrate] from`` (``run``
            freezes the plan from the file's; the same folder twice is accepted).
        InputError: the results directory does not verify, or holds no calibration
            (:func:`read_calibration`).
    """
    if calibrate_from is not None:
        results, given = Path(calibrate_from).resolve(), str(calibrate_from)
        if spec.calibrate is not None and \
                spec.calibrate.results_dir(spec.campaign_dir) != results:
            raise ArgumentError(
                f"--from {calibrate_from}: {spec.source} has [calibrate] from = "
                f"{spec.calibrate.source!r} ({spec.calibrate.results_dir(spec.campaign_dir)}), "
                f"another folder, and flightplan run freezes the plan from that one; drop "
                f"--from to plan from it, or drop [calibrate] from (or set it to this "
                f"folder) to plan from {results}")
    elif spec.calibrate is not None:
        results, given = spec.calibrate.results_dir(spec.campaign_dir), None
    else:
        return calibrate(spec, None), None
    calibration, predictions = read_calibration(results, verify=verify, spec=spec, given=given)
    versions = {run.name: resolve_task(run.task, spec.campaign_dir, field=f"run[{i}].task",
                                       source=spec.source).code_version
                for i, run in enumerate(spec.runs)}
    return calibrate(spec, calibration, code_versions=versions,
                     predictions=predictions), results


def plan_command(spec_path: Path, *, extend: list[str], gantt: Path | None, as_json: bool,
                 verify: ResultsVerifier, power_plot: Path | None = None,
                 calibrate_from: Path | None = None,
                 rule_drift: RuleDrift | None = None) -> int:
    """Plan the campaign in ``spec_path``; print JSON or tables; write a PNG Gantt and the
    power curves if asked.

    Args:
        verify: the verifier of a results directory to plan from (:data:`ResultsVerifier`;
            ``plan/`` may not import ``close/``, so the command line hands it in).
        calibrate_from: ``--from``: an earlier campaign's results directory (overrides
            ``[calibrate] from``).
        rule_drift: reads the campaign's ledger for a decision rule changed after runs
            started (:data:`RuleDrift`); its reason is a warning (``--json``:
            :data:`RULE_DRIFT`), since ``run`` and ``close`` will refuse the file.

    Returns:
        0, also when the plan does not fit the window or the test set cannot confirm the
        expected gains (the output says so).

    Raises:
        SpecError, CatalogError: bad campaign or catalog. TaskError: a run's task is not
            found or binds no ``train`` (checked without running it); SpecError too when
            the prediction columns a task declares cannot give the metric. ArgumentError: a bad
            ``--extend`` (format or unknown name), a ``--gantt`` or ``--power-plot`` path
            that cannot be written, or ``--power-plot`` when no comparison's power is known.
        ArgumentError or SpecError: the results directory to plan from does not verify or
            holds no calibration (:func:`read_calibration`).
        SpecError: a corpus file whose bytes differ from its hash in ``[corpus]``, or a
            ``[corpus]`` column missing from the train or test file's header
            (:func:`flightplan.corpus.check_corpus`). A corpus folder, package or file
            not there yet is a warning (a ``warning:`` line; ``--json``: a
            ``corpus-missing`` entry of ``warnings``), not an error.
    """
    spec = load_spec(spec_path)
    for index, run in enumerate(spec.runs):
        check_task(run.task, spec.campaign_dir, field=f"run[{index}].task", source=spec.source,
                   metric=spec.campaign.metric)
    missing = None if spec.corpus is None else \
        check_corpus(spec.corpus, spec.campaign_dir, source=spec.source)
    calibrated, source = calibrated_estimates(spec, calibrate_from, verify)
    result = plan_campaign(spec, extend=parse_extensions(extend), durations=calibrated.durations)
    uncertain, measured = uncertainties(result.schedule, calibrated.estimates)
    test, why = read_test_split(spec)
    power = campaign_power(spec, test, why_unknown=why, models=calibrated.models,
                           seed_spread=calibrated.seed_spread)
    if gantt is not None:
        _write_png("--gantt", gantt, gantt_png(result.schedule, window_s=result.window_s,
                                                title=spec.campaign.name))
    if power_plot is not None:
        if not power.comparisons:
            reasons = "; ".join(dict.fromkeys(why for _, _, why in power.not_computed))
            raise ArgumentError(f"--power-plot {power_plot}: no comparison's power is known "
                                f"({reasons or 'the campaign has no variant'}); there is no "
                                f"curve to draw")
        _write_png("--power-plot", power_plot, power_png(power, title=spec.campaign.name))
    left = result.time_left()
    measured_note = None if source is not None else _measured_note(spec)
    drift = None if rule_drift is None else rule_drift(spec)
    if as_json:
        plan = result.to_json()
        if missing is not None:
            plan["warnings"].append(LintWarning(CORPUS_MISSING, "corpus", missing).to_json())
        if measured_note is not None:
            plan["warnings"].append(
                LintWarning(MEASURED_FIGURES, "calibrate", measured_note).to_json())
        if drift is not None:
            plan["warnings"].append(LintWarning(RULE_DRIFT, "campaign", drift).to_json())
        print(json.dumps(plan | left | {
            "power": power.to_json(),
            "calibration": None if source is None else {
                "from": str(source), "campaign": calibrated.campaign, "verified": True},
            "uncertainties": [u.to_json() for u in uncertain],
            "measured": [u.to_json() for u in measured]}))
        return 0
    console = _console()
    if missing is not None:
        console.print(f"[bold yellow]warning:[/bold yellow] corpus not there yet: "
                      f"{escape(missing)}")
    if drift is not None:
        console.print(f"[bold yellow]warning:[/bold yellow] {escape(drift)} (`flightplan run` "
                      f"and `close` refuse this file)")
    _print_plan(console, result, left)
    _print_uncertainties(console, uncertain, measured, calibrated.campaign, source)
    _print_power(console, power)
    if measured_note is not None:
        console.print(f"[bold]note:[/bold] {escape(measured_note)}")
    if gantt is not None:
        console.print(f"Gantt chart written to {escape(str(gantt))}")
    if power_plot is not None:
        console.print(f"power curves written to {escape(str(power_plot))}")
    return 0


def _measured_note(spec: CampaignSpec) -> str | None:
    """The note that this campaign's own ``results/`` holds measured figures ``--from``
    would plan from (once closed: its ``calibration.json``), or will once closed (it has
    run: a manifest); None when it never ran. (``results`` is
    :data:`flightplan.publish.results.RESULTS_DIRNAME`, a later layer than this one.)"""
    results = spec.campaign_dir / "results"
    plan_from = f"`flightplan plan {spec.source} --from {results}`"
    instead = ("plans from its measured durations and disagreements instead of the file's "
               "guesses and the default disagreement")
    if (results / FILE_NAME).is_file():
        return f"this campaign was closed: {plan_from} {instead}"
    if (results / "MANIFEST.json").is_file():
        return (f"this campaign has run: once `flightplan close {spec.source}` has written "
                f"{results / FILE_NAME}, {plan_from} {instead}")
    return None


def _write_png(option: str, path: Path, png: bytes) -> None:
    folder = Path(path).parent
    for above in (folder, *folder.parents):
        if above.exists() and not above.is_dir():
            raise ArgumentError(f"{option} {path}: {above} is a file, not a folder; give a "
                                f"path in a folder")
    if not folder.is_dir():
        raise ArgumentError(f"{option} {path}: the folder {folder} does not exist; create it "
                            f"or give a path in an existing folder")
    try:
        write_atomic(Path(path), png)
    except OSError as exc:
        raise ArgumentError(f"{option} {path}: cannot write it ({exc.strerror or exc}); "
                            f"give a path in a writable folder") from None


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
    if left and rental.started is not None:
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


def _figure(value: float, figure: str) -> str:
    """An estimate for reading: a duration (hours) in s, min or h with 3 digits, never in
    exponent form, so that it reads back as a campaign file's duration (``"1.5 min"``,
    ``"1230 h"``); a share or an sd with 3 digits."""
    if figure != "duration":
        return f"{value:.3g}"
    seconds = value * 3600
    if seconds < 60:
        number, unit = seconds, "s"
    elif seconds < 3600:
        number, unit = seconds / 60, "min"
    else:
        number, unit = value, "h"
    return f"{Decimal(f'{number:.3g}'):f} {unit}"


def _print_uncertainties(console: Console, uncertain: tuple[Uncertainty, ...],
                         measured: tuple[Uncertainty, ...], campaign: str | None,
                         source: Path | None) -> None:
    """The uncertainties table, largest first, and one line per measured estimate."""
    if source is not None:
        console.print(f"planned from the measurements of campaign {escape(campaign or '?')} "
                      f"({escape(str(source))}, verified)")
    if uncertain:
        table = Table(title=f"Uncertainties: {len(uncertain)} estimate"
                            f"{'s' if len(uncertain) != 1 else ''} not measured in this "
                            f"configuration, largest first", title_justify="left",
                      caption=f"RANGE: a guess within ×{GUESS_FACTOR:g} either way, a scaled "
                              f"figure within its rule's bounds; MOVES: hours of the "
                              f"end-to-end schedule between the estimate at the top and at the "
                              f"bottom of its range, the plan's sequence kept "
                              f"(docs/decisions.md)", caption_justify="left")
        for header in ("ESTIMATE", "SOURCE", "VALUE", "RANGE", "MOVES (h)"):
            table.add_column(header, justify="right" if header in ("VALUE", "MOVES (h)")
                             else "left", no_wrap=header != "SOURCE")
        for u in uncertain:
            e = u.estimate
            table.add_row(escape(f"{e.subject} {e.figure}"), escape(f"{e.source}: {e.detail}"),
                          _figure(e.value, e.figure),
                          f"{_figure(e.low, e.figure)} – {_figure(e.high, e.figure)}",
                          f"{u.moves_hours:.3g}" if e.figure == "duration" else "0 (power)")
        console.print(table)
    else:
        console.print("uncertainties: none; every estimate was measured in this configuration")
    for u in measured:
        e = u.estimate
        console.print(f"measured: {escape(e.subject)} {e.figure} {_figure(e.value, e.figure)}"
                      + (f" [{_figure(e.low, e.figure)} – {_figure(e.high, e.figure)}]"
                         if e.high > e.low else "") + f" ({escape(e.detail)})")


def _percent(value: float) -> str:
    """A probability as a whole percent, ``<1``/``>99`` at the ends (``0.443`` → ``44``)."""
    if 0 < value < 0.005:
        return "<1"
    if 0.995 <= value < 1:
        return ">99"
    return f"{value * 100:.0f}"


def _verdicts(comparison: ComparisonPower, case: str) -> str:
    s = comparison.scenario(case)
    return f"{_percent(s.meets)} / {_percent(s.does_not_meet)} / {_percent(s.inconclusive)}"


def _print_power(console: Console, power: CampaignPower) -> None:
    """The power table, what it assumed, and a red panel per comparison whose expected
    gain would be confirmed with less than ``WARN_BELOW`` probability."""
    reasons: dict[str, list[str]] = {}
    for variant, reference, why in power.not_computed:
        reasons.setdefault(why, []).append(f"{variant} − {reference}")
    for why, names in reasons.items():
        console.print(f"power of {escape(', '.join(names))}: not computed: {escape(why)}")
    if not power.comparisons:
        return
    first = power.comparisons[0]
    target = f"{TARGET_POWER:.0%}"
    table = Table(title=f"What the test set can decide ({escape(first.metric)}, goal "
                        f"{first.goal}, threshold {first.min_gain:+g}; {first.n_test} test "
                        f"examples; 95% paired bootstrap)", title_justify="left",
                  caption=f"RESOLUTION: the interval's expected half-width (±); DETECTABLE: "
                          f"the smallest true gain confirmed with {target} probability; P: "
                          f"probability (%) of meets / does not meet / inconclusive if the "
                          f"true gain is 0, the threshold, the expected gain; EXAMPLES: the "
                          f"test size that confirms the expected gain with {target} "
                          f"probability (impractical: more than {PRACTICAL_FACTOR} times "
                          f"the test split, or a gap under a tenth of the resolution)",
                  caption_justify="left")
    for header in ("COMPARISON", "RESOLUTION", "DETECTABLE", "EXPECTED", "P IF 0",
                   "P AT THRESHOLD", "P IF EXPECTED", f"EXAMPLES FOR {target}"):
        table.add_column(header, justify="left" if header == "COMPARISON" else "right",
                         no_wrap=header != "COMPARISON")
    for c in power.comparisons:
        detectable = c.minimum_detectable_gain
        table.add_row(escape(f"{c.variant} − {c.reference}"), f"±{c.resolution:.3f}",
                      "beyond reach" if detectable is None else f"{detectable:+.3f}",
                      f"{c.expected_gain:+.3g}", _verdicts(c, "no gain"),
                      _verdicts(c, "threshold"), _verdicts(c, "expected gain"),
                      f"{c.examples_needed:,}" if c.examples_needed is not None
                      else "never" if c.expected_gain <= c.min_gain else "impractical")
    console.print(table)
    _print_seeds(console, power)
    for line in dict.fromkeys(_assumptions(c) for c in power.comparisons):
        console.print(f"assumed: {escape(line)}")
    for c in power.warnings:
        console.print(Panel(escape(_warning(c, len(power.comparisons))), title="POWER WARNING", title_align="left",
                            border_style="bold red", style="bold"))


def _print_seeds(console: Console, power: CampaignPower) -> None:
    """The power with K = 1, 3, 5 replicates side by side, and per comparison the fewest
    that confirm its expected gain, with their GPU-hours."""
    first = power.comparisons[0]
    counts = [r.seeds for r in first.by_seeds]
    seeds = first.seeds
    holm = (f"; meets at the Bonferroni level of {seeds.comparisons} comparisons (Holm)"
            if seeds.comparisons > 1 else "")
    table = Table(title=f"POWER WITH SEEDS: K replicates a side, seed spread sd "
                        f"{seeds.sd:g} ({escape(seeds.source)}){holm}",
                  title_justify="left",
                  caption="each cell: P(meets) at the expected gain / P(meets) at the "
                          "threshold (a false 'meets') / resolution (±) / GPU·h of the "
                          "variant's K replicates. With one seed the interval leaves the "
                          "seed spread out, so it 'meets' more often, falsely too: K=1 "
                          "never counts as confirming when there is a seed spread",
                  caption_justify="left")
    # the cells wrap at their " / " so that the names keep their width at 80 columns
    table.add_column("COMPARISON", min_width=14)
    for k in counts:
        table.add_column(f"K={k}", justify="right")
    table.add_column("CONFIRMS WITH", justify="right", min_width=10)
    for c in power.comparisons:
        cells = [f"{_percent(r.confirm_probability)}% / {r.false_meets:.1%} / "
                 f"±{r.resolution:.3f} / "
                 + ("?" if r.gpu_hours is None else f"{r.gpu_hours:.3g}") for r in c.by_seeds]
        enough = c.confirmable_with
        table.add_row(escape(f"{c.variant} − {c.reference}"), *cells,
                      f"no K up to {counts[-1]}" if enough is None else
                      f"K={enough.seeds}" + ("" if enough.gpu_hours is None
                                             else f" ({enough.gpu_hours:.3g} GPU·h)"))
    console.print(table)


def _assumptions(comparison: ComparisonPower) -> str:
    """What a comparison's figures assumed, in one line."""
    inputs = comparison.inputs
    parts = []
    if "disagreement" in inputs:
        parts.append(f"disagreement {inputs['disagreement']:g} "
                     f"({inputs.get('disagreement_source')})")
    if "reference_accuracy" in inputs and inputs.get("source") == "assumed":
        parts.append(f"reference right on {inputs['reference_accuracy']:.0%} of each class's "
                     f"examples (assumed)")
    if "difference_sd" in inputs:
        parts.append(f"per-example difference sd {inputs['difference_sd']:g} "
                     f"({inputs.get('difference_sd_source', inputs.get('source'))})")
    parts += list(comparison.notes)
    return "; ".join(parts)


def _warning(c: ComparisonPower, comparisons: int = 1) -> str:
    """The warning text: what cannot be confirmed, the numbers, and the fixes that help
    (``comparisons``: the campaign's; "fewer comparisons" only when there are several)."""
    source = str(c.inputs.get("disagreement_source", ""))
    if c.inputs.get("disagreement") == 0:
        return (f"{c.variant} − {c.reference}: the runs measured ({source}) predicted the "
                f"same on all {c.inputs.get('examples', c.n_test)} test examples they share "
                f"(disagreement 0). A variant that never disagrees with its reference cannot "
                f"differ from it on {c.metric or 'the metric'}, so no test size confirms any "
                f"gain: this comparison can only end without meeting the threshold. Fixes: a "
                f"bolder variant (its settings, as measured, change no prediction); or cut it "
                f"and spend its hours on the other comparisons.")
    if c.past_headroom:
        return (f"{c.variant} − {c.reference}: its expected gain {c.expected_gain:+.3g} "
                f"{c.metric} ({c.expected_gain_source}) is past the reference's headroom "
                f"({c.headroom:+.3g}: a variant right on every test example gains no more), "
                f"so no variant can show it and its power figures are those of a smaller "
                f"gain. Fix: an expected gain the metric allows ([[run]] expected_gain at "
                f"most {c.headroom:+.3g}); the test set is not at fault, and the decision "
                f"point does not cut a variant for it.")
    assumed = source.startswith(("default", "campaign file"))
    expected = c.scenario("expected gain")
    gain = expected.true_gain
    named = f"{gain:+.3g}" if gain == c.expected_gain else (
        f"{gain:+.3g} (the largest gain the {'assumed' if assumed else 'measured'} "
        f"disagreement allows; the expected gain {c.expected_gain:+.3g} is past it)")
    detectable = (f"no gain the {'assumed' if assumed else 'measured'} disagreement allows"
                  if c.minimum_detectable_gain is None else f"{c.minimum_detectable_gain:+.3f}")
    text = (f"{c.variant} − {c.reference}: a gain of at least {c.min_gain:+g} {c.metric} cannot "
            f"be confirmed reliably with {c.n_test} test examples. If {c.variant} truly gains "
            f"{named} (the expected gain; {c.expected_gain_source}), the "
            f"comparison meets the threshold with probability {expected.meets:.0%} and is "
            f"inconclusive with {expected.inconclusive:.0%}. Resolution ±{c.resolution:.3f} "
            f"(the interval's expected half-width); minimum detectable gain {detectable} "
            f"(confirmed with {TARGET_POWER:.0%} probability); ")
    if c.examples_needed is None:
        text += f"for {gain:+.3g}: {c.examples_needed_reason}."
    else:
        text += (f"about {rounded_count(c.examples_needed):,} test examples would confirm "
                 f"{gain:+.3g} with {TARGET_POWER:.0%} probability.")
    fixes = []
    enough = c.confirmable_with
    most = max(c.by_seeds, key=lambda r: r.seeds, default=None)
    now = next((r for r in c.by_seeds if r.seeds == c.seeds.replicates), None)
    if enough is not None and enough.seeds > c.seeds.replicates:
        fixes.append(f"more replicates ([campaign] seeds = {enough.seeds} confirms it with "
                     f"probability {enough.confirm_probability:.0%}"
                     + ("" if enough.gpu_hours is None else
                        f", {enough.gpu_hours:.3g} GPU·h for {c.variant}") + ")")
    elif c.seeds.sd > 0 and most is not None and now is not None \
            and most.seeds > now.seeds and most.false_meets < now.false_meets:
        fixes.append(f"more replicates (no K up to {most.seeds} confirms it, but [campaign] "
                     f"seeds = {most.seeds} holds a false 'meets' to {most.false_meets:.1%} "
                     f"from {now.false_meets:.1%} with {now.seeds}: the power-with-seeds "
                     f"table)")
    if c.examples_needed is not None and c.examples_needed > c.n_test:
        fixes.append(f"more test examples (about {rounded_count(c.examples_needed):,}, "
                     f"now {c.n_test})")
    bound = c.threshold_for_target
    if bound is not None and bound[0] == "at least" and bound[1] > c.min_gain \
            and (c.headroom is None or 2 * bound[1] <= c.headroom):
        fixes.append(f"a larger threshold (min_gain at least {bound[1]:+.3f}, the expected "
                     f"gain then twice it; or a bolder variant)")
    elif bound is not None and bound[0] == "at most" and bound[1] < c.min_gain:
        fixes.append(f"a threshold the test set can resolve (min_gain at most {bound[1]:+.3f} "
                     f"for the expected gain {gain:+.3g})")
    if comparisons > 1:
        fixes.append("fewer comparisons (a variant that cannot confirm its gain spends GPU "
                     "hours without deciding anything: cut it, or spend its hours on "
                     + ("replicates of the others)" if c.examples_needed is None else
                        "a larger test set)"))
    if not fixes:
        return text + " No change of this campaign's settings confirms it: a bolder variant would."
    return text + " Fixes: " + "; ".join(fixes) + "."


def _list_offers(catalog: Catalog, *, as_json: bool) -> int:
    """``quote --list``: every offer of ``catalog`` (built-in, merged with ``--catalog``),
    by name: GPUs per flight, GPU memory, and each package's days and price of one flight;
    an offer without packages says that it cannot be quoted. ``--json``: ``{"sources":
    [...], "offers": [{name, gpus_per_flight, gpu_memory_gb, currency, packages: [{days,
    price}]}]}`` (prices as decimal strings)."""
    offers = [catalog.offers[name] for name in sorted(catalog.offers, key=str.lower)]
    if as_json:
        print(json.dumps({"sources": list(catalog.sources), "offers": [{
            "name": o.name, "gpus_per_flight": o.gpus_per_flight,
            "gpu_memory_gb": o.gpu_memory_gb, "currency": o.currency,
            "packages": [{"days": d, "price": str(o.packages[d])} for d in o.package_days]}
            for o in offers]}))
        return 0
    console = _console()
    table = Table(title=f"offers ({escape(', '.join(catalog.sources))})", title_justify="left")
    for header in ("OFFER", "GPUS / FLIGHT", "GPU MEMORY", "PACKAGES (price of one flight)"):
        table.add_column(header, no_wrap=header != "PACKAGES (price of one flight)",
                         justify="right" if header.startswith("GPU") else "left")
    for o in offers:
        packages = ", ".join(f"{d} d {o.packages[d].display()}" for d in o.package_days)
        table.add_row(escape(o.name), str(o.gpus_per_flight),
                      "not given" if o.gpu_memory_gb is None else f"{o.gpu_memory_gb:g} GB",
                      packages or "no prices given: a --catalog file can add them")
    console.print(table)
    return 0


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


def quote_command(*, offer: str | None, hours: float | str | None, gpus: int,
                  catalog: Path | None, as_json: bool, list_offers: bool = False) -> int:
    """List the packages of ``offer`` that cover one continuous job of ``hours`` hours; with
    ``list_offers``, list the catalog's offers and their packages instead
    (:func:`list_offers_command`). ``hours`` as ``--hours`` gives it: a number of hours, or
    text, a bare number (hours) or a duration like a campaign file's (``"10h"``, ``"90m"``,
    ``"2d"``; :func:`flightplan.units.parse_hours`).

    Raises:
        ArgumentError: ``hours`` neither a number nor a duration; ``hours`` or ``gpus``
            not positive; neither ``--list`` nor both ``--offer`` and ``--hours``.
        CatalogError: unknown offer, offer without prices, or a bad ``--catalog`` file.
    """
    offers = builtin_catalog()
    if catalog is not None:
        offers = offers.merged(load_catalog(catalog))
    if list_offers:
        return _list_offers(offers, as_json=as_json)
    if offer is None or hours is None:
        raise ArgumentError("quote needs --offer and --hours (one job to price), or --list "
                            "(every offer of the catalog with its packages)")
    if isinstance(hours, str):
        try:
            hours = parse_hours(hours)
        except ValueError as exc:
            raise ArgumentError(f"--hours: {exc}") from None
    if not hours > 0:
        raise ArgumentError(f"--hours {hours:g}: a job length must be more than 0 hours")
    if gpus < 1:
        raise ArgumentError(f"--gpus {gpus}: a job needs at least 1 GPU")
    quote = quote_for_job(offer, hours, gpus, offers)
    if as_json:
        print(json.dumps(quote.to_json()))
        return 0
    console = _console()
    console.print(f"one continuous job of {hours:g} h on {gpus} GPU{'s' if gpus > 1 else ''}")
    _print_options(console, quote, title=f"{escape(quote.options[0].offer)} packages "
                                         f"(cheapest fitting first)")
    return 0
