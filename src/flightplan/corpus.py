"""Reading the frozen corpus: the train and test files named in ``[corpus]``.

A corpus is two tab-separated files, one whose name holds ``train`` and one whose name
holds ``test`` (case-insensitive), with a header row and the columns

    ``''`` (the example id), drugName, condition, review, rating (the label), date, usefulCount

The review is quoted with triple quotes (three ``"`` on each side), which the CSV reader turns into
one pair of quotes that is stripped here; HTML entities (``&#039;``) are unescaped.

The files come from an installed distribution (``package``: read through
``importlib.metadata``, never imported; a file may sit inside a ``.zip`` the package
ships) or from a folder (``path``, relative to the campaign directory). Hashes are of the
extracted file bytes, so a zip and the folder holding its extracted files hash the same.

Usage::

    corpus = load_corpus(spec.corpus, spec.campaign_dir)
    verify_hashes(corpus, spec.corpus.sha256)     # raises CorpusMismatch
    corpus.train[0].id, corpus.train[0].text, corpus.train[0].label
"""

from __future__ import annotations

import csv
import hashlib
import html
import importlib.metadata
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from flightplan.errors import CorpusMismatch, SpecError
from flightplan.spec import CorpusSection

__all__ = ["Example", "CorpusFile", "Corpus", "load_corpus", "verify_hashes", "corpus_root"]

ID_COLUMN = ""
TEXT_COLUMN = "review"
LABEL_COLUMN = "rating"
SPLITS: tuple[str, ...] = ("train", "test")


@dataclass(frozen=True)
class Example:
    """One labelled text. ``id`` is the corpus's own id column, as a string."""

    id: str
    text: str
    label: str


@dataclass(frozen=True)
class CorpusFile:
    """One corpus file: its split, sha256 of its bytes, size in bytes and data rows
    (before any ``*_limit``), and where it was read from (a path, or ``zip!member``)."""

    name: str
    split: str
    sha256: str
    size_bytes: int
    rows: int
    origin: str


@dataclass(frozen=True)
class Corpus:
    """The train and test examples (after ``train_limit``/``test_limit``).

    ``labels`` is the sorted set of labels of both splits; ``files`` maps each file name
    to its :class:`CorpusFile`; ``source`` says where the files came from (one line).
    """

    train: list[Example]
    test: list[Example]
    labels: list[str]
    files: dict[str, CorpusFile] = field(default_factory=dict)
    source: str = ""

    def file_hashes(self) -> dict[str, str]:
        """``{file name: sha256 hex}`` of the extracted file bytes."""
        return {name: f.sha256 for name, f in sorted(self.files.items())}

    def split(self, name: str) -> list[Example]:
        """The examples of split ``name`` (``train`` or ``test``)."""
        return {"train": self.train, "test": self.test}[name]


def _split_of(name: str) -> str | None:
    lowered = name.lower()
    hits = [s for s in SPLITS if s in lowered]
    return hits[0] if len(hits) == 1 else None


def _package_files(package: str, names: list[str]) -> tuple[dict[str, tuple[bytes, str]], str]:
    """The bytes of each of ``names`` found in distribution ``package`` (directly, or as a
    member of a zip the package ships). Missing names are left out."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise SpecError(f"{package!r} is not installed; install it (pip install {package}) "
                        f"or give corpus.path", field="corpus.package", value=package) from None
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


def _parse(data: bytes, name: str) -> list[Example]:
    """The examples of one TSV file. Raises CorpusMismatch if the layout is not the
    expected one (a hash check catches this first when the hash is frozen)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusMismatch(f"{name}: not UTF-8 text; restore the original corpus file") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    header = next(reader, None)
    if header is None or any(c not in header for c in (ID_COLUMN, TEXT_COLUMN, LABEL_COLUMN)):
        raise CorpusMismatch(f"{name}: header {header!r} lacks the columns "
                             f"{[ID_COLUMN, TEXT_COLUMN, LABEL_COLUMN]!r}; "
                             f"restore the original corpus file")
    at = {column: header.index(column) for column in (ID_COLUMN, TEXT_COLUMN, LABEL_COLUMN)}
    out = []
    for line, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise CorpusMismatch(f"{name}: row {line} has {len(row)} columns, the header "
                                 f"{len(header)}; restore the original corpus file")
        review = row[at[TEXT_COLUMN]]
        if len(review) >= 2 and review[0] == '"' and review[-1] == '"':
            review = review[1:-1]
        out.append(Example(id=row[at[ID_COLUMN]], text=html.unescape(review).strip(),
                           label=row[at[LABEL_COLUMN]].strip()))
    return out


def load_corpus(section: CorpusSection, campaign_dir: Path | str) -> Corpus:
    """Read the corpus files named in ``section.sha256`` (hashes are computed, not checked:
    see :func:`verify_hashes`).

    Args:
        section: the spec's ``[corpus]``.
        campaign_dir: the folder of the campaign file (``path`` is relative to it).

    Returns:
        the corpus; ``train``/``test`` cut to ``train_limit``/``test_limit`` rows.

    Raises:
        SpecError: the package is not installed, or the file names do not give exactly
            one train and one test file.
        CorpusMismatch: a named file is missing or unreadable as the expected TSV.
    """
    names = sorted(section.sha256)
    splits = {name: _split_of(name) for name in names}
    for wanted in SPLITS:
        holders = [n for n, s in splits.items() if s == wanted]
        if len(holders) != 1:
            raise SpecError(f"corpus files {names!r} must hold exactly one file whose name "
                            f"contains {wanted!r}; name the train and the test file",
                            field="corpus.sha256", value=names)
    if section.package is not None:
        found, source = _package_files(section.package, names)
    else:
        folder = Path(corpus_root(section, Path(campaign_dir)))
        if not folder.is_dir():
            raise SpecError(f"{folder} is not a folder; give the folder that holds the corpus "
                            f"files, relative to the campaign file", field="corpus.path",
                            value=section.path)
        found, source = _folder_files(folder, names), f"folder {folder}"
    missing = [n for n in names if n not in found]
    if missing:
        raise CorpusMismatch(f"corpus file(s) {missing!r} not found in {source}; "
                             f"restore them or fix corpus.sha256")
    files: dict[str, CorpusFile] = {}
    by_split: dict[str, list[Example]] = {}
    for name in names:
        data, origin = found[name]
        examples = _parse(data, name)
        files[name] = CorpusFile(name=name, split=splits[name] or "", sha256=hashlib.sha256(data).hexdigest(),
                                 size_bytes=len(data), rows=len(examples), origin=origin)
        by_split[splits[name] or ""] = examples
    train = by_split["train"][: section.train_limit]
    test = by_split["test"][: section.test_limit]
    labels = sorted({e.label for e in train} | {e.label for e in test})
    return Corpus(train=train, test=test, labels=labels, files=files, source=source)


def verify_hashes(corpus: Corpus, expected: dict[str, str]) -> None:
    """Check every file's sha256 against the hash frozen in the campaign file.

    Raises:
        CorpusMismatch: names each differing file with the expected and the actual hash.
    """
    actual = corpus.file_hashes()
    faults = [f"{name}: sha256 {actual.get(name)} but the campaign file froze {digest}"
              for name, digest in sorted(expected.items()) if actual.get(name) != digest]
    if faults:
        raise CorpusMismatch(f"corpus changed ({corpus.source}): " + "; ".join(faults)
                             + "; restore the original files or, if the change is intended, "
                               "freeze the new hashes in [corpus] (a new campaign)")
