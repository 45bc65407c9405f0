"""textclf's cost model: re-estimates with numbers worked out by hand."""

from __future__ import annotations

import pytest

from dataclasses import replace

from flightplan.goodput import CAUSES
from flightplan.rows import Restore, parse_row
from flightplan.tasks.estimate import PilotFigures, figures_from_rows
from flightplan.tasks.estimate import estimate_run_seconds as generic_estimate
from flightplan.tasks.textclf.cost_model import (EncoderFigures, RunShape, encoder_figures,
                                                 estimate_run_seconds, forward_seconds)

# slope of the forward line: (0.8 − 0.2) / (4096 − 1024) = 1.953125e-4 s per token;
# one test example alone: (20 − 6 − 2) / 32 = 0.375 s
PILOT = PilotFigures(n_train=600, n_test=300, pilot_n_train=192, pilot_n_test=32, setup_s=2.0,
                     load_s=20.0, step_s=0.01, eval_s=0.1, save_stall_s=0.2, persist_s=1.0,
                     restore_s=2.0, output_s=3.0, pilot_steps=12, planned_steps=114)
FIGURES = EncoderFigures(pilot=PILOT, max_length=128, encode_total_s=6.0,
                         short_tokens=1024.0, short_fwd_s=0.2, long_tokens=4096.0,
                         long_fwd_s=0.8, mean_len=150.0)
CONTROL = RunShape("control", "essential", 128, 16, 3, trains_encoder=False)
LORA = RunShape("lora-r8", "essential", 128, 16, 3, trains_encoder=True)
LORA_256 = RunShape("lora-r8-len256", "useful", 256, 16, 3, trains_encoder=True)


def test_forward_time_is_the_line_through_short_and_long_batches():
    assert forward_seconds(1024, FIGURES) == pytest.approx(0.2)
    assert forward_seconds(4096, FIGURES) == pytest.approx(0.8)
    assert forward_seconds(7168, FIGURES) == pytest.approx(1.4)        # extrapolated
    assert forward_seconds(512, FIGURES) == pytest.approx(0.1)         # 0.2 · 512 / 1024
    flat = replace(FIGURES, long_tokens=1024.0, long_fwd_s=0.2)
    assert forward_seconds(2048, flat) == pytest.approx(0.4)           # proportional
    # noise: the long batches ran faster; pooled 1.0 s per 5120 tokens
    noisy = replace(FIGURES, short_fwd_s=0.6, long_fwd_s=0.4)
    assert forward_seconds(1024, noisy) == pytest.approx(0.2)


def test_control_re_estimate_by_hand():
    assert FIGURES.one_example_s == 0.375
    est = estimate_run_seconds(CONTROL, FIGURES, tolerated_loss_s=60)
    # load: 2 + 6 · 600/192 + 300 · 0.375 = 2 + 18.75 + 112.5
    assert est["load_s"] == pytest.approx(133.25)
    # steps ceil(600/16) · 3 = 38 · 3 = 114 head steps of 0.01 s; 3 evals of 0.1 · 300/32
    assert est["steps"] == 114 and est["train_s"] == pytest.approx(1.14)
    assert est["eval_s"] == pytest.approx(2.8125)
    # interval L − D − R = 60 − 1 − 2 = 57 s; saves 1 + floor(1.14 / 57) = 1
    assert est["interval_s"] == 57.0 and est["checkpoints"] == 1
    assert est["total_s"] == pytest.approx(133.25 + 1.14 + 2.8125 + 0.2 + 3)


def test_adapter_re_estimate_by_hand():
    est = estimate_run_seconds(LORA, FIGURES, tolerated_loss_s=60)
    # 16 · 128 = 2048 tokens → forward 0.4 s → step 3 · 0.4 = 1.2 s; train 114 · 1.2
    assert est["tokens_per_batch"] == 2048.0 and est["step_s"] == pytest.approx(1.2)
    assert est["train_s"] == pytest.approx(136.8)
    # load = setup 2 s; one eval 300 · 0.375 = 112.5 s; × 3 epochs
    assert est["load_s"] == 2.0 and est["eval_s"] == pytest.approx(337.5)
    # saves 1 + floor(136.8 / 57) = 3
    assert est["checkpoints"] == 3
    assert est["total_s"] == pytest.approx(2 + 136.8 + 337.5 + 0.6 + 3)


def test_long_inputs_cost_more_tokens_steps_and_evaluation():
    est = estimate_run_seconds(LORA_256, FIGURES, tolerated_loss_s=60)
    # no kept_mean from the data check: kept(256) = min(150, 256) = 150 tokens per input,
    # 16 · 150 = 2400 tokens → 0.2 + 1376 · 1.953125e-4 = 0.46875 s forward → 1.40625 s/step
    assert est["tokens_per_batch"] == 2400.0 and est["step_s"] == pytest.approx(1.40625)
    assert est["train_s"] == pytest.approx(160.3125)
    # eval: 112.5 · min(150, 256) / min(150, 128) = 131.8359375 s; × 3
    assert est["eval_s"] == pytest.approx(395.5078125)
    assert est["checkpoints"] == 3                                 # 1 + floor(160.3 / 57)
    assert est["total_s"] == pytest.approx(2 + 160.3125 + 395.5078125 + 0.6 + 3)


def test_steps_compute_the_tokens_the_inputs_keep():
    kept = replace(FIGURES, kept_len={128: 96.0, 256: 112.0})
    est = estimate_run_seconds(LORA_256, kept, tolerated_loss_s=60)
    # 16 · 112 = 1792 tokens → 0.2 + 768 · 1.953125e-4 = 0.35 s forward → 1.05 s/step
    assert est["tokens_per_batch"] == 1792.0 and est["step_s"] == pytest.approx(1.05)
    assert est["train_s"] == pytest.approx(119.7)                  # 114 steps
    # eval: 300 · 0.375 · 112 / 96 = 131.25 s; × 3
    assert est["eval_s"] == pytest.approx(393.75)
    assert est["checkpoints"] == 3                                 # 1 + floor(119.7 / 57)
    assert est["total_s"] == pytest.approx(2 + 119.7 + 393.75 + 0.6 + 3)
    # a max_length the data check did not measure falls back to min(mean_len, L)
    assert kept.kept(64) == 64.0 and kept.kept(512) == 150.0


def test_mean_time_between_interruptions_shortens_the_interval():
    est = estimate_run_seconds(LORA, FIGURES, tolerated_loss_s=60, mtbi_s=1000)
    # Young: √(2 · 0.2 · 1000) = 20 s; saves 1 + floor(136.8 / 20) = 7 → 1.4 s
    assert est["interval_s"] == pytest.approx(20.0) and est["checkpoints"] == 7
    # 136.8 / 1000 = 0.1368 interruptions expected, each a new process that loads again
    # (2 s), restores (R = 2 s) and redoes half an interval (10 s): 0.1368 · 14 = 1.9152 s
    assert est["interruptions"] == pytest.approx(0.1368)
    assert (est["parts"]["restore"], est["parts"]["lost"]) == (pytest.approx(0.2736),
                                                                pytest.approx(1.368))
    # its load is the corpus read and tokenized (setup_s, 2 s): data preparation
    assert est["parts"]["data"] == pytest.approx(2 * 1.1368)
    assert est["parts"]["start_load"] == 0.0
    assert est["total_s"] == pytest.approx(2 + 136.8 + 337.5 + 1.4 + 3 + 1.9152)


def test_the_transfer_home_shortens_the_interval_and_is_reported_beside_the_total():
    remote = replace(FIGURES, pilot=replace(PILOT, transfer_s=27.0))
    est = estimate_run_seconds(LORA, remote, tolerated_loss_s=60)
    # L − D − X − R = 60 − 1 − 27 − 2 = 30 s; saves 1 + floor(136.8 / 30) = 5 → 1.0 s
    assert est["interval_s"] == 30.0 and est["checkpoints"] == 5
    # the last checkpoint home (27 s) holds the run's end: it is in the total
    assert est["parts"]["transfer"] == 27.0
    assert est["total_s"] == pytest.approx(2 + 136.8 + 337.5 + 1.0 + 3 + 27)
    assert est["transfer_s"] == 135.0              # 5 · 27 s, the others beside the loop
    assert estimate_run_seconds(LORA, FIGURES, tolerated_loss_s=60)["transfer_s"] == 0.0


def test_batch_size_changes_steps_and_tokens():
    est = estimate_run_seconds(RunShape("b32", "useful", 128, 32, 1, True), FIGURES,
                               tolerated_loss_s=60)
    # steps ceil(600/32) = 19; 4096 tokens → 2.4 s; train 45.6 s; only the first save
    assert est["steps"] == 19 and est["train_s"] == pytest.approx(45.6)
    assert est["checkpoints"] == 1
    assert est["total_s"] == pytest.approx(2 + 45.6 + 112.5 + 0.2 + 3)


def test_encoder_figures_by_hand():
    rows = [parse_row({"time": 1.0, **row}) for row in [
        {"step": 0, "encode_s": 0.30, "tokens": 32 * 40, "seq_len": 40},
        {"step": 0, "encode_s": 0.10, "tokens": 32 * 10, "seq_len": 10},
        {"step": 0, "encode_s": 0.50, "tokens": 32 * 64, "seq_len": 64},
        {"step": 0, "encode_s": 0.20, "tokens": 32 * 20, "seq_len": 20},
        {"step": 0, "load_s": 2.5, "planned_steps": 30},
        {"step": 0, "loss": 1.25, "step_s": 0.9, "seq_len": 64},
        {"step": 1, "event": "checkpoint", "name": "step-000001", "stall_s": 0.02,
         "persist_s": 0.3},
        {"step": 1, "loss": 1.0, "step_s": 0.01, "seq_len": 64},
        {"step": 2, "loss": 0.75, "step_s": 0.03, "seq_len": 64},
        {"step": 2, "event": "evaluation", "macro_f1": 0.5, "eval_s": 0.4},
        {"step": 2, "output_s": 0.6},
    ]]
    resumed = [Restore(1, 1.0, source="step-000001", restore_s=0.7)]
    check = {"splits": {"train": {"rows": 240}, "test": {"rows": 80}},
             "lengths": {"mean": 131.5}, "wall_s": 0.5,
             "truncation": [{"max_length": 64, "truncated": 200, "total": 320, "fraction": 0.625,
                             "kept_mean": 58.25, "runs": ["control"]}]}
    pilot = figures_from_rows(rows, resumed, n_train=240, n_test=80, setup_s=0.5,
                              pilot_n_train=48, pilot_n_test=8, started_at=0.0, ended_at=2.0)
    figures = encoder_figures(rows, pilot, check)
    # encode batches without the first logged (1280 tokens, warm-up), sorted by tokens:
    # 320 | 640, 2048
    assert (figures.short_tokens, figures.short_fwd_s) == (320.0, pytest.approx(0.1))
    assert (figures.long_tokens, figures.long_fwd_s) == (1344.0, pytest.approx(0.35))
    assert figures.encode_total_s == pytest.approx(1.1)         # the pass, warm-up included
    assert figures.max_length == 64
    # the generic figures, read once by the runner, are the ones the model uses
    assert figures.pilot is pilot
    assert pilot.step_s == pytest.approx(0.02)
    assert (pilot.load_s, pilot.eval_s, pilot.output_s) == (2.5, 0.4, 0.6)
    assert (pilot.save_stall_s, pilot.persist_s, pilot.restore_s) == (0.02, 0.3, 0.7)
    assert (pilot.n_train, pilot.n_test, figures.mean_len) == (240, 80, 131.5)
    assert figures.kept_len == {64: 58.25} and figures.kept(64) == 58.25
    # one test example alone: (2.5 − 1.1 − 0.5) / 8
    assert figures.one_example_s == pytest.approx(0.1125)


def test_the_control_and_the_generic_re_estimate_share_one_formula():
    # same pilot (X = 4 s from a flight), same 114 steps of the head's 0.01 s: the two models
    # differ only in what loading and evaluating cost, never in steps, saves or transfers
    remote = replace(FIGURES, pilot=replace(PILOT, transfer_s=4.0))
    textclf = estimate_run_seconds(CONTROL, remote, tolerated_loss_s=60, mtbi_s=500)
    generic = generic_estimate(remote.pilot, steps=114, tolerated_loss_s=60, mtbi_s=500)
    shared = ("steps", "step_s", "train_s", "interval_s", "checkpoints", "checkpoint_s",
              "output_s", "transfer_s", "interruptions")
    assert {k: textclf[k] for k in shared} == {k: generic[k] for k in shared}
    same_parts = ("waiting", "restore", "steps", "lost", "checkpoint", "output", "transfer")
    assert {c: textclf["parts"][c] for c in same_parts} == \
        {c: generic["parts"][c] for c in same_parts}
    # Young with X: √(2 · 0.2 · 500) ≈ 14.1 s; one save in 1.14 s of training, 4 s home
    assert textclf["checkpoints"] == 1 and textclf["transfer_s"] == 4.0
    # the control's whole load is data: the corpus read and tokenized (setup_s, 2 s) and
    # its embedding passes, 300 · 0.375 + 6 · 600/192 = 131.25 s, times the processes
    # (1 + 1.14 / 500)
    assert textclf["parts"]["data"] == pytest.approx((2 + 131.25) * (1 + 1.14 / 500))
    for est in (textclf, generic):
        assert list(est["parts"]) == list(CAUSES)
        assert est["total_s"] == pytest.approx(sum(est["parts"].values()))
