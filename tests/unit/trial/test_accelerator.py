"""The run's device, threads and precision helpers (trial/accelerator.py), on this CPU."""

from __future__ import annotations

import pytest
import torch

from flightplan.errors import ArgumentError
from flightplan.trial.accelerator import (autocast, cpu_slots, device, flight_threads,
                                          grad_scaler, set_deterministic, torch_threads)


def test_threads_come_from_the_environment_and_bad_values_name_the_variable():
    assert torch_threads({}) == 1
    assert torch_threads({"FLIGHTPLAN_TORCH_THREADS": "3"}) == 3
    with pytest.raises(ArgumentError, match="FLIGHTPLAN_TORCH_THREADS='0'"):
        torch_threads({"FLIGHTPLAN_TORCH_THREADS": "0"})
    assert cpu_slots(1, cores=16) == 16


def test_a_workers_threads_are_the_flights_cores_over_the_runs_it_holds_at_once():
    # one run per GPU at once: cores // GPUs, at least one
    assert flight_threads(1, cores=16, environ={}) == 16
    assert flight_threads(2, cores=16, environ={}) == 8
    assert flight_threads(3, cores=16, environ={}) == 5       # 16 // 3, 1 core left idle
    assert flight_threads(8, cores=4, environ={}) == 1        # more GPUs than cores
    # without GPUs one thread each, and cpu_slots(1, cores) = cores runs: 16 / 16
    assert flight_threads(0, cores=16, environ={}) == 1 == 16 // cpu_slots(1, cores=16)
    # the variable, when set, wins on any flight
    assert flight_threads(1, cores=16, environ={"FLIGHTPLAN_TORCH_THREADS": "4"}) == 4
    assert flight_threads(0, cores=16, environ={"FLIGHTPLAN_TORCH_THREADS": "2"}) == 2
    with pytest.raises(ArgumentError, match="FLIGHTPLAN_TORCH_THREADS='x'"):
        flight_threads(1, cores=16, environ={"FLIGHTPLAN_TORCH_THREADS": "x"})


def test_device_is_the_cpu_when_asked_and_refuses_unknown_names(monkeypatch):
    monkeypatch.setenv("FLIGHTPLAN_DEVICE", "cpu")
    assert device() == torch.device("cpu")
    monkeypatch.setenv("FLIGHTPLAN_DEVICE", "tpu")
    with pytest.raises(ArgumentError, match="FLIGHTPLAN_DEVICE='tpu': give cpu or cuda"):
        device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("FLIGHTPLAN_DEVICE", "cuda")
        with pytest.raises(ArgumentError, match="sees no CUDA device"):
            device()


def test_on_a_gpu_machine_each_rank_computes_on_the_gpu_at_its_local_rank(monkeypatch):
    """Where torch sees CUDA (here: said so, with two GPUs), ``device()`` is ``cuda:0`` for
    one process and ``cuda:LOCAL_RANK`` for a rank; a rank past the run's GPUs is refused."""
    monkeypatch.delenv("FLIGHTPLAN_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert device() == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert device() == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ArgumentError, match=r"LOCAL_RANK='2' but this run sees 2 GPUs; give "
                                            r"the run \[\[run\]\] gpus = processes"):
        device()


def test_precision_helpers_on_the_cpu():
    cpu = torch.device("cpu")
    with autocast("bf16", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast("fp32", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    with pytest.raises(ArgumentError, match="fp16 needs a CUDA device"):
        autocast("fp16", cpu)
    with pytest.raises(ArgumentError, match="precision 'fp8'"):
        grad_scaler("fp8", cpu)
    scaler = grad_scaler("bf16", cpu)               # no loss scaling outside fp16
    assert not scaler.is_enabled() and scaler.scale(torch.tensor(2.0)).item() == 2.0


def test_deterministic_settings_leave_a_cpu_run_alone():
    before = torch.are_deterministic_algorithms_enabled()
    set_deterministic(torch.device("cpu"))
    assert torch.are_deterministic_algorithms_enabled() == before


def test_visible_gpus_read_without_torch(tmp_path):
    from flightplan.trial.accelerator import visible_gpus

    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia1", "nvidia0", "nvidia10", "nvidiactl", "nvidia-uvm", "null"):
        (dev / name).write_text("")
    assert visible_gpus({}, dev) == ["0", "1", "10"]                 # the driver's files
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,GPU-ab12"}, dev) == ["2", "GPU-ab12"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,-1,4"}, dev) == ["3"]   # as CUDA reads it
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, dev) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, dev) == []
    assert visible_gpus({}, tmp_path / "none") == []
