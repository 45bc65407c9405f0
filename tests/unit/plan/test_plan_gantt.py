"""The Gantt charts of the illustration campaign extended by 30 h (78 h of a 72 h window).

Its ``install`` stage holds a GPU and a person, ``report`` is person-only work that ends
6 h past the window: the PNG must draw the first in both colours and the part of the
second past the window in red, with a legend naming every colour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.colors import to_rgba

from flightplan.plan import plan_campaign
from flightplan.plan.gantt import LEGEND, gantt_figure, gantt_png
from flightplan.spec import load_spec
from flightplan.units import Duration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def extended():
    spec = load_spec(ROOT / "examples" / "illustration" / "campaign.toml")
    return plan_campaign(spec, extend={"lora-r8": Duration(30 * 3600)})


def _bars(axes) -> list[tuple[float, float, float, float, tuple]]:
    """(x, y, width, height, colour) of every bar, from the axes' patches."""
    return [(p.get_x(), p.get_y(), p.get_width(), p.get_height(), p.get_facecolor())
            for p in axes.patches]


def test_a_gpu_and_person_stage_is_drawn_in_both_colours(extended) -> None:
    figure = gantt_figure(extended.schedule, window_s=extended.window_s, title="illustration")
    axes = figure.axes[0]
    names = [t.get_text() for t in axes.get_yticklabels()]
    row = names.index("install")                      # 0 h to 2 h, F1 G0 + person
    install = sorted((y, color) for x, y, w, h, color in _bars(axes)
                     if row - 0.5 < y < row + 0.5 and (x, w) == (0.0, 2.0))
    assert install == [(row - 0.4, to_rgba("tab:green")), (row, to_rgba("tab:orange"))]


def test_work_past_the_window_is_red_from_the_window_on(extended) -> None:
    figure = gantt_figure(extended.schedule, window_s=extended.window_s, title="illustration")
    axes = figure.axes[0]
    row = [t.get_text() for t in axes.get_yticklabels()].index("report")   # 68 h to 78 h
    report = sorted((x, w, color) for x, y, w, h, color in _bars(axes)
                    if row - 0.5 < y < row + 0.5)
    assert report == [(68.0, 4.0, to_rgba("tab:orange")), (72.0, 6.0, to_rgba("tab:red"))]


def test_the_legend_names_every_colour_and_the_png_is_written(extended) -> None:
    figure = gantt_figure(extended.schedule, window_s=extended.window_s, title="illustration")
    assert [t.get_text() for t in figure.legends[0].get_texts()] == list(LEGEND)
    assert gantt_png(extended.schedule, window_s=extended.window_s,
                     title="illustration")[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_short_campaign_shows_its_starts_and_ends_in_seconds() -> None:
    """The tiny campaign's schedule is 85 s long: in hours every start and end read 0.0."""
    import re

    from rich.console import Console

    from flightplan.plan.gantt import gantt_table

    result = plan_campaign(load_spec(ROOT / "examples" / "tiny" / "campaign.toml"))
    assert result.schedule.makespan_s == 85          # 10 + 10 s of stages, 15 + 20 + 30 s of runs
    console = Console(width=200, record=True, color_system=None)
    console.print(gantt_table(result.schedule, window_s=result.window_s))
    text = console.export_text()
    assert "START (s)" in text and "END (s)" in text and "(h)" not in text.split("\n", 3)[2]
    rows = {m[0]: (float(m[1]), float(m[2]))
            for m in re.findall(r"┃? *│? ?([\w-]+) +│ F1 G0 +│ +([\d.]+) │ +([\d.]+) │", text)}
    assert rows["data-check"] == (0.0, 10.0) and rows["pilot"] == (10.0, 20.0)
    assert sorted(end - start for start, end in rows.values()) == [10.0, 10.0, 15.0, 20.0, 30.0]
    assert max(end for _, end in rows.values()) == 85.0
