"""Variant lint: does each run tell the decision something it can attribute?

A variant should change one factor against its reference. A *factor* is a top-level
key of ``params`` (a nested table such as ``adapter = {kind = "lora", rank = 8}`` is one
factor) or the ``task``; a key present in one run and absent in the other is a change.

Warnings (``code``: when):

- ``several-changes``: a variant differs from its reference in more than one factor.
- ``identical-runs``: two runs have the same task and params (one of them adds nothing).
- ``full-grid``: runs that agree on everything else cover every combination of two or
  more factors; a one-factor-at-a-time plan needs ``1 + sum(levels_i - 1)`` runs instead
  of ``prod(levels_i)``.
- ``no-reference``: a run other than the control names no reference.

Usage::

    for warning in lint_variants(spec):
        print(warning.code, warning.subject, warning.message)
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass

from flightplan.spec import CampaignSpec, Run

__all__ = ["LintWarning", "lint_variants", "factor_changes"]

_ABSENT = "(absent)"
_MAX_GRID_FACTORS = 8     # subsets of up to 2**8 factors are searched for grids


@dataclass(frozen=True)
class LintWarning:
    """One finding: ``code`` (stable identifier), ``subject`` (the runs it is about, comma
    separated), ``message`` (one line: what, why it matters, the fix)."""

    code: str
    subject: str
    message: str

    def to_json(self) -> dict[str, str]:
        """``{"code", "subject", "message"}``."""
        return {"code": self.code, "subject": self.subject, "message": self.message}


def _factors(run: Run) -> dict[str, str]:
    """Factor name → canonical JSON of its value (``task`` included)."""
    values = {"task": json.dumps(run.task)}
    for key, value in run.params.items():
        values[key] = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return values


def factor_changes(run: Run, reference: Run) -> list[str]:
    """The factors (top-level param keys, or ``task``) in which ``run`` differs from
    ``reference``, sorted; a key present in only one of them counts."""
    mine, theirs = _factors(run), _factors(reference)
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def lint_variants(spec: CampaignSpec) -> list[LintWarning]:
    """All variant-design warnings of ``spec``, in the order of the module docstring."""
    runs = {r.name: r for r in spec.runs}
    warnings: list[LintWarning] = []
    for run in spec.runs:
        if run.reference is None:
            continue
        changed = factor_changes(run, runs[run.reference])
        if len(changed) > 1:
            mine, theirs = _factors(run), _factors(runs[run.reference])
            values = "; ".join(f"{k}: {theirs.get(k, 'not set')} → {mine.get(k, 'not set')}"
                               for k in changed)
            unset = [k for k in changed if k not in mine or k not in theirs]
            warnings.append(LintWarning(
                "several-changes", run.name,
                f"{run.name} differs from its reference {run.reference} in {len(changed)} factors "
                f"({values}), so a difference in results cannot be "
                f"attributed to one; split it into variants that change one factor each"
                + (f" (a param set in only one of the two counts as a change: if "
                   f"{', '.join(unset)} not set means the task's default, set "
                   f"{'it' if len(unset) == 1 else 'them'} in both)" if unset else "")))
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for run in spec.runs:
        key = tuple(sorted(_factors(run).items()))
        if key in seen:
            warnings.append(LintWarning(
                "identical-runs", f"{seen[key]}, {run.name}",
                f"{seen[key]} and {run.name} have the same task and params; the second adds no "
                f"information (a repeat for timing is not another result): remove it or change "
                f"the factor it should test"))
        else:
            seen[key] = run.name
    warnings.extend(_grids(spec.runs))
    control = spec.control.name
    for run in spec.runs:
        if run.reference is None and run.name != control:
            warnings.append(LintWarning(
                "no-reference", run.name,
                f"{run.name} has no reference, so nothing says what it is compared with; "
                f"add reference = \"{control}\" (or the run it varies from)"))
    return warnings


def _grids(runs: list[Run]) -> list[LintWarning]:
    """Full-factorial groups: runs that agree outside a set S of >= 2 factors and cover
    every combination of the levels of S (each factor with >= 2 levels)."""
    table = [_factors(r) for r in runs]
    keys = sorted({k for row in table for k in row})
    varying = [k for k in keys if len({row.get(k, _ABSENT) for row in table}) > 1]
    varying = varying[:_MAX_GRID_FACTORS]
    found: list[tuple[frozenset[str], frozenset[str]]] = []     # (factors, run names)
    warnings = []
    for size in range(len(varying), 1, -1):
        for subset in itertools.combinations(varying, size):
            groups: dict[tuple[str, ...], list[int]] = {}
            for i, row in enumerate(table):
                rest = tuple(row.get(k, _ABSENT) for k in keys if k not in subset)
                groups.setdefault(rest, []).append(i)
            for members in groups.values():
                combos = {tuple(table[i].get(k, _ABSENT) for k in subset) for i in members}
                levels = [len({c[j] for c in combos}) for j in range(size)]
                names = frozenset(runs[i].name for i in members)
                if min(levels) < 2 or len(combos) != math.prod(levels):
                    continue
                if any(set(subset) <= f and names <= n for f, n in found):
                    continue
                found.append((frozenset(subset), names))
                one_at_a_time = 1 + sum(n - 1 for n in levels)
                shape = "×".join(str(n) for n in levels)
                ordered = [r.name for r in runs if r.name in names]
                warnings.append(LintWarning(
                    "full-grid", ", ".join(ordered),
                    f"runs {', '.join(ordered)} form a full {shape} grid over "
                    f"{', '.join(subset)} ({len(combos)} combinations); a one-factor-at-a-time "
                    f"plan needs {one_at_a_time} runs: keep the reference and change one "
                    f"factor per variant"))
    return warnings
