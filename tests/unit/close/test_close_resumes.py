"""Each run's resumes as results/ states them (README.md, report.html, plan_vs_execution):
how many executions restored a checkpoint, and whether the products are still bitwise
those of an uninterrupted run. Worked by hand from restore rows."""

from __future__ import annotations

from close_fixture import CONTROL, VARIANT, make_campaign

from flightplan.close.plan_vs_execution import plan_vs_execution, plan_vs_execution_markdown
from flightplan.close.report import render_readme
from flightplan.close.resumes import Reshard, RunResumes, run_resumes
from flightplan.rows import Measurement, Restore, Row

T = 1_700_000_000.0


def _rows(*restores: tuple[str | None, int | None]) -> list[Row]:
    """A fresh start, then a restore row per ``(source, resharded_from)``, each after steps."""
    rows: list[Row] = [Restore(0, T, source=None, message="no checkpoint of this run")]
    for step, (source, resharded_from) in enumerate(restores, start=1):
        rows += [Measurement(step * 4 - 1, T + step, {"loss": 0.5}),
                 Restore(step * 4, T + step + 0.5, source=source, restore_s=0.2,
                         resharded_from=resharded_from)]
    return rows


def test_a_run_counts_its_restores_of_a_checkpoint_and_knows_when_it_stopped_being_bitwise():
    trials = {"a": {"deterministic": True}, "b": {"deterministic": True},
              "c": {"deterministic": True}, "d": {"deterministic": False}, "e": {}}
    rows = {"a": _rows(),                                       # ran through
            "b": _rows(("step-000004", None), ("step-000008", None)),
            "c": _rows(("step-000004", None), ("step-000008", 2), ("step-000012", None)),
            "d": _rows(("step-000004", None)),
            # "e" has no rows: it never logged (an older trial.json without the key)
            }
    resumes = run_resumes(trials, rows)
    assert resumes["a"] == RunResumes("a", resumed=0, deterministic=True)
    assert resumes["b"] == RunResumes("b", resumed=2, deterministic=True)
    assert resumes["c"] == RunResumes("c", resumed=3, deterministic=True,
                                      reshards=(Reshard("step-000008", 2),))
    assert resumes["e"] == RunResumes("e", resumed=0, deterministic=True)
    assert [r.bitwise for r in resumes.values()] == [True, True, False, False, True]
    assert {k: r.summary() for k, r in resumes.items()} == {
        "a": "none",
        "b": "2, bitwise",
        "c": "3, resharded from 2 processes at step-000008: not bitwise from there",
        "d": "1, not bitwise (deterministic = false: the pilot compares resumed losses within "
             "a relative 0.001)",
        "e": "none"}
    assert RunResumes("f", resumed=0, deterministic=False).summary().startswith(
        "none, not bitwise (deterministic = false")
    assert RunResumes("g", 1, True, (Reshard("step-000002", 1),)).summary() == (
        "1, resharded from 1 process at step-000002: not bitwise from there")
    assert resumes["c"].to_json() == {
        "resumed": 3, "deterministic": True, "bitwise": False,
        "reshards": [{"checkpoint": "step-000008", "saved_by": 2}]}


def test_plan_vs_execution_lists_the_runs_that_resumed_or_are_not_bitwise(tmp_path):
    _, ledger = make_campaign(tmp_path, stopped=("variant",), publish=False)
    resumes = {CONTROL: RunResumes(CONTROL, resumed=0, deterministic=True),
               VARIANT: RunResumes(VARIANT, resumed=1, deterministic=True,
                                   reshards=(Reshard("step-000004", 2),))}
    record = plan_vs_execution(ledger, resumes=resumes)
    assert record["resumes"] == [
        {"name": "control", "run_id": CONTROL, "summary": "none", "resumed": 0,
         "deterministic": True, "bitwise": True, "reshards": []},
        {"name": "variant", "run_id": VARIANT,
         "summary": "1, resharded from 2 processes at step-000004: not bitwise from there",
         "resumed": 1, "deterministic": True, "bitwise": False,
         "reshards": [{"checkpoint": "step-000004", "saved_by": 2}]}]
    markdown = plan_vs_execution_markdown(record)
    assert markdown.endswith(
        "## Resumes\n\nRuns that resumed from a checkpoint or that do not repeat bit for bit; "
        "every other run ran through in one execution.\n\n| run | id | resumes |\n|---|---|---|\n"
        f"| variant | `{VARIANT}` | 1, resharded from 2 processes at step-000004: not bitwise "
        "from there |\n")
    # no run resumed and every one is bitwise: no section
    plain = plan_vs_execution(ledger, resumes={CONTROL: resumes[CONTROL]})
    assert "## Resumes" not in plan_vs_execution_markdown(plain)
    assert plan_vs_execution(ledger)["resumes"] == []


def test_the_readme_gives_each_runs_resumes():
    class Product:
        def __init__(self, name: str, run_id: str) -> None:
            self.name, self.run_id, self.status = name, run_id, "finished"
            self.accepted, self.reasons = True, []

    text = render_readme({"campaign": "line", "order_number": None,
                          "conclusion": {"question": "Lower error?", "verdict": "No."},
                          "products": [Product("control", "c-1"), Product("variant", "v-1")],
                          "artifacts": [], "resumes": {"c-1": "2, bitwise"}})
    assert "| run | id | status | goodput | resumes | accepted | why not |" in text
    assert "| control | `c-1` | finished | – | 2, bitwise | yes | – |" in text
    assert "| variant | `v-1` | finished | – | – | yes | – |" in text
