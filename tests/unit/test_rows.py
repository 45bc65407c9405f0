"""Measurement rows: rows as the code before typed rows wrote them parse; every row kind
round-trips through its one writer and its one parser; torn lines and unknown kinds."""

from __future__ import annotations

import json
import math

import pytest

from flightplan.rows import (EVENTS, CheckpointInterval, CheckpointRejected, CheckpointSaved,
                             CheckpointTransfer, Evaluation, Finished, ForcedCheckpoint,
                             Measurement, Restore, StopEvent, Truncation, UnknownEvent,
                             as_number, encode_row, parse_row, parse_rows)

# Lines exactly as measurements.jsonl held them before rows were typed (one of each kind
# the trial, the Ray executor and textclf wrote), so published results keep parsing.
OLD_LINES = [
    '{"step": 0, "time": 1700000000.5, "event": "restore", "source": null, '
    '"resume_requested": false, "rejected": [], "message": "no checkpoint of this run; '
    'starting at step 0"}',
    '{"step": 0, "time": 1700000001.0, "event": "truncation", "fraction": 0.25}',
    '{"step": 0, "time": 1700000001.5, "load_s": 2.5, "planned_steps": 12, "steps_per_epoch": 6}',
    '{"step": 0, "time": 1700000002.0, "loss": 1.0986122886681098, "step_s": 0.031, '
    '"seq_len": 64, "tokens": 1024, "batch_size": 16, "lr": 0.001}',
    '{"step": 1, "time": 1700000002.5, "loss": "nan", "step_s": 0.03}',
    '{"step": 1, "time": 1700000003.0, "event": "checkpoint", "name": "step-000002", '
    '"bytes": 9000, "stall_s": 0.004, "persist_s": 0.12}',
    '{"step": 1, "time": 1700000003.1, "event": "checkpoint_interval", "interval_s": 10.0, '
    '"save_stall_s": 0.004, "persist_s": 0.12, "restore_s": 0.0, "restore_measured": false, '
    '"tolerated_loss_s": 10.0, "mtbi_s": null, "optimum_s": null, "formula": '
    '"tolerated_loss", "bound": "tolerated_loss", "transfer_s": 0.0}',
    '{"step": 2, "time": 1700000004.0, "event": "checkpoint_transfer", "name": '
    '"step-000002", "bytes": 9000, "wait_s": 0.2, "fetch_s": 0.1, "commit_s": 0.05, '
    '"node": "abc (127.0.0.1)"}',
    '{"step": 0, "time": 1700000004.5, "event": "checkpoint_rejected", "name": "step-000004", '
    '"reason": "sha256", "message": "model.safetensors: sha256 differs", "renamed_to": '
    '"step-000004.corrupt-sha256"}',
    '{"step": 2, "time": 1700000005.0, "event": "restore", "source": "step-000002", '
    '"restore_s": 0.4, "rejected": ["step-000004"], "not_yet_registered": ["scheduler"]}',
    '{"step": 3, "time": 1700000006.0, "event": "evaluation", "macro_f1": 0.42, '
    '"accuracy": 0.5, "eval_s": 1.25, "n_test": 32}',
    '{"step": 3, "time": 1700000006.5, "event": "forced_checkpoint", "name": "step-000003", '
    '"then": "stop"}',
    '{"step": 3, "time": 1700000007.0, "event": "stop", "rule": "non_finite_loss", '
    '"message": "loss is nan at step 1"}',
    '{"step": 3, "time": 1700000008.0, "event": "finished"}',
]


def _old_rows():
    return parse_rows(("\n".join(OLD_LINES) + "\n").encode())


def test_rows_written_before_typed_rows_parse_into_their_kinds():
    rows, consumed = _old_rows()
    assert consumed == len(("\n".join(OLD_LINES) + "\n").encode())
    assert [type(r) for r in rows] == [Restore, Truncation, Measurement, Measurement, Measurement,
                                       CheckpointSaved, CheckpointInterval, CheckpointTransfer,
                                       CheckpointRejected, Restore, Evaluation, ForcedCheckpoint,
                                       StopEvent, Finished]
    first, loss, nan_loss, save, transfer, restored, evaluation = (
        rows[0], rows[3], rows[4], rows[5], rows[7], rows[9], rows[10])
    assert (first.source, first.resume_requested, first.rejected) == (None, False, ())
    assert loss.step == 0 and loss.is_step and loss.values["loss"] == 1.0986122886681098
    assert nan_loss.values["loss"] == "nan" and math.isnan(nan_loss.number("loss"))
    assert (save.name, save.bytes, save.stall_s, save.persist_s) == ("step-000002", 9000,
                                                                     0.004, 0.12)
    assert (transfer.wait_s, transfer.fetch_s, transfer.commit_s) == (0.2, 0.1, 0.05)
    assert restored.rejected == ("step-000004",) and restored.not_yet_registered == ("scheduler",)
    assert evaluation.number("macro_f1") == 0.42 and evaluation.number("eval_s") == 1.25
    assert not rows[2].is_step and rows[2].number("planned_steps") == 12.0


def test_every_row_re_encodes_with_the_keys_it_was_read_from_and_parses_back_equal():
    rows, _ = _old_rows()
    for line, row in zip(OLD_LINES, rows, strict=True):
        written = json.loads(encode_row(row))
        assert written.items() >= json.loads(line).items()   # defaults may be added
        assert parse_row(written) == row


def test_a_measurement_encodes_non_finite_numbers_as_strings_and_reads_them_back():
    row = Measurement(5, 1.5, {"loss": math.inf, "lr": -math.inf, "g": math.nan, "ok": 2})
    line = encode_row(row)
    assert json.loads(line) == {"step": 5, "time": 1.5, "loss": "inf", "lr": "-inf",
                                "g": "nan", "ok": 2}
    back = parse_row(json.loads(line))
    assert back.number("loss") == math.inf and back.number("lr") == -math.inf
    assert math.isnan(back.number("g")) and back.number("ok") == 2.0


@pytest.mark.parametrize("name", ["step", "time", "event"])
def test_a_measurement_may_not_use_a_reserved_name(name):
    with pytest.raises(ValueError, match=f"measurement name '{name}' is reserved"):
        encode_row(Measurement(0, 0.0, {name: 1}))


def test_a_torn_last_line_and_non_rows_are_skipped():
    data = (OLD_LINES[3] + "\n" + "not json\n" + "[1, 2]\n" + '{"step": "x", "time": 1}\n'
            + '{"step": 1}\n' + OLD_LINES[5] + "\n" + OLD_LINES[6][:40]).encode()
    rows, consumed = parse_rows(data)
    assert [type(r) for r in rows] == [Measurement, CheckpointSaved]
    assert consumed == data.rfind(b"\n") + 1


def test_an_unknown_event_kind_is_kept_with_its_keys_and_round_trips():
    line = '{"step": 4, "time": 2.0, "event": "gpu_temperature", "celsius": 71.5}'
    row = parse_row(json.loads(line))
    assert isinstance(row, UnknownEvent)
    assert (row.event, row.values) == ("gpu_temperature", {"celsius": 71.5})
    assert json.loads(encode_row(row)) == json.loads(line)


def test_keys_an_event_does_not_have_are_dropped_and_missing_ones_default():
    row = parse_row({"step": 1, "time": 1.0, "event": "checkpoint", "name": "step-000001",
                     "extra": 3})
    assert row == CheckpointSaved(1, 1.0, name="step-000001", bytes=0, stall_s=0.0,
                                  persist_s=0.0)


def test_every_event_kind_has_one_class_and_round_trips():
    for kind, cls in EVENTS.items():
        row = parse_row({"step": 2, "time": 3.0, "event": kind})
        assert type(row) is cls
        assert json.loads(encode_row(row))["event"] == kind


@pytest.mark.parametrize("value, number", [(1, 1.0), (2.5, 2.5), ("inf", math.inf),
                                           (True, None), ("0.5", None), (None, None), ([1], None)])
def test_as_number_takes_numbers_and_the_non_finite_strings_only(value, number):
    assert as_number(value) == number


def test_a_save_from_a_gpu_carries_its_device_wait_and_copy_and_a_cpu_save_does_not():
    gpu = CheckpointSaved(2, 3.0, name="step-000002", bytes=10, stall_s=0.0125, persist_s=0.5,
                          device_wait_s=0.0075, copy_s=0.03125)
    line = json.loads(encode_row(gpu))
    assert (line["stall_s"], line["device_wait_s"], line["copy_s"]) == (0.0125, 0.0075, 0.03125)
    assert parse_row(line) == gpu
    cpu = CheckpointSaved(2, 3.0, name="step-000002", bytes=10, stall_s=0.0125, persist_s=0.5)
    assert set(json.loads(encode_row(cpu))) == {"step", "time", "event", "name", "bytes",
                                                "stall_s", "persist_s"}
