"""The campaign ledger: one SQLite file (WAL) that survives a kill -9 at any moment.

``.flightplan/ledger.sqlite`` under the campaign directory holds the campaign, the plan
versions (version 1 is the original plan, frozen with the sha256 of its canonical JSON
and protected by triggers against any UPDATE or DELETE; re-estimates are appended as new
versions), the runs, the events, the expenses, the notes, the decisions and the times of
the stages the runner executed. Every write is one transaction (``BEGIN IMMEDIATE`` …
``COMMIT``) with ``synchronous=FULL``, so a killed process leaves either the whole write
or none of it.

Usage::

    ledger = Ledger.open(campaign_dir)
    ledger.freeze_original(plan_json)            # no-op when version 1 exists
    ledger.record_run_start("control-1a2b3c4d5e", resumed=False)
    ledger.runs()                                # read side used by ``close``: typed rows
    ledger.snapshot()                            # one object for ``status --json``

The read side returns the dataclasses of :mod:`flightplan.ledger_rows`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from flightplan.errors import ArgumentError
from flightplan.canonical import canonical_json, plan_sha256
from flightplan.ledger_rows import (CampaignRow, DecisionRow, EventRow, ExpenseRow, NoteRow,
                                    PlanVersionRow, RunRow, StageTimeRow)

__all__ = ["Ledger", "LEDGER_FILE"]

LEDGER_FILE = Path(".flightplan") / "ledger.sqlite"
_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS campaign (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL, spec_path TEXT NOT NULL, spec_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS plan_versions (
    version INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('original', 're-estimate')),
    plan_sha256 TEXT NOT NULL, plan_json TEXT NOT NULL,
    created_at REAL NOT NULL, reason TEXT,
    CHECK ((version = 1) = (kind = 'original')));
CREATE TRIGGER IF NOT EXISTS plan_versions_never_rewritten BEFORE UPDATE ON plan_versions
BEGIN SELECT RAISE(ABORT, 'plan versions are never rewritten; add a new version'); END;
CREATE TRIGGER IF NOT EXISTS plan_versions_never_deleted BEFORE DELETE ON plan_versions
BEGIN SELECT RAISE(ABORT, 'plan versions are never deleted'); END;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, name TEXT NOT NULL, tier TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'finished', 'stopped',
                                           'cut', 'failed', 'superseded')),
    config_hash TEXT, started_at REAL, ended_at REAL, wall_s REAL NOT NULL DEFAULT 0,
    stop_json TEXT, superseded_by TEXT, metric REAL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, kind TEXT NOT NULL,
    at REAL NOT NULL, data_json TEXT);
CREATE TABLE IF NOT EXISTS expenses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('package', 'external')),
    label TEXT NOT NULL, offer TEXT, package_days INTEGER, flights INTEGER,
    amount TEXT NOT NULL, currency TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, text TEXT NOT NULL,
    at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('continue', 'cut', 'stop')),
    computed TEXT NOT NULL CHECK (computed IN ('continue', 'cut', 'stop')),
    overridden INTEGER NOT NULL, figures_json TEXT NOT NULL, dropped_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stage_times (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('stage', 'run')),
    started_at REAL NOT NULL, ended_at REAL NOT NULL);
"""


def _dump(value: Any) -> str:
    """JSON text of a stored value (sorted keys; NaN kept, as stop records may carry it)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Ledger:
    """The campaign's ledger. Open with :meth:`open`; every write is one transaction.

    Attributes:
        path: the SQLite file.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._db = connection

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, campaign_dir: str | Path, *, create: bool = True) -> "Ledger":
        """Open (creating when ``create``) ``.flightplan/ledger.sqlite`` under ``campaign_dir``.

        Raises:
            ArgumentError: ``create`` is false and the campaign has no ledger yet (it was
                never run); the message says to run it first.
        """
        path = Path(campaign_dir) / LEDGER_FILE
        if not path.exists():
            if not create:
                raise ArgumentError(f"{campaign_dir}: the campaign was never run (no ledger "
                                    f"in .flightplan/ yet); run `flightplan run` on its "
                                    f"campaign file first")
            path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        ledger = cls(path, db)
        if db.execute("PRAGMA user_version").fetchone()[0] < _SCHEMA_VERSION:
            with ledger._write() as tx:
                for statement in _split_statements(_SCHEMA):
                    tx.execute(statement)
                tx.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        return ledger

    @classmethod
    def open_existing(cls, campaign_dir: str | Path) -> "Ledger":
        """:meth:`open` without creating: the ledger of a campaign that has run.

        Raises:
            ArgumentError: the campaign has no ledger yet.
        """
        return cls.open(campaign_dir, create=False)

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite)."""
        self._db.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it is committed, or none (also on kill -9)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[None]:
        """One read transaction: every read inside sees the same committed state, even while
        another process writes (SQLite WAL: the snapshot is taken at the first read)."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: ``"ok"`` when the file is consistent."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    # ---------------------------------------------------------------- writes
    def ensure_campaign(self, *, name: str, spec_path: str, spec_sha256: str) -> None:
        """Record the campaign the first time; later calls refresh the spec's path and hash."""
        with self._write() as tx:
            row = tx.execute("SELECT id FROM campaign WHERE id = 1").fetchone()
            if row is None:
                tx.execute("INSERT INTO campaign VALUES (1, ?, ?, ?, ?)",
                           (name, spec_path, spec_sha256, time.time()))
            else:
                tx.execute("UPDATE campaign SET name = ?, spec_path = ?, spec_sha256 = ? "
                           "WHERE id = 1", (name, spec_path, spec_sha256))

    def freeze_original(self, plan: dict[str, Any]) -> tuple[PlanVersionRow, bool]:
        """Store ``plan`` as version 1 unless an original exists.

        Returns:
            (the version-1 entry, True when it was written by this call).
        """
        with self._write() as tx:
            exists = tx.execute("SELECT 1 FROM plan_versions WHERE version = 1").fetchone()
            if exists is None:
                tx.execute("INSERT INTO plan_versions VALUES (1, 'original', ?, ?, ?, ?)",
                           (plan_sha256(plan), canonical_json(plan).decode("utf-8"), time.time(),
                            "planned before the first run"))
        original = self.original_plan()
        assert original is not None  # written above or before
        return original, exists is None

    def add_plan_version(self, plan: dict[str, Any], *, reason: str) -> int:
        """Append a re-estimated plan; returns its version number (≥ 2).

        Raises:
            ValueError: there is no original plan yet (freeze it first).
        """
        with self._write() as tx:
            found = tx.execute("SELECT MAX(version) FROM plan_versions").fetchone()[0]
            if found is None:
                raise ValueError("no original plan in the ledger; freeze the original first")
            last = int(found)
            tx.execute("INSERT INTO plan_versions VALUES (?, 're-estimate', ?, ?, ?, ?)",
                       (last + 1, plan_sha256(plan), canonical_json(plan).decode("utf-8"),
                        time.time(), reason))
        return last + 1

    def sync_expenses(self, rows: list[ExpenseRow]) -> None:
        """Replace the expenses with ``rows`` (from the current spec), in one transaction."""
        with self._write() as tx:
            tx.execute("DELETE FROM expenses")
            for row in rows:
                tx.execute("INSERT INTO expenses (kind, label, offer, package_days, flights, "
                           "amount, currency) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (row.kind, row.label, row.offer, row.package_days, row.flights,
                            row.amount, row.currency))

    def add_event(self, kind: str, *, run_id: str | None = None,
                  data: dict[str, Any] | None = None, at: float | None = None) -> None:
        """Append one event (kinds listed in docs/internals.md)."""
        with self._write() as tx:
            _insert_event(tx, kind, run_id, data, at)

    def ensure_run(self, *, run_id: str, name: str, tier: str, config_hash: str | None) -> str:
        """Register a run as ``pending`` if it is new (or was superseded: a config changed
        back); mark every other id of the same name ``superseded`` by this one (a changed
        configuration gets a new id; the old one stays, with what it did).

        Returns:
            the run's status after the call.
        """
        with self._write() as tx:
            row = tx.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                tx.execute("INSERT INTO runs (run_id, name, tier, status, config_hash) "
                           "VALUES (?, ?, ?, 'pending', ?)", (run_id, name, tier, config_hash))
            else:
                tx.execute("UPDATE runs SET tier = ?, superseded_by = NULL, status = CASE "
                           "WHEN status = 'superseded' THEN 'pending' ELSE status END "
                           "WHERE run_id = ?", (tier, run_id))
            old = tx.execute("SELECT run_id FROM runs WHERE name = ? AND run_id != ? AND "
                             "status != 'superseded'", (name, run_id)).fetchall()
            for (old_id,) in old:
                tx.execute("UPDATE runs SET status = 'superseded', superseded_by = ? "
                           "WHERE run_id = ?", (run_id, old_id))
                _insert_event(tx, "superseded", old_id, {"by": run_id}, None)
            return str(tx.execute("SELECT status FROM runs WHERE run_id = ?",
                                  (run_id,)).fetchone()[0])

    def set_run_status(self, run_id: str, status: str, *, event: str | None = None,
                       data: dict[str, Any] | None = None) -> None:
        """Set a run's status (and append ``event`` with ``data``) in one transaction."""
        with self._write() as tx:
            tx.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))
            if event:
                _insert_event(tx, event, run_id, data, None)

    def record_restart(self, run_id: str, *, data: dict[str, Any] | None = None) -> None:
        """A run started over on purpose (``flightplan run --restart``): ``pending`` again,
        without the metric, stop record and end time of the execution set aside, and a
        ``restarted`` event with ``data``, in one transaction. Its first start and its wall
        time stay: the hours the set-aside execution ran were spent."""
        with self._write() as tx:
            tx.execute("UPDATE runs SET status = 'pending', metric = NULL, stop_json = NULL, "
                       "ended_at = NULL WHERE run_id = ?", (run_id,))
            _insert_event(tx, "restarted", run_id, data, None)

    def record_run_start(self, run_id: str, *, resumed: bool, at: float | None = None) -> None:
        """Mark a run ``running`` and append ``started`` or ``resumed``."""
        at = time.time() if at is None else at
        with self._write() as tx:
            tx.execute("UPDATE runs SET status = 'running', "
                       "started_at = COALESCE(started_at, ?) WHERE run_id = ?", (at, run_id))
            _insert_event(tx, "resumed" if resumed else "started", run_id, None, at)

    def record_run_end(self, run_id: str, *, status: str, started_at: float, ended_at: float,
                       stop: dict[str, Any] | None = None, metric: float | None = None,
                       data: dict[str, Any] | None = None,
                       extra_events: Sequence[Mapping[str, Any]] = (),
                       event: str | None = None) -> None:
        """Close one execution of a run: status, end time, wall time added, stop record,
        its event (``finished``/``stopped``/``failed``, or ``event`` when given, e.g.
        ``interrupted``) and the run's own events (``extra_events``: ``{kind, at, data}``
        read from its measurements), atomically.
        """
        kind = event or {"finished": "finished", "stopped": "stopped"}.get(status, "failed")
        with self._write() as tx:
            tx.execute("UPDATE runs SET status = ?, ended_at = ?, wall_s = wall_s + ?, "
                       "stop_json = ?, metric = ? WHERE run_id = ?",
                       (status, ended_at, max(0.0, ended_at - started_at),
                        None if stop is None else _dump(stop), metric, run_id))
            for extra in extra_events:
                _insert_event(tx, extra["kind"], run_id, extra.get("data"), extra.get("at"))
            _insert_event(tx, kind, run_id, dict(data or {}, **({"stop": stop} if stop else {})),
                          ended_at)
            tx.execute("INSERT INTO stage_times (name, kind, started_at, ended_at) "
                       "SELECT name, 'run', ?, ? FROM runs WHERE run_id = ?",
                       (started_at, ended_at, run_id))

    def reset_interrupted(self, last_seen: Mapping[str, float] | None = None) -> list[str]:
        """Runs left ``running`` by a killed runner go back to ``pending`` with an
        ``interrupted`` event (no data: the runner died).

        Args:
            last_seen: run id → unix time of the execution's last sign of life (its newest
                file write); the execution then counts once, like any other, from its
                ``started``/``resumed`` event to that time: wall time added, end time set,
                a ``stage_times`` row. A run not in it counts no time.

        Returns:
            The ids reset.
        """
        seen = dict(last_seen or {})
        with self._write() as tx:
            ids = [r[0] for r in tx.execute("SELECT run_id FROM runs WHERE status = 'running'")]
            for run_id in ids:
                tx.execute("UPDATE runs SET status = 'pending' WHERE run_id = ?", (run_id,))
                start = _last_start(tx, run_id)
                if run_id in seen and start is not None:
                    ended = max(start, seen[run_id])
                    tx.execute("UPDATE runs SET ended_at = ?, wall_s = wall_s + ? WHERE "
                               "run_id = ?", (ended, ended - start, run_id))
                    tx.execute("INSERT INTO stage_times (name, kind, started_at, ended_at) "
                               "SELECT name, 'run', ?, ? FROM runs WHERE run_id = ?",
                               (start, ended, run_id))
                _insert_event(tx, "interrupted", run_id, None, None)
        return ids

    def record_late_end(self, run_id: str, *, status: str, ended_at: float,
                        stop: dict[str, Any] | None = None,
                        metric: float | None = None) -> None:
        """A run whose directory shows it ``finished`` or ``stopped`` while the ledger says
        otherwise (a runner killed between the worker's end and its record, or a run id
        back in use after its configuration was changed and changed back): status, stop
        record and metric set, in one transaction. No time is added: the execution that
        ended it was counted when it was closed (its end, or :meth:`reset_interrupted`).
        Its ``finished``/``stopped`` event (data ``recorded_late``, at ``ended_at``) is
        appended unless the run's last execution event already is that one.
        """
        kind = "stopped" if status == "stopped" else "finished"
        with self._write() as tx:
            tx.execute("UPDATE runs SET status = ?, stop_json = ?, metric = ?, "
                       "ended_at = COALESCE(ended_at, ?) WHERE run_id = ?",
                       (status, None if stop is None else _dump(stop), metric, ended_at,
                        run_id))
            last = tx.execute("SELECT kind FROM events WHERE run_id = ? AND kind IN "
                              f"({_EXECUTION_KINDS}) ORDER BY id DESC LIMIT 1",
                              (run_id,)).fetchone()
            if last is None or last[0] != kind:
                _insert_event(tx, kind, run_id,
                              {"recorded_late": True, **({"stop": stop} if stop else {})},
                              ended_at)

    def record_stage(self, name: str, *, started_at: float, ended_at: float,
                     event: str | None = None, data: dict[str, Any] | None = None) -> None:
        """Record the times of a stage the runner executed (data-check, pilot) and its event."""
        with self._write() as tx:
            tx.execute("INSERT INTO stage_times (name, kind, started_at, ended_at) "
                       "VALUES (?, 'stage', ?, ?)", (name, started_at, ended_at))
            if event:
                _insert_event(tx, event, None, data, ended_at)

    def add_decision(self, *, decision: str, computed: str, figures: dict[str, Any],
                     dropped: list[str]) -> None:
        """Record a decision (and its ``decision`` event); ``overridden`` is derived."""
        at = time.time()
        with self._write() as tx:
            tx.execute("INSERT INTO decisions (at, decision, computed, overridden, figures_json, "
                       "dropped_json) VALUES (?, ?, ?, ?, ?, ?)",
                       (at, decision, computed, int(decision != computed),
                        _dump(figures), _dump(dropped)))
            _insert_event(tx, "decision", None, {"decision": decision, "computed": computed,
                                                 "dropped": dropped}, at)

    def add_note(self, name: str, text: str) -> NoteRow:
        """Record why a stage or run deviated; returns the note."""
        at = time.time()
        with self._write() as tx:
            tx.execute("INSERT INTO notes (name, text, at) VALUES (?, ?, ?)", (name, text, at))
        return NoteRow(name, text, at)

    # ---------------------------------------------------------------- reads
    def campaign(self) -> CampaignRow | None:
        """The campaign, or None before the first run."""
        row = self._db.execute("SELECT name, spec_path, spec_sha256, created_at FROM campaign"
                               ).fetchone()
        return None if row is None else CampaignRow(**dict(row))

    def plan_versions(self) -> list[PlanVersionRow]:
        """Every plan version, oldest first."""
        rows = self._db.execute("SELECT * FROM plan_versions ORDER BY version").fetchall()
        return [PlanVersionRow(r["version"], r["kind"], r["plan_sha256"],
                               json.loads(r["plan_json"]), r["created_at"], r["reason"])
                for r in rows]

    def original_plan(self) -> PlanVersionRow | None:
        """The version-1 entry, or None before the plan is frozen."""
        versions = self.plan_versions()
        return versions[0] if versions else None

    def verify_original(self) -> bool:
        """True when the original plan still hashes to the sha256 frozen with it."""
        original = self.original_plan()
        return original is not None and plan_sha256(original.plan) == original.plan_sha256

    def runs(self) -> list[RunRow]:
        """Every run id ever registered, in order."""
        rows = self._db.execute("SELECT * FROM runs ORDER BY rowid").fetchall()
        return [RunRow(r["run_id"], r["name"], r["tier"], r["status"], r["started_at"],
                       r["ended_at"], r["wall_s"], _loads(r["stop_json"]), r["superseded_by"],
                       r["metric"], r["config_hash"]) for r in rows]

    def run(self, run_id: str) -> RunRow | None:
        """One run's entry (as in :meth:`runs`) or None."""
        return next((r for r in self.runs() if r.run_id == run_id), None)

    def events(self, run_id: str | None = None, *, kind: str | None = None) -> list[EventRow]:
        """Events in order, optionally of one run/kind."""
        query, args = "SELECT * FROM events WHERE 1 = 1", list[str]()
        if run_id is not None:
            query, args = query + " AND run_id = ?", args + [run_id]
        if kind is not None:
            query, args = query + " AND kind = ?", args + [kind]
        rows = self._db.execute(query + " ORDER BY id", args).fetchall()
        return [EventRow(r["id"], r["run_id"], r["kind"], r["at"], _loads(r["data_json"]))
                for r in rows]

    def decisions(self) -> list[DecisionRow]:
        """Decisions in order."""
        rows = self._db.execute("SELECT * FROM decisions ORDER BY id").fetchall()
        return [DecisionRow(r["at"], r["decision"], r["computed"], bool(r["overridden"]),
                            json.loads(r["figures_json"]), json.loads(r["dropped_json"]))
                for r in rows]

    def expenses(self) -> list[ExpenseRow]:
        """The committed package(s) and the other expenses, in the order written."""
        rows = self._db.execute("SELECT kind, label, offer, package_days, flights, amount, "
                                "currency FROM expenses ORDER BY id").fetchall()
        return [ExpenseRow(**dict(r)) for r in rows]

    def notes(self) -> list[NoteRow]:
        """The notes in the order written."""
        return [NoteRow(**dict(r)) for r in
                self._db.execute("SELECT name, text, at FROM notes ORDER BY id")]

    def stage_times(self) -> list[StageTimeRow]:
        """Every execution the runner made (or a person marked)."""
        return [StageTimeRow(**dict(r)) for r in self._db.execute(
            "SELECT name, kind, started_at, ended_at FROM stage_times ORDER BY id")]

    def snapshot(self) -> dict[str, Any]:
        """The whole ledger as one JSON-ready object (what ``status --json`` prints).

        Plan versions carry their summary (``reserved_hours``, ``window_hours``, ``fits``)
        instead of the whole plan. Every table is read in one transaction, so the object is
        one state of the ledger even while a runner writes it (no event of a run that the
        runs list lacks).
        """
        with self._read():
            versions = []
            for entry in self.plan_versions():
                summary = entry.to_json()
                plan = summary.pop("plan")
                versions.append(summary | {k: plan.get(k) for k in (
                    "reserved_hours", "window_hours", "uncommitted_hours", "fits")})
            campaign = self.campaign()
            return {"campaign": None if campaign is None else campaign.to_json(),
                    "plan_versions": versions,
                    "original_plan_intact": self.verify_original() if versions else None,
                    **{key: [row.to_json() for row in rows] for key, rows in (
                        ("runs", self.runs()), ("decisions", self.decisions()),
                        ("expenses", self.expenses()), ("notes", self.notes()),
                        ("stage_times", self.stage_times()), ("events", self.events()))}}


_EXECUTION_KINDS = "'started', 'resumed', 'finished', 'stopped', 'failed', 'interrupted'"
"""Events that open or close one execution of a run (SQL list)."""


def _last_start(tx: sqlite3.Connection, run_id: str) -> float | None:
    """Unix time of the run's latest ``started``/``resumed`` event, or None."""
    row = tx.execute("SELECT at FROM events WHERE run_id = ? AND kind IN ('started', "
                     "'resumed') ORDER BY id DESC LIMIT 1", (run_id,)).fetchone()
    return None if row is None else float(row[0])


def _insert_event(tx: sqlite3.Connection, kind: str, run_id: str | None,
                  data: dict[str, Any] | None, at: float | None) -> None:
    tx.execute("INSERT INTO events (run_id, kind, at, data_json) VALUES (?, ?, ?, ?)",
               (run_id, kind, time.time() if at is None else at,
                None if data is None else _dump(data)))


def _split_statements(script: str) -> list[str]:
    """Split the schema into statements (a trigger's body keeps its inner ``;``)."""
    statements, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text.endswith(";") and (not text.upper().startswith("CREATE TRIGGER")
                                   or text.upper().endswith("END;")):
            statements.append(text)
            current = []
    return statements
