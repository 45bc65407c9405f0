"""Whether a campaign is already closed: the fingerprint of what ``close`` reads.

``close`` reads the campaign file, the ledger, the run folders and the task's code. Their
fingerprint (:func:`inputs_fingerprint`) goes into the close record
(:mod:`flightplan.publish.close_record`); a later ``close`` whose fingerprint, manifest and
verification are the same has nothing to redo (:func:`unchanged_close`), and says so
instead of reloading every artifact again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from flightplan.close.ledger_reader import LedgerReader
from flightplan.close.verify import verify_results
from flightplan.publish.close_record import CloseRecord, read_close_record, results_changed_since
from flightplan.publish.results import RESULTS_DIRNAME
from flightplan.spec import CampaignSpec
from flightplan.tasks.loader import resolve_task

__all__ = ["inputs_fingerprint", "unchanged_close"]


def _runs_listing(runs_dir: Path) -> list[str]:
    """``relative path, size, mtime_ns`` of every file under ``runs/``, sorted by path."""
    listing = []
    for root, dirs, files in os.walk(runs_dir):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            listing.append(f"{path.relative_to(runs_dir)}\t{_stat(path)}")
    return listing


def _stat(path: Path) -> str:
    """``size<TAB>mtime_ns`` of ``path``, or ``missing``."""
    try:
        info = path.stat()
    except OSError:
        return "missing"
    return f"{info.st_size}\t{info.st_mtime_ns}"


def inputs_fingerprint(spec: CampaignSpec, ledger: LedgerReader) -> str:
    """sha256 (hex) over what ``close`` reads: the campaign file's settings, every ledger
    table (rows as the reader returns them), the path, size and modification time of every
    file under ``runs/`` and of the corpus files of a ``[corpus] path``, and the code
    version of every task the runs name. Any write a run, a note, an expense or an edit
    makes changes it (a missing file hashes as ``missing``)."""
    digest = hashlib.sha256()

    def add(label: str, text: str) -> None:
        digest.update(f"{label}\0{text}\0".encode("utf-8", "surrogateescape"))

    add("spec", spec.model_dump_json())
    for table, rows in (("plan_versions", ledger.plan_versions()), ("runs", ledger.runs()),
                        ("events", ledger.events()), ("decisions", ledger.decisions()),
                        ("expenses", ledger.expenses()), ("notes", ledger.notes()),
                        ("stage_times", ledger.stage_times())):
        add(table, repr(rows))
    add("runs/", "\n".join(_runs_listing(Path(spec.campaign_dir) / "runs")))
    if spec.corpus is not None and spec.corpus.path is not None:   # (a package: left out)
        folder = Path(spec.campaign_dir) / spec.corpus.path
        add("corpus", "\n".join(f"{name}\t{_stat(folder / name)}"
                                for name in sorted(spec.corpus.sha256)))
    for task in sorted({run.task for run in spec.runs}):
        add(f"task {task}", resolve_task(task, spec.campaign_dir).code_version)
    return digest.hexdigest()


def unchanged_close(spec: CampaignSpec, ledger: LedgerReader) -> CloseRecord | None:
    """The record of the last close when closing again would change nothing: it verified,
    the inputs' fingerprint is the same, ``results/MANIFEST.json`` is the one it wrote, and
    ``results/`` verifies again against it (checksums and structure; artifacts are not
    reloaded). None otherwise: then ``close`` has work to do."""
    record = read_close_record(spec.campaign_dir)
    if record is None or not record.verified:
        return None
    if results_changed_since(spec.campaign_dir, record):
        return None
    if record.inputs_sha256 != inputs_fingerprint(spec, ledger):
        return None
    report = verify_results(Path(spec.campaign_dir) / RESULTS_DIRNAME, reload=False)
    return record if report["verified"] else None
