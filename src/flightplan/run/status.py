"""What ``flightplan status`` prints (the ledger) and the table that ends ``flightplan run``,
as plain lines that fit the terminal.

The layout is made for an 80-column terminal and uses more width when it has it. Run
ids are never cut (every other command and file names a run by its id): one line per
run, grouped under its tier, with status, metric, wall time and start; then each run's
goodput (the share of its wall time in productive steps, and the other causes, largest
first) and, per flight, the slot-hours its package bought: productive, overheads and
uncommitted (:mod:`flightplan.goodput`). A time of today
shows without its date. A reason (a stop rule's message, a plan version's reason, a
decision's reason, a note) goes at the end of its line when it fits there, else on the
next line, indented, and cut with "…" at the width; ``--json`` keeps every text whole.

Usage::

    for line in status_lines(snapshot, metric="macro_f1", width=80, now=time.time()):
        print(line)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.text import Text

from flightplan.goodput import LABELS, OVERHEADS
from flightplan.publish.close_record import read_close_record, results_changed_since
from flightplan.run.decision import ValueRanking
from flightplan.run.executors.contract import ClusterJoined
from flightplan.run.progress import format_stop
from flightplan.units import time_unit

__all__ = ["status_lines", "run_lines", "replicates_line", "goodput_lines", "flight_hours_lines", "clock", "cut"]

_TIERS = ("essential", "useful", "exploratory")
_EVENTS_SHOWN = 12
_ONE_LINE = str.maketrans({"\n": " ", "\r": " ", "\t": " "})


def clock(at: float | None, *, now: float) -> str:
    """Local ``HH:MM:SS`` when ``at`` (unix s) is on ``now``'s date, else
    ``YYYY-MM-DD HH:MM``; ``-`` for None."""
    if at is None:
        return "-"
    when, today = time.localtime(at), time.localtime(now)
    if when[:3] == today[:3]:
        return time.strftime("%H:%M:%S", when)
    return time.strftime("%Y-%m-%d %H:%M", when)


def cut(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` terminal cells with a trailing "…"."""
    flat = str(text).translate(_ONE_LINE)
    if cell_len(flat) <= width:
        return flat
    line = Text(flat)
    line.truncate(max(1, width), overflow="ellipsis")
    return line.plain


def _with_reason(head: str, reason: str, *, width: int, indent: int) -> list[str]:
    """``head`` plus ``reason`` at its end when it fits, else on the next line (cut)."""
    reason = " ".join(reason.split())
    if not reason:
        return [head.rstrip()]
    if cell_len(head) + 2 + cell_len(reason) <= width:
        return [f"{head}  {reason}"]
    return [head.rstrip(), " " * indent + cut(reason, width - indent)]


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart (``right``: right-aligned)."""
    widths = [max(cell_len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [cell.rjust(w) if i in right else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _run_reason(run: dict[str, Any]) -> str:
    if run.get("stop"):
        return format_stop(run["stop"])
    if run.get("superseded_by"):
        return f"superseded by {run['superseded_by']}"
    return run.get("reason") or ""


def _status_cell(run: dict[str, Any]) -> str:
    """``finished``, or for a run in progress ``running 5/76`` (steps done / planned;
    ``running 5`` before the task says how many, and ``running`` alone while no step is
    done and none is planned: a bare zero is not shown)."""
    progress = run.get("progress")
    if not progress:
        return str(run["status"])
    planned = progress.get("planned_steps")
    if planned:
        return f"{run['status']} {progress['steps_done']}/{planned}"
    return f"{run['status']} {progress['steps_done']}" if progress["steps_done"] else str(run["status"])


def replicates_line(name: str, replicates: list[dict[str, Any]], *, metric: str) -> str:
    """The line above the replicates of run ``name``: ``  lora-r8: 3 replicates (2
    finished, 1 running); macro_f1 mean 0.4530, sd 0.0100`` (mean and sd, ddof = 1, of
    the replicates with a metric; the sd with two or more)."""
    counts: dict[str, int] = {}
    for r in replicates:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    values = [float(r["metric"]) for r in replicates if r.get("metric") is not None]
    line = (f"  {name}: {len(replicates)} replicates ("
            + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")")
    if values:
        mean = sum(values) / len(values)
        line += f"; {metric} mean {mean:.4f}"
        if len(values) >= 2:
            sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
            line += f", sd {sd:.4f}"
    return line


def run_lines(runs: list[dict[str, Any]], *, metric: str, width: int, now: float,
              title: str = "runs") -> list[str]:
    """One line per run under its tier: full id, status, metric, wall time and (when the
    rows have ``started_at``) start; its reason at the end of the line or below it, cut.
    The replicates of a run of several seeds (rows with ``replicate_of``) come under a
    line naming their run (:func:`replicates_line`).
    A run id too long for its row to fit in ``width`` goes alone on its line, with its
    columns below; the id column is as wide as the longest id that fits, so one long id
    cuts neither the header nor the other runs' lines.

    Args:
        runs: ``{run_id, tier, status, metric, wall_s, stop, [started_at, superseded_by,
            reason, progress, replicate_of]}`` per run (the ledger's rows, or ``flightplan run``'s summary rows).
        metric: the campaign's decision metric (column header).
        width: terminal columns. now: unix seconds (times of today show without date).
        title: the first line.
    """
    started = any("started_at" in r for r in runs)
    header = ["RUN ID", "STATUS", metric.upper(), "WALL (s)"] + (["STARTED"] if started else [])
    rows = [header] + [[r["run_id"], _status_cell(r),
                        "-" if r.get("metric") is None else f"{r['metric']:.4f}",
                        f"{r.get('wall_s') or 0:.1f}"]
                       + ([clock(r.get("started_at"), now=now)] if started else [])
                       for r in runs]
    rest = _table([row[1:] for row in rows], right={1, 2})
    # the id column is as wide as the longest id whose row still fits: a longer id goes
    # alone on its line (not widening every row past the terminal)
    room = width - 2 - 2 - max(cell_len(line) for line in rest)
    fitting = [cell_len(row[0]) for row in rows if cell_len(row[0]) <= room]
    id_width = max(fitting or [cell_len(header[0])])
    out = [title, cut(f"  {header[0].ljust(id_width)}  {rest[0]}", width)]
    order = sorted(range(len(runs)), key=lambda i: (_TIERS.index(runs[i]["tier"])
                                                    if runs[i]["tier"] in _TIERS else 3, i))
    tier, group = None, None
    for i in order:
        if runs[i]["tier"] != tier:
            tier, group = runs[i]["tier"], None
            out.append(f" {tier}")
        if runs[i].get("replicate_of") and runs[i]["replicate_of"] != group:
            group = runs[i]["replicate_of"]
            out.append(cut(replicates_line(group, [r for r in runs
                                                   if r.get("replicate_of") == group],
                                           metric=metric), width))
        run_id, columns, reason = runs[i]["run_id"], rest[i + 1], _run_reason(runs[i])
        row = f"  {run_id.ljust(id_width)}  {columns}"
        if cell_len(run_id) <= id_width and cell_len(row) <= width:
            out += _with_reason(row, reason, width=width, indent=4)
            continue
        # an id too long for the terminal: alone on its line, its columns and reason below
        out += [f"  {run_id}", cut(f"    {columns.strip()}", width)]
        out += [cut(f"    {reason}", width)] if reason else []
    return out


def _split_text(parts_hours: dict[str, float], wall_hours: float) -> tuple[str, str]:
    """``("7.9 s", "steps 2.5 s; start/load 3.1 s, output 1.5 s")``: the wall time and the
    causes (steps first, then the overheads largest first, those that show as 0 left out),
    in the unit that reads best for the wall time (:func:`flightplan.units.time_unit`)."""
    unit, scale = time_unit(wall_hours)
    shown = [(c, parts_hours.get(c, 0.0) * scale) for c in OVERHEADS]
    shown = sorted((p for p in shown if round(p[1], 1) > 0), key=lambda p: -p[1])
    steps = f"steps {parts_hours.get('steps', 0.0) * scale:.1f} {unit}"
    return (f"{wall_hours * scale:.1f} {unit}",
            steps + ("; " + ", ".join(f"{LABELS.get(c, c)} {v:.1f} {unit}" for c, v in shown)
                     if shown else ""))


def goodput_lines(runs: list[dict[str, Any]], *, width: int) -> list[str]:
    """One line per run that ran: its full id, its goodput (the share of its wall time in
    productive steps) and wall time, then its causes (steps, then the overheads largest
    first) at the end of the line when they fit, else on the next line, cut.

    Args:
        runs: rows with ``run_id``, ``tier`` and ``goodput`` (``GoodputSplit.to_json()`` or
            None); shown in tier order.
        width: terminal columns.

    Returns:
        The lines under the title ``goodput``; [] when no run ran.
    """
    ran = sorted((r for r in runs if r.get("goodput") and r["goodput"]["wall_hours"] > 0),
                 key=lambda r: _TIERS.index(r["tier"]) if r.get("tier") in _TIERS else 3)
    if not ran:
        return []
    texts = [_split_text(r["goodput"]["parts_hours"], r["goodput"]["wall_hours"]) for r in ran]
    rows = [["GOODPUT", "WALL"]] + [
        ["-" if r["goodput"]["goodput"] is None else f"{r['goodput']['goodput']:.1%}", wall]
        for r, (wall, _) in zip(ran, texts)]
    rest = _table(rows, right={0, 1})
    room = width - 2 - 2 - max(cell_len(line) for line in rest)
    ids = ["RUN ID"] + [r["run_id"] for r in ran]
    id_width = max([cell_len(i) for i in ids if cell_len(i) <= room] or [cell_len(ids[0])])
    out = [cut("goodput (productive steps / wall time; the rest by cause, largest first)",
               width),
           cut(f"  {ids[0].ljust(id_width)}  {rest[0]}", width)]
    for run_id, columns, (_, causes) in zip(ids[1:], rest[1:], texts):
        out += _with_reason(f"  {run_id.ljust(id_width)}  {columns}", causes, width=width,
                            indent=4)
    return out


def flight_hours_lines(flights: list[dict[str, Any]], *, width: int) -> list[str]:
    """Per flight, the slot-hours its package bought (slots × package hours) and where they
    went: productive steps, overheads, uncommitted (not a fault: the package is not an
    obligation to fill every hour); then the overheads by cause, largest first, cut.

    Args:
        flights: ``FlightGoodput.to_json()`` objects.
        width: terminal columns.

    Returns:
        The lines, title first; [] without a flight. Hours show with 2 places, or 4 when a
        figure other than 0 is under 0.1 h (a tiny campaign).
    """
    if not flights:
        return []
    figures = [f[k] for f in flights for k in ("productive_hours", "overhead_hours")]
    places = 4 if any(0 < abs(v) < 0.1 for v in figures) else 2
    out = ["hours bought per flight (slot-hours)"]
    for f in flights:
        head = (f"  {f['flight']}  {f['slots']} slot{'s' if f['slots'] != 1 else ''} × "
                f"{f['package_hours']:g} h = {f['bought_hours']:.2f} h")
        out += _with_reason(head, f"steps {f['productive_hours']:.{places}f} h, overheads "
                                  f"{f['overhead_hours']:.{places}f} h, uncommitted "
                                  f"{f['uncommitted_hours']:.{places}f} h", width=width,
                            indent=4)
        shown = sorted(((c, v) for c, v in f["overheads_hours"].items()
                        if round(v, places) > 0), key=lambda p: -p[1])
        if shown:
            out.append(cut("    overheads: " + ", ".join(
                f"{LABELS.get(c, c)} {v:.{places}f} h" for c, v in shown), width))
    return out


def _flight_state(flight: dict[str, Any]) -> str:
    """``12.50 h left``, ``ended`` or ``lost``."""
    if flight.get("lost_at") is not None:
        return "lost"
    return f"{flight['hours_left']:.2f} h left" if flight["hours_left"] > 0 else "ended"


def _flight_when(flight: dict[str, Any], *, now: float) -> str:
    """When the package ends (or ended), or when the flight was lost."""
    if flight.get("lost_at") is not None:
        return "at " + clock(flight["lost_at"], now=now)
    return ("ends " if flight["hours_left"] > 0 else "at ") + clock(flight["ends_at"], now=now)


def results_lines(results: dict[str, Any] | None, *, spec: str, width: int, now: float,
                  stopped_by: str | None = None) -> list[str]:
    """The lines on ``results/`` under the campaign line: once closed, the answer, the
    verdict, whether it verified and where the report is, unless runs were published
    since that close (``results/MANIFEST.json`` is not the one it wrote,
    :func:`~flightplan.publish.close_record.results_changed_since`): then one line, that
    the results are out of date and ``close`` brings them up to date; before, that results/ holds
    what the runs published so far and that ``close`` completes it, or, when the runner
    last stopped the campaign on a fault (``stopped_by``: its data check, kernel check or
    pilot), that the fault is fixed and ``run`` goes on; nothing when there is no
    results/ yet.

    Args:
        results: the snapshot's ``results`` (``flightplan.run.commands._add_results``).
        spec: the campaign file, for the commands shown.
        width: terminal columns. now: unix seconds (see :func:`clock`).
        stopped_by: what stopped the campaign when that is the ledger's last event
            (``pilot``, ``data_check``, ``kernel_check``, ``decision``); None otherwise.
    """
    if not results:
        return []
    closed = results.get("closed")
    if closed is None:
        if not results.get("exists"):
            return []
        if stopped_by is not None and stopped_by != "decision":
            return [cut(f"results: {results['dir']} holds what was published so far; the "
                        f"{stopped_by.replace('_', ' ')} stopped the campaign (last events "
                        f"below): fix that, then `flightplan run {spec}` goes on", width)]
        return [cut(f"results: {results['dir']} holds what the runs published so far; "
                    f"`flightplan close {spec}` completes it", width)]
    record = read_close_record(Path(results["dir"]).parent) if results.get("dir") else None
    if record is not None and results_changed_since(Path(results["dir"]).parent, record):
        # runs published since that close: its answer no longer covers them
        return [cut(f"results: out of date in {results['dir']}: the runs changed since the "
                    f"close at {clock(record.closed_at, now=now)} (answer then: "
                    f"{closed.get('answer')}); run `flightplan close {spec}` again", width)]
    state = "verified" if closed.get("verified") else "NOT verified"
    lines = [cut(f"closed {clock(closed.get('at'), now=now)}: answer {closed.get('answer')}, "
                 f"results {state} in {results['dir']} (at close)", width)]
    changed = closed.get("changed_since") or []
    if changed:
        lines.append(cut(f"  changed since the close: {len(changed)} file(s) gone or resized "
                         f"(first: {changed[0]}); `flightplan verify` names each", width))
    lines.append(cut(f"  verdict: {closed.get('verdict')}", width))
    if results.get("report"):
        lines.append(cut(f"  report: {results['report']} (`flightplan report --open` opens it)",
                         width))
    return lines


def status_lines(snapshot: dict[str, Any], *, metric: str, width: int, now: float
                 ) -> list[str]:
    """The ``flightplan status`` text of a ledger snapshot.

    Args:
        snapshot: :meth:`flightplan.run.ledger.Ledger.snapshot` plus ``runner``,
            ``cluster`` (the latest ``cluster_joined``, a line under the first when
            present) and ``flights`` (:mod:`flightplan.run.rental`; a section when present,
            a lost flight with its reason).
        metric: the campaign's decision metric (the runs' metric column header).
        width: terminal columns; no line is longer unless a run id alone is (an id too
            long for its row to fit goes alone on its line, its columns below; the header
            and the other runs keep their one line each).
        now: unix seconds; times on this local date show without the date.

    Returns:
        The lines, without newlines.
    """
    width = max(40, width)
    campaign = snapshot.get("campaign") or {}
    runner = snapshot.get("runner")
    out = [cut(f"campaign {campaign.get('name', '?')} ({campaign.get('spec_path', '?')}), "
               f"created {clock(campaign.get('created_at'), now=now)}; "
               + (f"runner: process {runner.get('pid')}" if runner else "no runner active"),
               width)]
    if snapshot.get("cluster"):
        out.append(cut(ClusterJoined(**snapshot["cluster"]).line(), width))
    events = snapshot.get("events") or []
    last = events[-1] if events else {}
    stopped_by = (last.get("data") or {}).get("by") if last.get("kind") == "stopped" else None
    out += results_lines(snapshot.get("results"), spec=campaign.get("spec_path", "?"),
                         width=width, now=now, stopped_by=stopped_by)
    out += ["", "plan versions"]
    versions = snapshot.get("plan_versions") or []
    if versions:
        rows = [[f"v{v['version']}", v["kind"],
                 f"{v.get('reserved_hours') or 0:.2f} h of {v.get('window_hours') or 0:.0f} h",
                 "fits" if v.get("fits") else "over", v["plan_sha256"][:12],
                 clock(v.get("created_at"), now=now)] for v in versions]
        for v, line in zip(versions, _table(rows, right=set())):
            out += _with_reason(cut("  " + line, width), v.get("reason") or "", width=width,
                                indent=6)
    out += ["", *run_lines(snapshot.get("runs") or [], metric=metric, width=width, now=now)] \
        if snapshot.get("runs") else ["", "runs: none yet"]
    goodput = goodput_lines(snapshot.get("runs") or [], width=width)
    out += ["", *goodput] if goodput else []
    flights = snapshot.get("flights") or []
    if flights:
        out += ["", "flights (packages)"]
        rows = [[f["flight"], _flight_state(f), _flight_when(f, now=now),
                 f"started {clock(f['started_at'], now=now)} "
                 + ("([rental] started)" if f["source"] == "spec" else "(its first run)")]
                for f in flights]
        for f, line in zip(flights, _table(rows, right={1})):
            out += _with_reason(cut("  " + line, width), f.get("lost_reason") or "",
                                width=width, indent=6)
    bought = flight_hours_lines((snapshot.get("goodput") or {}).get("flights") or [],
                                width=width)
    out += ["", *bought] if bought else []
    decisions = snapshot.get("decisions") or []
    if decisions:
        out += ["", "decisions"]
        for d in decisions:
            head = f"  {clock(d['at'], now=now)}  {d['decision']}" + (
                f" (computed: {d['computed']})" if d["computed"] != d["decision"] else "")
            out += _with_reason(head, (d.get("figures") or {}).get("reason", ""),
                                width=width, indent=6)
            if d.get("dropped"):
                out.append(cut("      dropped: " + ", ".join(d["dropped"]), width))
            if (d.get("figures") or {}).get("value"):
                value = ValueRanking.from_json(d["figures"]["value"])
                out.append(cut("      " + value.line(), width))
                out += [cut(f"      cut {name}: {why}", width)
                        for name, why in value.proposed_cuts.items()]
    expenses = snapshot.get("expenses") or []
    if expenses:
        out += ["", "expenses"]
        rows = [[e["kind"], e["label"], f"{e['amount']} {e['currency']}"] for e in expenses]
        out += [cut("  " + line, width) for line in _table(rows, right={2})]
    notes = snapshot.get("notes") or []
    if notes:
        out += ["", "notes"]
        for n in notes:
            out += _with_reason(f"  {clock(n['at'], now=now)}  {n['name']}", n["text"],
                                width=width, indent=6)
    # in time order: a run's checkpoint events reach the ledger when it ends, after the
    # events of runs that went on beside it
    events = sorted(snapshot.get("events") or [], key=lambda e: e["at"] or 0.0)[-_EVENTS_SHOWN:]
    if events:
        out += ["", "last events"]
        rows = [[clock(e["at"], now=now), e.get("run_id") or "-", e["kind"]] for e in events]
        out += [cut("  " + line, width) for line in _table(rows, right=set())]
    return out
