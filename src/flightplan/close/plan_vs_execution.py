"""Plan versus execution: the original plan, exactly as frozen, next to what happened.

Planned durations come from the original plan's ``stages`` (``duration_hours``, summed
over the copies of a stage that repeats on every flight); observed durations from the
ledger's ``stage_times`` (summed over executions: a resumed run counts every attempt),
or a run's ``started_at``/``ended_at`` when the runner recorded no stage time.
Deviation = observed − planned (hours) and observed / planned − 1. Explanations are
the notes recorded with ``flightplan note NAME "text"``. Decisions are the pilot's
decision point (and the pilot's resume check), the runs cut, the runs stopped by a
rule and a campaign stop, in time order. Totals: the plan's
``reserved_hours`` against the observed span from the first start to the last end.

Checkpoint transfer home (runs on Ray flights) is a stage cost of its own, beside the runs
(a checkpoint travels while the loop trains on, so it is not in any run's hours): observed =
Σ (wait_s + fetch_s + commit_s) of the run's ``checkpoint_transferred`` events, from durable
on the flight to durable at home; planned = the last decision point's re-estimate
(``estimates[name].transfer_s``). The frozen original plan holds no transfer figure, and
none is made up for it.

Goodput (:mod:`flightplan.goodput`, given by the caller, which reads the run directories):
each run's wall time by cause beside the decision point's re-estimate by the same causes
(``estimates[name].parts``), and per flight the slot-hours its package bought: productive,
overheads, uncommitted.

The original plan is read, never rewritten; ``plan_intact`` says whether it still hashes
to the sha256 frozen with it.

Usage::

    record = plan_vs_execution(ledger, goodput=ledger_goodput(ledger, spec, gpus_per_flight=1))
    markdown = plan_vs_execution_markdown(record)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flightplan.canonical import plan_sha256
from flightplan.close.ledger_reader import LedgerReader
from flightplan.campaign_goodput import CampaignGoodput, ledger_executions
from flightplan.close.resumes import RunResumes
from flightplan.goodput import CAUSES, LABELS
from flightplan.ledger_rows import RunRow
from flightplan.transfer_time import trip_s
from flightplan.units import time_unit

__all__ = ["plan_vs_execution", "plan_vs_execution_markdown", "shown_hours",
           "shown_transfers"]

_HOUR_S = 3600.0
_NO_ORIGINAL = ("the original plan has no transfer figure: planned is the decision point's "
                "re-estimate (null without one)")


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _planned(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name → {kind, tier, planned_hours, planned_start_hours} from the plan's stages."""
    planned: dict[str, dict[str, Any]] = {}
    for slot in plan.get("stages") or []:
        entry = planned.setdefault(slot["name"], {
            "kind": slot.get("kind"), "tier": slot.get("tier"), "planned_hours": 0.0,
            "planned_start_hours": slot.get("start_hours")})
        entry["planned_hours"] += float(slot.get("duration_hours") or 0.0)
        start = slot.get("start_hours")
        if start is not None and (entry["planned_start_hours"] is None
                                  or start < entry["planned_start_hours"]):
            entry["planned_start_hours"] = start
    return planned


def _observed(ledger: LedgerReader) -> tuple[dict[str, list[tuple[float, float]]],
                                             dict[str, RunRow]]:
    """name → [(start_s, end_s)] executions, and run name → its latest ledger row."""
    runs = ledger.runs()
    name_of = {r.run_id: r.name for r in runs}
    spans: dict[str, list[tuple[float, float]]] = {}
    for row in ledger.stage_times():
        name = name_of.get(row.name, row.name)
        spans.setdefault(name, []).append((float(row.started_at), float(row.ended_at)))
    latest: dict[str, RunRow] = {}
    for run in runs:
        if run.status != "superseded" or run.name not in latest:
            latest[run.name] = run
        if run.name not in spans and run.started_at and run.ended_at:
            spans[run.name] = [(float(run.started_at), float(run.ended_at))]
    return spans, latest


def _hours(planned_s: float | None, observed_s: float, *, compared: bool = True
           ) -> dict[str, float | None]:
    """``{planned_hours, observed_hours, deviation_hours}`` from seconds; the deviation
    only when there is a planned figure and ``compared``."""
    return {"planned_hours": None if planned_s is None else _r(planned_s / _HOUR_S),
            "observed_hours": _r(observed_s / _HOUR_S),
            "deviation_hours": _r((observed_s - planned_s) / _HOUR_S)
            if planned_s is not None and compared else None}


def _transfers(ledger: LedgerReader) -> dict[str, Any]:
    """The ``transfers`` object of :func:`plan_vs_execution` (module docstring)."""
    decisions = ledger.decisions()
    figures = decisions[-1].figures if decisions else {}
    estimates = figures.get("estimates") or {}
    rows: list[dict[str, Any]] = []
    planned_s: list[float | None] = []
    observed_s: list[float] = []
    for run in ledger.runs():
        events = [e.data or {} for e in ledger.events(run.run_id, kind="checkpoint_transferred")]
        planned = None if run.status in ("cut", "superseded") else \
            (estimates.get(run.name) or {}).get("transfer_s")
        if not events and not planned:
            continue
        observed = sum(trip_s(d) for d in events)
        planned_s.append(planned)
        observed_s.append(observed)
        rows.append({"name": run.name, "run_id": run.run_id, "checkpoints": len(events),
                     "bytes": sum(int(d["bytes"]) for d in events), **_hours(planned, observed)})
    known = [p for p in planned_s if p is not None]
    totals = {"checkpoints": sum(r["checkpoints"] for r in rows),
              "bytes": sum(r["bytes"] for r in rows),
              **_hours(sum(known) if known else None, sum(observed_s),
                       compared=len(known) == len(planned_s))}
    return {"planned_from": {"plan_version": figures.get("plan_version")} if decisions
            else None, "note": _NO_ORIGINAL, "runs": rows, "totals": totals}


def _goodput(ledger: LedgerReader, goodput: CampaignGoodput) -> dict[str, Any]:
    """The ``goodput`` object of :func:`plan_vs_execution` (module docstring)."""
    decisions = ledger.decisions()
    estimates = (decisions[-1].figures.get("estimates") or {}) if decisions else {}
    executions = ledger_executions(ledger.runs(), ledger.stage_times(), ledger.events())
    runs = []
    for run in ledger.runs():
        split = goodput.runs.get(run.run_id)
        if split is None:
            continue
        parts = None if run.status in ("cut", "superseded") else \
            (estimates.get(run.name) or {}).get("parts")
        runs.append({"name": run.name, "run_id": run.run_id, "status": run.status,
                     "executions": len(executions.get(run.run_id) or []),
                     "observed": split.to_json(),
                     "planned_parts_hours": None if not parts else
                     {c: _r(float(parts.get(c) or 0.0) / _HOUR_S) for c in CAUSES},
                     "planned_hours": None if not parts else
                     _r(sum(float(v or 0.0) for v in parts.values()) / _HOUR_S)})
    whole = goodput.to_json()
    return {"runs": runs, "flights": whole["flights"], "stages_hours": whole["stages_hours"],
            "totals": whole["total"]}


def _items(planned: dict[str, dict[str, Any]], spans: dict[str, list[tuple[float, float]]],
           latest: dict[str, RunRow], notes: dict[str, list[str]], origin: float
           ) -> list[dict[str, Any]]:
    """The ``items`` of :func:`plan_vs_execution`: every planned stage and run in planned
    start order, then what ran unplanned in the order it started."""
    items = []
    order = sorted(planned, key=lambda n: (planned[n]["planned_start_hours"] or 0.0, n))
    order += sorted((n for n in spans if n not in planned), key=lambda n: min(spans[n]))
    for name in order:
        plan_entry = planned.get(name, {})
        executions = spans.get(name, [])
        observed = sum(e - s for s, e in executions) / _HOUR_S if executions else None
        planned_hours = plan_entry.get("planned_hours")
        run = latest.get(name)
        deviation = None if observed is None or planned_hours is None else observed - planned_hours
        items.append({
            "name": name, "kind": plan_entry.get("kind") or ("run" if run else "stage"),
            "tier": plan_entry.get("tier") or (run.tier if run else None),
            "status": run.status if run else ("done" if executions else "not run"),
            "planned_hours": _r(planned_hours),
            "planned_start_hours": _r(plan_entry.get("planned_start_hours")),
            "observed_hours": _r(observed),
            "observed_start_hours": _r((min(s for s, _ in executions) - origin) / _HOUR_S)
            if executions else None,
            "executions": len(executions),
            "deviation_hours": _r(deviation),
            "deviation_fraction": _r(deviation / planned_hours)
            if deviation is not None and planned_hours else None,
            "explanation": notes.get(name, []),
        })
    return items


def _decisions(ledger: LedgerReader) -> list[dict[str, Any]]:
    """The ``decisions`` of :func:`plan_vs_execution`, in time order: the decision points,
    the pilot's resume checks, a campaign stop, the runs cut and the runs stopped."""
    decisions: list[dict[str, Any]] = [
        {"kind": "pilot", "at": d.at, "decision": d.decision, "computed": d.computed,
         "overridden": d.overridden, "dropped": d.dropped, "figures": d.figures}
        for d in ledger.decisions()]
    for event in ledger.events():
        data = event.data if isinstance(event.data, dict) else {}
        if event.kind == "pilot":
            decisions.append({"kind": "pilot_check", "at": event.at, "ok": data.get("ok"),
                              "decision": "resume verified" if data.get("ok") else "failed",
                              "message": data.get("message"),
                              "control_id": data.get("control_id")})
        elif event.kind == "stopped" and event.run_id is None:
            decisions.append({"kind": "campaign_stop", "at": event.at, "decision": "stop",
                              "message": data.get("message") or data.get("reason")})
    for run in ledger.runs():
        if run.status == "cut":
            decisions.append({"kind": "cut", "at": run.ended_at, "run_id": run.run_id,
                              "name": run.name, "decision": "cut"})
        if run.status == "stopped" and run.stop:
            decisions.append({"kind": "stop", "at": run.stop.get("time"),
                              "run_id": run.run_id, "name": run.name, "decision": "stop",
                              "rule": run.stop.get("rule"), "message": run.stop.get("message")})
    decisions.sort(key=lambda d: (d["at"] is None, d["at"] or 0.0))
    return decisions


def plan_vs_execution(ledger: LedgerReader, *, goodput: CampaignGoodput | None = None,
                      resumes: Mapping[str, RunResumes] | None = None) -> dict[str, Any]:
    """The ``plan_vs_execution.json`` object.

    Args:
        ledger: the campaign's ledger (:class:`~flightplan.close.ledger_reader.LedgerReader`).
        goodput: the campaign's goodput (:func:`flightplan.campaign_goodput.ledger_goodput`); None
            leaves ``goodput`` null.
        resumes: run id → its resumes as results/ holds them
            (:func:`flightplan.close.resumes.run_resumes`); None leaves ``resumes`` empty.

    Returns:
        ``{original_plan: {version, plan_sha256, created_at, file, reserved_hours,
        window_hours}, plan_intact, re_estimates: [...], items: [{name, kind, tier,
        status, planned_hours, planned_start_hours, observed_hours, observed_start_hours,
        executions, deviation_hours, deviation_fraction, explanation: [str]}],
        decisions: [...], totals: {reserved_hours, observed_hours, busy_hours,
        deviation_hours}, transfers: {planned_from ({plan_version} of the re-estimate, or
        null without a decision), note, runs: [{name, run_id, checkpoints, bytes,
        planned_hours, observed_hours, deviation_hours}], totals: {checkpoints, bytes,
        planned_hours, observed_hours, deviation_hours}}, goodput: {runs: [{name, run_id,
        status, executions, observed (``GoodputSplit.to_json()``), planned_parts_hours
        ({cause: h} of the last decision's re-estimate, null without one), planned_hours}],
        flights ([``FlightGoodput.to_json()``]), stages_hours, totals}, resumes: [{name,
        run_id, summary, **RunResumes.to_json()}] (the ledger's runs in order)}``; hours from the
        campaign's first observed start. ``transfers.runs`` lists the runs with a checkpoint that
        came home or a planned transfer (a run cut or superseded has no planned figure);
        a planned figure is null when the re-estimate gave none, and the total's
        deviation is null unless every run listed has one.
    """
    original = ledger.original_plan()
    plan = original.plan if original else {}
    spans, latest = _observed(ledger)
    starts = [s for executions in spans.values() for s, _ in executions]
    ends = [e for executions in spans.values() for _, e in executions]
    origin = min(starts) if starts else 0.0
    notes: dict[str, list[str]] = {}
    for note in ledger.notes():
        notes.setdefault(note.name, []).append(note.text)
    reserved = plan.get("reserved_hours")
    observed_span = (max(ends) - origin) / _HOUR_S if ends else None
    busy = sum(e - s for ex in spans.values() for s, e in ex) / _HOUR_S if spans else None
    return {
        "original_plan": {"version": original.version if original else None,
                          "plan_sha256": original.plan_sha256 if original else None,
                          "created_at": original.created_at if original else None,
                          "file": "plan.json", "reserved_hours": reserved,
                          "window_hours": plan.get("window_hours")},
        "plan_intact": bool(plan) and original is not None
        and plan_sha256(plan) == original.plan_sha256,
        "re_estimates": [{"version": v.version, "created_at": v.created_at, "reason": v.reason,
                          "reserved_hours": v.plan.get("reserved_hours")}
                         for v in ledger.plan_versions() if v.kind != "original"],
        "items": _items(_planned(plan), spans, latest, notes, origin),
        "decisions": _decisions(ledger),
        "totals": {"reserved_hours": reserved, "observed_hours": _r(observed_span),
                   "busy_hours": _r(busy),
                   "deviation_hours": _r(observed_span - reserved)
                   if observed_span is not None and reserved is not None else None},
        "transfers": _transfers(ledger),
        "goodput": None if goodput is None else _goodput(ledger, goodput),
        "resumes": [{"name": run.name, "run_id": run.run_id,
                     "summary": resumes[run.run_id].summary(), **resumes[run.run_id].to_json()}
                    for run in ledger.runs() if resumes and run.run_id in resumes],
    }


def shown_hours(record: dict[str, Any]) -> dict[str, Any]:
    """The hours of the plan-versus-execution tables as printed, adding up as printed.

    One precision for every figure of the record: 2 places, or 4 when a non-zero figure
    is under 0.1 h (a tiny campaign). Planned and observed hours are rounded to it, and a
    deviation is the printed observed minus the printed planned, so that planned +
    deviation = observed holds for the digits a reader sees (rounding each separately
    gave e.g. 0.0056 + 0.0028 ≠ 0.0083).

    Returns:
        ``{places, items: [{planned, observed, deviation}], totals: {reserved, observed,
        busy, deviation}}``: strings, ``–`` when unknown, deviations signed.
    """
    totals = record["totals"]
    figures = [v for i in record["items"] for v in (i["planned_hours"], i["observed_hours"])]
    figures += [totals["reserved_hours"], totals["observed_hours"], totals["busy_hours"]]
    small = any(v is not None and 0 < abs(v) < 0.1 for v in figures)
    places = 4 if small else 2

    def text(value: float | None) -> str:
        return "–" if value is None else f"{value:.{places}f}"

    def deviation(observed: float | None, planned: float | None) -> str:
        if observed is None or planned is None:
            return "–"
        return f"{round(observed, places) - round(planned, places):+.{places}f}"

    return {"places": places,
            "items": [{"planned": text(i["planned_hours"]), "observed": text(i["observed_hours"]),
                       "deviation": deviation(i["observed_hours"], i["planned_hours"])}
                      for i in record["items"]],
            "totals": {"reserved": text(totals["reserved_hours"]),
                       "observed": text(totals["observed_hours"]),
                       "busy": text(totals["busy_hours"]),
                       "deviation": deviation(totals["observed_hours"],
                                              totals["reserved_hours"])}}


def shown_transfers(record: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint-transfer table as printed: seconds with two places (a transfer takes
    seconds, not hours), each deviation the printed observed minus the printed planned.

    Returns:
        ``{runs: [{planned, observed, deviation}], totals: {planned, observed,
        deviation}}``: strings, ``–`` when unknown, deviations signed.
    """
    def row(entry: dict[str, Any]) -> dict[str, str]:
        planned, observed = (None if entry[k] is None else round(entry[k] * _HOUR_S, 2)
                             for k in ("planned_hours", "observed_hours"))
        return {"planned": "–" if planned is None else f"{planned:.2f}",
                "observed": "–" if observed is None else f"{observed:.2f}",
                "deviation": "–" if planned is None or observed is None
                else f"{observed - planned:+.2f}"}

    transfers = record["transfers"]
    return {"runs": [row(r) for r in transfers["runs"]], "totals": row(transfers["totals"])}


def _transfer_lines(record: dict[str, Any]) -> list[str]:
    transfers = record["transfers"]
    if not transfers["runs"]:
        return []
    shown = shown_transfers(record)
    source = transfers["planned_from"]
    lines = ["", "## Checkpoint transfer home", "",
             "A stage cost beside the runs (a checkpoint travels while the run trains on, so "
             "it is in no run's hours above): observed from durable on the flight to durable "
             "at home; planned as the decision point's re-estimate"
             + (f" (plan version {source['plan_version']})" if source else "")
             + " gave it: the original plan has no transfer figure.", "",
             "| run | checkpoints | MB | planned (s) | observed (s) | deviation (s) |",
             "|---|---|---|---|---|---|"]
    for run, text in [*zip(transfers["runs"], shown["runs"]),
                      ({"name": "total", **transfers["totals"]}, shown["totals"])]:
        lines.append(f"| {run['name']} | {run['checkpoints']} | {run['bytes'] / 1e6:.1f} | "
                     f"{text['planned']} | {text['observed']} | {text['deviation']} |")
    return lines


def _goodput_lines(record: dict[str, Any]) -> list[str]:
    """The ``## Goodput`` section: each run's wall time by cause, its re-estimate below it,
    and each flight's slot-hours."""
    goodput = record.get("goodput")
    if not goodput or not goodput["runs"]:
        return []
    unit, scale = time_unit(max(r["observed"]["wall_hours"] for r in goodput["runs"]))
    lines = ["", "## Goodput", "",
             f"Each run's wall time by cause ({unit}; every execution, each second to one "
             f"cause, so a row adds up to its wall time); below it, the decision point's "
             f"re-estimate by the same causes. Goodput is the share of productive steps.", "",
             "| run | status | wall | goodput | "
             + " | ".join(LABELS[c] for c in CAUSES) + " |",
             "|---" * (4 + len(CAUSES)) + "|"]

    def cells(parts: dict[str, float]) -> str:
        return " | ".join(f"{parts[c] * scale:.1f}" for c in CAUSES)
    for run in goodput["runs"]:
        seen = run["observed"]
        share = "–" if seen["goodput"] is None else f"{seen['goodput']:.1%}"
        lines.append(f"| {run['name']} | {run['status']} | {seen['wall_hours'] * scale:.1f} | "
                     f"{share} | {cells(seen['parts_hours'])} |")
        if run["planned_parts_hours"] is not None:
            planned = run["planned_parts_hours"]
            total = run["planned_hours"] or 0.0
            share = f"{planned['steps'] / total:.1%}" if total else "–"
            lines.append(f"| ↳ re-estimate |  | {total * scale:.1f} | {share} | "
                         f"{cells(planned)} |")
    for flight in goodput["flights"]:
        figures = [flight["productive_hours"], flight["overhead_hours"]]
        places = 4 if any(0 < v < 0.1 for v in figures) else 2
        shown = sorted(((c, v) for c, v in flight["overheads_hours"].items()
                        if round(v, places) > 0), key=lambda p: -p[1])
        lines += ["", f"Flight `{flight['flight']}`: {flight['slots']} slot(s) × "
                      f"{flight['package_hours']:g} h = {flight['bought_hours']:.2f} h bought; "
                      f"steps {flight['productive_hours']:.{places}f} h, overheads "
                      f"{flight['overhead_hours']:.{places}f} h"
                      + (" (" + ", ".join(f"{LABELS.get(c, c)} {v:.{places}f} h"
                                          for c, v in shown) + ")" if shown else "")
                      + f", uncommitted {flight['uncommitted_hours']:.{places}f} h (not a "
                        f"fault: the package is not an obligation to fill every hour)."]
    return lines


def _resume_lines(record: dict[str, Any]) -> list[str]:
    """The ``## Resumes`` section: each run that resumed or is not bitwise, and how far its
    products are those of an uninterrupted run."""
    shown = [r for r in record.get("resumes") or [] if r["resumed"] or not r["bitwise"]]
    if not shown:
        return []
    return ["", "## Resumes", "",
            "Runs that resumed from a checkpoint or that do not repeat bit for bit; every other "
            "run ran through in one execution.", "",
            "| run | id | resumes |", "|---|---|---|",
            *(f"| {r['name']} | `{r['run_id']}` | {r['summary']} |" for r in shown)]


def plan_vs_execution_markdown(record: dict[str, Any]) -> str:
    """``plan_vs_execution.md``: the same comparison as tables."""
    original = record["original_plan"]
    lines = ["# Plan versus execution", "",
             f"Original plan: version {original['version']}, sha256 `{original['plan_sha256']}`"
             f" ({'intact' if record['plan_intact'] else 'DOES NOT MATCH its frozen hash'}); "
             f"the plan itself is `plan.json`, never rewritten.", "",
             "| stage / run | kind | tier | status | planned (h) | observed (h) | deviation (h) "
             "| runs | explanation |", "|---|---|---|---|---|---|---|---|---|"]
    shown = shown_hours(record)
    for item, hours in zip(record["items"], shown["items"]):
        explanation = " / ".join(item["explanation"]).replace("|", "\\|") or "–"
        lines.append(f"| {item['name']} | {item['kind']} | {item['tier'] or '–'} | "
                     f"{item['status']} | {hours['planned']} | {hours['observed']} | "
                     f"{hours['deviation']} | {item['executions']} | {explanation} |")
    totals = shown["totals"]
    lines += ["", f"Reserved {totals['reserved']} h; observed {totals['observed']} h from "
              f"first start to last end ({totals['busy']} h of stage and run time); "
              f"deviation {totals['deviation']} h.", "", "## Decisions", ""]
    if not record["decisions"]:
        lines.append("No decision was recorded.")
    for d in record["decisions"]:
        if d["kind"] == "pilot":
            extra = " (overridden; computed: " + d["computed"] + ")" if d["overridden"] else ""
            dropped = f"; dropped {', '.join(map(str, d['dropped']))}" if d["dropped"] else ""
            lines.append(f"- decision point after the pilot: **{d['decision']}**{extra}{dropped}")
            ranking = ((d.get("figures") or {}).get("value") or {}).get("ranking") or []
            lines += [f"  {i}. {r['variant']}: decision value {r['decision_value']:.3f}"
                      + ("" if r["value_per_gpu_hour"] is None
                         else f", {r['value_per_gpu_hour']:.3g} per GPU·h")
                      + (f"; proposed for cut: {r['reason']}" if r["cut"] else "")
                      for i, r in enumerate(ranking, 1)]
        elif d["kind"] == "pilot_check":
            lines.append(f"- pilot (short run, checkpoint, resume in a new process): "
                         f"{'passed' if d['ok'] else 'FAILED'}"
                         + (f": {d['message']}" if d["message"] else ""))
        elif d["kind"] == "campaign_stop":
            lines.append(f"- campaign stopped: {d['message']}")
        elif d["kind"] == "cut":
            lines.append(f"- cut: {d['name']} (`{d['run_id']}`)")
        else:
            lines.append(f"- stopped: {d['name']} (`{d['run_id']}`) by rule {d['rule']}: "
                         f"{d['message']}")
    for version in record["re_estimates"]:
        reserved = version["reserved_hours"]
        lines.append(f"- re-estimated plan (version {version['version']}): reserved "
                     + ("–" if reserved is None else f"{reserved:.{shown['places']}f}")
                     + f" h; {version['reason'] or 'no reason given'}")
    return "\n".join(lines + _transfer_lines(record) + _goodput_lines(record)
                     + _resume_lines(record)) + "\n"
