"""Checkpoint transfer time home: the figures from ``checkpoint_transfer`` rows, by hand."""

from __future__ import annotations

import pytest

from flightplan.rows import parse_row
from flightplan.transfer_time import TransferTally, checkpoint_transfer_s

ROWS = [parse_row({"time": 1.0, **row}) for row in [
    {"step": 1, "loss": 1.0},
    {"step": 1, "event": "checkpoint_transfer", "name": "step-000001", "bytes": 3_000_000,
     "wait_s": 0.25, "fetch_s": 0.5, "commit_s": 0.25, "node": "a"},
    {"step": 4, "event": "checkpoint_transfer", "name": "step-000004", "bytes": 1_000_000,
     "wait_s": 0.5, "fetch_s": 0.125, "commit_s": 0.125, "node": "a"},
    {"step": 6, "event": "checkpoint_transfer_failed", "name": "step-000006", "error": "x"},
    # a row written before wait_s was measured: its wait counts 0
    {"step": 8, "event": "checkpoint_transfer", "name": "step-000008", "bytes": 4_000_000,
     "fetch_s": 0.75, "commit_s": 0.25, "node": "b"},
]]


def test_figures_from_rows_by_hand():
    tally = TransferTally.from_rows(ROWS)
    # 3 transfers, 8 MB moved in 0.75 + 0.25 + 1.0 = 2.0 s after waits of 0.25 + 0.5 + 0
    assert (tally.checkpoints, tally.bytes, tally.moving_s, tally.wait_s) == (3, 8_000_000,
                                                                              2.0, 0.75)
    # durable there → durable home: (1.0 + 0.75 + 1.0) / 3; throughput 8 MB / 2 s
    assert tally.transfer_s == pytest.approx(2.75 / 3, rel=1e-15)
    assert tally.bytes_per_s == 4_000_000.0
    assert tally.figure() == {"transfer_s": tally.transfer_s, "bytes_per_s": 4_000_000.0,
                              "wait_s": 0.25, "checkpoints": 3}


def test_no_transfer_no_figure():
    tally = TransferTally.from_rows([parse_row({"step": 0, "time": 1.0, "loss": 1.0})])
    assert (tally.transfer_s, tally.bytes_per_s, tally.figure()) == (0.0, None, None)


def test_one_checkpoint_scales_by_its_own_bytes_when_a_throughput_is_known():
    figure = TransferTally.from_rows(ROWS).figure()
    # 2 MB / 4 MB/s + the mean wait 0.25 s
    assert checkpoint_transfer_s(figure, 2_000_000) == 0.75
    assert checkpoint_transfer_s({"transfer_s": 1.5, "bytes_per_s": None}, 2_000_000) == 1.5
    assert checkpoint_transfer_s(None, 2_000_000) == 0.0        # a run at home
    assert checkpoint_transfer_s({"transfer_s": "soon"}, 10) == 0.0


def test_a_streamed_checkpoint_moves_for_its_stream_s_and_trips_from_durable_to_durable():
    rows = [parse_row({"step": 2, "time": 1.0, "event": "checkpoint_transfer",
                       "name": "step-000002", "bytes": 6_000_000, "wait_s": 0.5,
                       "fetch_s": 0.25, "commit_s": 0.25, "stream_s": 3.0, "resent_bytes": 0,
                       "node": "a"}), ROWS[1]]
    tally = TransferTally.from_rows(rows)
    # moving: 3.0 s streamed + 0.75 s of the older row (fetch + commit); 9 MB in 3.75 s
    assert (tally.moving_s, tally.wait_s, tally.bytes_per_s) == (3.75, 0.75, 2_400_000.0)
    # durable on the flight → durable home: 0.5 + 0.25 + 0.25 and 0.25 + 0.5 + 0.25
    assert tally.transfer_s == 1.0
    assert checkpoint_transfer_s(tally.figure(), 2_400_000) == 1.0 + 0.375
