"""One run's directory ``runs/<run_id>/``: the one class that owns its layout.

Who writes what (docs/internals.md, "Run directory")::

    trial.json          the runner          what to run (TrialFile)
    measurements.jsonl  the trial runtime   one JSON row per log call, events included
    checkpoints/        the trial runtime   step-NNNNNN/ folders (a manifest marks each done)
    stop.json           the trial runtime   the stop record: the run was stopped by a rule
    done.json           the trial runtime   the run finished
    predictions.csv     the task            one row per test example
    metrics.json        the task            the task's figures
    artifact/           the task            what reloads the model
    artifact.tmp/       an integration      the next artifact/ being written (never read;
                                            durable.replace_path puts it in place whole)
    log.txt             the executor        the worker's stdout and stderr
    transfer.json       the Ray executor    on a flight only: how long a checkpoint takes
                                            to come home (transfer_time.py)
    no-checkpoint       the runner          a resumed pilot's only: the checkpoint it
                                            awaits will not come (the first process ended
                                            without one)

Every reader of these files goes through :class:`RunDir`; measurement rows are read by
:meth:`RunDir.read_rows` as typed rows (:mod:`flightplan.rows`, which owns their schema),
complete lines only (a row being written waits for its newline), skipping a line that is not
a row (the torn row of a killed writer).

Usage::

    run = RunDir.of(campaign_dir, run_id)
    run.status()                      # "finished", "stopped" or None
    rows, offset = run.read_rows()    # later: run.read_rows(offset) for what was appended
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flightplan.durable import fsync_dir
from flightplan.rows import Row, parse_rows, records_a_save

__all__ = ["RunDir", "list_checkpoints", "shown_path"]


def shown_path(path: Path | str) -> str:
    """``path`` as a person opens it from the working directory of the command that prints
    it: relative to that directory when it lies inside it (``runs/lora-1/log.txt`` from the
    campaign folder, ``camp/runs/lora-1/log.txt`` from its parent), else absolute (a
    campaign elsewhere). For what a verb prints, never for what is written into results/.
    """
    full = Path(path).resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):           # outside it, or the directory is gone
        return str(full)


def list_checkpoints(parent: Path) -> tuple[list[tuple[int, Path]], list[Path]]:
    """(complete ``step-NNNNNN`` dirs newest first as (steps, path), partial ``.tmp`` dirs)."""
    complete, partial = [], []
    if parent.is_dir():
        for path in parent.iterdir():
            stem, _, suffix = path.name.partition(".")
            if not (stem.startswith("step-") and stem[5:].isdigit() and path.is_dir()):
                continue
            if suffix == "":
                complete.append((int(stem[5:]), path))
            elif suffix == "tmp":
                partial.append(path)
    return sorted(complete, reverse=True), sorted(partial)


class RunDir:
    """A run directory and the names of its files (module docstring).

    Args:
        path: the folder (``<campaign>/runs/<run_id>``, or a pilot's ``resume/``).
    """

    TRIAL = "trial.json"
    MEASUREMENTS = "measurements.jsonl"
    CHECKPOINTS = "checkpoints"
    STOP = "stop.json"
    DONE = "done.json"
    PREDICTIONS = "predictions.csv"
    METRICS = "metrics.json"
    ARTIFACT = "artifact"
    ARTIFACT_STAGING = "artifact.tmp"
    LOG = "log.txt"
    TRANSFER = "transfer.json"
    NO_CHECKPOINT = "no-checkpoint"
    """In a flight's scratch folder only (never committed home): the Ray executor's
    latest checkpoint transfer figure, read by the trial when a save completes."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @classmethod
    def of(cls, campaign_dir: Path | str, run_id: str) -> "RunDir":
        """``<campaign_dir>/runs/<run_id>``."""
        return cls(Path(campaign_dir) / "runs" / run_id)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def set_aside(self) -> Path | None:
        """Move the folder aside to ``<name>.restarted-<n>`` (the first ``n`` free), so that
        a run (or a pilot) can start over without deleting what an earlier one left. The
        parent folder is fsync'd after the rename, so once this returns a power loss cannot
        bring the old folder back under the run's name.

        Returns:
            The new path, or None when the folder does not exist.
        """
        if not self.path.exists():
            return None
        n = 1
        while self.path.with_name(f"{self.path.name}.restarted-{n}").exists():
            n += 1
        target = self.path.with_name(f"{self.path.name}.restarted-{n}")
        self.path.rename(target)
        fsync_dir(self.path.parent)
        return target

    @property
    def trial_json(self) -> Path:
        """``trial.json``."""
        return self.path / self.TRIAL

    @property
    def measurements(self) -> Path:
        """``measurements.jsonl``."""
        return self.path / self.MEASUREMENTS

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``."""
        return self.path / self.CHECKPOINTS

    @property
    def stop_json(self) -> Path:
        """``stop.json``."""
        return self.path / self.STOP

    @property
    def done_json(self) -> Path:
        """``done.json``."""
        return self.path / self.DONE

    @property
    def predictions(self) -> Path:
        """``predictions.csv``."""
        return self.path / self.PREDICTIONS

    @property
    def metrics(self) -> Path:
        """``metrics.json``."""
        return self.path / self.METRICS

    @property
    def artifact(self) -> Path:
        """``artifact/``."""
        return self.path / self.ARTIFACT

    @property
    def artifact_staging(self) -> Path:
        """``artifact.tmp/``: where an integration writes the next ``artifact/`` before
        :func:`flightplan.durable.replace_path` puts it in place (emptied before each write;
        never read)."""
        return self.path / self.ARTIFACT_STAGING

    @property
    def log(self) -> Path:
        """``log.txt``."""
        return self.path / self.LOG

    @property
    def no_checkpoint(self) -> Path:
        """``no-checkpoint`` (a resumed pilot's: the checkpoint it awaits will not come)."""
        return self.path / self.NO_CHECKPOINT

    def status(self) -> str | None:
        """``"stopped"`` (stop.json), ``"finished"`` (done.json) or None."""
        if self.stop_json.is_file():
            return "stopped"
        if self.done_json.is_file():
            return "finished"
        return None

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in file ``name`` of the run directory; None when it is missing,
        unreadable or not an object."""
        try:
            value = json.loads((self.path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def read_rows(self, offset: int = 0) -> tuple[list[Row], int]:
        """Measurement rows appended after byte ``offset`` (:func:`flightplan.rows.parse_rows`).

        Returns:
            ``(rows, new_offset)``; ``([], offset)`` while the file does not exist.
        """
        try:
            with open(self.measurements, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return [], offset
        rows, consumed = parse_rows(data)
        return rows, offset + consumed

    def rows(self) -> list[Row]:
        """Every complete measurement row ([] when there is none)."""
        return self.read_rows()[0]

    def last_written(self) -> float | None:
        """Unix time of the last sign of life of the files an execution writes as it goes:
        the newest modification time of its measurements, log, ``done.json`` or
        ``stop.json``, or the time stamp of its last measurement row (a file's time comes
        from a coarser clock and may lag the row's by milliseconds); None when there is
        none."""
        times = [p.stat().st_mtime for p in (self.measurements, self.log, self.done_json,
                                             self.stop_json) if p.is_file()]
        rows = self.rows()
        if rows:
            times.append(rows[-1].time)
        return max(times) if times else None

    def rows_across_restarts(self) -> list[Row]:
        """Every row this run id logged: those of the folders ``--restart`` set aside
        (``<name>.restarted-<n>``, oldest first), then this folder's (goodput counts the work
        a restart threw away as lost)."""
        earlier = sorted(self.path.parent.glob(f"{self.path.name}.restarted-*"),
                         key=lambda p: int(p.name.rpartition("-")[2])
                         if p.name.rpartition("-")[2].isdigit() else 0)
        return [row for folder in earlier for row in RunDir(folder).rows()] + self.rows()

    def saved_checkpoint(self, *, on_flight: bool = False) -> bool:
        """Whether the measurements show a checkpoint this run saved at home (a
        ``checkpoint_saving`` row, durable before the checkpoint was renamed into place, or
        a ``checkpoint`` row; ``on_flight``: a ``checkpoint_transfer`` row, committed home
        from a flight: :func:`flightplan.rows.records_a_save`), whatever is left in
        ``checkpoints/``."""
        return any(records_a_save(row, on_flight=on_flight) for row in self.rows())

    def has_checkpoint(self) -> bool:
        """Whether ``checkpoints/`` holds a finished ``step-*`` folder (not a ``.tmp``)."""
        return bool(list_checkpoints(self.checkpoints)[0])

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines of ``log.txt`` ("" when there is none)."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
