"""Data-parallel runs (two ranks on the CPU with gloo) killed and resumed: the whole group
SIGKILLed after a checkpoint, one rank alone SIGKILLed after a checkpoint, each resumed in
new processes to final weights, optimizer state, predictions and metrics bitwise equal to an
uninterrupted run; a resume at another world size refused in one line (or, with
``reshard``, restored from the full state by one process); a rank that raises
ends the run as crashed with its traceback in the log; a non-finite loss on one rank stops
every rank with one stop record; the leave signal sent to every rank ends both with the
same durable checkpoint (exit 75), from which the run resumes bitwise. The ranks are
started as the local executor starts them (:class:`~flightplan.run.executors.ranks.RankGroup`,
the real worker). The tasks are beside this file: ``ddp_task.py`` under DDP and (with
``"fsdp": true``) FSDP2, ``lightning_ddp_task.py`` and ``trainer_ddp_task.py``; the
kill-and-resume cases are written once and run for each task (:data:`FLAVOURS`)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.ranks import RankGroup
from flightplan.rundir import RunDir
from flightplan.trial.checkpoint_io import load_checkpoint
from flightplan.run.worker import EXIT_CRASHED, EXIT_PREEMPTED, EXIT_STOPPED

HERE = Path(__file__).resolve().parent
HANG_S = 300.0
"""A group that takes longer has hung (a safety net, not a speed check)."""
STEPS = 12
PRODUCTS = ("final/model.safetensors", "final/optimizer.safetensors", "predictions.csv",
            "metrics.json")
LIBRARY_PRODUCTS = PRODUCTS + ("artifact/model.safetensors",)

pytestmark = pytest.mark.slow


def _trial_json(run_dir: Path, *, resume: bool = False, task: str = "ddp_task.py",
                reshard: bool = False, **params: object) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "trial.json"
    defaults = ({"steps": STEPS, "checkpoint_at": [2, 5, 8]}
                if task == "ddp_task.py" else {"steps": STEPS, "every": 3})
    path.write_text(json.dumps({
        "run_id": "ddp-0123456789", "name": "ddp", "task": task,
        "campaign_dir": str(HERE), "resume": resume, "reshard": reshard,
        "params": {**defaults, **params}}))
    return path


@dataclass(frozen=True)
class Flavour:
    """A data-parallel task as the kill-and-resume cases run it: its file, the params it is
    always given, and the products its resume must match bitwise."""

    name: str
    task: str
    params: dict[str, object] = field(default_factory=dict)
    products: tuple[str, ...] = PRODUCTS

    def trial_json(self, run_dir: Path, *, resume: bool = False, reshard: bool = False,
                   **params: object) -> Path:
        return _trial_json(run_dir, resume=resume, task=self.task, reshard=reshard,
                           **{**self.params, **params})

    def products_of(self, run_dir: Path) -> dict[str, bytes]:
        return {name: (run_dir / name).read_bytes() for name in self.products}


DDP = Flavour("ddp", "ddp_task.py")
"""The native loop under DistributedDataParallel; saves after steps 2, 5 and 8."""
FSDP = Flavour("fsdp", "ddp_task.py", {"fsdp": True})
"""The same loop with every parameter sharded over the two ranks by FSDP2's fully_shard."""
LIGHTNING = Flavour("lightning", "lightning_ddp_task.py", products=LIBRARY_PRODUCTS)
"""Lightning with strategy="ddp"; saves every 3 steps."""
TRAINER = Flavour("trainer", "trainer_ddp_task.py", {"save_steps": 3}, LIBRARY_PRODUCTS)
"""The Hugging Face Trainer under DDP; saves every 3 steps."""


def _start(trial_json: Path, world_size: int = 2) -> RankGroup:
    env = dict(os.environ, FLIGHTPLAN_TORCH_THREADS="1", PYTHONUNBUFFERED="1")

    def launch(extra: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(trial_json.parent / "log.txt", "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "flightplan.run.worker",
                                     str(trial_json)], stdout=log, stderr=subprocess.STDOUT,
                                    env={**env, **extra}, cwd=trial_json.parent)
    return RankGroup.start(world_size, launch)


def _wait(group: RankGroup) -> int:
    deadline = time.monotonic() + HANG_S
    while group.poll() is None:
        assert time.monotonic() < deadline, "the group hung"
        time.sleep(0.05)
    assert group.returncode is not None
    return group.returncode


def _products(run_dir: Path) -> dict[str, bytes]:
    return DDP.products_of(run_dir)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _losses(run_dir: Path) -> int:
    path = run_dir / "measurements.jsonl"
    return path.read_text().count('"loss"') if path.exists() else 0


def _paused(run_dir: Path, after: int, flavour: Flavour = DDP) -> RankGroup:
    group = _start(flavour.trial_json(run_dir, pause_after=after))
    deadline = time.monotonic() + HANG_S
    while not (run_dir / "paused").exists():
        assert group.poll() is None, (run_dir / "log.txt").read_text()[-3000:]
        assert time.monotonic() < deadline, "never paused"
        time.sleep(0.05)
    return group


References = Callable[[Flavour], Path]
"""The ``references`` fixture: a flavour's uninterrupted run directory."""


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    """Each flavour's uninterrupted run, made once (on first use) for the whole module."""
    made: dict[str, Path] = {}

    def reference_of(flavour: Flavour) -> Path:
        if flavour.name not in made:
            run_dir = tmp_path_factory.mktemp(flavour.name) / "reference"
            code = _wait(_start(flavour.trial_json(run_dir)))
            assert code == 0, (run_dir / "log.txt").read_text()[-3000:]
            made[flavour.name] = run_dir
        return made[flavour.name]
    return reference_of


@pytest.fixture(scope="module")
def reference(references: References) -> Path:
    return references(DDP)


# -- every task: killed (the group, one rank), left, resized; resumed bitwise ------------

def _flavour_id(value: object) -> str | None:
    return value.name if isinstance(value, Flavour) else None          # the rest: pytest's


def _kill_group(group: RankGroup) -> None:
    group.kill()
    assert group.poll() == -signal.SIGKILL


def _kill_one_rank(group: RankGroup) -> None:
    os.kill(group.pids[1], signal.SIGKILL)
    assert _wait(group) == -signal.SIGKILL                    # the group ends with it


@pytest.mark.parametrize("flavour, kill, after, source", [
    pytest.param(flavour, kill, after, source, id=f"{flavour.name}-{kill.__name__.removeprefix('_kill_')}")
    for flavour, group_after, rank_after in [(DDP, 5, 8), (LIGHTNING, 7, 10), (TRAINER, 7, 10),
                                             (FSDP, 5, 8)]
    for kill, after, source in [(_kill_group, group_after, "step-000006"),
                                (_kill_one_rank, rank_after, "step-000009")]])
def test_killed_after_a_checkpoint_the_run_resumes_bitwise(
        flavour: Flavour, kill: Callable[[RankGroup], None], after: int, source: str,
        references: References, tmp_path: Path) -> None:
    """The whole group SIGKILLed, or one rank alone (which ends the group), while paused
    after a checkpoint; resumed in new processes from the checkpoint after the pause, the
    run ends bitwise equal to the uninterrupted one."""
    run_dir = tmp_path / "killed"
    group = _paused(run_dir, after=after, flavour=flavour)
    kill(group)
    assert not any(_alive(pid) for pid in group.pids)           # every rank killed and reaped
    code = _wait(_start(flavour.trial_json(run_dir, resume=True)))
    assert code == 0, (run_dir / "log.txt").read_text()[-3000:]
    assert flavour.products_of(run_dir) == flavour.products_of(references(flavour))
    restores = [r for r in _rows(run_dir) if r.get("event") == "restore"]
    assert restores[-1]["source"] == source


@pytest.mark.parametrize("flavour, step_sleep_s", [(DDP, 0.2), (LIGHTNING, 0.3), (TRAINER, 0.3)],
                         ids=_flavour_id)
def test_the_leave_signal_reaches_every_rank_and_the_run_resumes_bitwise(
        flavour: Flavour, step_sleep_s: float, references: References,
        tmp_path: Path) -> None:
    run_dir = tmp_path / "left"
    group = _start(flavour.trial_json(run_dir, step_sleep_s=step_sleep_s))
    deadline = time.monotonic() + HANG_S
    while _losses(run_dir) < 4:
        assert group.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    group.send_signal(signal.SIGUSR1)                    # the executor's leave request
    assert _wait(group) == EXIT_PREEMPTED
    assert [p.returncode for p in group.processes] == [EXIT_PREEMPTED, EXIT_PREEMPTED]
    forced = [r for r in _rows(run_dir) if r.get("event") == "forced_checkpoint"]
    assert len(forced) == 1 and forced[0]["then"] == "stop"
    manifest = json.loads((run_dir / "checkpoints" / forced[0]["name"] / "manifest.json")
                          .read_text())
    assert manifest["world_size"] == 2
    code = _wait(_start(flavour.trial_json(run_dir, resume=True)))
    assert code == 0, (run_dir / "log.txt").read_text()[-3000:]
    restores = [r for r in _rows(run_dir) if r.get("event") == "restore"]
    assert restores[-1]["source"] == forced[0]["name"]
    assert flavour.products_of(run_dir) == flavour.products_of(references(flavour))


REFUSED = ("step-000003 was saved by 2 processes but this run has 1; resuming at another "
           "world size is not bitwise: give [[run]] processes = 2, set [[run]] reshard = true "
           "to resume it at 1 anyway (not bitwise), or start the run over with flightplan run "
           "CAMPAIGN_FILE --restart NAME")
LIBRARY_REFUSED = ("step-000003 was saved by 2 processes but this run has 1; [[run]] reshard "
                   "applies to tasks on flightplan's trial API, not to a Lightning or Trainer "
                   "checkpoint: give [[run]] processes = 2, or start the run over with "
                   "flightplan run CAMPAIGN_FILE --restart NAME")


@pytest.mark.parametrize("flavour, after, reshard, refusal", [
    (DDP, 2, False, REFUSED), (LIGHTNING, 5, True, LIBRARY_REFUSED)],
    ids=["ddp", "lightning-reshard"])
def test_a_resume_at_another_world_size_is_refused_in_one_line(
        flavour: Flavour, after: int, reshard: bool, refusal: str, tmp_path: Path) -> None:
    """Without ``reshard``; and a library's checkpoint (Lightning's) also with it."""
    run_dir = tmp_path / "resized"
    group = _paused(run_dir, after=after, flavour=flavour)
    group.kill()
    code = _wait(_start(flavour.trial_json(run_dir, resume=True, reshard=reshard),
                        world_size=1))
    assert code == EXIT_CRASHED
    lines = (run_dir / "log.txt").read_text().splitlines()
    assert [line for line in lines if "was saved by" in line] == [
        "flightplan.errors.CheckpointError: " + refusal]
    assert not (run_dir / "done.json").exists()


def _flat_tensors(tree: object, path: str) -> dict[str, bytes]:
    """Every tensor of ``tree`` by its path (``state/0/exp_avg``), as raw bytes."""
    if isinstance(tree, torch.Tensor):
        return {path: tree.contiguous().numpy().tobytes()}
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items()
                for k, v in _flat_tensors(value, f"{path}/{key}").items()}
    return {}


@pytest.mark.parametrize("flavour", [DDP, FSDP], ids=_flavour_id)
def test_with_reshard_a_run_of_two_ranks_resumes_in_one_from_its_full_state(
        flavour: Flavour, tmp_path: Path) -> None:
    """``[[run]] reshard = true``: a checkpoint saved by two ranks (DDP replicas, or FSDP2's
    whole state gathered) is restored by one process. With no step left after it, the
    final weights and optimizer state are the checkpoint's, bit for bit (FSDP: the whole
    state sharded again over one rank); with steps left, the run goes on to the end, its
    restore row saying ``resharded_from: 2`` and its log that it is not bitwise."""
    run_dir = tmp_path / "resharded"
    _paused(run_dir, after=2, flavour=flavour).kill()
    saved = load_checkpoint(run_dir / "checkpoints" / "step-000003")
    assert saved.manifest["world_size"] == 2
    at_once = tmp_path / "restored-only"
    shutil.copytree(run_dir, at_once)
    code = _wait(_start(flavour.trial_json(at_once, resume=True, steps=3, reshard=True),
                        world_size=1))
    assert code == 0, (at_once / "log.txt").read_text()[-3000:]
    final = at_once / "final"
    assert {k: v.numpy().tobytes() for k, v in load_file(final / "model.safetensors").items()} \
        == {k: v.contiguous().numpy().tobytes() for k, v in saved.model.items()}
    assert {k: v.numpy().tobytes() for k, v in load_file(final / "optimizer.safetensors").items()} \
        == _flat_tensors(saved.optimizer["state"], "state")

    code = _wait(_start(flavour.trial_json(run_dir, resume=True, reshard=True), world_size=1))
    assert code == 0, (run_dir / "log.txt").read_text()[-3000:]
    assert json.loads((run_dir / "done.json").read_text())["steps"] == STEPS
    [restore] = [r for r in _rows(run_dir) if r.get("event") == "restore" and r["source"]]
    assert (restore["source"], restore["resharded_from"]) == ("step-000003", 2)
    assert "flightplan: step-000003 was saved by 2 processes and resumes at 1 ([[run]] " \
           "reshard = true): this run is not bitwise from here on" in (run_dir / "log.txt").read_text()


# -- the native loop (ddp_task.py under DDP) ---------------------------------------------

def test_an_uninterrupted_run_writes_once_and_saves_every_ranks_state(reference: Path) -> None:
    rows = _rows(reference)
    assert [r["step"] for r in rows if "loss" in r] == list(range(STEPS))  # rank 0's rows only
    assert sum(1 for r in rows if r.get("event") == "process_start") == 1
    done = json.loads((reference / "done.json").read_text())
    assert done["steps"] == STEPS
    manifest = json.loads((reference / "checkpoints" / "step-000009" / "manifest.json").read_text())
    assert manifest["world_size"] == 2
    assert {"state/ranks/1/rng/torch_cpu", "state/rng/torch_cpu",
            "state/ranks/1/generators/sampler"} <= set(manifest["tensors"])
    assert "[rank 1] " in (reference / "log.txt").read_text()


def test_a_rank_that_raises_ends_the_run_as_crashed_with_its_traceback(tmp_path: Path) -> None:
    run_dir = tmp_path / "raises"
    _trial_json(run_dir, raise_at=[1, 4])
    results = LocalExecutor(slots=2, env={"FLIGHTPLAN_TORCH_THREADS": "1"}).run(
        [Job("ddp-0123456789", run_dir, processes=2)])
    assert [r.exit_code for r in results] == [EXIT_CRASHED]
    log = (run_dir / "log.txt").read_text()
    assert "2 processes" in log.splitlines()[0]
    assert "[rank 1] Traceback (most recent call last):" in log
    assert "[rank 1] RuntimeError: rank 1 fails at step 4" in log
    assert not (run_dir / "done.json").exists()


def test_a_non_finite_loss_on_one_rank_stops_every_rank_with_one_record(tmp_path: Path) -> None:
    run_dir = tmp_path / "nan"
    code = _wait(_start(_trial_json(run_dir, nan_at=[1, 3])))
    assert code == EXIT_STOPPED
    stop = json.loads((run_dir / "stop.json").read_text())
    assert stop["rule"] == "non_finite_loss"
    rows = _rows(run_dir)
    assert [r["rule"] for r in rows if r.get("event") == "stop"] == ["non_finite_loss"]
    # rank 1's rule fired at step 3, held (the ranks agree every 10 steps) until the save
    # after step 5 settled it first: rank 0's rows run to 5, no state after the NaN saved
    assert stop["step"] == 3
    assert [r["step"] for r in rows if "loss" in r] == [0, 1, 2, 3, 4, 5]   # rank 0's
    assert [r["name"] for r in rows if r.get("event") == "checkpoint"] == ["step-000003"]
    log = (run_dir / "log.txt").read_text()
    assert log.count("stopped:") == 2                      # both ranks, one record


def test_killed_at_random_points_saving_every_step_it_ends_bitwise(reference: Path,
                                                                   tmp_path: Path) -> None:
    """Three SIGKILLs at seeded random points of a run that saves after every step (so
    they land inside saves, renames and prunes as well as between them), each of the whole
    group or of one rank, each followed by a resume as the runner starts one (``resume``
    once a save was recorded)."""
    run_dir = tmp_path / "random"
    rng = random.Random(32)
    every = list(range(STEPS))
    for _ in range(3):
        resume = RunDir(run_dir).saved_checkpoint() if run_dir.exists() else False
        group = _start(_trial_json(run_dir, resume=resume, checkpoint_at=every))
        target = _losses(run_dir) + rng.randint(1, 3)
        deadline = time.monotonic() + HANG_S
        while group.poll() is None and _losses(run_dir) < target:
            assert time.monotonic() < deadline, "the group hung"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))     # somewhere in the step, its log or its save
        if rng.random() < 0.5:
            group.kill()
        else:
            os.kill(group.pids[rng.randrange(2)], signal.SIGKILL)
            _wait(group)
        assert not any(_alive(pid) for pid in group.pids)
    resume = RunDir(run_dir).saved_checkpoint()
    code = _wait(_start(_trial_json(run_dir, resume=resume, checkpoint_at=every)))
    assert code == 0, (run_dir / "log.txt").read_text()[-3000:]
    assert _products(run_dir) == _products(reference)


# -- Lightning with strategy="ddp" (lightning_ddp_task.py: saves every 3 steps) ----------

def test_lightning_ddp_saves_once_with_every_ranks_rng(references: References) -> None:
    lightning_reference = references(LIGHTNING)
    rows = _rows(lightning_reference)
    assert [r["step"] for r in rows if "loss" in r] == list(range(STEPS))  # rank 0's rows only
    # every 3 steps; the one due after the last step (an epoch's last batch) never comes
    saved = [r["name"] for r in rows if r.get("event") == "checkpoint"]
    assert saved == ["step-000003", "step-000006", "step-000009"]
    folder = lightning_reference / "checkpoints" / "step-000009"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["kind"] == "lightning"
    import torch
    rng = torch.load(folder / "checkpoint.ckpt", weights_only=True)["flightplan_rng"]
    assert len(rng) == 2 and not torch.equal(rng[0]["torch_cpu"], rng[1]["torch_cpu"])
    assert json.loads((lightning_reference / "done.json").read_text())["steps"] == STEPS


def test_lightning_ddp_refuses_a_sampler_lightning_wraps(tmp_path: Path) -> None:
    run_dir = tmp_path / "wrapped"
    code = _wait(_start(LIGHTNING.trial_json(run_dir, wrapped_sampler=True)))
    assert code == EXIT_CRASHED
    refusal = [line for line in (run_dir / "log.txt").read_text().splitlines()
               if line.startswith("[rank 0] flightplan.errors.ArgumentError")]
    assert refusal == [
        "[rank 0] flightplan.errors.ArgumentError: train dataloader: with several processes "
        "its sampler (DistributedSamplerWrapper) does not give each rank the same order again "
        "after a resume; use torchdata.stateful_dataloader.sampler.StatefulDistributedSampler"
        "(dataset, num_replicas=trial.world_size, rank=trial.rank, seed=...) and build the "
        "Trainer with use_distributed_sampler=False"]


def test_lightning_ddp_a_nan_loss_on_one_rank_stops_every_rank_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "nan"
    group = _start(LIGHTNING.trial_json(run_dir, nan_at=[1, 4]))
    assert _wait(group) == EXIT_STOPPED
    assert [p.returncode for p in group.processes] == [EXIT_STOPPED, EXIT_STOPPED]
    rows = _rows(run_dir)
    assert [r["rule"] for r in rows if r.get("event") == "stop"] == ["non_finite_loss"]
    # rank 1's NaN (its training_step at global_step 4) is the row of step 5; the ranks
    # agree every 10 steps, but the save after step 5 settles the verdict first
    assert [r["step"] for r in rows if "loss" in r] == [0, 1, 2, 3, 4, 5]   # rank 0's
    assert json.loads((run_dir / "stop.json").read_text())["step"] == 5
    assert [r["name"] for r in rows if r.get("event") == "checkpoint"] == ["step-000003"]


def test_docs_tasks_shows_lines_of_the_lightning_ddp_task_in_order() -> None:
    """docs/tasks.md's Lightning DDP block is lines of lightning_ddp_task.py, in its order
    (``...`` stands for lines left out)."""
    docs = (HERE.parents[1] / "docs" / "tasks.md").read_text(encoding="utf-8")
    marker = "<!-- lightning-ddp: tests/reliability/lightning_ddp_task.py -->\n```python\n"
    assert docs.count(marker) == 1
    shown = [line for line in docs.split(marker, 1)[1].split("```", 1)[0].splitlines()
             if line.strip() not in ("", "...")]
    source = (HERE / LIGHTNING.task).read_text().splitlines()
    at = 0
    for line in shown:
        assert line in source[at:], f"not in {LIGHTNING.task} after line {at}: {line!r}"
        at = source.index(line, at) + 1


# -- the Hugging Face Trainer under DDP (trainer_ddp_task.py: saves every 3 steps) -------

def test_trainer_ddp_saves_once_with_every_ranks_rng(references: References) -> None:
    trainer_reference = references(TRAINER)
    rows = _rows(trainer_reference)
    assert [r["step"] for r in rows if "loss" in r] == list(range(STEPS))  # rank 0's rows only
    saved = [r["name"] for r in rows if r.get("event") == "checkpoint"]
    assert saved == ["step-000003", "step-000006", "step-000009", "step-000012"]
    manifest = json.loads((trainer_reference / "checkpoints" / "step-000012" / "manifest.json")
                          .read_text())
    assert manifest["world_size"] == 2 and manifest["kind"] == "transformers"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(manifest["files"])
    assert json.loads((trainer_reference / "done.json").read_text())["steps"] == STEPS


def test_trainer_ddp_a_nan_loss_stops_every_rank_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "nan"
    group = _start(TRAINER.trial_json(run_dir, nan_at=4))
    assert _wait(group) == EXIT_STOPPED
    assert [p.returncode for p in group.processes] == [EXIT_STOPPED, EXIT_STOPPED]
    rows = _rows(run_dir)
    assert [r["rule"] for r in rows if r.get("event") == "stop"] == ["non_finite_loss"]
    assert [r["name"] for r in rows if r.get("event") == "checkpoint"] == ["step-000003"]


# -- the ranks on a Ray flight (a real loopback cluster, one flight) -----------------------

def _rank_pid(scratch: Path, rank: int) -> int | None:
    """The pid of the worker of rank ``rank`` running under ``scratch`` on this machine."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"flightplan.run.worker" in cmdline and str(scratch).encode() in cmdline \
                and f"RANK={rank}".encode() in environ:
            return int(entry)
    return None


def test_ray_runs_the_ranks_on_one_flight_and_resumes_them_bitwise(reference: Path,
                                                                   tmp_path: Path) -> None:
    """Two ranks on a Ray flight: one rank SIGKILLed on the flight ends the execution;
    resumed through Ray (home's checkpoint sent to the flight), the run ends with
    predictions and last checkpoint bitwise equal to the local uninterrupted run's, with
    both ranks' lines in home's log."""
    from flightplan.run.executors.ray_executor import RayExecutor

    sys.path.insert(0, str(HERE.parent / "fixtures"))
    from ray_cluster import loopback_cluster

    run_dir = tmp_path / "on-ray"
    job = Job("ddp-0123456789", run_dir, processes=2)
    with loopback_cluster(flights=1) as (made, _nodes, tmp):
        scratch = tmp / "scratch"
        executor = RayExecutor(address=made.address, scratch=str(scratch), poll_s=0.1,
                               env={"FLIGHTPLAN_TORCH_THREADS": "1"})
        killed: list[int] = []

        def kill_rank_one() -> None:
            while _losses(run_dir) < 8:
                time.sleep(0.05)
            pid = _rank_pid(scratch, 1)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        killer = threading.Thread(target=kill_rank_one, daemon=True)
        try:
            _trial_json(run_dir, step_sleep_s=0.3)
            killer.start()
            [first] = executor.run([job])
            killer.join(timeout=HANG_S)
            _trial_json(run_dir, resume=True)
            [second] = executor.run([job])
        finally:
            executor.close()
    assert killed and first.exit_code == -signal.SIGKILL
    assert second.exit_code == 0, (run_dir / "log.txt").read_text()[-3000:]
    restores = [r for r in _rows(run_dir) if r.get("event") == "restore"]
    assert restores[-1]["source"] in ("step-000006", "step-000009")
    # what comes home from a flight: the outputs and the checkpoints (final/ stays there)
    home = ("predictions.csv", "metrics.json", "checkpoints/step-000009/model.safetensors",
            "checkpoints/step-000009/optimizer.safetensors")
    assert {name: (run_dir / name).read_bytes() for name in home} == \
        {name: (reference / name).read_bytes() for name in home}
    log = (run_dir / "log.txt").read_text()
    assert "[rank 1] " in log and "[rank 0] " in log


# -- FSDP2 (ddp_task.py with "fsdp": true: every parameter sharded over the two ranks) ---

def test_fsdp_saves_the_full_state_once(references: References) -> None:
    from safetensors.torch import load_file

    fsdp_reference = references(FSDP)
    rows = _rows(fsdp_reference)
    assert [r["step"] for r in rows if "loss" in r] == list(range(STEPS))
    folder = fsdp_reference / "checkpoints" / "step-000009"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["world_size"] == 2
    model = load_file(folder / "model.safetensors")
    assert {k: tuple(v.shape) for k, v in model.items()} == {
        "0.weight": (32, 16), "0.bias": (32,), "3.weight": (4, 32), "3.bias": (4,)}  # whole
    assert {"optimizer/state/0.weight/exp_avg", "state/ranks/1/rng/torch_cpu"} \
        <= set(manifest["tensors"])
