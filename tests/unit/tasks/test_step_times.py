"""One reading of step times (flightplan.tasks.estimate.step_times): the pilot's re-estimate
(figures_from_rows) and ``plan --from`` (calibration.measure.run_figures) give the same steady step
time for the same rows, whatever the task logs, with the warm-up rule worked out by hand."""

from __future__ import annotations

import pytest

from flightplan.plan.calibration.measure import run_figures
from flightplan.rows import parse_row
from flightplan.tasks.estimate import figures_from_rows, step_times

START = 100.0
LOGGED = [  # a task that logs step_s; the process started at 100 s
    {"step": 0, "event": "process_start", "time": 100.0},
    {"step": 0, "event": "restore", "time": 101.0},
    {"step": 0, "load_s": 2.0, "planned_steps": 30, "time": 103.0},
    {"step": 0, "loss": 1.25, "step_s": 0.9, "time": 104.0},
    {"step": 1, "loss": 1.0, "step_s": 0.4, "time": 104.5},
    {"step": 2, "event": "checkpoint", "name": "step-000002", "stall_s": 0.2,
     "persist_s": 0.3, "time": 104.8},
    {"step": 2, "loss": 0.75, "step_s": 0.6, "time": 105.5},
    {"step": 2, "event": "evaluation", "macro_f1": 0.5, "eval_s": 0.8, "time": 106.4},
]
STAMPED = [  # a task that logs only its loss
    {"step": 0, "event": "process_start", "time": 100.0},
    {"step": 0, "loss": 1.25, "planned_steps": 30, "time": 102.5},
    {"step": 1, "event": "checkpoint", "name": "step-000001", "stall_s": 0.02,
     "persist_s": 0.3, "time": 102.6},
    {"step": 1, "loss": 1.0, "time": 103.1},
    {"step": 2, "event": "evaluation", "r2": 0.5, "time": 104.3},
    {"step": 2, "loss": 0.75, "time": 104.5},
]
RESUMED = [{"step": 1, "event": "restore", "source": "step-000001", "restore_s": 0.7,
            "time": 200.0}]


def _rows(raw):
    return [parse_row(row) for row in raw]


def _pilot_step_s(raw) -> float:
    return figures_from_rows(_rows(raw), _rows(RESUMED), n_train=240, n_test=80, setup_s=0.5,
                             pilot_n_train=48, pilot_n_test=8, started_at=START,
                             ended_at=107.0).step_s


@pytest.mark.parametrize(("raw", "by_hand"), [
    (LOGGED, (0.4 + 0.6) / 2),    # logged step_s, the first (0.9 s, warm-up) left out
    (STAMPED, (0.5 + 0.2) / 2),   # gaps since the row before: after the checkpoint row
                                  # 0.5 s, after the evaluation row 0.2 s; the first left out
])
def test_the_pilots_reestimate_and_plan_from_agree_on_the_same_rows(raw, by_hand) -> None:
    assert _pilot_step_s(raw) == pytest.approx(by_hand)
    assert run_figures(_rows(raw)).step_s == pytest.approx(by_hand)


def test_the_first_step_of_every_process_is_warm_up() -> None:
    resumed = LOGGED + [
        {"step": 2, "event": "process_start", "time": 300.0},
        {"step": 2, "event": "restore", "source": "step-000002", "restore_s": 0.5, "time": 301.0},
        {"step": 2, "loss": 0.75, "step_s": 1.5, "time": 303.0},   # warm-up again
        {"step": 3, "loss": 0.5, "step_s": 0.5, "time": 303.5},
    ]
    times = step_times(_rows(resumed), START)
    assert times.warmup == [True, False, False, True, False]
    assert times.step_s == pytest.approx((0.4 + 0.6 + 0.5) / 3)
    assert times.train_s == pytest.approx(0.9 + 0.4 + 0.6 + 1.5 + 0.5)
    figures = run_figures(_rows(resumed))
    assert (figures.steps, figures.step_s) == (5, pytest.approx(0.5))


def test_a_single_step_row_counts_though_it_is_warm_up() -> None:
    one = step_times(_rows(STAMPED[:2]), START)
    assert (one.warmup, one.step_s) == ([True], pytest.approx(2.5))
    assert step_times([], START).step_s == 0.0
