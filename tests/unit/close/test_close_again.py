"""A closed campaign says so: a second ``close`` redoes nothing unless something it reads
changed (or ``--again``), ``status`` shows the answer and where results/ and the report
are, and ``flightplan report`` prints the report's path and opens it in a browser.

On the fixture campaign (tests/unit/close/close_fixture.py: ``control`` and ``variant``
finished, macro-F1 1.0 and 0.7509 on its 20 test examples, the variant a gain of −0.2491,
so the answer is "no").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from close_fixture import CONTROL, FAKES, T0, VARIANT, make_campaign

from flightplan.close.commands import close_command
from flightplan.run.commands import status_command
from flightplan.run.ledger import Ledger

FLIGHTPLAN = Path(sys.executable).parent / "flightplan"


def _stamps(results: Path) -> dict[str, tuple[int, int]]:
    """inode and modification time of every file under ``results``: a file rewritten (even
    atomically, with the same bytes) changes them."""
    return {str(p.relative_to(results)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(results.rglob("*")) if p.is_file()}


def _close(spec, ledger, capsys, **kwargs) -> tuple[int, dict, str]:
    code = close_command(spec.source, as_json=True, open_ledger=lambda _: ledger, **kwargs)
    as_json = json.loads(capsys.readouterr().out)
    close_command(spec.source, as_json=False, open_ledger=lambda _: ledger, **kwargs)
    return code, as_json, capsys.readouterr().out


def test_a_second_close_redoes_nothing_until_something_changed_or_again(tmp_path, capsys):
    spec, ledger = make_campaign(tmp_path)
    results = Path(spec.campaign_dir) / "results"
    before = time.time()
    code, first, _ = _close(spec, ledger, capsys, again=True)
    assert code == 0 and first["verified"] is True and first["already_closed"] is False
    assert first["answer"] == "no" and before <= first["closed_at"] <= time.time()
    stamps = _stamps(results)

    code, second, text = _close(spec, ledger, capsys)
    assert code == 0 and second["already_closed"] is True
    closed_at = second["closed_at"]
    assert {k: v for k, v in second.items() if k not in ("already_closed", "closed_at")} == \
        {k: v for k, v in first.items() if k not in ("already_closed", "closed_at")} | {
            "results_dir": second["results_dir"]}
    lines = text.splitlines()
    assert lines[0] == (f"already closed and verified at "
                        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(closed_at))}; "
                        f"nothing close reads has changed since, so nothing was redone "
                        f"(`flightplan close {spec.source} --again` redoes it)")
    assert lines[2:4] == ["answer: no", f"verdict: {first['verdict']}"]
    assert lines[-1] == "verified"
    assert _stamps(results) == stamps                     # no file rewritten

    # a note in the ledger changes what close reads: closed again, files rewritten
    ledger.note_rows.append({"name": "control", "text": "a late note", "at": T0 + 99})
    code, third, _ = _close(spec, ledger, capsys)
    assert code == 0 and third["already_closed"] is False and third["verified"] is True
    assert _stamps(results)["report.html"] != stamps["report.html"]
    assert "a late note" in (results / "plan_vs_execution.md").read_text()
    stamps = _stamps(results)
    code, fourth, _ = _close(spec, ledger, capsys)
    assert fourth["already_closed"] is True and _stamps(results) == stamps

    # a file of results/ changed by hand: it no longer verifies, so close redoes it
    (results / "README.md").write_text("edited by hand\n")
    code, fifth, _ = _close(spec, ledger, capsys)
    assert code == 0 and fifth["already_closed"] is False
    assert (results / "README.md").read_text() != "edited by hand\n"
    assert first["rewritten"] == [] and fifth["rewritten"] == ["README.md"]
    # a published run's file changed within its size: close says it wrote it again
    predictions = results / "predictions" / f"{CONTROL}.csv"
    published = predictions.read_bytes()
    predictions.write_bytes(published.replace(b",", b";", 1))
    assert close_command(spec.source, as_json=False, open_ledger=lambda _: ledger) == 0
    assert (f"rewrote 1 file(s) of results/ that had changed since they were written (first: "
            f"predictions/{CONTROL}.csv), from runs/ and the ledger") in \
        capsys.readouterr().out.splitlines()
    assert predictions.read_bytes() == published

    # --again redoes it although nothing changed
    stamps = _stamps(results)
    code, sixth, _ = _close(spec, ledger, capsys, again=True)
    assert sixth["already_closed"] is False and _stamps(results) != stamps


def test_status_shows_the_answer_results_and_report_once_closed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "500")          # rich's width: no line is cut here
    spec, ledger = make_campaign(tmp_path)
    campaign = Path(spec.campaign_dir)
    with Ledger.open(campaign) as real:          # status reads the real ledger's tables
        real.ensure_campaign(name="fixture", spec_path=str(spec.source), spec_sha256="0" * 64)
    results = campaign / "results"

    assert status_command(spec.source, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["results"] == {
        "dir": str(results), "exists": True, "report": None, "closed": None}
    status_command(spec.source, as_json=False)
    assert (f"results: {results} holds what the runs published so far; `flightplan close "
            f"{spec.source}` completes it") in capsys.readouterr().out

    _close(spec, ledger, capsys)
    record = json.loads((campaign / ".flightplan" / "closed.json").read_text())
    assert status_command(spec.source, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out)["results"]
    assert shown == {"dir": str(results), "exists": True, "report": str(results / "report.html"),
                     "closed": {"at": record["closed_at"], "verified": True, "answer": "no",
                                "verdict": record["summary"]["verdict"], "changed_since": [],
                                "accepted": [f"{CONTROL}", f"{VARIANT}"]}}
    status_command(spec.source, as_json=False)
    text = capsys.readouterr().out.splitlines()
    at = time.strftime("%H:%M:%S", time.localtime(record["closed_at"]))
    assert text[1] == f"closed {at}: answer no, results verified in {results} (at close)"
    assert text[2].startswith("  verdict: ")
    assert text[3] == (f"  report: {results / 'report.html'} (`flightplan report --open` "
                       f"opens it)")

    # a file cut short and one deleted after the close: status says so without hashing
    predictions = results / "predictions" / f"{CONTROL}.csv"
    predictions.write_bytes(predictions.read_bytes()[:-1])
    (results / "budget.json").unlink()
    status_command(spec.source, as_json=True)
    assert json.loads(capsys.readouterr().out)["results"]["closed"]["changed_since"] == [
        "budget.json", f"predictions/{CONTROL}.csv"]
    status_command(spec.source, as_json=False)
    text = capsys.readouterr().out.splitlines()
    assert text[2] == ("  changed since the close: 2 file(s) gone or resized (first: budget.json); "
                       "`flightplan verify` names each")


def test_report_prints_where_it_is_and_opens_it_in_the_browser(tmp_path, capsys):
    spec, ledger = make_campaign(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKES), *sys.path]))
    before = subprocess.run([str(FLIGHTPLAN), "report", str(spec.source)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert (before.returncode, before.stdout) == (2, "")
    assert before.stderr == (f"error: {spec.source}: no report yet (`flightplan close` writes "
                             f"results/report.html once the campaign has run): run "
                             f"`flightplan run {spec.source}` if it has not, then "
                             f"`flightplan close {spec.source}`\n")
    _close(spec, ledger, capsys)
    report = (Path(spec.campaign_dir) / "results" / "report.html").resolve()
    shown = subprocess.run([str(FLIGHTPLAN), "report", str(spec.source)], capture_output=True,
                           text=True, env=env, timeout=300)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == f"report: {report}\nREADME: {report.with_name('README.md')}\n"

    # a browser that writes down what it was asked to open ($BROWSER, read by webbrowser)
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {tmp_path / "opened.txt"}\n')
    browser.chmod(0o755)
    opened = subprocess.run([str(FLIGHTPLAN), "report", str(spec.source), "--open", "--json"],
                            capture_output=True, text=True, timeout=300,
                            env=dict(env, BROWSER=str(browser)))
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == {"report": str(report),
                                         "readme": str(report.with_name("README.md")),
                                         "opened": True}
    assert (tmp_path / "opened.txt").read_text() == report.as_uri() + "\n"
