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

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from flightplan.plan.schedule import Schedule, Slot

__all__ = ["gantt_table", "gantt_png", "where"]

_GPU_STYLE, _PERSON_STYLE, _OVER_STYLE = "green", "yellow", "bold red"


def where(slot: Slot) -> str:
    """``"F1 G0"`` (flight 1, GPU 0), ``"F1 G0,1 +person"``, ``"F2"`` or ``"person"``."""
    parts = []
    if slot.flight is not None:
        parts.append(f"F{slot.flight}" + (f" G{','.join(map(str, slot.gpu_ids))}" if slot.gpu_ids else ""))
    if slot.task.person:
        parts.append("person" if not parts else "+person")
    return " ".join(parts)


def gantt_table(schedule: Schedule, *, window_s: int, width: int = 40) -> Table:
    """A rich table: name, where, start/end (h) and a bar of ``width`` characters.

    Each character stands for ``max(makespan, window) / width`` seconds; ``¦`` marks the
    end of the window.
    """
    span = max(schedule.makespan_s, window_s, 1)
    window_col = min(width - 1, round(window_s / span * width))
    table = Table(title="Schedule", title_justify="left")
    for header in ("NAME", "WHERE", "START (h)", "END (h)"):
        table.add_column(header, justify="right" if "(h)" in header else "left", no_wrap=True)
    table.columns[0].overflow = "fold"
    table.add_column(f"0 … {span / 3600:g} h (¦ = end of window)", no_wrap=True)
    for slot in schedule.slots:
        first = int(slot.start_s / span * width)
        last = max(first + 1, round(slot.end_s / span * width))
        style = _GPU_STYLE if slot.gpu_ids or slot.flight else _PERSON_STYLE
        bar = Text()
        for col in range(width):
            inside = first <= col < last
            over = inside and col >= window_col and slot.end_s > window_s
            char = "█" if inside else ("¦" if col == window_col else " ")
            bar.append(char, style=_OVER_STYLE if over else (style if inside else "dim"))
        table.add_row(escape(slot.task.name), where(slot), f"{slot.start_s / 3600:.1f}",
                      f"{slot.end_s / 3600:.1f}", bar)
    return table


def _plain(text: str) -> str:
    """``text`` with ``$`` escaped, so matplotlib does not read it as TeX math."""
    return text.replace("$", r"\$")


def gantt_png(schedule: Schedule, *, window_s: int, title: str) -> bytes:
    """A PNG Gantt chart (bytes): rows per slot, x in hours, the window as a dashed line.

    The caller writes it (atomically); nothing here touches the file system.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    slots = schedule.slots
    figure = Figure(figsize=(10, 1.2 + 0.35 * max(1, len(slots))), dpi=110)
    axes = figure.add_subplot()
    for row, slot in enumerate(slots):
        start_h, length_h = slot.start_s / 3600, (slot.end_s - slot.start_s) / 3600
        color = "tab:green" if slot.gpu_ids or slot.flight else "tab:orange"
        if slot.end_s > window_s:
            color = "tab:red"
        axes.broken_barh([(start_h, length_h)], (row - 0.4, 0.8), facecolors=color)
        wide = length_h >= 0.08 * max(schedule.makespan_s, window_s, 1) / 3600
        axes.text(start_h + length_h / 2 if wide else start_h + length_h, row,
                  where(slot) if wide else f" {where(slot)}", ha="center" if wide else "left",
                  va="center", fontsize=7)
    axes.axvline(window_s / 3600, color="black", linestyle="--", linewidth=1)
    axes.text(window_s / 3600, -0.9, " end of window", fontsize=8, va="bottom")
    axes.set_yticks(range(len(slots)), [_plain(s.task.name) for s in slots], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("time from the first start (h)")
    axes.set_xlim(0, max(schedule.makespan_s, window_s) / 3600 * 1.02)
    axes.set_title(f"{_plain(title)}: {schedule.makespan_s / 3600:g} h reserved of a "
                   f"{window_s / 3600:g} h window")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
