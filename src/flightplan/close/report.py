"""``report.html``: one self-contained page for a reader who was not there.

The page holds the question and the verdict, the comparison of each variant with its
reference, the products accepted and why others were not, a planned-versus-actual Gantt
chart, each run's wall time by cause (one stacked bar per run: goodput) and each flight's
hours, the loss curves, a confusion matrix per run and the budget. Plots are PNGs drawn
with matplotlib's Agg backend and embedded as base64 ``data:`` URIs; the page loads
nothing from anywhere and runs no script. The template
(``close/templates/report.html.j2``) is rendered by jinja2 with autoescaping on.

Usage::

    html = render_report(context)        # context: see render_report
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import numpy as np

from flightplan.close.plan_vs_execution import shown_hours, shown_transfers
from flightplan.goodput import CAUSES, LABELS
from flightplan.plan.power import rounded_count
from flightplan.rows import Measurement, parse_rows
from flightplan.units import time_unit

__all__ = ["loss_curves", "gantt_png", "goodput_png", "loss_png", "confusion_png",
           "shown_flights", "render_report", "render_readme"]

_TEMPLATES = Path(__file__).parent / "templates"


def _figure(width: float, height: float) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _png(figure: Any) -> str:
    """The figure as a base64 PNG (ASCII)."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def gantt_png(items: list[dict[str, Any]], *, reserved_hours: float | None) -> str:
    """Planned (light) against observed (dark) bars per stage/run, base64 PNG.

    Args:
        items: ``plan_vs_execution`` items (``planned_start_hours``, ``planned_hours``,
            ``observed_start_hours``, ``observed_hours``).
        reserved_hours: the plan's reserved hours, drawn as a dashed line.
    """
    ends = [(i["planned_start_hours"] or 0) + (i["planned_hours"] or 0) for i in items] + \
           [(i["observed_start_hours"] or 0) + (i["observed_hours"] or 0) for i in items] + \
           [reserved_hours or 0]
    unit, scale = time_unit(max(ends + [1e-9]))
    figure = _figure(9, 1.2 + 0.5 * max(1, len(items)))
    axes = figure.add_subplot()
    for row, item in enumerate(items):
        if item["planned_hours"] is not None and item["planned_start_hours"] is not None:
            axes.broken_barh([(item["planned_start_hours"] * scale, item["planned_hours"] * scale)],
                             (row - 0.4, 0.38), facecolors="#9ecae1", label="planned" if row == 0 else None)
        if item["observed_hours"] is not None and item["observed_start_hours"] is not None:
            axes.broken_barh([(item["observed_start_hours"] * scale,
                               max(item["observed_hours"] * scale, 1e-9))],
                             (row + 0.02, 0.38), facecolors="#08519c")
    if reserved_hours:
        axes.axvline(reserved_hours * scale, color="black", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(items)), [i["name"] for i in items], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(f"time from the first start ({unit}); light: planned, dark: observed, "
                    f"dashed: reserved")
    axes.grid(axis="x", alpha=0.3)
    return _png(figure)


_CAUSE_COLOURS = {"steps": "#31a354", "waiting": "#bdbdbd", "start_load": "#9ecae1",
                  "data": "#6baed6", "restore": "#c6dbef", "lost": "#de2d26",
                  "checkpoint": "#fd8d3c", "evaluation": "#756bb1", "output": "#fdd0a2",
                  "transfer": "#636363"}
"""One colour per goodput cause: productive steps green, work lost red."""


def goodput_png(runs: list[dict[str, Any]]) -> str | None:
    """One horizontal stacked bar per run: its wall time by cause (productive steps first),
    its goodput at the bar's end, base64 PNG (None without a run that ran).

    Args:
        runs: ``plan_vs_execution``'s ``goodput.runs`` (``name``, ``observed``:
            ``GoodputSplit.to_json()``).
    """
    runs = [r for r in runs if r["observed"]["wall_hours"] > 0]
    if not runs:
        return None
    unit, scale = time_unit(max(r["observed"]["wall_hours"] for r in runs))
    order = ["steps"] + [c for c in CAUSES if c != "steps"]
    figure = _figure(9, 1.4 + 0.45 * len(runs))
    axes = figure.add_subplot()
    for row, run in enumerate(runs):
        left = 0.0
        for cause in order:
            width = run["observed"]["parts_hours"][cause] * scale
            axes.barh(row, width, left=left, color=_CAUSE_COLOURS[cause], height=0.6,
                      label=LABELS[cause] if row == 0 else None)
            left += width
        share = run["observed"]["goodput"]
        axes.text(left, row, f" {share:.1%}" if share is not None else "", va="center",
                  fontsize=8)
    axes.set_yticks(range(len(runs)), [r["name"] for r in runs], fontsize=8)
    axes.invert_yaxis()
    # room right of the longest bar for its goodput label
    axes.set_xlim(0, 1.1 * max(r["observed"]["wall_hours"] for r in runs) * scale)
    axes.set_xlabel(f"wall time ({unit}) by cause; at the end: goodput (steps / wall time)")
    axes.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.1 / len(runs)))
    axes.grid(axis="x", alpha=0.3)
    return _png(figure)


def loss_curves(measurements_path: Path) -> list[tuple[int, float]]:
    """``(step, loss)`` pairs of the rows of a raw ``measurements.jsonl`` that log a loss.

    A resumed run may log a step twice; the last row for a step wins.
    """
    points: dict[int, float] = {}
    if not measurements_path.is_file():
        return []
    for row in parse_rows(measurements_path.read_bytes())[0]:
        loss = row.number("loss") if isinstance(row, Measurement) else None
        if loss is not None:
            points[row.step] = loss
    return sorted(points.items())


def loss_png(curves: dict[str, list[tuple[int, float]]]) -> str | None:
    """Training loss against step, one line per run, base64 PNG (None without any loss)."""
    curves = {name: points for name, points in curves.items() if points}
    if not curves:
        return None
    figure = _figure(8, 4)
    axes = figure.add_subplot()
    for name, points in curves.items():
        steps, losses = zip(*points)
        finite = np.isfinite(losses)
        axes.plot(np.array(steps)[finite], np.array(losses)[finite], label=name, linewidth=1)
    axes.set_xlabel("step")
    axes.set_ylabel("training loss")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    return _png(figure)


def confusion_png(counts: list[list[int]], labels: list[str], title: str) -> str:
    """A confusion matrix (rows gold, columns predicted) with counts, base64 PNG."""
    matrix = np.array(counts, dtype=float).reshape(len(labels), len(labels))
    figure = _figure(1.6 + 0.6 * len(labels), 1.4 + 0.6 * len(labels))
    axes = figure.add_subplot()
    axes.imshow(matrix, cmap="Blues")
    top = matrix.max() if matrix.size else 0
    for (row, col), value in np.ndenumerate(matrix):
        axes.text(col, row, f"{int(value)}", ha="center", va="center", fontsize=8,
                  color="white" if top and value > top / 2 else "black")
    axes.set_xticks(range(len(labels)), labels, fontsize=8, rotation=45)
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.set_xlabel("predicted")
    axes.set_ylabel("gold")
    axes.set_title(title, fontsize=9)
    return _png(figure)


def render_report(context: dict[str, Any]) -> str:
    """The HTML page.

    Args:
        context: ``{campaign, conclusion (conclude()), products (the acceptance
            verdicts, :class:`flightplan.close.acceptance.Verdict`), plan_vs_execution,
            budget, runs: [{run_id,
            name, analysis (error_analysis() or None)}], curves: {name: [(step, loss)]},
            metric, resumes: {run_id: summary} (:meth:`flightplan.close.resumes.RunResumes.
            summary`)}``.

    Returns:
        The page as a string (UTF-8 when written).
    """
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
                                     autoescape=True, undefined=jinja2.StrictUndefined,
                                     trim_blocks=True, lstrip_blocks=True)
    environment.filters["rounded_count"] = lambda count: f"{rounded_count(int(count)):,}"
    pve = context["plan_vs_execution"]
    images = {
        "gantt": gantt_png(pve["items"], reserved_hours=pve["totals"]["reserved_hours"]),
        "goodput": goodput_png((pve.get("goodput") or {}).get("runs") or []),
        "loss": loss_png(context["curves"]),
        "confusion": {r["run_id"]: confusion_png(r["analysis"]["confusion_matrix"]["counts"],
                                                 r["analysis"]["labels"], r["name"])
                      for r in context["runs"]
                      if r["analysis"] and r["analysis"]["n_test"]
                      and r["analysis"]["confusion_matrix"]},
    }
    return environment.get_template("report.html.j2").render(
        **context, images=images, shown_hours=shown_hours(pve),
        shown_transfers=shown_transfers(pve),
        shown_flights=shown_flights((pve.get("goodput") or {}).get("flights") or []))


def shown_flights(flights: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each flight's slot-hours as the report prints them (``FlightGoodput.to_json()``):
    2 places, or 4 when a figure other than 0 is under 0.1 h; ``overheads``: the causes,
    largest first, those that show as 0 left out."""
    figures = [f[k] for f in flights for k in ("productive_hours", "overhead_hours")]
    places = 4 if any(0 < abs(v) < 0.1 for v in figures) else 2
    return [{"flight": f["flight"], "slots": str(f["slots"]),
             "package": f"{f['package_hours']:g}", "bought": f"{f['bought_hours']:.2f}",
             **{k: f"{f[k + '_hours']:.{places}f}"
                for k in ("productive", "overhead", "uncommitted")},
             "overheads": ", ".join(f"{LABELS.get(c, c)} {v:.{places}f}" for c, v in sorted(
                 f["overheads_hours"].items(), key=lambda p: -p[1]) if round(v, places) > 0)}
            for f in flights]


def render_readme(context: dict[str, Any]) -> str:
    """``README.md`` of the results directory (how to verify, reload and reproduce).

    Args:
        context: ``{campaign, conclusion, order_number, products, artifacts: [{run_id,
            package, command, base_revision}]}``, optionally ``goodput`` and ``resumes``
            (run id → the line its runs-table cell shows; "–" where absent); ``command``
            is the shell line run from results/; ``package`` the built-in task's module,
            None for a task kept in ``tasks/``; ``base_revision`` whether the artifact
            records a base model.
    """
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
                                     autoescape=False, undefined=jinja2.StrictUndefined,
                                     trim_blocks=True, lstrip_blocks=True,
                                     keep_trailing_newline=True)
    return environment.get_template("README.md.j2").render(**context)
