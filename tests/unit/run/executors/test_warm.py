"""Warm starts (run/executors/warm.py): runs forked from a template that imported torch
once finish bitwise like cold ones, stay the runner's own children (a SIGKILL of one ends
it alone, read as -9), and a dead template gives a cold start, then a new template."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from flightplan.rows import ProcessStart
from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.executors.warm import WarmTemplate, preload_modules
from flightplan.rundir import RunDir

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _job(folder: Path, run_id: str, *, steps: int, sleep_s: float) -> Job:
    folder.mkdir(parents=True)
    (folder / "trial.json").write_text(json.dumps({
        "run_id": run_id, "task": "paced_task.py", "campaign_dir": str(FIXTURES),
        "params": {"steps": steps, "step_sleep_s": sleep_s}}))
    return Job(run_id, folder)


def _worker_env(job: Job) -> dict[str, str]:
    return dict(os.environ, FLIGHTPLAN_TRIAL=str(job.trial_json), PYTHONUNBUFFERED="1",
                FLIGHTPLAN_TORCH_THREADS="1", OMP_NUM_THREADS="1")


def _argv(job: Job) -> list[str]:
    return ["-m", "flightplan.run.worker", str(job.trial_json)]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def _wait_for_step(run_dir: Path) -> None:
    while not any(getattr(r, "step", -1) >= 1 for r in RunDir(run_dir).rows()
                  if not isinstance(r, ProcessStart)):
        time.sleep(0.05)


def test_warm_and_cold_runs_give_the_same_bytes(tmp_path):
    cold = _job(tmp_path / "cold", "c-1", steps=20, sleep_s=0.0)
    warm = _job(tmp_path / "warm", "w-1", steps=20, sleep_s=0.0)
    [c] = LocalExecutor(slots=1, poll_s=0.05, warm=False).run([cold])
    executor = LocalExecutor(slots=1, poll_s=0.05)
    [w] = executor.run([warm])
    template = _children(os.getpid())
    again = _job(tmp_path / "again", "w-2", steps=20, sleep_s=0.0)
    [w2] = executor.run([again])                 # the same template serves a later run()
    assert _children(os.getpid()) == template and len(template) == 1
    executor.close()
    assert _gone(template[0])
    assert (c.exit_code, w.exit_code, w2.exit_code) == (0, 0, 0)
    assert ((again.run_dir / "artifact" / "weights.bin").read_bytes()
            == (cold.run_dir / "artifact" / "weights.bin").read_bytes())
    assert ((warm.run_dir / "artifact" / "weights.bin").read_bytes()
            == (cold.run_dir / "artifact" / "weights.bin").read_bytes())
    assert json.loads((warm.run_dir / "artifact" / "threads.json").read_text()) == {
        "torch": 1, "omp": "1"}
    log = (warm.run_dir / "log.txt").read_text()
    assert "thread(s), warm) ---" in log and "starting cold" not in log
    # the worker, imported in the template, is called, not executed again by runpy: no
    # "'flightplan.run.worker' found in sys.modules ..." RuntimeWarning opens the log
    for folder in (warm.run_dir, again.run_dir):
        text = (folder / "log.txt").read_text()
        assert "RuntimeWarning" not in text and "found in sys.modules" not in text, text
        assert text.splitlines()[0].startswith("--- flightplan worker started ")
    assert ", warm) ---" not in (cold.run_dir / "log.txt").read_text()
    # the execution's own process: its start row falls after the executor's start
    [start] = [r for r in RunDir(warm.run_dir).rows() if isinstance(r, ProcessStart)]
    assert w.started_at - 0.05 <= start.time <= w.ended_at


def test_a_killed_execution_ends_alone_and_a_dead_template_is_replaced(tmp_path):
    template = WarmTemplate(dict(os.environ, OMP_NUM_THREADS="1"),
                            preload_modules(["paced_task.py"]))
    try:
        slow = _job(tmp_path / "slow", "s-1", steps=200, sleep_s=0.05)
        other = _job(tmp_path / "other", "o-1", steps=20, sleep_s=0.05)
        a = template.start(_argv(slow), _worker_env(slow), slow.run_dir, RunDir(slow.run_dir).log)
        b = template.start(_argv(other), _worker_env(other), other.run_dir,
                           RunDir(other.run_dir).log)
        assert a.pid != b.pid and os.getpgid(a.pid) == os.getpgid(0)
        # the runner's own child (re-parented from the template), reaped like a Popen
        assert _parent(a.pid) == _parent(b.pid) == os.getpid() and a.poll() is None
        _wait_for_step(slow.run_dir)
        a.kill()
        assert a.wait() == -signal.SIGKILL
        assert b.wait() == 0 and (other.run_dir / "artifact" / "weights.bin").is_file()
        server = template.pid
        assert server is not None
        os.kill(server, 0)                        # the template is still there

        os.kill(server, signal.SIGKILL)
        time.sleep(0.5)
        after = _job(tmp_path / "after", "a-1", steps=5, sleep_s=0.0)
        try:
            template.start(_argv(after), _worker_env(after), after.run_dir,
                           RunDir(after.run_dir).log)
        except Exception as exc:  # noqa: BLE001 - the executor starts this one cold
            assert type(exc).__name__ == "TemplateUnavailable"
            assert "exited (-9)" in str(exc)
        else:
            raise AssertionError("a dead template started an execution")
        assert template.pid not in (None, server)   # a new one, started for the next run
        again = template.start(_argv(after), _worker_env(after), after.run_dir,
                               RunDir(after.run_dir).log)
        assert again.wait() == 0
    finally:
        template.close()


def test_the_executor_starts_cold_when_the_template_has_died(tmp_path, monkeypatch):
    """The template dies before the run starts: the run starts cold, the log says why."""
    from flightplan.run.executors import local

    class Dying(WarmTemplate):
        def __init__(self, env: dict[str, str], modules: list[str]) -> None:
            super().__init__(env, ["json"])
            assert self.pid is not None
            os.kill(self.pid, signal.SIGKILL)
            while self._proc is not None and self._proc.poll() is None:
                time.sleep(0.01)

    monkeypatch.setattr(local, "WarmTemplate", Dying)
    job = _job(tmp_path / "run", "r-1", steps=5, sleep_s=0.0)
    [result] = LocalExecutor(slots=1, poll_s=0.05).run([job])
    assert result.exit_code == 0
    log = (job.run_dir / "log.txt").read_text()
    assert "--- flightplan: warm start failed: the template exited (-9); starting cold ---" \
        in log


_RUNNER = """
import json, sys
from pathlib import Path
from flightplan.run.executors.contract import Job
from flightplan.run.executors.local import LocalExecutor
LocalExecutor(slots=1, poll_s=0.05).run([Job("k-1", Path(sys.argv[1]))])
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_killed_runner_leaves_neither_its_template_nor_its_runs(tmp_path):
    import subprocess

    job = _job(tmp_path / "run", "k-1", steps=2000, sleep_s=0.05)
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(job.run_dir)],
                              env=dict(os.environ, FLIGHTPLAN_TORCH_THREADS="1"))
    try:
        _wait_for_step(job.run_dir)
        children = _children(runner.pid)
        assert len(children) == 2                 # the template and the execution
        assert ", warm) ---" in (job.run_dir / "log.txt").read_text()
        runner.kill()
        runner.wait()
        given_up = time.monotonic() + 60      # a bound, not a speed: they die at once
        while not all(_gone(pid) for pid in children):
            assert time.monotonic() < given_up, [p for p in children if not _gone(p)]
            time.sleep(0.05)
    finally:
        runner.kill()
        runner.wait()
