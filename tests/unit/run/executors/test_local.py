"""The local executor: one process per run, its own log, one at a time on CPU, progress
read from measurements, workers that die with the runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flightplan.trial.accelerator import cpu_slots
from flightplan.run.executors.contract import Job, MeasurementTail
from flightplan.run.executors.local import LocalExecutor
from processes import alive  # tests/fixtures, put on the path by conftest.py

FAKE_WORKER = Path(__file__).resolve().parents[3] / "fixtures" / "fake_worker.py"


def _fake_argv(trial_json: Path) -> list[str]:
    return [sys.executable, str(FAKE_WORKER), str(trial_json)]


def _job(root: Path, run_id: str, **params) -> Job:
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "trial.json").write_text(json.dumps({"run_id": run_id, "params": params,
                                                    "planned_steps": None, "max_steps": None}))
    return Job(run_id, run_dir)


def test_runs_one_at_a_time_with_own_log_and_exit_codes(tmp_path):
    jobs = [_job(tmp_path, "a-1", steps=3), _job(tmp_path, "b-2", steps=2, exit_code=1)]
    events: list[tuple[str, str]] = []
    seen_progress: dict[str, tuple] = {}

    def on_progress(job, progress):
        seen_progress[job.run_id] = (progress.completed, progress.total, progress.loss)

    executor = LocalExecutor(slots=1, argv=_fake_argv, poll_s=0.05)
    results = executor.run(jobs, on_start=lambda j: events.append(("start", j.run_id)),
                           on_done=lambda r: events.append(("done", r.run_id)),
                           on_progress=on_progress)
    # one at a time: the second starts only after the first ended
    assert events == [("start", "a-1"), ("done", "a-1"), ("start", "b-2"), ("done", "b-2")]
    assert [(r.run_id, r.exit_code) for r in results] == [("a-1", 0), ("b-2", 1)]
    assert all(r.wall_s >= 0 for r in results)
    log = (tmp_path / "runs" / "a-1" / "log.txt").read_text()
    assert "fake worker a-1 on CUDA_VISIBLE_DEVICES=-" in log and "to stderr" in log
    assert "fake worker b-2" not in log
    # the last read after exit sees every row: 3 steps of 3, loss 1/3
    assert seen_progress["a-1"] == (3, 3, 1 / 3)
    assert seen_progress["b-2"] == (2, 2, 0.5)


def test_measurement_tail_reads_only_complete_new_rows(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps({"planned_steps": 100, "max_steps": 8}))
    tail = MeasurementTail(run_dir)
    assert tail.read().total == 8 and tail.read().step is None      # capped by max_steps
    path = run_dir / "measurements.jsonl"
    path.write_text('{"step": 0, "time": 1.0, "loss": 2.5}\n{"step": 1, "time": 2.0, "lo')
    progress = tail.read()
    assert (progress.step, progress.loss) == (0, 2.5)
    with open(path, "a") as handle:
        handle.write('ss": 1.5}\n{"step": 1, "time": 3.0, "event": "checkpoint"}\n')
    progress = tail.read()
    assert (progress.step, progress.loss, progress.completed) == (1, 1.5, 2)


_RUNNER = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from test_local import _fake_argv
from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
job = Job("slow-1", Path(sys.argv[1]))
print("starting", flush=True)
LocalExecutor(slots=1, argv=_fake_argv, poll_s=0.05).run([job])
"""


def test_worker_dies_when_the_runner_is_killed(tmp_path):
    job = _job(tmp_path, "slow-1", steps=1, sleep_s=120)
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(job.run_dir),
                               str(Path(__file__).parent), str(Path(__file__).parents[3] / "fixtures")],
                              stdout=subprocess.PIPE, text=True)
    assert runner.stdout.readline().strip() == "starting"
    pid_file = job.run_dir / "pid.txt"
    for _ in range(1200):      # up to 60 s: the runner imports torch, slow on a loaded machine
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    worker_pid = int(pid_file.read_text())
    assert alive(worker_pid)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    for _ in range(200):
        if not alive(worker_pid):
            break
        time.sleep(0.05)
    assert not alive(worker_pid)


def test_cpu_slots_divide_the_cores_by_the_threads_per_run():
    assert cpu_slots(1, cores=2) == 2
    assert cpu_slots(2, cores=2) == 1
    assert cpu_slots(3, cores=8) == 2          # 8 // 3: never more threads than cores
    assert cpu_slots(4, cores=2) == 1          # at least one run


def test_without_gpus_runs_share_the_cores_each_with_its_threads(tmp_path, monkeypatch):
    monkeypatch.setattr("flightplan.run.executors.local.gpu_count", lambda: 0)
    monkeypatch.setattr("flightplan.run.executors.local.cpu_slots", lambda threads: 4 // threads)
    executor = LocalExecutor(argv=_fake_argv, poll_s=0.05, env={"FLIGHTPLAN_TORCH_THREADS": "2"})
    assert (executor.threads, executor.slots) == (2, 2)
    jobs = [_job(tmp_path, "a-1", steps=3, sleep_s=0.2), _job(tmp_path, "b-2", steps=3, sleep_s=0.2),
            _job(tmp_path, "c-3", steps=1)]
    events: list[tuple[str, str]] = []
    results = executor.run(jobs, on_start=lambda j: events.append(("start", j.run_id)),
                           on_done=lambda r: events.append(("done", r.run_id)))
    # two slots: a and b start together, c only once one of them ended
    assert events[:2] == [("start", "a-1"), ("start", "b-2")]
    assert events.index(("start", "c-3")) > min(events.index(("done", "a-1")),
                                                events.index(("done", "b-2")))
    by_id = {r.run_id: r for r in results}
    assert by_id["b-2"].started_at < by_id["a-1"].ended_at        # side by side
    for run_id in ("a-1", "b-2", "c-3"):
        log = (tmp_path / "runs" / run_id / "log.txt").read_text()
        assert "(device cpu, 2 thread(s))" in log
        assert "CUDA_VISIBLE_DEVICES=- with FLIGHTPLAN_TORCH_THREADS=2" in log


def test_on_gpus_one_run_per_gpu_with_deterministic_cublas(tmp_path, monkeypatch):
    monkeypatch.setattr("flightplan.run.executors.local.gpu_count", lambda: 2)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")      # the runner's own two GPUs
    monkeypatch.delenv("FLIGHTPLAN_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("flightplan.trial.accelerator.cpu_count", lambda: 16)
    executor = LocalExecutor(argv=lambda t: [sys.executable, "-c",
                                             "import os; print('gpu', os.environ['CUDA_VISIBLE_"
                                             "DEVICES'], 'cublas', os.environ"
                                             "['CUBLAS_WORKSPACE_CONFIG'], 'threads', os.environ"
                                             "['FLIGHTPLAN_TORCH_THREADS'], os.environ"
                                             "['OMP_NUM_THREADS'])"], poll_s=0.05)
    assert (executor.slots, executor.threads) == (2, 8)     # 16 cores // 2 GPUs
    jobs = [_job(tmp_path, "a-1"), _job(tmp_path, "b-2"), _job(tmp_path, "c-3")]
    executor.run(jobs)
    logs = [(tmp_path / "runs" / j.run_id / "log.txt").read_text() for j in jobs]
    assert "(device 0, 8 thread(s))" in logs[0] and "gpu 5 cublas :4096:8 threads 8 8" in logs[0]
    assert "(device 1, 8 thread(s))" in logs[1] and "gpu 7 cublas :4096:8 threads 8 8" in logs[1]
    assert "gpu 5" in logs[2] or "gpu 7" in logs[2]       # the first GPU to free up


_RANK_WORKER = ("import os, time; e = os.environ; time.sleep(0.3); "
                "print('rank', e.get('RANK', '-'), 'of', e.get('WORLD_SIZE', '-'), "
                "e.get('LOCAL_RANK', '-'), e.get('MASTER_ADDR', '-'), e.get('MASTER_PORT', '-'))")


def test_a_job_of_several_processes_starts_ranks_with_torchruns_environment(tmp_path):
    ddp = Job("ddp-1", tmp_path / "runs" / "ddp-1", processes=2)
    alone = Job("one-2", tmp_path / "runs" / "one-2")
    for job in (ddp, alone):
        job.run_dir.mkdir(parents=True)
    executor = LocalExecutor(slots=2, argv=lambda _: [sys.executable, "-c", _RANK_WORKER],
                             gpus=0)
    results = {r.run_id: r for r in executor.run([ddp, alone])}
    assert {k: r.exit_code for k, r in results.items()} == {"ddp-1": 0, "one-2": 0}
    lines = (ddp.run_dir / "log.txt").read_text().splitlines()
    assert lines[0].endswith("(device cpu, 1 thread(s), 2 processes) ---")
    ranks = sorted(line.split() for line in lines[1:])
    assert [r[:5] for r in ranks] == [["rank", "0", "of", "2", "0"], ["rank", "1", "of", "2", "1"]]
    assert {r[5] for r in ranks} == {"127.0.0.1"} and ranks[0][6] == ranks[1][6] != "-"
    assert (alone.run_dir / "log.txt").read_text().splitlines()[1] == "rank - of - - - -"
    # the two ranks took both slots: the one-process job started once they had ended
    assert results["one-2"].started_at >= results["ddp-1"].ended_at
