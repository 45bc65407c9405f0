"""Checkpoint interval: Young (1974), Daly (2006), the tolerated-loss bound and the schedule."""

from __future__ import annotations

import math

import pytest

from flightplan.trial.interval import (CheckpointSchedule, choose_interval, daly_interval,
                                     young_interval)


def test_young_when_the_save_is_small_against_m():
    # C = 18 s, M = 10 000 s: √(2·18·10 000) = √360 000 = 600 s; C/M = 0.0018 < 0.01
    choice = choose_interval(save_stall_s=18, persist_s=60, restore_s=40, tolerated_loss_s=1800,
                             mtbi_s=10_000)
    assert young_interval(18, 10_000) == 600.0
    assert (choice.formula, choice.bound, choice.interval_s) == ("young", "optimum", 600.0)


def test_daly_when_the_save_is_not_small():
    # C = 200 s, M = 5000 s, C/2M = 0.02, √(2CM) = √2e6:
    # T = √2e6·(1 + √0.02/3 + 0.02/9) − 200 = √2e6 + 200/3 + √2e6/450 − 200 ≈ 1284.02 s
    root = math.sqrt(2e6)
    expected = root + 200 / 3 + root / 450 - 200
    assert daly_interval(200, 5000) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1284.023, abs=1e-3)
    choice = choose_interval(save_stall_s=200, persist_s=100, restore_s=100, tolerated_loss_s=3600,
                             mtbi_s=5000)
    assert (choice.formula, choice.bound) == ("daly", "optimum")
    assert choice.interval_s == pytest.approx(expected, rel=1e-12)


def test_daly_is_m_when_the_save_exceeds_twice_m():
    assert daly_interval(300, 100) == 100


def test_tolerated_loss_bounds_the_optimum():
    # optimum 600 s, but L − D − R = 600 − 30 − 20 = 550 s
    choice = choose_interval(save_stall_s=18, persist_s=30, restore_s=20, tolerated_loss_s=600,
                             mtbi_s=10_000)
    assert (choice.interval_s, choice.bound, choice.optimum_s) == (550, "tolerated_loss", 600.0)


def test_without_m_the_interval_is_l_minus_d_minus_r():
    choice = choose_interval(save_stall_s=1, persist_s=60, restore_s=40, tolerated_loss_s=1800)
    assert (choice.interval_s, choice.formula, choice.optimum_s) == (1700, "tolerated_loss", None)


def test_never_shorter_than_the_persist_time():
    # L − D − R = 100 − 60 − 50 = −10 s: one save in flight at a time needs T ≥ D = 60 s
    choice = choose_interval(save_stall_s=1, persist_s=60, restore_s=50, tolerated_loss_s=100)
    assert (choice.interval_s, choice.bound) == (60, "persist_time")


def test_schedule_saves_first_then_by_the_measured_interval():
    schedule = CheckpointSchedule(tolerated_loss_s=1800, mtbi_s=None)
    assert schedule.due(0.0)
    schedule.record_start(0.0)
    assert not schedule.due(5000.0)  # first save still being written: C and D unknown
    first = schedule.record_save(0.01, 60.0)
    # no restore measured yet: R is estimated as D; T = 1800 − 60 − 60 = 1680 s
    assert first is not None and first.restore_measured is False and first.interval_s == 1680
    assert first.as_row(1, 2.0).EVENT == "checkpoint_interval"
    assert not schedule.due(1679.0) and schedule.due(1680.0)
    assert schedule.record_save(0.01, 60.0) is None  # unchanged: not recorded again
    schedule.record_restore(900.0)
    moved = schedule.record_save(0.01, 60.0)  # T = 1800 − 60 − 900 = 840 s, 50 % shorter
    assert moved is not None and moved.interval_s == 840 and moved.restore_measured


def test_the_transfer_home_shifts_the_bound_from_the_optimum_to_the_tolerated_loss():
    # optimum √(2·18·10 000) = 600 s; at home L − D − R = 1800 − 60 − 40 = 1700 s ≥ 600
    home = choose_interval(save_stall_s=18, persist_s=60, restore_s=40, tolerated_loss_s=1800,
                           mtbi_s=10_000)
    assert (home.interval_s, home.bound, home.transfer_s) == (600.0, "optimum", 0.0)
    # X = 1200 s home from the flight: L − D − X − R = 1800 − 60 − 1200 − 40 = 500 s < 600
    remote = choose_interval(save_stall_s=18, persist_s=60, restore_s=40,
                             tolerated_loss_s=1800, mtbi_s=10_000, transfer_s=1200)
    assert (remote.interval_s, remote.bound, remote.optimum_s) == (500, "tolerated_loss", 600.0)
    assert remote.as_row(1, 2.0).transfer_s == 1200
    # without M: 1800 − 60 − 100 − 40 = 1600 s; X never lowers T below D
    assert choose_interval(save_stall_s=1, persist_s=60, restore_s=40, tolerated_loss_s=1800,
                           transfer_s=100).interval_s == 1600
    floor = choose_interval(save_stall_s=1, persist_s=60, restore_s=40, tolerated_loss_s=1800,
                            transfer_s=1750)
    assert (floor.interval_s, floor.bound) == (60, "persist_time")


def test_schedule_takes_the_transfer_given_with_the_latest_save():
    schedule = CheckpointSchedule(tolerated_loss_s=1800, mtbi_s=None)
    schedule.record_start(0.0)
    first = schedule.record_save(0.01, 60.0)        # at home: 1800 − 60 − 60 = 1680 s
    assert first.interval_s == 1680 and first.transfer_s == 0.0
    # a figure arrived: 1800 − 60 − 900 − 60 = 780 s (moved > 25 %: recorded)
    moved = schedule.record_save(0.01, 60.0, transfer_s=900.0)
    assert moved is not None and (moved.interval_s, moved.transfer_s) == (780, 900.0)
