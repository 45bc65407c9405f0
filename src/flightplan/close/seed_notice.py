"""The seed notice of a one-seed comparison: what training randomness would add.

When both sides of a comparison ran one seed (``seeds = 1``, the default), its paired
bootstrap resamples test examples only: seed variance was not measured, and the gain moves
with the seed more than the interval says (the main job's lora-r8, unchanged but for its
seed, scores macro-F1 0.4930, 0.4544, 0.4217, 0.4328 and 0.4322 over seeds 0-4). The
verdict stays the interval's; the notice says so plainly and gives the interval the seed
spread would make.

**Widening.** The measured difference is d̂ = Δ + e_ex + e_V − e_R: the true difference,
the test sampling's error (variance σ_ex², which the bootstrap measures: its half-width is
h = z·σ_ex) and each side's seed error (variance s² each, the per-replicate seed variance;
independent of each other and of the test sampling, since each side trains with its own
seed). Variances of independent terms add, so Var(d̂) = σ_ex² + 2 s² and the interval's
half-width becomes::

    h' = z · sqrt(σ_ex² + 2 s²) = sqrt(h² + (z · s · √2)²)

with z = Φ⁻¹(0.975) = 1.96, the interval's normal quantile (the same decomposition as
``plan``'s σ²(K) at K = 1, :class:`flightplan.plan.power.Seeds`; Bouthillier et al.,
"Accounting for Variance in Machine Learning Benchmarks", MLSys 2021). The percentile
interval need not be symmetric, so each side is widened on its own: the lower bound to
d̂ − sqrt((d̂ − low)² + (z s √2)²), the upper to d̂ + sqrt((high − d̂)² + (z s √2)²).

**s, best source first** (:func:`flightplan.plan.power.campaign_seeds`, the same as
``plan``'s): the spread an earlier campaign measured over the replicates of the same run
(``[calibrate] from``: its ``calibration.json``'s ``seed_sd``, the variant's, else its
reference's), else for a classification metric
:data:`~flightplan.plan.power.DEFAULT_SEED_SD` (0.025, the main job's lora-r8 over seeds
0-4), else none: a ``mean:<column>`` metric's units are the column's, so nothing is
added and the notice says so.

The main job's lora-r8 − control (+0.0705, [+0.0101, +0.1303]) with s = 0.025:
z s √2 = 0.0693, so [+0.0705 − 0.0919, +0.0705 + 0.0917] = [−0.0214, +0.1622].

Usage::

    entries = with_seed_spread(spec, comparisons, calibrated_seed_spread(spec))
    notice = seed_notice(entry, goal="max", min_gain=0.05)   # conclude() does this
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from flightplan.plan.calibration.calibrate import calibrate
from flightplan.plan.calibration.record import FILE_NAME, Calibration
from flightplan.plan.power import Z_INTERVAL, campaign_seeds
from flightplan.spec import CampaignSpec
from flightplan.tasks.loader import resolve_task

__all__ = ["calibrated_seed_spread", "with_seed_spread", "seed_notice", "notice_text"]


def calibrated_seed_spread(spec: CampaignSpec) -> dict[str, tuple[float, str]]:
    """Variant name → (per-replicate seed sd, source) that the campaign's ``[calibrate]
    from`` measured for the same run (:func:`flightplan.plan.calibration.calibrate.calibrate`'s
    ``seed_spread``); ``{}`` without ``[calibrate]``, or when its ``calibration.json``
    cannot be read (the notice then falls back to the default, which names itself).

    The file is read as it is: ``flightplan run`` verified that results directory when it
    froze the plan from it, and the figure only informs.
    """
    if spec.calibrate is None:
        return {}
    path = spec.calibrate.results_dir(spec.campaign_dir) / FILE_NAME
    try:
        calibration = Calibration.from_json(json.loads(path.read_text(encoding="utf-8")),
                                            source=str(path))
        versions = {run.name: resolve_task(run.task, spec.campaign_dir,
                                           field=f"run[{i}].task",
                                           source=spec.source).code_version
                    for i, run in enumerate(spec.runs)}
    except (OSError, ValueError):
        return {}
    return dict(calibrate(spec, calibration, code_versions=versions).seed_spread)


def with_seed_spread(spec: CampaignSpec, comparisons: list[dict[str, Any]],
                     measured: Mapping[str, tuple[float, str]]) -> list[dict[str, Any]]:
    """The comparisons, each one made between two one-seed runs with ``seed_notice:
    {seed_sd, seed_sd_source}`` added (the spread's best source, module docstring), for
    :func:`seed_notice` to complete; new dicts, the others unchanged."""
    runs = {run.name: run for run in spec.runs}
    out = []
    for entry in comparisons:
        run, reference = runs.get(entry.get("variant", "")), runs.get(entry.get("reference", ""))
        if entry.get("verdict") == "not_available" or run is None or reference is None \
                or spec.seeds_of(run) != 1 or spec.seeds_of(reference) != 1:
            out.append(entry)
            continue
        seeds = campaign_seeds(spec, run, measured)
        out.append(entry | {"seed_notice": {"seed_sd": seeds.sd,
                                            "seed_sd_source": seeds.source}})
    return out


def seed_notice(comparison: dict[str, Any], *, goal: str, min_gain: float
                ) -> dict[str, Any]:
    """The notice of a one-seed comparison (its ``seed_notice`` holds ``seed_sd`` and
    ``seed_sd_source``), completed from its interval (module docstring).

    Returns:
        ``{seeds_measured: false, seed_sd, seed_sd_source, z, ci_low, ci_high,
        verdict}``: the interval of the difference (variant − reference) widened by the
        seed spread, and the verdict that interval would give (informative: the
        comparison's own verdict is not changed); the last three null when ``seed_sd``
        is 0 (no spread known). Rounded to 6 places.
    """
    given = comparison["seed_notice"]
    sd = float(given["seed_sd"])
    out = {"seeds_measured": False, "seed_sd": sd, "seed_sd_source": given["seed_sd_source"],
           "z": round(Z_INTERVAL, 6), "ci_low": None, "ci_high": None, "verdict": None}
    if sd <= 0:
        return out
    point, low, high = (float(comparison[k]) for k in ("difference", "ci_low", "ci_high"))
    extra = Z_INTERVAL * sd * math.sqrt(2)
    wide_low = point - math.hypot(point - low, extra)
    wide_high = point + math.hypot(high - point, extra)
    sign = 1.0 if goal == "max" else -1.0
    gain_low, gain_high = sorted((sign * wide_low, sign * wide_high))
    verdict = ("meets" if gain_low >= min_gain else
               "does_not_meet" if gain_high < min_gain else "inconclusive")
    return out | {"ci_low": round(wide_low, 6), "ci_high": round(wide_high, 6),
                  "verdict": verdict}


def notice_text(comparisons: list[dict[str, Any]], *, goal: str, metric: str) -> str:
    """The notice's sentences for the verdict paragraph, from comparisons whose
    ``seed_notice`` :func:`seed_notice` completed ("" when none has one): one per seed
    spread and source, naming each comparison's widened interval (of the gain, its sign
    turned, when lower is better) and the verdict it would give."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for c in comparisons:
        notice = c.get("seed_notice")
        if notice is not None:
            groups.setdefault((notice["seed_sd"], notice["seed_sd_source"]), []).append(c)
    if not groups:
        return ""
    which = "of the gain" if goal == "min" else "of the difference"
    sentences = ["Seed variance was not measured: "
                 + ("each side ran one seed" if sum(map(len, groups.values())) == 1 else
                    "each side of these comparisons ran one seed")
                 + ", so the interval covers the sampling of test examples only."]
    for (sd, source), members in groups.items():
        if sd <= 0:
            sentences.append(f"No seed spread is known for {metric} ({source}), so "
                             f"{_names(members)} {'is' if len(members) == 1 else 'are'} not "
                             f"widened.")
            continue
        parts = []
        for c in members:
            n = c["seed_notice"]
            low, high = (n["ci_low"], n["ci_high"]) if goal == "max" else \
                (-n["ci_high"], -n["ci_low"])
            parts.append(f"{c['variant']} − {c['reference']} [{low:+.4f}, {high:+.4f}] "
                         f"({n['verdict'].replace('_', ' ')})")
        sentences.append(f"With a seed spread of sd {sd:g} per run ({source}), the 95% "
                         f"interval {which} would be " + "; ".join(parts) + ".")
    return " ".join(sentences)


def _names(comparisons: list[dict[str, Any]]) -> str:
    return " and ".join(f"{c['variant']} − {c['reference']}" for c in comparisons)
