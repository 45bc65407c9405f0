"""``[[run]] processes`` against the executor: refused where it cannot start ranks, and on a
machine with GPUs beyond the run's ``gpus`` (one GPU a rank); any count on the CPU."""

from __future__ import annotations

import pytest

from flightplan.errors import SpecError
from flightplan.run.executors.contract import GpuLimit, check_processes
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.ray_executor import RayExecutor
from flightplan.spec import Run


def _run(name: str, **fields: object) -> Run:
    return Run.model_validate({"name": name, "tier": "essential", "duration": "1m", **fields})


def test_processes_default_to_one_and_must_be_positive() -> None:
    assert _run("a").processes == 1
    with pytest.raises(ValueError, match="processes"):
        _run("a", processes=0)


def test_only_the_local_executor_launches_ranks() -> None:
    assert LocalExecutor.launches_ranks is True and RayExecutor.launches_ranks is False


def test_ranks_on_an_executor_without_them_are_refused_naming_the_field() -> None:
    runs = [_run("control"), _run("ddp", processes=2)]
    with pytest.raises(SpecError) as refused:
        check_processes(runs, None, launches_ranks=False, source="c.toml")
    assert str(refused.value) == (
        "c.toml: run[1].processes: 'ddp' asks for 2 processes ([[run]] processes) but this "
        "executor starts one process per run; run it with the local executor or give "
        "processes = 1")
    assert refused.value.exit_code == 2


def test_on_gpus_each_rank_needs_a_gpu_of_the_run_and_on_the_cpu_any_count_runs() -> None:
    runs = [_run("ddp", processes=2, gpus=1)]
    with pytest.raises(SpecError) as refused:
        check_processes(runs, GpuLimit(2, "this machine"), launches_ranks=True, source=None)
    assert str(refused.value).endswith(
        "run[0].processes: 'ddp' asks for 2 processes but holds 1 GPU ([[run]] gpus); each "
        "process computes on a GPU of its own: give gpus = 2 or processes = 1")
    check_processes(runs, None, launches_ranks=True, source=None)                  # CPU
    check_processes([_run("ddp", processes=2, gpus=2)], GpuLimit(2, "this machine"),
                    launches_ranks=True, source=None)
