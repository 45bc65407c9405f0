"""Every way a run executes, killed at chosen points and run again: a file task written as
``docs/tasks.md`` shows (and its ``close`` and ``export``), the Hugging Face Trainer and
Lightning killed inside their own saves and inside flightplan's commit of them, and a Ray
campaign on a loopback cluster whose driver dies and then a flight node. Each ends with
products bitwise those of an uninterrupted campaign, the ledger whole and ``verify``
passing. ``bench/faults.py`` draws 100 such points with a seed; these are a few of each.

The first tests check the fault shim itself on a short script (seconds); the campaigns are
``small_campaigns`` (20–60 s a run on 2 cores) and marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .cli_harness import FLIGHTPLAN
from .crash_harness import CrashPoint, count_calls, shim_path, crash_campaign, fingerprint
from .small_campaigns import docs_task, docs_trainer, small_lightning

# opens two files for writing under staging/ (open, os.open), one for reading; two INSERTs
# (through the connection, through a cursor), one COMMIT through Connection.commit()
SCRIPT = """
import os, sqlite3, sys
from pathlib import Path
folder = Path(sys.argv[1])
(folder / "staging").mkdir()
with open(folder / "staging" / "a.json", "w") as handle:
    handle.write("{}")
os.close(os.open(folder / "staging" / "b.bin", os.O_WRONLY | os.O_CREAT))
open(folder / "staging" / "a.json").read()
db = sqlite3.connect(folder / "x.db")
db.execute("CREATE TABLE t (x)")
db.execute("INSERT INTO t VALUES (1)")
db.cursor().execute("INSERT INTO t VALUES (2)")
db.commit()
print("done")
"""


def test_the_shim_counts_files_opened_for_writing_and_commits_through_the_connection(
        tmp_path: Path) -> None:
    code, counts = count_calls([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=tmp_path)
    assert code == 0
    assert counts[("runner", "open", "staging")] == 2      # the read is not counted
    assert counts[("runner", "insert", "")] == 2
    assert counts[("runner", "commit", "")] == 1


def test_a_process_reads_its_fault_from_the_file_a_flight_node_names(tmp_path: Path) -> None:
    """What a Ray node's processes do: the fault comes from ``FLIGHTPLAN_FAULT_FILE``, read
    when each process starts; the marker holds the pid of the process that died."""
    marker = tmp_path / "fired"
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"role": "runner", "point": "open", "nth": 2, "after": False,
                                 "contains": "staging", "group": False, "marker": str(marker)}))
    env = dict(os.environ, PYTHONPATH=shim_path(os.environ.get("PYTHONPATH")),
               FLIGHTPLAN_FAULT_FILE=str(fault))
    env.pop("FLIGHTPLAN_FAULT", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert int(marker.read_text()) > 0
    # killed before its second file was opened: the first is whole, the second never made
    assert sorted(p.name for p in (tmp_path / "staging").iterdir()) == ["a.json"]


def _reference(spec: Path) -> tuple[dict[str, str], dict]:
    """The products of ``spec`` run once without faults, and the calls it made."""
    code, counts = count_calls(FLIGHTPLAN + ["run", str(spec)], cwd=spec.parent)
    assert code == 0
    return fingerprint(spec.parent), counts


def _assert_identical(report) -> None:
    trace = [(label, a.code, a.fired, a.stderr_tail[-300:]) for label, a in report.attempts]
    assert report.fired == sum(not label.endswith(": clean") for label, _ in report.attempts), trace
    assert report.finished, trace
    assert report.differences == [], trace
    assert report.store_differences == [], trace
    assert report.ledger == []
    assert report.verify_code == 0
    assert report.rejected == []


@pytest.fixture(scope="module")
def file_task_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict]:
    """The docs' file task run once without faults: its products and the calls it made."""
    return _reference(docs_task(tmp_path_factory.mktemp("reference") / "file-task"))


@pytest.mark.slow
def test_the_docs_file_task_killed_mid_save_then_in_close_and_export_ends_bitwise_identical(
        file_task_reference: tuple[dict[str, str], dict], tmp_path: Path) -> None:
    products, counts = file_task_reference
    spec = docs_task(tmp_path / "file-task")
    report = crash_campaign(
        spec, reference=products,
        # the machine dies as a trial renames its last checkpoint into place
        run_points=[CrashPoint("trial", "replace", nth=counts[("trial", "replace", "checkpoints")],
                               contains="checkpoints")],
        # close dies after its first fsync; export as it writes its first artifact
        close_points=[CrashPoint("runner", "fsync", nth=1, after=True)],
        export_points=[CrashPoint("runner", "open", nth=1, after=True, contains="mlartifacts")])
    _assert_identical(report)


@pytest.mark.slow
@pytest.mark.parametrize("build", [docs_trainer, small_lightning], ids=["trainer", "lightning"])
def test_an_integration_killed_inside_its_librarys_save_and_inside_the_commit_ends_bitwise_identical(
        build, tmp_path: Path) -> None:
    """The Trainer and Lightning write their own save into a staging folder, then flightplan
    commits it: killed with the library's first file half open, then at the rename that
    commits the next save."""
    reference, _ = _reference(build(tmp_path / "reference"))
    report = crash_campaign(build(tmp_path / "crashed"), reference=reference, close_points=[], run_points=[
        CrashPoint("trial", "open", nth=1, after=True, contains="staging"),
        CrashPoint("trial", "replace", nth=1, contains="staging")])
    _assert_identical(report)


@pytest.mark.slow
def test_a_ray_campaign_whose_driver_then_a_flight_node_dies_ends_bitwise_identical_to_a_local_one(
        file_task_reference: tuple[dict[str, str], dict], tmp_path: Path) -> None:
    """On a loopback cluster with token authentication: the driver dies around a ledger
    commit, then the flight node of a trial dies as that trial fsyncs a checkpoint file; the
    products equal those of the uninterrupted local campaign."""
    from .flight_faults import Flights

    spec = docs_task(tmp_path / "ray")
    with Flights.start(count=2) as flights:
        report = crash_campaign(
            spec, reference=file_task_reference[0], close_points=[], flights=flights,
            run_args=("--executor", "ray", "--address", flights.address), run_points=[
                CrashPoint("runner", "commit", nth=3, after=True),
                CrashPoint("flight", "fsync", nth=2, contains="checkpoints")])
        assert flights.killed == 1
    _assert_identical(report)
