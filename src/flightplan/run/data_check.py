"""The data check: the campaign's first essential stage, for any corpus and any task.

It reads the frozen corpus (:mod:`flightplan.corpus`) and reports, as one JSON object
(also ``data_check.json``):

- ``files``: per corpus file its split, format, rows (before the limits; null when the
  task reads the files), size and sha256 against the hash frozen in ``[corpus]``; any
  difference raises :class:`CorpusMismatch` (which stops the campaign) after the report,
  with ``status: "corpus_mismatch"``, has been written;
- ``columns``: ``{id, inputs, label}`` as declared, or null when the task reads the files
  (then only the files are checked, and the keys below are absent);
- ``splits``: per split (after the limits) ``rows``; ``empty_inputs``: ids of examples
  with an input that is null or blank; ``duplicate_ids``: ids found more than once;
  ``duplicate_inputs``: ``[{ids, text}]`` examples with identical inputs;
  ``missing_labels``: ids without a label (when a label column is declared); ``labels``:
  ``{label: count}`` over every label of the corpus (null without a label column or with
  more than :data:`MAX_LABELS` distinct labels);
- ``labels``: the sorted labels (null as above), ``distinct_labels``: their number;
  ``test_labels_not_in_train``: the sorted labels that some test example has and no
  training example has (no training example teaches them, and every classification
  metric counts them as classes; null as ``labels``);
- ``cross_split_duplicates``: ``[{train_ids, test_ids, text}]`` examples whose inputs are
  in both train and test; ``cross_split_ids``: ids found in both splits;
- then every key of the figures each run's task adds through its ``data_check`` hook
  (:mod:`flightplan.tasks.protocol`; e.g. token ``lengths`` and ``truncation``), called once
  per distinct task with the params of its runs. A task key that the generic check (or
  another task) already wrote is a :class:`TaskError`.

Once the corpus is found whole, :func:`prepare_data` calls each task's ``prepare_data``
hook, which builds the data its runs read into the campaign's cache (textclf: its
tokenised splits, :mod:`flightplan.tasks.textclf.prepared`), so no run pays for it.

Inputs are identical when their values are (strings compared exactly, other values as
canonical JSON); ``text`` is a preview of the first example's :attr:`Example.text`.

The report is a :class:`DataCheckReport` (the common part typed, the tasks' keys in
``task_figures``); :meth:`DataCheckReport.to_json` is the JSON object above, and the
ledger keeps its :class:`DataCheckSummary`.

Usage::

    tasks = {r.name: load_task(r.task, spec.campaign_dir) for r in spec.runs}
    report = run_data_check(spec, out=campaign_dir / ".flightplan" / "data_check.json",
                            tasks=tasks)
    report.splits["train"].duplicate_ids                 # e.g. ["17"]
    report.to_json()["splits"]["train"]["duplicate_ids"]  # the same, as written
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from flightplan.corpus import (Corpus, CorpusFile, Example, corpus_files, load_corpus,
                               verify_hashes)
from flightplan.durable import write_json_atomic
from flightplan.errors import CorpusMismatch, SpecError, TaskError
from flightplan.spec import CampaignSpec

__all__ = ["DataCheckReport", "DataCheckSummary", "SplitReport", "run_data_check",
           "prepare_data",
           "split_report", "cross_split", "MAX_LABELS", "PREVIEW_CHARS"]

PREVIEW_CHARS = 80
MAX_LABELS = 100
"""More distinct labels than this (a numeric target) are not counted one by one."""


@dataclass(frozen=True)
class SplitReport:
    """The figures of one split, after its limit (module docstring, ``splits``)."""

    rows: int
    empty_inputs: list[str] = field(default_factory=list)
    duplicate_ids: list[str] = field(default_factory=list)
    duplicate_inputs: list[dict[str, Any]] = field(default_factory=list)
    missing_labels: list[str] | None = None
    labels: dict[str, int] | None = None


@dataclass(frozen=True)
class DataCheckSummary:
    """The data check's outcome as the ledger keeps it (its ``data_check`` event) and
    ``flightplan run --json`` prints it; the full report is in ``results/``.

    Attributes:
        status: ``ok`` or ``corpus_mismatch``. message: the mismatch, or None.
        files: file → ``{matches, sha256}``. summary: the tasks' one-line summary, or None.
        cross_split_duplicates: how many inputs are in both splits.
        test_labels_not_in_train: as :attr:`DataCheckReport.test_labels_not_in_train`.
    """

    status: str
    message: str | None
    files: dict[str, dict[str, Any]]
    summary: str | None
    cross_split_duplicates: int
    test_labels_not_in_train: list[str] | None

    def to_json(self) -> dict[str, Any]:
        """``{status, message, files, summary, cross_split_duplicates,
        test_labels_not_in_train}``."""
        return asdict(self)


@dataclass(frozen=True)
class DataCheckReport:
    """The data check's report (module docstring). The common part is typed; the keys the
    tasks' ``data_check`` hooks add are ``task_figures``, merged at the top level of
    :meth:`to_json`. A field that is None where the JSON has no key is left out of it:
    ``files`` when a file is missing, ``limits`` and ``columns`` on a mismatch,
    ``labels`` … ``cross_split_ids`` when the task reads the files (``columns`` None).

    Attributes:
        status: ``ok`` or ``corpus_mismatch``. message: the mismatch (None when ok).
        source: where the corpus was read. files: file → ``{split, format, rows, size_bytes,
            sha256, expected_sha256, matches}``. limits: ``{train, test}`` row limits.
        columns: ``{id, inputs, label}`` or None. labels, distinct_labels,
            test_labels_not_in_train: the corpus's labels (None without a label list).
        splits: ``train``/``test`` → :class:`SplitReport`. cross_split_duplicates,
            cross_split_ids: what both splits hold. task_figures: the hooks' keys.
        wall_s: the check's wall time (s).
    """

    status: str
    wall_s: float
    message: str | None = None
    source: str | None = None
    files: dict[str, dict[str, Any]] | None = None
    limits: dict[str, int | None] | None = None
    columns: dict[str, Any] | None = None
    labels: list[str] | None = None
    distinct_labels: int | None = None
    test_labels_not_in_train: list[str] | None = None
    splits: dict[str, SplitReport] | None = None
    cross_split_duplicates: list[dict[str, Any]] | None = None
    cross_split_ids: list[str] | None = None
    task_figures: dict[str, Any] = field(default_factory=dict)

    def rows(self, split: str) -> int:
        """Examples of ``split`` after its limit (0 when the task reads the files)."""
        return self.splits[split].rows if self.splits and split in self.splits else 0

    def to_json(self) -> dict[str, Any]:
        """The report as written to ``data_check.json`` (module docstring's keys, in order)."""
        out: dict[str, Any] = {"status": self.status}
        if self.source is not None:
            out["source"] = self.source
        if self.files is not None:
            out["files"] = self.files
        if self.status != "ok":
            return out | {"message": self.message, "wall_s": self.wall_s}
        out |= {"limits": self.limits, "columns": self.columns}
        if self.columns is not None:
            out |= {"labels": self.labels, "distinct_labels": self.distinct_labels,
                    "test_labels_not_in_train": self.test_labels_not_in_train,
                    "splits": {k: asdict(v) for k, v in (self.splits or {}).items()},
                    "cross_split_duplicates": self.cross_split_duplicates,
                    "cross_split_ids": self.cross_split_ids}
        return out | self.task_figures | {"wall_s": self.wall_s}

    def summary(self) -> DataCheckSummary:
        """What the ledger keeps of this report."""
        summary = self.task_figures.get("summary")
        return DataCheckSummary(
            status=self.status, message=self.message,
            files={name: {"matches": f.get("matches"), "sha256": f.get("sha256")}
                   for name, f in (self.files or {}).items()},
            summary=summary if isinstance(summary, str) else None,
            cross_split_duplicates=len(self.cross_split_duplicates or []),
            test_labels_not_in_train=self.test_labels_not_in_train)


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, tuple, dict)) and not value


def _content(example: Example) -> str:
    """A key equal for two examples exactly when their input values are equal."""
    return json.dumps(list(example.inputs.values()), ensure_ascii=False, sort_keys=True,
                      default=str)


def split_report(examples: list[Example], labels: list[str] | None, *,
                 has_label: bool) -> SplitReport:
    """The figures of one split (module docstring, ``splits``).

    Args:
        examples: the split after its limit.
        labels: every label of the corpus (the keys of ``labels``), or None not to count.
        has_label: whether a label column is declared (``missing_labels`` is null if not).
    """
    by_content: dict[str, list[str]] = defaultdict(list)
    id_count: dict[str, int] = defaultdict(int)
    first_text: dict[str, str] = {}
    for example in examples:
        key = _content(example)
        by_content[key].append(example.id)
        first_text.setdefault(key, example.text)
        id_count[example.id] += 1
    counts = None
    if labels is not None:
        counts = {label: 0 for label in labels}
        for example in examples:
            if example.label is not None:
                counts[example.label] += 1
    return SplitReport(
        rows=len(examples),
        empty_inputs=[e.id for e in examples if any(map(_empty, e.inputs.values()))],
        duplicate_ids=[i for i, n in id_count.items() if n > 1],
        duplicate_inputs=[{"ids": ids, "text": _preview(first_text[key])}
                          for key, ids in by_content.items() if len(ids) > 1],
        missing_labels=[e.id for e in examples if e.label is None] if has_label else None,
        labels=counts)


def cross_split(corpus: Corpus) -> tuple[list[dict[str, Any]], list[str]]:
    """``(by content [{train_ids, test_ids, text}], ids in both splits)``, in test order."""
    train_ids: dict[str, list[str]] = defaultdict(list)
    for example in corpus.train:
        train_ids[_content(example)].append(example.id)
    test_ids: dict[str, list[str]] = defaultdict(list)
    texts: dict[str, str] = {}
    for example in corpus.test:
        key = _content(example)
        if key in train_ids:
            test_ids[key].append(example.id)
            texts.setdefault(key, example.text)
    by_content = [{"train_ids": train_ids[key], "test_ids": ids, "text": _preview(texts[key])}
                  for key, ids in test_ids.items()]
    in_train = {e.id for e in corpus.train}
    by_id = list(dict.fromkeys(e.id for e in corpus.test if e.id in in_train))
    return by_content, by_id


def _test_only_labels(corpus: Corpus) -> list[str]:
    """The sorted labels of test examples that no training example has."""
    in_train = {e.label for e in corpus.train}
    return sorted({e.label for e in corpus.test if e.label is not None} - in_train)


def _file_rows(files: Mapping[str, CorpusFile], expected: Mapping[str, str]
               ) -> dict[str, Any]:
    return {name: {"split": f.split, "format": f.format, "rows": f.rows,
                   "size_bytes": f.size_bytes, "sha256": f.sha256,
                   "expected_sha256": expected.get(name),
                   "matches": f.sha256 == expected.get(name)}
            for name, f in sorted(files.items())}


def _runs_by_task(spec: CampaignSpec, tasks: Mapping[str, Any]
                  ) -> list[tuple[Any, dict[str, Any]]]:
    """``[(task, {run name: params})]``, one entry per distinct task, in run order."""
    groups: dict[str, tuple[Any, dict[str, Any]]] = {}
    for run in spec.runs:
        task = tasks[run.name]
        key = task.source.module_name
        groups.setdefault(key, (task, {}))[1][run.name] = dict(run.params)
    return list(groups.values())


def prepare_data(spec: CampaignSpec, tasks: Mapping[str, Any]) -> list[str]:
    """Call each distinct task's ``prepare_data`` hook once (its runs' params), after the
    check has found the corpus whole: the data every run reads is built into the
    campaign's cache before any run starts (textclf: the tokenised splits). Returns the
    refs of the tasks that have the hook.

    Raises:
        TaskHookFailed: a task's hook raised.
    """
    return [task.source.ref for task, params_by_run in _runs_by_task(spec, tasks)
            if task.prepare_data(spec.corpus, params_by_run, spec.base_model,
                                 campaign_dir=spec.campaign_dir)]


def _task_figures(spec: CampaignSpec, corpus: Corpus, tasks: Mapping[str, Any],
                  generic: list[str]) -> dict[str, Any]:
    """Each distinct task's hook figures (once per task), merged; ``generic``: the keys
    the generic check writes, which no task may."""
    written = {key: "the generic data check" for key in (*generic, "wall_s")}
    merged: dict[str, Any] = {}
    for task, params_by_run in _runs_by_task(spec, tasks):
        figures = task.data_check(corpus, params_by_run, spec.base_model)
        for key, value in figures.items():
            if key in written:
                raise TaskError(f"task {task.source.ref!r}: its data_check returned key "
                                f"{key!r}, which {written[key]} already wrote; rename it",
                                field="data_check", value=key)
            written[key] = f"task {task.source.ref!r}"
            merged[key] = value
    return merged


def run_data_check(spec: CampaignSpec, *, out: Path | None = None,
                   tasks: Mapping[str, Any]) -> DataCheckReport:
    """Check the campaign's corpus; write the report to ``out`` (atomically) if given.

    Args:
        spec: the campaign; needs ``[corpus]``.
        out: where to write ``data_check.json``; nothing is written when None.
        tasks: run name → the run's :class:`flightplan.tasks.loader.LoadedTask` (every
            run of ``spec``); each distinct task's ``data_check`` hook adds its figures.

    Returns:
        the report (see the module docstring); ``status`` is ``"ok"``.

    Raises:
        SpecError: the campaign has no ``[corpus]``, a package or column is missing, or a
            task hook refuses a run's params.
        CorpusMismatch: a file's sha256 differs from the frozen one or a file is missing
            (the report, with ``status: "corpus_mismatch"``, is written first).
        TaskError: a task hook's key clashes with a key already in the report.
    """
    started = time.perf_counter()
    if spec.corpus is None:
        raise SpecError("the campaign has no [corpus]; add one with package or path and sha256",
                        file=spec.source, field="corpus")
    section = spec.corpus
    source, files = None, None
    try:
        corpus = load_corpus(section, spec.campaign_dir)
        source, files = corpus.source, _file_rows(corpus.files, section.sha256)
        verify_hashes(corpus, dict(section.sha256))
    except CorpusMismatch as exc:
        if files is None:              # a changed file that no longer reads: hash them all
            try:
                found, source = corpus_files(section, spec.campaign_dir)
                files = _file_rows(found, section.sha256)
            except CorpusMismatch:     # a file is missing: the message names it
                pass
        _write(out, DataCheckReport("corpus_mismatch", time.perf_counter() - started,
                                    message=str(exc), source=source, files=files))
        raise
    generic = DataCheckReport("ok", 0.0, source=source, files=files,
                              limits={"train": section.train_limit, "test": section.test_limit},
                              **_corpus_figures(corpus, section))
    report = replace(generic, task_figures=_task_figures(spec, corpus, tasks,
                                                         list(generic.to_json())),
                     wall_s=time.perf_counter() - started)
    _write(out, report)
    return report


def _corpus_figures(corpus: Corpus, section: Any) -> dict[str, Any]:
    """The report's fields from the examples (none when the task reads the files)."""
    if not section.has_columns:
        return {}
    has_label = section.label_column is not None
    counted = corpus.labels if has_label and len(corpus.labels) <= MAX_LABELS else None
    by_content, by_id = cross_split(corpus)
    return {"columns": {"id": section.id_column, "inputs": list(section.input_columns or []),
                        "label": section.label_column},
            "labels": counted,
            "distinct_labels": len(corpus.labels) if has_label else None,
            "test_labels_not_in_train": None if counted is None else _test_only_labels(corpus),
            "splits": {name: split_report(corpus.split(name), counted, has_label=has_label)
                       for name in ("train", "test")},
            "cross_split_duplicates": by_content, "cross_split_ids": by_id}


def _write(out: Path | None, report: DataCheckReport) -> None:
    if out is not None:
        write_json_atomic(Path(out), report.to_json())
