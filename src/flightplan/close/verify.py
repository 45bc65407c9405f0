"""``flightplan verify``: prove a results directory from its files alone.

Every problem is a :class:`~flightplan.findings.Finding` (``{"check", "path", "message"}``
in the JSON report); ``path`` is relative to the results directory. The checks (names are
part of the JSON contract):

==================== ==========================================================================
check                fires when
==================== ==========================================================================
checksum             a listed file's size or sha256 differs from the manifest
missing_file         a listed file does not exist
unlisted_file        a file in the directory is not in the manifest
empty_file           a file has zero bytes
temp_path            a text file holds a path into /tmp, /var/tmp, /var/folders or the
                     writer's $TMPDIR (recorded in the manifest)
absolute_path        a text file holds an absolute path of the writing machine (its
                     campaign directory, home, working directory or Python environment,
                     recorded in the manifest) or any /home/<user>, /Users/<user> path
missing_run          an expected run id lacks its files (params and measurements; plus
                     predictions and artifact unless the run stopped or never finished:
                     status ``incomplete``, a run that failed or was still running)
base_revision        an artifact names a base model (``base_revision``) but not exactly, or
                     names none although its run's campaign names a base model or the
                     artifact holds an adapter (``adapter_config.json``, ``peft``)
path_traversal       a manifest path, or a link in the directory, leads outside it
task_source          a run's file or module task has no source kept in ``tasks/``, or the
                     kept source does not hash to the run's ``code_version``
reload               an artifact fails to load in a fresh process (its task has no
                     ``reload_predictions`` hook, refuses it, or its kept source fails its checks)
prediction_mismatch  predictions re-created in a fresh process differ from the stored ones
incomplete           the manifest lists none (or not all) of :data:`CLOSE_FILES`: ``close``
                     never completed the directory (``flightplan run`` publishes the plan
                     and each run into it as they end; a ``close`` stopped part-way lists
                     nothing it wrote); or the directory is out of date: a run the
                     manifest expects that the last ``close`` did not judge (published
                     after it), or whose files differ from those that close judged
                     (:func:`_check_current`)
inconsistent         a figure the directory states is not what its own predictions give: a
                     run's ``metric_value`` in the manifest, a comparison, the answer or
                     verdict of ``conclusion.json`` (:mod:`flightplan.close.consistency`)
config_hash          a run's recorded inputs (``params/<id>.json``: task, params, corpus
                     sha256 and view, code_version; base revision) do not hash to the
                     ``config_hash`` recorded there, or it is not the manifest's, or the
                     run id's suffix is not its first 10 hex, or the manifest's task record
                     names another task or code_version than the run's params
                     (:func:`_check_configs`)
==================== ==========================================================================

**Integrity, not provenance.** These checks prove that the directory is whole and agrees
with itself: every file as its manifest lists it, every run's id and config hash those of
its recorded inputs, every stated figure what its predictions give. They cannot prove who
wrote it: a directory rewritten throughout (code, params, run ids, manifest and all their
hashes, consistently) cannot be told from a genuine one without a signature, which
flightplan does not make. Get a results directory from a sender you trust.

**Trust.** A results directory may come from someone else, so verify never runs code that
came inside it unless told to (``trust_code``, ``flightplan verify DIR --trust-code``).
Artifacts of built-in tasks are reloaded with the installed flightplan as always. For a
file or module task (its source kept in ``tasks/<hex>/``, :mod:`flightplan.tasks.archive`)
the files are hashed and checked without trust, and the reload is reported ``not_run``,
which is not a finding by itself, unless the kept file the task loads, read and not run,
visibly defines no ``reload_predictions`` hook
(:func:`~flightplan.tasks.archive.kept_lacks_reload`): then the ``reload`` finding is the
one a trusted reload gives (``close``, ``--trust-code``), so every verb says the same of one
directory; a package, a ``from x import *`` or a module ``__getattr__`` cannot be read for
it and stay ``not_run``. With trust, the kept source runs only when every file
of it matches the manifest and it hashes to the run's ``code_version``, and only when the
directory has no finding at all before reloading: with any, no kept code runs and each
such artifact gets a ``reload`` finding (``not run: …``). ``close`` reloads
its own campaign's tasks (trusted). Reloads run ``python -P -m flightplan.tasks.reload``
from a temporary folder outside results/, so nothing in the directory shadows an installed
module, the artifacts of one task several to a process, at most one process per core, or
one per GPU on a machine with GPUs (:func:`reproduce_runs`).

Usage::

    report = verify_results(Path("results"), sample=32)
    report["verified"], report["findings"], report["reload"]   # {run_id: status}
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import queue
import re
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from flightplan.activity import doing
from flightplan.close.consistency import CHECK as CONSISTENCY, consistency_findings
from flightplan.publish.manifest import MANIFEST_NAME, read_manifest
from flightplan.durable import hash_file
from flightplan.errors import VerificationFailed
from flightplan.findings import Finding
from flightplan.ids import HASH_CHARS, config_hash, corpus_view, run_config
from flightplan.tasks.archive import check_kept, kept_lacks_reload, task_record
from flightplan.tasks import BUILTIN_TASKS
from flightplan.tasks.reload import NO_RELOAD_HOOK, no_reload_hook, reload_argv
from flightplan.trial.accelerator import (CUBLAS_ENV, CUBLAS_WORKSPACE, OMP_ENV, THREADS_ENV,
                                          cpu_count, visible_gpus)

__all__ = [
    "CHECKS",
    "changed_files",
    "CLOSE_FILES",
    "DEFAULT_SAMPLE",
    "PROB_TOLERANCE",
    "RELOAD_STATUSES",
    "prediction_differences",
    "reload_processes",
    "reproduce_run",
    "reproduce_runs",
    "run_files_digest",
    "run_task",
    "verify_results",
]

CHECKS = ("checksum", "missing_file", "unlisted_file", "empty_file", "temp_path",
          "absolute_path", "missing_run", "base_revision", "path_traversal", "task_source",
          "reload", "prediction_mismatch", "incomplete", CONSISTENCY, "config_hash")
CLOSE_FILES = ("conclusion.json", "budget.json", "plan_vs_execution.json",
               "plan_vs_execution.md", "README.md", "report.html")
"""Files every ``close`` writes (since the first flightplan) after the runs are published and
judged, then lists in MANIFEST.json in one atomic rewrite with the campaign facts
(:func:`flightplan.close.commands.close_campaign`): a manifest that lacks them belongs to a
directory ``close`` never completed. ``calibration.json`` and ``errors/`` are not among
them (an earlier close wrote no calibration; a campaign without predictions has no
analyses)."""
RELOAD_STATUSES = ("reproduced", "failed", "not_run")
"""What became of one artifact's reload: predictions re-created and equal; a ``reload`` or
``prediction_mismatch`` (or ``task_source``) finding; not run (untrusted code, no finding)."""
DEFAULT_SAMPLE = 32          # test examples re-predicted per artifact by `verify`
PROB_TOLERANCE = 1e-5        # absolute difference allowed between stored and re-created probabilities
RELOAD_TIMEOUT_S = 900         # seconds per artifact a reload process may take
_TEMP_DIRS = ("/tmp", "/var/tmp", "/var/folders", "/private/tmp", "/private/var/folders")
# any user's home directory is a path of one machine, recorded roots or not (a Windows
# path may appear with its backslashes escaped, as JSON writes them)
_HOME_DIRS = (r"/home/[\w.-]+", r"/Users/[\w.-]+", r"[A-Za-z]:(?:\\){1,2}Users(?:\\){1,2}[\w.-]+")
_SNIFF_BYTES = 8192
_HEX64 = re.compile(r"^[0-9a-f]{64}$")



def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {} (a damaged manifest reads as empty)."""
    return value if isinstance(value, dict) else {}

def _inside(results: Path, rel: str) -> bool:
    """True when ``rel`` is a relative path that stays inside ``results`` (links resolved)."""
    if not rel or rel.startswith("/") or "\\" in rel or "\0" in rel or ".." in Path(rel).parts:
        return False
    try:
        target = (results / rel).resolve()
    except (OSError, RuntimeError):  # a link loop, a name too long
        return False
    return target == results or results in target.parents


def _entry_problem(entry: Any) -> str | None:
    """Why a manifest ``files`` entry is malformed, or None."""
    if not isinstance(entry, dict):
        return f"the manifest entry {entry!r:.60} is not an object with path, size_bytes, sha256"
    if not isinstance(entry.get("path"), str) or not entry["path"]:
        return "a manifest entry has no path"
    if not isinstance(entry.get("size_bytes"), int) or not isinstance(entry.get("sha256"), str):
        return "the manifest entry lacks an integer size_bytes or a sha256 string"
    return None


def _is_text(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" not in handle.read(_SNIFF_BYTES)


def _path_pattern(prefixes: list[str], *, extra: tuple[str, ...] = ()) -> re.Pattern[str] | None:
    """A regex matching any of ``prefixes`` (literal) or ``extra`` (regexes) as the start
    of a path, not inside a longer one."""
    prefixes = sorted({p.rstrip("/") for p in prefixes if p and p.rstrip("/")}, key=len,
                      reverse=True)
    if not prefixes and not extra:
        return None
    alternatives = "|".join([re.escape(p) for p in prefixes] + list(extra))
    return re.compile(rf"(?:(?<=file://)|(?<![\w.~/+=-]))(?:{alternatives})"
                      rf"(?=[/\\\"'\s,;:)\]}}<>]|$)")


def _scan_text(results: Path, rel: str, temp: re.Pattern[str] | None,
               absolute: re.Pattern[str] | None) -> list[Finding]:
    text = (results / rel).read_bytes().decode("utf-8", errors="replace")
    found: list[Finding] = []
    for check, pattern in (("temp_path", temp), ("absolute_path", absolute)):
        match = pattern.search(text) if pattern else None
        if match:
            line = text.count("\n", 0, match.start()) + 1
            what = "a temporary directory" if check == "temp_path" else \
                "an absolute path of the machine that wrote it"
            found.append(Finding(check, rel, f"line {line} points into {what} "
                                 f"({match.group(0)!r}); write paths relative to results/"))
    return found


def _check_files(results: Path, manifest: dict[str, Any]) -> tuple[list[Finding], set[str]]:
    """checksum, missing_file, empty_file, path_traversal, unlisted_file; and the paths
    that are present, inside and listed."""
    findings: list[Finding] = []
    listed: set[str] = set()
    present: set[str] = set()
    for done, entry in enumerate(manifest["files"]):
        doing("checking the files of results/", done=done, total=len(manifest["files"]),
              unit="files")
        problem = _entry_problem(entry)
        if problem:
            rel = str(entry.get("path", "")) if isinstance(entry, dict) else ""
            findings.append(Finding("checksum", rel or MANIFEST_NAME, problem))
            if not (rel and isinstance(entry.get("path"), str)):
                continue
        rel = entry["path"]
        listed.add(rel)
        if not _inside(results, rel):
            findings.append(Finding("path_traversal", rel, "the manifest path leaves the results "
                                    "directory or is not a valid relative path; paths must be "
                                    "relative and stay inside it"))
            continue
        path = results / rel
        try:
            if not path.is_file():
                findings.append(Finding("missing_file", rel, "listed in the manifest but not "
                                        "present"))
                continue
            size, digest = hash_file(path)
        except OSError as exc:
            findings.append(Finding("missing_file", rel, f"listed but cannot be read: "
                                    f"{exc.strerror or exc}"))
            continue
        if size != entry.get("size_bytes") or digest != entry.get("sha256"):
            findings.append(Finding("checksum", rel, f"{size} bytes, sha256 {digest[:12]}…; the "
                                    f"manifest says {entry.get('size_bytes')} bytes, sha256 "
                                    f"{str(entry.get('sha256'))[:12]}…"))
        if size == 0:
            findings.append(Finding("empty_file", rel, "the file is empty (0 bytes)"))
        present.add(rel)
    for folder, dirs, files in os.walk(results):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            rel = path.relative_to(results).as_posix()
            if path.is_symlink() and not _inside(results, rel):
                findings.append(Finding("path_traversal", rel, f"a link to {os.readlink(path)!r} "
                                        f"leads outside the results directory; copy the file in"))
                continue
            if name in files and rel != MANIFEST_NAME and rel not in listed:
                findings.append(Finding("unlisted_file", rel, "present but not in the manifest; "
                                        "remove it or re-run `flightplan close`"))
                if path.is_file() and path.stat().st_size == 0:
                    findings.append(Finding("empty_file", rel, "the file is empty (0 bytes)"))
    return findings, present


def changed_files(results_dir: Path) -> list[str]:
    """The files ``MANIFEST.json`` lists whose bytes are no longer the ones it gives (another
    sha256 or size, gone, empty), as relative paths, sorted; [] when ``results_dir`` has no
    readable manifest. ``close`` asks before it writes ``results/`` again, so it can say
    which files it rewrote."""
    try:
        manifest = read_manifest(results_dir)
    except VerificationFailed:
        return []
    findings, _ = _check_files(Path(results_dir), manifest)
    return sorted({f.path for f in findings
                   if f.check in ("checksum", "missing_file", "empty_file")
                   and f.path != MANIFEST_NAME})


def _check_closed(manifest: dict[str, Any]) -> list[Finding]:
    """incomplete: the manifest lists every one of :data:`CLOSE_FILES`."""
    listed = {e.get("path") for e in manifest["files"] if isinstance(e, dict)}
    lacking = [rel for rel in CLOSE_FILES if rel not in listed]
    if not lacking:
        return []
    return [Finding("incomplete", lacking[0], f"not closed: {MANIFEST_NAME} lists no "
                    f"{', '.join(lacking)} (close lists them last); run `flightplan close "
                    f"CAMPAIGN_FILE` on its campaign")]


def run_files_digest(manifest: dict[str, Any], run_id: str) -> str:
    """sha256 (hex) over ``"<path> <sha256>\\n"`` of the run's files the manifest lists
    (``params/<id>.json``, ``measurements/<id>.jsonl``, ``metrics/<id>.json``,
    ``predictions/<id>.csv``, ``artifacts/<id>/…``), sorted by path: what ``close``
    records as ``runs.<id>.judged_sha256`` for each run it judged."""
    own = (f"params/{run_id}.json", f"measurements/{run_id}.jsonl", f"metrics/{run_id}.json",
           f"predictions/{run_id}.csv")
    lines = sorted(f"{e.get('path')} {e.get('sha256')}\n" for e in manifest.get("files", [])
                   if isinstance(e, dict) and isinstance(e.get("path"), str)
                   and (e["path"] in own or e["path"].startswith(f"artifacts/{run_id}/")))
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _check_current(manifest: dict[str, Any]) -> list[Finding]:
    """incomplete (out of date): on a closed directory, every run the manifest expects was
    judged by the last close (its ``accepted`` verdict), and its files are those it judged
    (``judged_sha256``, when recorded). A run fixed and run again after the close, its new
    id published into results/, or a run published again under its id, makes the
    conclusion older than the runs."""
    runs = _object(manifest.get("runs"))
    expected = manifest.get("expected_run_ids")
    if not isinstance(expected, list):
        return []
    unjudged, changed = [], []
    for run_id in (i for i in expected if isinstance(i, str)):
        entry = _object(runs.get(run_id))
        if not entry:
            continue            # never published: missing_run says it
        if "accepted" not in entry:
            unjudged.append(run_id)
        elif isinstance(entry.get("judged_sha256"), str) and \
                entry["judged_sha256"] != run_files_digest(manifest, run_id):
            changed.append(run_id)
    found = []
    again = "run `flightplan close CAMPAIGN_FILE` again on its campaign"
    if unjudged:
        found.append(Finding("incomplete", "conclusion.json", f"out of date: {MANIFEST_NAME} "
                             f"lists runs the last close did not judge (published after it): "
                             f"{', '.join(unjudged)}; conclusion.json does not cover them; "
                             f"{again}"))
    if changed:
        found.append(Finding("incomplete", "conclusion.json", f"out of date: the files of "
                             f"{', '.join(changed)} changed after the last close judged them "
                             f"(published again); conclusion.json is older than the runs; "
                             f"{again}"))
    return found


def _check_configs(results: Path, manifest: dict[str, Any], present: set[str]
                   ) -> list[Finding]:
    """config_hash: each run's id and config hash are those of its recorded inputs.

    The inputs come from ``params/<id>.json`` (the run's ``trial.json``): ``task``,
    ``params``, ``corpus.sha256`` and the corpus view, ``code_version``; the base revision
    is not recorded there, so each one the directory records for the run is tried (its
    ``artifact.json`` ``base_revision``, its ``calibration.json`` entry's, the manifest's
    ``base_model_revision``, and none). The hash must equal ``config_hash`` in the params
    and the manifest, its first :data:`~flightplan.ids.HASH_CHARS` hex the run id's suffix,
    and the manifest's task record must name the params' task and ``code_version`` (the
    record ``--trust-code`` reloads from)."""
    findings: list[Finding] = []
    runs = _object(manifest.get("runs"))
    listed = _json_object(results, "calibration.json", present).get("runs")
    calibrated = {str(r.get("run_id")): r.get("base_revision")
                  for r in (listed if isinstance(listed, list) else []) if isinstance(r, dict)}
    for run_id in sorted(runs):
        rel = f"params/{run_id}.json"
        entry = _object(runs[run_id])
        doc = _json_object(results, rel, present)
        if not doc:
            continue            # missing_run / missing_file say it
        problem = _config_problem(results, manifest, run_id, entry, doc, present,
                                  calibrated.get(run_id))
        if problem:
            findings.append(Finding("config_hash", rel, f"run {run_id}: {problem}; its "
                                    f"recorded inputs were changed after it ran, so its "
                                    f"files are not the run's"))
    return findings


def _config_problem(results: Path, manifest: dict[str, Any], run_id: str,
                    entry: dict[str, Any], doc: dict[str, Any], present: set[str],
                    calibrated: Any) -> str | None:
    """Why run ``run_id``'s recorded config does not hold together (None when it does)."""
    stated = doc.get("config_hash")
    if not isinstance(stated, str) or not _HEX64.match(stated):
        return f"params/{run_id}.json records no 64-hex config_hash ({stated!r:.40})"
    if entry.get("config_hash") != stated:
        return (f"{MANIFEST_NAME} records config_hash {str(entry.get('config_hash'))[:12]}…, "
                f"params/{run_id}.json {stated[:12]}…")
    if doc.get("run_id") not in (None, run_id):
        return f"params/{run_id}.json names run id {doc.get('run_id')!r}"
    record = _object(entry.get("task"))
    if record and record.get("code_version") != doc.get("code_version"):
        return (f"{MANIFEST_NAME}'s task record has code_version "
                f"{str(record.get('code_version'))[:19]}…, the run's params "
                f"{str(doc.get('code_version'))[:19]}…")
    if record and record.get("ref") not in (None, doc.get("task")):
        return f"{MANIFEST_NAME}'s task record names task {record.get('ref')!r}, the run's params {doc.get('task')!r}"
    corpus = _object(doc.get("corpus"))
    revisions: list[Any] = []
    meta = _json_object(results, f"artifacts/{run_id}/artifact.json", present)
    for candidate in (meta.get("base_revision"), calibrated,
                      manifest.get("base_model_revision"), None):
        if candidate not in revisions:
            revisions.append(candidate)
    try:
        hashes = [config_hash(run_config(str(doc.get("task")), _object(doc.get("params")),
                                         _object(corpus.get("sha256")), revision,
                                         str(doc.get("code_version")), corpus_view(corpus)))
                  for revision in revisions]
    except Exception as exc:   # a value canonical JSON refuses (SpecError), a bad type
        return f"its recorded inputs cannot be hashed ({exc})"
    if stated not in hashes:
        return (f"its recorded inputs (task, params, corpus, code_version, base revision) "
                f"hash to {hashes[0][:12]}…, not to the recorded config_hash {stated[:12]}…")
    suffix = run_id.rsplit("-", 1)[-1]
    if suffix != stated[:HASH_CHARS]:
        return (f"the run id's suffix {suffix!r} is not the first {HASH_CHARS} hex of its "
                f"config_hash ({stated[:HASH_CHARS]})")
    return None


def _check_runs(results: Path, manifest: dict[str, Any], present: set[str]) -> list[Finding]:
    """missing_run and base_revision."""
    findings: list[Finding] = []
    runs = _object(manifest.get("runs"))
    expected = manifest.get("expected_run_ids") or []
    if not isinstance(expected, list) or not all(isinstance(i, str) and i for i in expected):
        findings.append(Finding("missing_run", MANIFEST_NAME, "expected_run_ids is not a list of "
                                "run ids; re-run `flightplan close`"))
        expected = []
    for run_id in expected:
        needed = [f"params/{run_id}.json", f"measurements/{run_id}.jsonl"]
        # a run stopped by a rule, or one that never finished (it failed, or close came
        # before it ended), has no product to check: its rows say what happened
        if (runs.get(run_id) or {}).get("status") not in ("stopped", "incomplete"):
            needed.append(f"predictions/{run_id}.csv")
            if not any(p.startswith(f"artifacts/{run_id}/") for p in present):
                needed.append(f"artifacts/{run_id}/")
        lacking = [p for p in needed if p not in present]
        if lacking:
            findings.append(Finding("missing_run", lacking[0],
                                    f"expected run {run_id} lacks {', '.join(lacking)}"))
    for run_id in sorted({p.split("/")[1] for p in present
                          if re.fullmatch(r"artifacts/[^/]+/.+", p)}):
        problem = _revision_problem(results, run_id, present)
        if problem:
            findings.append(Finding("base_revision", f"artifacts/{run_id}/artifact.json", problem))
    return findings


def _json_object(results: Path, rel: str, present: set[str]) -> dict[str, Any]:
    """The JSON object in ``rel`` ({} when it is not present, unreadable or no object)."""
    if rel not in present:
        return {}
    try:
        value = json.loads((results / rel).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _revision_problem(results: Path, run_id: str, present: set[str]) -> str | None:
    """Why ``artifacts/<run_id>`` does not pin its base model exactly, or None.

    A run whose campaign names a base model (``base_model`` in ``params/<id>.json``) or whose
    artifact holds an adapter (PEFT's ``adapter_config.json``, or ``peft`` in
    ``artifact.json``) must record the exact revision in ``artifact.json``; an artifact
    that records one must record it exactly, whatever else is wrong with the file.
    """
    meta = _json_object(results, f"artifacts/{run_id}/artifact.json", present)
    revision = meta.get("base_revision")
    if revision is not None:
        return None if _exact_revision(revision) else (
            "the artifact names a base model but not its exact revision (a 64-hex "
            "weights_sha256, or a 40-hex commit as revision)")
    if _json_object(results, f"params/{run_id}.json", present).get("base_model") is not None:
        why = "the run's campaign names a base model ([base_model])"
    elif f"artifacts/{run_id}/adapter_config.json" in present or meta.get("peft"):
        why = "the artifact holds an adapter, which is nothing without its base model"
    else:
        return None
    return (f"{why}, but artifact.json records no base_revision; the artifact cannot be "
            f"matched to the exact base model it was trained on: the task must write "
            f"base_revision (package, version and a 64-hex weights_sha256, or a 40-hex "
            f"commit as revision) into artifact.json, and the run be made again")


def _exact_revision(revision: Any) -> bool:
    """Whether a ``base_revision`` pins its base model exactly: an object with a 64-hex
    ``weights_sha256`` (the weights' own hash) or a 40-hex ``revision`` (a hub commit)."""
    if not isinstance(revision, dict):
        return False
    return bool(_HEX64.match(str(revision.get("weights_sha256", "")))
                or re.fullmatch(r"[0-9a-f]{40}", str(revision.get("revision", ""))))


def _read_predictions(path: Path) -> dict[str, dict[str, str]]:
    """example_id → row of a predictions CSV. Raises ValueError when unreadable."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return {row["example_id"]: row for row in csv.DictReader(handle)}
    except (OSError, KeyError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path.name}: unreadable predictions ({exc})") from None


def prediction_differences(stored_path: Path, fresh_path: Path) -> tuple[int, list[str]]:
    """Compare re-created predictions with stored ones, example by example.

    A re-created row matches when the stored file has its example id with the same
    ``predicted`` label and every ``prob_*`` within :data:`PROB_TOLERANCE` (absolute).

    Returns:
        ``(rows re-created, ids that differ)`` in the order of the re-created file.

    Raises:
        ValueError: either file is unreadable or lacks ``example_id``.
    """
    stored, fresh = _read_predictions(stored_path), _read_predictions(fresh_path)
    differ = []
    for example_id, row in fresh.items():
        old = stored.get(example_id)
        if old is None or old.get("predicted") != row.get("predicted"):
            differ.append(example_id)
            continue
        for key, value in row.items():
            if key.startswith("prob_"):
                try:
                    close = abs(float(value) - float(old.get(key, "nan"))) <= PROB_TOLERANCE
                except (TypeError, ValueError):
                    close = False
                if not close:
                    differ.append(example_id)
                    break
    return len(fresh), differ


def run_task(results: Path, manifest: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The task record of ``run_id`` (:mod:`flightplan.tasks.archive`): the manifest's
    ``runs.<id>.task``, else (results written before records existed) built from
    ``artifacts/<id>/artifact.json``'s ``task``: a built-in name, or a task whose source
    was not kept.

    Raises:
        ValueError: neither says which task made the artifact.
    """
    runs = _object(manifest.get("runs"))
    record = _object(runs.get(run_id)).get("task")
    if isinstance(record, dict) and isinstance(record.get("entry"), str):
        return record
    try:
        task = json.loads((results / "artifacts" / run_id / "artifact.json").read_text(
            encoding="utf-8"))["task"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"artifact.json unreadable or without task: {exc}") from None
    if not isinstance(task, str) or not task:
        raise ValueError(f"artifact.json's task {task!r} is not a task name")
    return task_record(task, None)


def _source_problems(results: Path, record: dict[str, Any], manifest: dict[str, Any]
                     ) -> list[str]:
    """Why the kept source of a file or module task must not run ([] when it may): not
    kept, a file that differs from the manifest or is not in it, or a copy that does not
    hash to the run's ``code_version``. Reads files only."""
    if not isinstance(record.get("source"), str):
        return [f"its source was not kept ({record.get('not_kept') or 'no source folder'})"]
    folder = results / record["source"]
    if not _inside(results, record["source"]) or folder.is_symlink() or not folder.is_dir():
        return [f"{record['source']} is not a folder inside the results directory"]
    listed = {e.get("path"): e for e in manifest.get("files", []) if isinstance(e, dict)}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(results).as_posix()
        entry = listed.get(rel)
        if path.is_symlink() or entry is None or not _inside(results, rel):
            return [f"{rel} is not a file listed in the manifest"]
        if hash_file(path) != (entry.get("size_bytes"), entry.get("sha256")):
            return [f"{rel} differs from its manifest entry"]
    return check_kept(results, record)


def _task_findings(results: Path, manifest: dict[str, Any]) -> list[Finding]:
    """task_source: every run's file or module task has its source kept and intact."""
    found: dict[tuple[str, str], Finding] = {}
    runs = _object(manifest.get("runs"))
    for run_id in sorted(runs):
        record = _object(runs[run_id]).get("task")
        if not isinstance(record, dict) or record.get("kind") == "builtin":
            continue
        source = record.get("source")
        path = source if isinstance(source, str) else f"params/{run_id}.json"
        for problem in _source_problems(results, record, manifest):
            found.setdefault((path, problem), Finding(
                "task_source", path, f"task {record.get('ref')!r} of {run_id}: {problem}"))
    return list(found.values())


class _Reloads:
    """The reload processes of one call, run from any thread and killed together by
    :meth:`stop` (the caller was interrupted: a Ctrl-C or SIGTERM in the main thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        self._stopped = False

    def run(self, argv: list[str], *, cwd: str, env: dict[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)``
        whose process :meth:`stop` kills; any exception here kills it too.

        Raises:
            subprocess.TimeoutExpired: it ran over ``timeout`` seconds.
            InterruptedError: the reloads were stopped before it started.
        """
        with self._lock:
            if self._stopped:
                raise InterruptedError("the reloads were stopped")
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def stop(self) -> None:
        """Kill every reload still running and refuse to start another."""
        with self._lock:
            self._stopped = True
            for proc in self._running:
                proc.kill()


def reproduce_run(results_dir: Path, run_id: str, *, limit: int | None = DEFAULT_SAMPLE,
                  trust_code: bool = False, campaign_dir: Path | None = None
                  ) -> tuple[str, list[Finding]]:
    """Reload ``artifacts/<run_id>`` in a fresh process and compare its predictions.

    The command is :func:`flightplan.tasks.reload.reload_argv` (what README.md tells a
    reader to run), started in a temporary folder outside results/ that also receives its
    output. A file or module task runs from its kept copy in ``tasks/<hex>/`` and only
    when ``trust_code`` is set and the copy passes its checks (module docstring).

    Args:
        results_dir: the results directory.
        run_id: the run whose artifact to reload.
        limit: re-predict the first ``limit`` test examples; None for all of them.
        trust_code: run a file or module task's kept source (``close``: the campaign's
            own code; ``verify --trust-code``).
        campaign_dir: passed to the task's reload hook (None: results alone).

    Returns:
        ``(status, findings)``: ``("reproduced", [])``; ``("failed", [one reload,
        prediction_mismatch or task_source finding])``; ``("not_run", [])`` for untrusted
        code.
    """
    return reproduce_runs(results_dir, [run_id], limit=limit, trust_code=trust_code,
                          campaign_dir=campaign_dir)[run_id]


def _reload_task(results: Path, manifest: dict[str, Any], run_id: str, *, trust_code: bool,
                 refused: str | None = None
                 ) -> tuple[str, str | None] | tuple[str, list[Finding]]:
    """How ``artifacts/<run_id>`` is reloaded: ``(task entry, task root or None)``; or,
    when it is not (untrusted, unknown or unkept code), its final ``(status, findings)``."""
    artifact_rel = f"artifacts/{run_id}"
    try:
        record = run_task(results, manifest, run_id)
    except ValueError as exc:
        return "failed", [Finding("reload", artifact_rel, str(exc))]
    if record.get("kind") == "builtin":
        if record["entry"] not in BUILTIN_TASKS:
            return "failed", [Finding("reload", artifact_rel, f"task {record['entry']!r} is not "
                                      f"a built-in task of this flightplan "
                                      f"({', '.join(BUILTIN_TASKS)})")]
        return record["entry"], None
    if not isinstance(record.get("source"), str):  # not reloadable from here, trusted or not
        return "failed", [Finding("reload", artifact_rel, f"task {record.get('ref')!r}: its "
                                  f"source was not kept ({record.get('not_kept')})")]
    problems = _source_problems(results, record, manifest)
    if not trust_code and not problems and kept_lacks_reload(results, record):
        # read, not run: the kept code the runs were made from writes no hook
        return "failed", [Finding("reload", artifact_rel, no_reload_hook(record["entry"]))]
    if not trust_code:  # the task_source check has hashed the kept copy all the same
        return "not_run", []
    if problems:
        return "failed", [Finding("reload", artifact_rel, f"not run: task "
                                  f"{record.get('ref')!r}: {problems[0]}")]
    if refused:
        return "failed", [Finding("reload", artifact_rel, f"not run: task "
                                  f"{record.get('ref')!r}: {refused}")]
    return record["entry"], str(results / record["source"])


def reload_processes(artifacts: int, *, gpus: int = 0, cores: int | None = None
                     ) -> tuple[int, int]:
    """``(processes at once, threads per process)`` for reloading ``artifacts`` artifacts
    on this machine (``cores``: its cores, unless given; ``gpus``: its GPUs).

    With GPUs, one process per GPU (each given its GPU in ``CUDA_VISIBLE_DEVICES``),
    ``cores // processes`` threads each; without, ``min(cores, artifacts)`` processes of
    ``cores // processes`` threads: the processes' threads together never outnumber the
    cores. At least one process of one thread. A task that records the thread count it
    computed with (textclf: ``artifact.json`` ``torch_threads``) reloads at that count, so
    its predictions stay bitwise those of its run; the count given here is what the
    others compute with (``$FLIGHTPLAN_TORCH_THREADS``).
    """
    cores = cores if cores is not None else cpu_count()
    processes = max(1, min(gpus or cores, artifacts))
    return processes, max(1, cores // processes)


def _batches(groups: dict[tuple[str, str | None], list[str]], processes: int
             ) -> list[tuple[str, str | None, list[str]]]:
    """Each task's run ids cut into at most ``processes`` batches of near-equal size (one
    process each), largest first: ``[(entry, task root, run ids)]``."""
    out = []
    for (entry, root), run_ids in groups.items():
        count = min(processes, len(run_ids))
        out += [(entry, root, run_ids[i::count]) for i in range(count)]
    return sorted(out, key=lambda batch: -len(batch[2]))


def _reload_batch(results: Path, entry: str, task_root: str | None, run_ids: list[str], *,
                  limit: int | None, campaign_dir: Path | None, env: dict[str, str],
                  reloads: _Reloads) -> dict[str, tuple[str, list[Finding]]]:
    """Reload ``run_ids`` (artifacts of one task) in one fresh process and compare each
    one's predictions; run id → ``(status, findings)``."""
    found: dict[str, tuple[str, list[Finding]]] = {}
    with tempfile.TemporaryDirectory(prefix="flightplan-verify-") as scratch:
        outs = {run_id: Path(scratch) / f"{run_id}.csv" for run_id in run_ids}
        pairs = [(str(results / "artifacts" / run_id), str(outs[run_id])) for run_id in run_ids]
        argv = reload_argv(entry, *pairs[0], task_root=task_root, limit=limit,
                           campaign_dir=None if campaign_dir is None else str(campaign_dir),
                           pairs=pairs[1:], as_json=True)
        timeout = RELOAD_TIMEOUT_S * len(run_ids)
        try:
            done = reloads.run(argv, cwd=scratch, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {run_id: ("failed", [Finding("reload", f"artifacts/{run_id}",
                                                f"reloading took over {timeout} s")])
                    for run_id in run_ids}
        said = _outcomes(done.stdout)
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("error: ")
        for run_id, (artifact, _) in zip(run_ids, pairs):
            outcome = said.get(artifact, {"exit": done.returncode or 1, "error": tail})
            if outcome.get("exit") != 0 or not outs[run_id].is_file():
                message = str(outcome.get("error") or tail)
                if not message.startswith(NO_RELOAD_HOOK):
                    message = (f"failed to load in a fresh process (exit "
                               f"{outcome.get('exit')}): {message}")
                found[run_id] = ("failed", [Finding("reload", f"artifacts/{run_id}", message)])
                continue
            found[run_id] = _compared(results, run_id, outs[run_id])
    return found


def _outcomes(stdout: str) -> dict[str, dict[str, Any]]:
    """Artifact folder → the reload entry's ``--json`` object for it."""
    said = {}
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("artifact"), str):
            said[value["artifact"]] = value
    return said


def _compared(results: Path, run_id: str, fresh: Path) -> tuple[str, list[Finding]]:
    """``(status, findings)`` of re-created predictions ``fresh`` against the stored ones."""
    stored_rel = f"predictions/{run_id}.csv"
    try:
        count, differ = prediction_differences(results / stored_rel, fresh)
    except ValueError as exc:
        return "failed", [Finding("prediction_mismatch", stored_rel, str(exc))]
    if not count or differ:
        return "failed", [Finding("prediction_mismatch", stored_rel,
                                  f"{len(differ)} of {count} re-created predictions differ "
                                  f"from the stored ones (first: "
                                  f"{', '.join(differ[:5]) or 'none re-created'})")]
    return "reproduced", []


def reproduce_runs(results_dir: Path, run_ids: list[str], *, limit: int | None = DEFAULT_SAMPLE,
                   trust_code: bool = False, campaign_dir: Path | None = None,
                   on_done: Callable[[int], None] | None = None,
                   gpus: list[str] | None = None, cores: int | None = None,
                   refused: str | None = None) -> dict[str, tuple[str, list[Finding]]]:
    """:func:`reproduce_run` for each of ``run_ids``: the artifacts of one task are reloaded
    several to a fresh process (the task loaded and its imports paid once), at most
    :func:`reload_processes` processes at once, so no core (or GPU) idles while reloads
    remain.

    Each process computes where its task chooses: on a machine with GPUs (``gpus``,
    default :func:`~flightplan.trial.accelerator.visible_gpus`) each process at once is
    given one of them in ``CUDA_VISIBLE_DEVICES`` (with the cuBLAS setting of a
    reproducible run); ``$FLIGHTPLAN_TORCH_THREADS`` and ``OMP_NUM_THREADS`` are the
    cores divided by the processes at once unless set. A process that fails as a whole
    (killed, a task that does not load) gives each of its artifacts the ``reload``
    finding with its exit code and last line, as one process per artifact did.

    Args:
        results_dir, limit, trust_code, campaign_dir: as :func:`reproduce_run`.
        run_ids: the runs whose artifacts to reload.
        on_done: called with the number of reloads finished after each one ends.
        gpus: the GPUs to reload on (``CUDA_VISIBLE_DEVICES`` names; [] for none).
        cores: this machine's cores (default :func:`~flightplan.trial.accelerator.cpu_count`).
        refused: why no kept code may run (:func:`verify_results`: the directory has
            findings); with ``trust_code``, each artifact of a file or module task whose
            kept source passes its checks then gets a ``reload`` finding ``not run:
            <refused>`` instead of running. Built-in tasks reload as always.

    An exception in the calling thread (a Ctrl-C, SIGTERM, or ``on_done`` raising) kills the
    reloads still running and starts no other before it propagates.

    Returns:
        run id → :func:`reproduce_run`'s ``(status, findings)``, in the order of ``run_ids``.
    """
    results = Path(results_dir).resolve()
    found: dict[str, tuple[str, list[Finding]]] = {}

    def done(run_id: str, outcome: tuple[str, list[Finding]]) -> None:
        found[run_id] = outcome
        if on_done:
            on_done(len(found))
    groups: dict[tuple[str, str | None], list[str]] = {}
    try:
        manifest = read_manifest(results)
    except VerificationFailed as exc:
        for run_id in run_ids:
            done(run_id, ("failed", [Finding("reload", f"artifacts/{run_id}", str(exc))]))
        return found
    for run_id in run_ids:
        how = _reload_task(results, manifest, run_id, trust_code=trust_code, refused=refused)
        if isinstance(how[1], list):
            done(run_id, (how[0], how[1]))
        else:
            groups.setdefault((how[0], how[1]), []).append(run_id)
    devices = visible_gpus() if gpus is None else list(gpus)
    processes, threads = reload_processes(sum(map(len, groups.values())), gpus=len(devices),
                                          cores=cores)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.setdefault(THREADS_ENV, str(threads))
    env.setdefault(OMP_ENV, str(threads))
    free: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    for slot in range(processes):
        free.put(devices[slot] if devices else None)

    def batch(entry: str, root: str | None, ids: list[str]
              ) -> dict[str, tuple[str, list[Finding]]]:
        device = free.get()
        try:
            where = env if device is None else dict(env, CUDA_VISIBLE_DEVICES=device,
                                                    **{CUBLAS_ENV: CUBLAS_WORKSPACE})
            return _reload_batch(results, entry, root, ids, limit=limit,
                                 campaign_dir=campaign_dir, env=where, reloads=reloads)
        finally:
            free.put(device)
    reloads = _Reloads()
    with ThreadPoolExecutor(max_workers=processes) as pool:
        try:
            pending = [pool.submit(batch, *b) for b in _batches(groups, processes)]
            for future in as_completed(pending):
                for run_id, outcome in future.result().items():
                    done(run_id, outcome)
        except BaseException:   # interrupted: no reload outlives the call
            reloads.stop()
            pool.shutdown(cancel_futures=True)
            raise
    return {run_id: found[run_id] for run_id in run_ids}


def verify_results(results_dir: Path, *, sample: int | None = DEFAULT_SAMPLE,
                   reload: bool = True, trust_code: bool = False,
                   campaign_dir: Path | None = None,
                   reproduced: dict[str, list[Finding]] | None = None) -> dict[str, Any]:
    """Run every check on ``results_dir``.

    Args:
        results_dir: the results directory (holds MANIFEST.json).
        sample: test examples re-predicted per artifact (None: all).
        reload: reload artifacts in fresh processes (the ``reload`` and
            ``prediction_mismatch`` checks).
        trust_code: also reload artifacts of file and module tasks by running their kept
            source (see the module docstring); without it they are ``not_run``.
        campaign_dir: passed to the tasks' reload hooks (None: results alone).
        reproduced: run id → findings of a reload of that run's artifact already made
            in a fresh process from the files now in the directory (``close`` passes
            what its acceptance step found, so it does not reload twice); the checksum
            check still proves those files unchanged since.

    Returns:
        ``{"verified": bool, "findings": [{check, path, message}, ...]}``, findings sorted
        by path then check; with ``reload``, also ``"reload": {run_id: status}`` (one of
        :data:`RELOAD_STATUSES` per artifact with stored predictions). ``verified`` is
        true when there is no finding: a reload ``not_run`` is not one.
    """
    results = Path(results_dir).resolve()
    try:
        manifest = read_manifest(results)
    except VerificationFailed as exc:
        return {"verified": False, "findings": [f.as_dict() for f in exc.findings]} | (
            {"reload": {}} if reload else {})
    findings, present = _check_files(results, manifest)
    findings += _check_closed(manifest)
    writer = _object(manifest.get("writer"))

    def strings(key: str) -> list[str]:
        value = writer.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    temp = _path_pattern(list(_TEMP_DIRS) + strings("tmpdirs"))
    absolute = _path_pattern(strings("absolute_roots"), extra=_HOME_DIRS)
    for rel in sorted(present):
        if _is_text(results / rel):
            findings += _scan_text(results, rel, temp, absolute)
    findings += _check_runs(results, manifest, present)
    findings += _task_findings(results, manifest)
    findings += _check_configs(results, manifest, present)
    if not any(f.check == "incomplete" for f in findings):
        findings += _check_current(manifest)
    findings += consistency_findings(results, manifest, changed=frozenset(
        f.path for f in findings if f.check in ("checksum", "missing_file", "empty_file")))
    statuses: dict[str, str] = {}
    if reload:
        artifacts = sorted({p.split("/")[1] for p in present
                            if re.fullmatch(r"artifacts/[^/]+/.+", p)})
        known = reproduced or {}
        to_reload = [r for r in artifacts
                     if r not in known and f"predictions/{r}.csv" in present]

        def progress(reloaded: int) -> None:    # the others need no reload here
            doing("reloading artifacts in fresh processes",
                  done=len(artifacts) - len(to_reload) + reloaded, total=len(artifacts),
                  unit="artifacts")
        if to_reload:
            progress(0)
        # a directory with any finding runs none of the code it holds, trusted or not
        distrusted = sorted({f.check for f in findings}, key=CHECKS.index)
        refused = None if not distrusted else (
            f"this results directory has findings ({', '.join(distrusted)} above), so "
            f"--trust-code runs none of the code it holds; get the directory again from its "
            f"sender")
        reloads = reproduce_runs(results, to_reload, limit=sample, trust_code=trust_code,
                                 campaign_dir=campaign_dir, on_done=progress,
                                 refused=refused)
        for run_id in artifacts:
            if run_id in known:
                status, found = ("failed" if known[run_id] else "reproduced", known[run_id])
            elif run_id in reloads:
                status, found = reloads[run_id]
            else:
                continue
            statuses[run_id] = status
            findings += [f for f in found if f not in findings]
    findings.sort(key=lambda f: (f.path, f.check))
    report: dict[str, Any] = {"verified": not findings,
                              "findings": [f.as_dict() for f in findings]}
    return report | ({"reload": statuses} if reload else {})
