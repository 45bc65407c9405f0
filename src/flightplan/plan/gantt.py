"""Gantt views of a schedule: a terminal chart (rich) and a PNG (matplotlib, Agg).

One row per placed stage/run, in start order, labelled with where it runs (``F1 G0`` =
flight 1, GPU 0; ``person`` for human-only work). The time axis covers the larger of
the schedule and the rental window; a vertical mark shows where the window ends, and
work past it is drawn in red.

Usage::

    console.print(gantt_table(result.schedule, window_s=result.window_s))
    png = gantt_png(result.schedule, window_s=result.window_s, title="illustration")
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from flightplan.plan.problem import Slot
from flightplan.plan.schedule import Schedule
from flightplan.units import time_unit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["gantt_table", "gantt_figure", "gantt_png", "where", "LEGEND"]

_GPU_STYLE, _PERSON_STYLE, _OVER_STYLE = "green", "yellow", "bold red"
_PNG_GPU, _PNG_PERSON, _PNG_OVER = "tab:green", "tab:orange", "tab:red"
LEGEND = ("GPU", "person", "GPU and person", "past the window", "end of window")
"""The legend's entries, in order (the PNG's; the terminal chart's caption says the same)."""


def where(slot: Slot) -> str:
    """``"F1 G0"`` (flight 1, GPU 0), ``"F1 G0,1 +person"``, ``"F2"`` or ``"person"``."""
    parts = []
    if slot.flight is not None:
        parts.append(f"F{slot.flight}" + (f" G{','.join(map(str, slot.gpu_ids))}" if slot.gpu_ids else ""))
    if slot.task.person:
        parts.append("person" if not parts else "+person")
    return " ".join(parts)


def gantt_table(schedule: Schedule, *, window_s: int, width: int = 40) -> Table:
    """A rich table: name, where, start/end and a bar of ``width`` characters.

    Starts and ends are in hours, or in minutes or seconds for a schedule shorter than 2 h
    or 2 min (:func:`flightplan.units.time_unit`; the column headers name the unit). Each
    character of a bar stands for ``max(makespan, window) / width`` seconds; ``¦`` marks the
    end of the window. GPU work is green ``█``, person-only work yellow, a stage holding a
    GPU and a person ``▀`` (green over yellow), work past the window red; the caption is
    the legend.
    """
    span = max(schedule.makespan_s, window_s, 1)
    window_col = min(width - 1, round(window_s / span * width))
    caption = Text("█ GPU", style=_GPU_STYLE) + Text("  ") + \
        Text("█ person", style=_PERSON_STYLE) + Text("  ") + \
        Text("▀ GPU and person", style=f"{_GPU_STYLE} on {_PERSON_STYLE}") + Text("  ") + \
        Text("█ past the window", style=_OVER_STYLE) + Text("  ¦ end of window")
    table = Table(title="Schedule", title_justify="left", caption=caption,
                  caption_justify="left")
    unit, per_hour = time_unit(schedule.makespan_s / 3600)
    for header in ("NAME", "WHERE", f"START ({unit})", f"END ({unit})"):
        table.add_column(header, justify="right" if "(" in header else "left", no_wrap=True)
    table.columns[0].overflow = "fold"
    table.add_column(f"0 … {span / 3600:g} h (¦ = end of window)", no_wrap=True)
    for slot in schedule.slots:
        first = int(slot.start_s / span * width)
        last = max(first + 1, round(slot.end_s / span * width))
        gpu = bool(slot.gpu_ids or slot.flight)
        style = _GPU_STYLE if gpu else _PERSON_STYLE
        block = "█"
        if gpu and slot.task.person:  # both: upper half GPU, lower half person
            style, block = f"{_GPU_STYLE} on {_PERSON_STYLE}", "▀"
        bar = Text()
        for col in range(width):
            inside = first <= col < last
            over = inside and col >= window_col and slot.end_s > window_s
            char = ("█" if over else block) if inside else ("¦" if col == window_col else " ")
            bar.append(char, style=_OVER_STYLE if over else (style if inside else "dim"))
        table.add_row(escape(slot.task.name), where(slot),
                      f"{slot.start_s / 3600 * per_hour:.1f}",
                      f"{slot.end_s / 3600 * per_hour:.1f}", bar)
    return table


def _plain(text: str) -> str:
    """``text`` with ``$`` escaped, so matplotlib does not read it as TeX math."""
    return text.replace("$", r"\$")


def gantt_figure(schedule: Schedule, *, window_s: int, title: str) -> "Figure":
    """The Gantt chart as a matplotlib figure (Agg): one row per slot, x in hours.

    Colours: GPU work green, person-only work orange, a stage that holds a GPU and a
    person drawn as both (upper half green, lower half orange); the part of a bar past
    the window is red; the window's end is a dashed line. A legend names each.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    slots = schedule.slots
    height_in = 1.6 + 0.35 * max(1, len(slots))
    figure = Figure(figsize=(10, height_in), dpi=110)
    axes = figure.add_subplot()
    window_h = window_s / 3600
    for row, slot in enumerate(slots):
        start_h, end_h = slot.start_s / 3600, slot.end_s / 3600
        halves = [(row - 0.4, 0.8, _PNG_GPU if slot.gpu_ids or slot.flight else _PNG_PERSON)]
        if (slot.gpu_ids or slot.flight) and slot.task.person:
            halves = [(row - 0.4, 0.4, _PNG_GPU), (row, 0.4, _PNG_PERSON)]
        inside = (start_h, min(end_h, window_h) - start_h)
        for bottom, height, color in halves:
            if inside[1] > 0:
                axes.barh(bottom, inside[1], height=height, left=start_h, align="edge",
                          color=color)
        if end_h > window_h:
            past = max(start_h, window_h)
            axes.barh(row - 0.4, end_h - past, height=0.8, left=past, align="edge",
                      color=_PNG_OVER)
        length_h = end_h - start_h
        wide = length_h >= 0.08 * max(schedule.makespan_s, window_s, 1) / 3600
        axes.text(start_h + length_h / 2 if wide else end_h, row,
                  where(slot) if wide else f" {where(slot)}", ha="center" if wide else "left",
                  va="center", fontsize=7)
    axes.axvline(window_h, color="black", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(slots)), [_plain(s.task.name) for s in slots], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("time from the first start (h)")
    axes.set_xlim(0, max(schedule.makespan_s, window_s) / 3600 * 1.02)
    axes.set_title(f"{_plain(title)}: {schedule.makespan_s / 3600:g} h reserved of a "
                   f"{window_h:g} h window")
    axes.grid(axis="x", alpha=0.3)
    both = (Patch(facecolor=_PNG_GPU), Patch(facecolor=_PNG_PERSON))
    figure.legend(handles=[Patch(facecolor=_PNG_GPU), Patch(facecolor=_PNG_PERSON), both,
                           Patch(facecolor=_PNG_OVER),
                           Line2D([], [], color="black", linestyle="--", linewidth=1)],
                  labels=list(LEGEND), loc="lower center", ncol=len(LEGEND), fontsize=8,
                  frameon=False, handler_map={tuple: HandlerTuple(ndivide=None, pad=0)})
    figure.tight_layout(rect=(0, 0.4 / height_in, 1, 1))  # 0.4 in at the bottom: the legend
    return figure


def gantt_png(schedule: Schedule, *, window_s: int, title: str) -> bytes:
    """:func:`gantt_figure` as PNG bytes. The caller writes them (atomically); nothing
    here touches the file system."""
    buffer = io.BytesIO()
    gantt_figure(schedule, window_s=window_s, title=title).savefig(buffer, format="png")
    return buffer.getvalue()
