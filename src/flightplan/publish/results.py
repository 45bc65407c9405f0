"""Publishing into ``results/`` while the campaign runs (called by the runner).

Each call copies what now exists into ``<campaign>/results/`` and rewrites
``MANIFEST.json`` atomically, so a campaign cut short still leaves a directory that
``flightplan verify`` accepts for what was finished. ``flightplan close`` completes it.

Files written here (all paths relative to ``results/``)::

    plan.json                     the original plan, exactly as frozen (never rewritten)
    data_check.json               the data check's record
    params/<run_id>.json          trial.json without machine paths (campaign_dir, corpus root)
    measurements/<run_id>.jsonl   the run's measurements as logged
    metrics/<run_id>.json         the task's metrics.json
    predictions/<run_id>.csv      the task's predictions.csv
    artifacts/<run_id>/...        the task's artifact/ folder

Nothing written here names a path of this machine: in every copied file that is text, a
path under the campaign directory becomes relative to ``results/`` (:func:`portable_bytes`;
the only change a copy undergoes: a file without such a path is copied byte for byte).
    stops.json                    list of stop records ``{run_id, rule, step, value, ...}``
    flights.json                  once a flight was lost: every flight's package window
                                  ``{flight, started_at, ends_at, source, hours_left,
                                  lost_at, lost_reason}`` (unix s, hours at the loss)
    tasks/<hex[:12]>/...          the source of a file or module task (flightplan.tasks.archive),
                                  named by the run's manifest entry ``task``
    pilot/<pilot_id>.jsonl        the pilot's measurements as logged (``runs/pilot-<control
                                  id>/measurements.jsonl``: the evidence that resume works)
    pilot/<pilot_id>.resume.jsonl those of its second process, resumed from its early
                                  checkpoint (``runs/pilot-<control id>/resume/``)

Usage (from the runner)::

    publish_plan(campaign_dir, plan_json)
    publish_data_check(campaign_dir, record)
    publish_run(campaign_dir, run_id)
    publish_pilot(campaign_dir, pilot_run_id)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from flightplan.canonical import plan_sha256
from flightplan.durable import write_atomic, write_json_atomic
from flightplan.errors import RunDirectoryDamaged, UnsafeFileError
from flightplan.publish.manifest import update_manifest
from flightplan.rundir import RunDir
from flightplan.tasks.archive import keep_task_source

__all__ = [
    "RESULTS_DIRNAME",
    "results_dir_of",
    "portable",
    "portable_bytes",
    "publish_plan",
    "publish_data_check",
    "publish_run",
    "publish_pilot",
    "publish_flights",
    "PILOT_DIRNAME",
]

RESULTS_DIRNAME = "results"
PILOT_DIRNAME = "pilot"     # results/pilot/: the pilot's measurement rows
# trial.json keys that hold paths of the machine that ran the trial
_MACHINE_KEYS = ("campaign_dir", "root")


def results_dir_of(campaign_dir: Path) -> Path:
    """``<campaign_dir>/results``, created if missing."""
    path = Path(campaign_dir) / RESULTS_DIRNAME
    path.mkdir(parents=True, exist_ok=True)
    return path


def portable(value: Any, campaign_dir: Path) -> Any:
    """``value`` with machine paths removed, for writing into results.

    Keys ``campaign_dir`` and ``root`` are dropped; inside every string, a path under the
    resolved campaign directory becomes a path relative to ``results/``
    (``"see /home/me/camp/runs/x/log.txt"`` → ``"see ../runs/x/log.txt"``).
    """
    if isinstance(value, dict):
        return {k: portable(v, campaign_dir) for k, v in value.items() if k not in _MACHINE_KEYS}
    if isinstance(value, list):
        return [portable(v, campaign_dir) for v in value]
    if isinstance(value, str):
        return _relative(value, str(Path(campaign_dir).resolve()))
    return value


def _relative(text: str, base: str) -> str:
    """``text`` with every path under ``base`` (the resolved campaign directory) made
    relative to ``results/`` (a folder inside it)."""
    if base not in text:
        return text
    return re.sub(re.escape(base) + r"(?:/|(?=[\s\"',;:)\]}]|$))",
                  lambda m: "../" if m.group(0).endswith("/") else "..", text)


def portable_bytes(data: bytes, campaign_dir: Path) -> bytes:
    """A copied file's bytes with machine paths made relative as :func:`portable` does, when
    it is UTF-8 text that names the campaign directory; every other file (a binary, a text
    without such a path) is returned unchanged, byte for byte."""
    base = str(Path(campaign_dir).resolve())
    if base.encode("utf-8") not in data or b"\0" in data:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return _relative(text, base).encode("utf-8")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirectoryDamaged(f"{path}: cannot read JSON ({exc}); the run directory is "
                                  f"damaged: run flightplan run again to rewrite it, or "
                                  f"--restart the run") from None


def publish_plan(campaign_dir: Path, plan: dict[str, Any]) -> Path:
    """Write the original plan to ``results/plan.json`` (once; never rewritten).

    Args:
        campaign_dir: the campaign directory.
        plan: the ``flightplan plan --json`` object frozen as plan version 1.

    Returns:
        The path of ``plan.json``. When it already exists it is left untouched (the
        original plan is never rewritten), even if ``plan`` differs.
    """
    results = results_dir_of(campaign_dir)
    path = results / "plan.json"
    if path.exists():
        return path
    write_json_atomic(path, plan)
    update_manifest(results, written=["plan.json"], meta={"plan_sha256": plan_sha256(plan)})
    return path


def publish_data_check(campaign_dir: Path, data_check: dict[str, Any]) -> Path:
    """Write the data check's record to ``results/data_check.json`` (machine paths removed).

    Returns:
        The path of ``data_check.json``.
    """
    return _publish_portable(campaign_dir, "data_check.json", data_check)


def publish_flights(campaign_dir: Path, flights: list[dict[str, Any]]) -> Path:
    """Write the flights' package windows to ``results/flights.json`` (the runner calls it
    when a flight is lost, so ``results/`` says which flight went away and when).

    Args:
        campaign_dir: the campaign directory.
        flights: ``{flight, started_at, ends_at, source, hours_left, lost_at,
            lost_reason}`` per flight (:meth:`flightplan.run.rental.FlightWindow.to_json`).

    Returns:
        The path of ``flights.json``.
    """
    return _publish_portable(campaign_dir, "flights.json", flights)


def _publish_portable(campaign_dir: Path, name: str, data: Any) -> Path:
    """Write ``data`` (machine paths removed: :func:`portable`) to ``results/<name>``
    atomically and list it in the manifest; its path."""
    results = results_dir_of(campaign_dir)
    path = results / name
    write_json_atomic(path, portable(data, campaign_dir))
    update_manifest(results, written=[name])
    return path


def _copy_file(source: Path, target: Path, campaign_dir: Path) -> None:
    write_atomic(target, portable_bytes(source.read_bytes(), campaign_dir))


def _checked(path: Path, run_root: Path) -> Path:
    """``path`` when it is a plain file, or a link to a file of the run folder (resolved
    ``run_root``); a link out of the run folder, or to a folder, is refused.

    Raises:
        UnsafeFileError: names the link and where it points.
    """
    if not path.is_symlink():
        return path
    target = path.resolve()
    if not target.is_relative_to(run_root):
        raise UnsafeFileError(f"{path}: a symbolic link out of the run folder (to {target}); "
                              f"refused, nothing of the run copied into results/: put the "
                              f"file itself there")
    if target.is_dir():
        raise UnsafeFileError(f"{path}: a symbolic link to a folder (to {target}); refused, "
                              f"nothing of the run copied into results/: put the folder "
                              f"itself there")
    return path


def _files_to_copy(run: RunDir, run_id: str, artifact_prefix: str) -> list[tuple[Path, str]]:
    """(source, path under ``results/``) of each file :func:`publish_run` copies: the
    measurements, metrics and predictions that exist, then every file of ``artifact/``
    (sorted). Links are not followed while listing; each one is checked first.

    Raises:
        UnsafeFileError: a link out of the run folder or to a folder (:func:`_checked`).
    """
    run_root = run.path.resolve()
    copies = [(_checked(source, run_root), rel)
              for source, rel in ((run.measurements, f"measurements/{run_id}.jsonl"),
                                  (run.metrics, f"metrics/{run_id}.json"),
                                  (run.predictions, f"predictions/{run_id}.csv"))
              if source.is_file() or source.is_symlink()]
    artifact = _checked(run.artifact, run_root)
    if not artifact.is_dir():
        return copies
    found = []
    for root, dirs, files in os.walk(artifact):  # a link to a folder: in dirs, not walked
        found += [Path(root) / name for name in files]
        found += [Path(root) / name for name in dirs if (Path(root) / name).is_symlink()]
    for source in sorted(found):
        rel = artifact_prefix + source.relative_to(artifact).as_posix()
        copies.append((_checked(source, run_root), rel))
    return copies


def _publish_stop(results: Path, record: dict[str, Any] | None, run_id: str) -> None:
    path = results / "stops.json"
    stops = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    stops = [s for s in stops if s.get("run_id") != run_id]
    if record is not None:
        stops.append(portable(record, results.parent))
    write_json_atomic(path, sorted(stops, key=lambda s: str(s.get("run_id"))))


def publish_run(campaign_dir: Path, run_id: str) -> list[str]:
    """Copy one run's files from ``runs/<run_id>/`` into ``results/`` and list them.

    Copies whatever exists: params (always), measurements, metrics, predictions, artifact,
    and the stop record into ``stops.json``. Publishing again replaces the run's earlier
    files (a resumed run republishes).

    Returns:
        The relative paths written, sorted.

    Raises:
        RunDirectoryDamaged: ``runs/<run_id>/trial.json`` is missing or unreadable.
        UnsafeFileError: a file to copy is a symbolic link out of the run folder, or a link
            to a folder (:func:`_files_to_copy`); nothing of the run is written then.
    """
    campaign_dir = Path(campaign_dir)
    run = RunDir.of(campaign_dir, run_id)
    trial_path = run.trial_json
    if not trial_path.is_file():
        raise RunDirectoryDamaged(f"{trial_path}: no such file; publish_run needs a run "
                                  f"directory written by flightplan run (check the run id "
                                  f"{run_id!r})")
    trial = _read_json(trial_path)
    results = results_dir_of(campaign_dir)
    written: list[str] = []

    artifact_prefix = f"artifacts/{run_id}/"
    copies = _files_to_copy(run, run_id, artifact_prefix)
    params = portable(trial, campaign_dir)
    write_json_atomic(results / "params" / f"{run_id}.json", params)
    written.append(f"params/{run_id}.json")
    target = results / "artifacts" / run_id
    if target.is_dir():
        for old in sorted(target.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() and not old.is_symlink() else old.unlink()
    for source, rel in copies:
        _copy_file(source, results / rel, campaign_dir)
        written.append(rel)

    task, kept = keep_task_source(results, trial.get("task_source"), str(trial.get("task")))
    written += kept

    status = run.status() or "incomplete"
    stop = _read_json(run.stop_json) if status == "stopped" else None
    _publish_stop(results, stop, run_id)
    written.append("stops.json")

    done = _read_json(run.done_json) if status == "finished" else {}
    revision = None
    if (run.artifact / "artifact.json").is_file():
        revision = _read_json(run.artifact / "artifact.json").get("base_revision")
    facts = {"name": trial.get("name"), "tier": trial.get("tier"), "status": status,
             "config_hash": trial.get("config_hash"), "steps": done.get("steps"),
             "wall_s": done.get("wall_s"), "stop_rule": (stop or {}).get("rule"), "task": task}
    meta: dict[str, Any] = {}
    corpus = trial.get("corpus") or {}
    if corpus.get("sha256"):
        meta["corpus_sha256"] = corpus["sha256"]
    if revision:
        meta["base_model_revision"] = revision
    with_run = _published_ids(results) | {run_id}
    meta["expected_run_ids"] = sorted(with_run)
    update_manifest(results, written=written, removed_prefixes=[artifact_prefix], meta=meta,
                    runs={run_id: facts})
    return sorted(written)


def publish_pilot(campaign_dir: Path, pilot_run_id: str) -> list[str]:
    """Copy the pilot's measurement rows into ``results/pilot/`` and list them: those of
    ``runs/<pilot_run_id>/measurements.jsonl`` as ``pilot/<pilot_run_id>.jsonl`` and those
    of its resumed process (``resume/measurements.jsonl``) as
    ``pilot/<pilot_run_id>.resume.jsonl``, whichever exist; publishing again replaces them.
    The pilot is no product of the campaign: it is not among ``expected_run_ids``.

    Returns:
        The relative paths written, sorted (empty when the pilot logged no row).
    """
    campaign_dir = Path(campaign_dir)
    pilot = RunDir.of(campaign_dir, pilot_run_id)
    results = results_dir_of(campaign_dir)
    written = []
    for source, rel in ((pilot.measurements, f"{PILOT_DIRNAME}/{pilot_run_id}.jsonl"),
                        (RunDir(pilot.path / "resume").measurements,
                         f"{PILOT_DIRNAME}/{pilot_run_id}.resume.jsonl")):
        if source.is_file():
            _copy_file(source, results / rel, campaign_dir)
            written.append(rel)
    if written:
        update_manifest(results, written=written)
    return sorted(written)


def _published_ids(results: Path) -> set[str]:
    """Run ids that already have a params file in ``results/``."""
    folder = results / "params"
    return {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()

