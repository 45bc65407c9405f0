"""``[[run]] processes`` against the executor: refused on a machine with GPUs beyond the run's
``gpus`` (one GPU a rank); any count on the CPU."""

from __future__ import annotations

import pytest

from flightplan.errors import SpecError
from flightplan.run.executors.contract import GpuLimit, check_processes
from flightplan.spec import Run


def _run(name: str, **fields: object) -> Run:
    return Run.model_validate({"name": name, "tier": "essential", "duration": "1m", **fields})


def test_processes_default_to_one_and_must_be_positive() -> None:
    assert _run("a").processes == 1
    with pytest.raises(ValueError, match="processes"):
        _run("a", processes=0)


def test_on_gpus_each_rank_needs_a_gpu_of_the_run_and_on_the_cpu_any_count_runs() -> None:
    runs = [_run("ddp", processes=2, gpus=1)]
    with pytest.raises(SpecError) as refused:
        check_processes(runs, GpuLimit(2, "this machine"), source=None)
    assert str(refused.value).endswith(
        "run[0].processes: 'ddp' asks for 2 processes but holds 1 GPU ([[run]] gpus); each "
        "process computes on a GPU of its own: give gpus = 2 or processes = 1")
    check_processes(runs, None, source=None)                  # CPU
    check_processes([_run("ddp", processes=2, gpus=2)], GpuLimit(2, "this machine"),
                    source=None)
