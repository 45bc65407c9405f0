"""The figures a results directory states, computed again from its own predictions.

The checksums of ``flightplan verify`` prove that every file is the one ``close`` wrote and
listed, and the reloads that every artifact still makes its predictions. This module proves
that the figures agree with those predictions, so that an edited figure is found even when
its manifest entry was rewritten to match:

1. each run's ``metric_value`` in ``MANIFEST.json`` is the campaign metric
   (:func:`flightplan.metrics.metric_value`, rounded to 6 places as close writes it) of
   ``predictions/<run_id>.csv``;
2. each comparison in ``conclusion.json`` that was made is
   :func:`~flightplan.close.conclusion.compare_runs` on the two runs' predictions with the
   conclusion's own ``metric``, ``goal`` and ``min_gain`` (the paired bootstrap's fixed
   seed makes it repeat exactly); one over replicates (``reference_run_ids`` and
   ``variant_run_ids``) is :func:`~flightplan.close.replicates.compare_replicated_runs` on
   all of them;
3. each run's ``seed_spread`` is :func:`~flightplan.close.replicates.seed_spread` of the
   metric of its replicates' predictions (its ``run_ids``);
4. ``answer``, ``verdict`` and ``family_wise_level``, and each comparison's
   ``p_value_adjusted``, ``verdict_adjusted`` and ``seed_notice``, are
   :func:`~flightplan.close.conclusion.conclude`'s on those comparisons, under the
   conclusion's own ``multiple`` (``"none"`` when it states none: written before Holm),
   with the seed spreads' sentence
   (:func:`~flightplan.close.replicates.with_run_seed_spreads`).

Each disagreement is an ``inconsistent`` finding that names the file, the figure, the value
the file states and the value its predictions give. A predictions file that is missing,
unreadable or fails its own file check is left to that check (``missing_file``,
``checksum``): nothing is computed from it.

Usage::

    findings = consistency_findings(results_dir, read_manifest(results_dir))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from flightplan.close.conclusion import compare_runs, conclude
from flightplan.close.replicates import compare_replicated_runs, run_seed_spreads, with_run_seed_spreads
from flightplan.errors import CheckFailed, SpecError
from flightplan.findings import Finding
from flightplan.metrics import Predictions, metric_value, read_predictions_or_none

__all__ = ["CHECK", "consistency_findings"]

CHECK = "inconsistent"
"""The name of the check in verify's findings."""

_CONCLUSION = "conclusion.json"
_MANIFEST = "MANIFEST.json"


def consistency_findings(results: Path, manifest: Mapping[str, Any], *,
                         changed: frozenset[str] = frozenset()) -> list[Finding]:
    """Every figure of ``MANIFEST.json`` and ``conclusion.json`` that its predictions do not
    give (module docstring); ``[]`` when they all agree.

    Args:
        results: the results directory.
        manifest: its ``MANIFEST.json``, parsed.
        changed: paths (relative to ``results``) that already failed a file check (changed,
            missing): figures are not computed from a predictions file that is not the one
            close wrote, whose own finding already says so.
    """
    predictions = _Predictions(results, changed)
    findings = _metric_values(manifest, predictions)
    path = results / _CONCLUSION
    if _CONCLUSION in changed:           # not the file close wrote: its checksum says so
        return findings
    try:
        conclusion = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return findings          # a missing or broken conclusion is the file checks' finding
    if isinstance(conclusion, dict):
        findings += _conclusion(conclusion, predictions)
    return findings


class _Predictions:
    """``predictions/<run_id>.csv`` of the results directory, each read once (None when
    missing, unreadable, or among the ``changed`` paths)."""

    def __init__(self, results: Path, changed: frozenset[str]) -> None:
        self.results = results
        self.changed = changed
        self._read: dict[str, Predictions | None] = {}

    def __call__(self, run_id: Any) -> Predictions | None:
        if not isinstance(run_id, str) or "/" in run_id or run_id.startswith("."):
            return None
        if f"predictions/{run_id}.csv" in self.changed:
            return None
        if run_id not in self._read:
            self._read[run_id] = read_predictions_or_none(self.results / "predictions" /
                                                          f"{run_id}.csv")
        return self._read[run_id]


def _metric_values(manifest: Mapping[str, Any], predictions: _Predictions) -> list[Finding]:
    metric, runs = manifest.get("metric"), manifest.get("runs")
    if not isinstance(metric, str) or not isinstance(runs, dict):
        return []
    findings = []
    for run_id, run in sorted(runs.items()):
        stated = run.get("metric_value") if isinstance(run, dict) else None
        made = predictions(run_id)
        if not isinstance(stated, (int, float)) or made is None:
            continue
        try:
            value = round(metric_value(metric, made), 6)
        except (CheckFailed, SpecError) as exc:
            findings.append(Finding(CHECK, _MANIFEST, f"runs.{run_id}.metric_value: states "
                                    f"{stated}, but predictions/{run_id}.csv cannot give "
                                    f"{metric}: {exc}"))
            continue
        if value != stated:
            findings.append(Finding(CHECK, _MANIFEST, f"runs.{run_id}.metric_value: states "
                                    f"{stated}, but predictions/{run_id}.csv give {metric} "
                                    f"{value}"))
    return findings


def _conclusion(conclusion: dict[str, Any], predictions: _Predictions) -> list[Finding]:
    try:
        metric, goal = str(conclusion["metric"]), str(conclusion["goal"])
        min_gain, stated = float(conclusion["min_gain"]), list(conclusion["comparisons"])
    except (KeyError, TypeError, ValueError):
        return [Finding(CHECK, _CONCLUSION, "lacks metric, goal, min_gain or comparisons, so "
                                            "its answer cannot be computed again")]
    findings, recomputed, moved = [], [], set()
    for i, entry in enumerate(stated):
        if not isinstance(entry, dict) or entry.get("verdict") == "not_available":
            recomputed.append(entry)
            continue
        replicated = "reference_run_ids" in entry or "variant_run_ids" in entry
        keys = ("reference_run_ids", "variant_run_ids") if replicated else \
            ("reference_run_id", "variant_run_id")
        sides = [[predictions(r) for r in (entry.get(key) or [])] if replicated
                 else [predictions(entry.get(key))] for key in keys]
        if any(not side or any(p is None for p in side) for side in sides):
            recomputed.append(entry)
            continue
        ref, var = ([p for p in side if p is not None] for side in sides)
        try:
            fresh = compare_replicated_runs(ref, var, metric=metric, goal=goal,
                                            min_gain=min_gain) if replicated else \
                compare_runs(ref[0], var[0], metric=metric, goal=goal, min_gain=min_gain)
        except (CheckFailed, SpecError) as exc:
            findings.append(Finding(CHECK, _CONCLUSION, f"comparisons[{i}]: the predictions "
                                    f"cannot give it again: {exc}"))
            recomputed.append(entry)
            continue
        differ = [key for key in sorted(fresh) if entry.get(key) != fresh[key]]
        if differ:
            moved.add(i)
            findings.append(Finding(CHECK, _CONCLUSION, f"comparisons[{i}] "
                                    f"({entry.get('variant')} vs {entry.get('reference')}): "
                                    + "; ".join(f"{key} states {entry.get(key)!r}, the "
                                                f"predictions give {fresh[key]!r}"
                                                for key in differ)))
        recomputed.append({**entry, **fresh})
    spreads, spread_findings = _seed_spreads(conclusion, metric, predictions)
    findings += spread_findings
    answer = conclude(question=str(conclusion.get("question", "")), metric=metric, goal=goal,
                      min_gain=min_gain, comparisons=recomputed,
                      multiple=str(conclusion.get("multiple", "none")))
    if "seed_spread" in conclusion:
        answer = with_run_seed_spreads(answer, spreads)
    findings += _derived(stated, answer["comparisons"], moved)
    for key in ("answer", "verdict", "family_wise_level"):
        if key == "family_wise_level" and key not in conclusion:
            continue                    # a conclusion written before Holm states none
        if conclusion.get(key) != answer[key]:
            findings.append(Finding(CHECK, _CONCLUSION, f"{key} states "
                                    f"{conclusion.get(key)!r}, but its comparisons give "
                                    f"{answer[key]!r}"))
    return findings


_DERIVED = ("p_value_adjusted", "verdict_adjusted", "seed_notice")
"""The keys :func:`~flightplan.close.conclusion.conclude` adds to each comparison."""


def _derived(stated: list[Any], recomputed: list[dict[str, Any]], moved: set[int]
             ) -> list[Finding]:
    """A finding per comparison whose adjusted verdict or seed notice is not the one its
    figures give; not for those in ``moved`` (their figures already have a finding, which
    these follow from), nor for a key the file does not state (one written before it; a
    key removed is the checksum's finding)."""
    findings = []
    for i, (entry, fresh) in enumerate(zip(stated, recomputed)):
        if not isinstance(entry, dict) or i in moved:
            continue
        differ = [key for key in _DERIVED if key in entry and entry[key] != fresh.get(key)]
        if differ:
            findings.append(Finding(CHECK, _CONCLUSION, f"comparisons[{i}] "
                                    f"({entry.get('variant')} vs {entry.get('reference')}): "
                                    + "; ".join(f"{key} states {entry[key]!r}, its figures "
                                                f"give {fresh.get(key)!r}" for key in differ)))
    return findings


def _seed_spreads(conclusion: dict[str, Any], metric: str, predictions: _Predictions
                  ) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Each run's seed spread computed again from its replicates' predictions (a run whose
    predictions cannot be read keeps the stated one), and a finding per figure that
    differs."""
    stated = conclusion.get("seed_spread")
    if not isinstance(stated, dict):
        return {}, []
    spreads, findings = {}, []
    for name, spread in stated.items():
        ids = spread.get("run_ids") if isinstance(spread, dict) else None
        made = [predictions(r) for r in ids or []]
        if not ids or any(p is None for p in made):
            spreads[name] = spread
            continue
        try:
            values = [(r, round(metric_value(metric, p), 6))
                      for r, p in zip(ids, made) if p is not None]
        except (CheckFailed, SpecError) as exc:
            findings.append(Finding(CHECK, _CONCLUSION, f"seed_spread.{name}: the predictions "
                                    f"cannot give it again: {exc}"))
            spreads[name] = spread
            continue
        fresh = run_seed_spreads({name: values}).get(name, {})
        differ = [key for key in sorted(fresh) if spread.get(key) != fresh[key]]
        if differ:
            findings.append(Finding(CHECK, _CONCLUSION, f"seed_spread.{name}: "
                                    + "; ".join(f"{key} states {spread.get(key)!r}, the "
                                                f"predictions give {fresh[key]!r}"
                                                for key in differ)))
        spreads[name] = fresh or spread
    return spreads, findings
