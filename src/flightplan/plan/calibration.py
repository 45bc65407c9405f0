"""Calibration: plan a campaign from what an earlier one measured, and say what is left
uncertain.

``flightplan close`` writes ``results/calibration.json`` (:func:`calibration_record`): per
run, what it was (task and code version, params, ``[base_model]``, corpus files and view,
the base model's exact revision) and what it measured (observed duration from plan versus
execution; load, steps, seconds per step and per token, evaluations, checkpoint save
stall, persist, restore and transfer, from its measurement rows: :func:`run_figures`),
the stages' planned and observed durations, and the pilot's figures. ``flightplan plan
SPEC --from RESULTS_DIR`` (or ``[calibrate] from``) reads it back
(:meth:`Calibration.from_json`; the command layer reads the files and refuses a directory
that does not verify) and :func:`calibrate` takes each figure in place of the campaign
file's guess where it applies:

- **measured**: a run whose task (and code version), ``[base_model]``, corpus (files,
  columns, limits), params and offer equal a run of the earlier campaign takes that run's
  observed duration; a person-only stage takes the observed duration of the stage of the
  same name; a GPU stage the same on the same offer (the data check also needs the same
  corpus, the pilot the same control); a comparison whose two runs match two runs of the
  earlier campaign (offer aside: predictions do not depend on the GPU) takes the model of
  paired outcomes built from their predictions
  (:func:`flightplan.plan.power.model_from_predictions`), so its resolution comes from the
  measured disagreement.
- **scaled**: a run that differs from a measured one only in :data:`SCALED_PARAMS` or in
  the corpus limits (same task, base model, corpus files and columns, offer, every other
  param) is that run's measured time split in parts, each scaled by the work it does
  (time per example and per token kept; :func:`scale_run`)::

      load'  = load  · (n'_train + n'_test) / (n_train + n_test) · ℓ
      train' = train · n'_train / n_train · e'/e · ℓ        (train = Σ step times + Σ save
                                                            stalls; with the run's ``steps``
                                                            given: · s'/s · B'/B instead of
                                                            the examples and epochs)
      eval'  = eval  · n'_test / n_test · e'/e · ℓ          (the built-in task evaluates once
                                                            per epoch)
      other' = other = observed − load − train − eval       (writing outputs, start-up)

  with e the epochs, B the batch size (tokens per step ∝ B, steps ∝ 1/B: the train time of
  a fixed set of examples does not depend on it) and ℓ the tokens per input: between the
  measured ones and L'/L of them when max_length goes from L to L' (as many inputs as were
  cut at L grow up to L'; none, if none was longer than L), the midpoint as the estimate
  and the two bounds as its range. A data check on other corpus limits scales with the
  examples (n'_train + n'_test)/(n_train + n_test).
- **guess**: everything else keeps the campaign file's figure, and the plan says why
  (another offer: no rule relates two offers' speeds; a param no rule scales, e.g. a
  LoRA rank; another task, code version, base model or corpus; nothing measured).

Ranges, and what an estimate can move
-------------------------------------
Every estimate has a value and a range [low, high]:

- a guess: [v / :data:`GUESS_FACTOR`, v · :data:`GUESS_FACTOR`] (a disagreement's high end
  capped at 1);
- scaled: the bounds of ℓ, widened by ± :data:`SCALED_SPREAD` for what the linear rules
  leave out (per-step overhead, rounding up to whole batches);
- measured: a duration is taken as it was measured once, so its range is the value (the
  spread between repeats is not known from one campaign and is not made up); a measured
  disagreement d on n paired test examples has the binomial interval
  d ± 1.96 · √(d(1 − d)/n), a measured sd s of per-example differences
  s · (1 ± 1.96/√(2(n − 1))) (the normal approximation of an sd's sampling spread).

**Hours it can move** (:func:`uncertainties`): the end-to-end schedule's makespan with the
estimate at the high end of its range minus the makespan with it at the low end, every
other estimate at its value, each stage kept on the flight, GPUs and person line and in
the order the plan gave it (the plan's sequence re-timed: :func:`retimed_makespan`;
re-solving instead could reorder the stages, and a list schedule can get shorter when a
stage gets longer, Graham 1969, so the difference would not be the estimate's alone). A
disagreement moves no hours; it moves the resolution (docs/decisions.md).

The **uncertainties** are the estimates nothing has measured in this configuration (the
guesses and the scaled ones), largest first; the measured ones are listed apart.

Pure functions over typed values (rows, dicts read from JSON, the spec): the command layer
reads the files (:mod:`flightplan.plan.commands`), ``close`` writes them.

Usage::

    record = calibration_record(spec, runs=..., trials=..., rows=..., ...)  # close
    calibration = Calibration.from_json(json.loads(text), source="results/calibration.json")
    calibrated = calibrate(spec, calibration, code_versions={"control": "3", ...},
                           predictions={run_id: Predictions, ...})
    result = plan_campaign(spec, durations=calibrated.durations)
    uncertain, measured = uncertainties(result.schedule, calibrated.estimates)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from flightplan.errors import CheckFailed
from flightplan.ids import corpus_view
from flightplan.metrics import Predictions, parse_metric
from flightplan.plan.power import DEFAULT_DISAGREEMENT, PairedModel, model_from_predictions
from flightplan.plan.problem import Problem, Slot
from flightplan.plan.schedule import Schedule
from flightplan.rows import CheckpointSaved, Evaluation, Measurement, Restore, Row
from flightplan.spec import CampaignSpec, Run, Stage
from flightplan.tasks.estimate import step_times
from flightplan.transfer_time import TransferTally
from flightplan.units import SECONDS_PER_HOUR, Duration, hours

__all__ = [
    "FORMAT", "FILE_NAME", "GUESS_FACTOR", "SCALED_SPREAD", "SCALED_PARAMS", "RUNNER_STAGES",
    "RunFigures", "run_figures", "MeasuredRun", "MeasuredStage", "Calibration",
    "calibration_record", "Estimate", "Calibrated", "calibrate", "scale_run",
    "retimed_makespan", "Uncertainty", "uncertainties",
]

FORMAT = "flightplan-calibration/1"
"""``format`` of ``calibration.json``."""
FILE_NAME = "calibration.json"
"""Its name inside ``results/``."""
GUESS_FACTOR = 3.0
"""A guess is taken to lie within this factor of the truth either way (a named
assumption: the main job's campaign file guessed its runs within about a factor of 2 of
what they took, its two shortest stages 4 to 8 times too long)."""
SCALED_SPREAD = 0.2
"""A scaled figure's range is widened by this share either way, for what the linear rules
leave out (per-step overhead, rounding up to whole batches, evaluations not one per
epoch)."""
SCALED_PARAMS = ("epochs", "max_length", "batch_size")
"""The params the scaling rules read, by the names the built-in task gives them
(docs/tasks.md): passes over the training set, tokens per input at most, inputs per step.
A run that differs from a measured one in any other param is left a guess."""
RUNNER_STAGES = ("data-check", "pilot")
"""The stages ``flightplan run`` executes itself (:data:`flightplan.run.stages.RUNNER_STAGES`):
the data check reads the corpus, the pilot is the control's short run."""
_Z = 1.959963984540054          # Φ⁻¹(0.975): the binomial interval of a measured share


# ---------------------------------------------------------------- what one run measured

@dataclass(frozen=True)
class RunFigures:
    """What one run's measurement rows say about its time (seconds, counts, tokens).

    Attributes:
        steps: optimizer step rows. train_s: Σ their times, warm-up included; step_s: the
            steady step time, first step of each process left out (both
            :func:`flightplan.tasks.estimate.step_times`, the reading the pilot's
            re-estimate uses too: ``step_s`` where logged, else the gap since the row
            before).
        tokens_per_step: mean ``tokens`` of the step rows (None: not logged).
        load_s: ``load_s`` where logged, else from the first row to the first step row.
        evaluations: evaluation rows. eval_s: Σ their ``eval_s`` (else the gap before
            each). eval_examples: ``n_test`` of the last one (None: not logged).
        checkpoints: saves. save_stall_s: Σ the loop's stall per save (C). persist_s:
            mean time until durable (D).
        restore_s: mean restore time of a process that resumed from a checkpoint (R;
            None: the run never resumed).
        transfers, transfer_s: checkpoints brought home from a flight and Σ seconds from
            durable there to durable at home (X; 0 at home).
    """

    steps: int
    train_s: float
    step_s: float
    tokens_per_step: float | None
    load_s: float
    evaluations: int
    eval_s: float
    eval_examples: int | None
    checkpoints: int
    save_stall_s: float
    persist_s: float
    restore_s: float | None
    transfers: int
    transfer_s: float

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON object (keys as the attribute names)."""
        return asdict(self)


def run_figures(rows: Sequence[Row]) -> RunFigures:
    """The time figures of one run from its measurement rows (:class:`RunFigures`); the
    rows of every process of a resumed run count."""
    timed = sorted(rows, key=lambda r: r.time)
    first = timed[0].time if timed else 0.0
    steps = step_times(timed, first)
    tokens = [v for r in steps.rows if (v := r.number("tokens")) is not None]
    load_s = next((v for r in timed if isinstance(r, Measurement)
                   and (v := r.number("load_s")) is not None), None)
    eval_s, evaluations, eval_examples = 0.0, 0, None
    last = first
    for row in timed:
        gap = row.time - last
        last = row.time
        if isinstance(row, Evaluation):
            evaluations += 1
            logged = row.number("eval_s")
            eval_s += gap if logged is None else logged
            count = row.number("n_test")
            eval_examples = int(count) if count is not None and math.isfinite(count) \
                else eval_examples
    saves = [r for r in rows if isinstance(r, CheckpointSaved)]
    restores = [r.restore_s for r in rows
                if isinstance(r, Restore) and r.source and r.restore_s is not None]
    tally = TransferTally.from_rows(rows)
    if load_s is None:
        load_s = (steps.rows[0].time - first) if steps.rows else 0.0
    return RunFigures(
        steps=len(steps.rows), train_s=steps.train_s, step_s=steps.step_s,
        tokens_per_step=sum(tokens) / len(tokens) if tokens else None,
        load_s=float(load_s), evaluations=evaluations, eval_s=eval_s,
        eval_examples=eval_examples, checkpoints=len(saves),
        save_stall_s=sum(r.stall_s for r in saves),
        persist_s=sum(r.persist_s for r in saves) / len(saves) if saves else 0.0,
        restore_s=sum(restores) / len(restores) if restores else None,
        transfers=tally.checkpoints, transfer_s=tally.moving_s + tally.wait_s)


# ---------------------------------------------------------------- calibration.json

@dataclass(frozen=True)
class MeasuredRun:
    """One run of the earlier campaign, as ``calibration.json`` holds it.

    Attributes:
        name, run_id, reference, tier, status: the run (``status`` as the ledger has it).
        task, code_version: the task as written and what stood for its code.
        params: the run's params. base_model: its ``[base_model]`` table (None: none).
        base_revision: the exact base model revision its artifact names (None: none).
        corpus_view: the ``[corpus]`` keys that change what a run reads
            (:func:`flightplan.ids.corpus_view`).
        observed_s: its observed duration (plan versus execution, every execution; None:
            never timed). executions: how many processes.
        predictions: its predictions file, relative to ``results/`` (None: none).
        figures: what its rows measured (None: no rows).
        seed_sd: the standard deviation of its decision metric over its replicates (None:
            not measured, e.g. one seed, or a record written before replicates).
    """

    name: str
    run_id: str
    reference: str | None
    tier: str
    status: str
    task: str
    code_version: str
    params: Mapping[str, Any]
    base_model: Mapping[str, Any] | None
    base_revision: Any
    corpus_view: Mapping[str, Any]
    observed_s: float | None
    executions: int
    predictions: str | None
    figures: RunFigures | None
    seed_sd: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``runs[]`` entry of ``calibration.json`` (hours for the observed duration)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("observed_s", "figures")}
        out["observed_hours"] = _hours(self.observed_s)
        out["figures"] = None if self.figures is None else self.figures.to_json()
        return out


@dataclass(frozen=True)
class MeasuredStage:
    """One stage of the earlier campaign: its ``uses``, planned and observed durations
    (seconds; observed None: never timed) and how many times it was executed."""

    name: str
    uses: tuple[str, ...]
    planned_s: float | None
    observed_s: float | None
    executions: int

    def to_json(self) -> dict[str, Any]:
        """The ``stages[]`` entry of ``calibration.json`` (hours)."""
        return {"name": self.name, "uses": list(self.uses),
                "planned_hours": _hours(self.planned_s), "observed_hours": _hours(self.observed_s),
                "executions": self.executions}


@dataclass(frozen=True)
class Calibration:
    """``results/calibration.json``: what the next campaign needs of this one.

    Attributes:
        campaign: the campaign's name. offer: the rental's offer it ran on.
        corpus_sha256: file → sha256 (None: no corpus).
        train_rows, test_rows: rows of each split's files before the limits (data check;
            None: unknown). n_train, n_test: after them (None: unknown).
        control: the control run's name. pilot: the pilot's figures as the decision
            point read them (:class:`flightplan.tasks.estimate.PilotFigures`; None: none).
        runs, stages: what each measured.
    """

    campaign: str
    offer: str
    corpus_sha256: Mapping[str, str] | None
    train_rows: int | None
    test_rows: int | None
    n_train: int | None
    n_test: int | None
    control: str | None
    pilot: Mapping[str, Any] | None
    runs: tuple[MeasuredRun, ...]
    stages: tuple[MeasuredStage, ...]

    def to_json(self) -> dict[str, Any]:
        """The ``calibration.json`` object (docs/internals.md)."""
        return {"format": FORMAT, "campaign": self.campaign, "offer": self.offer,
                "corpus": {"sha256": None if self.corpus_sha256 is None
                           else dict(self.corpus_sha256),
                           "train_rows": self.train_rows, "test_rows": self.test_rows,
                           "n_train": self.n_train, "n_test": self.n_test},
                "control": self.control, "pilot": None if self.pilot is None else dict(self.pilot),
                "runs": [r.to_json() for r in self.runs],
                "stages": [s.to_json() for s in self.stages]}

    @classmethod
    def from_json(cls, data: Any, *, source: str) -> "Calibration":
        """Read a ``calibration.json`` object back.

        Raises:
            ValueError: not this format, or a key missing or of the wrong type (names
                ``source`` and the key).
        """
        try:
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT!r}")
            corpus = data["corpus"]
            runs = tuple(_measured_run(r) for r in data["runs"])
            stages = tuple(MeasuredStage(
                name=str(s["name"]), uses=tuple(str(u) for u in s["uses"]),
                planned_s=_seconds(s["planned_hours"]), observed_s=_seconds(s["observed_hours"]),
                executions=int(s["executions"])) for s in data["stages"])
            return cls(campaign=str(data["campaign"]), offer=str(data["offer"]),
                       corpus_sha256=corpus["sha256"], train_rows=_count(corpus["train_rows"]),
                       test_rows=_count(corpus["test_rows"]), n_train=_count(corpus["n_train"]),
                       n_test=_count(corpus["n_test"]), control=data["control"],
                       pilot=data["pilot"], runs=runs, stages=stages)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{source}: not a calibration written by flightplan close "
                             f"({what})") from None


def _hours(seconds: float | None) -> float | None:
    """Seconds as hours with 9 places (3.6 µs; plan versus execution keeps 6), or None."""
    return None if seconds is None else hours(seconds, places=9)


def _seconds(value_h: Any) -> float | None:
    return None if value_h is None else float(value_h) * SECONDS_PER_HOUR


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _measured_run(r: Mapping[str, Any]) -> MeasuredRun:
    figures = r["figures"]
    return MeasuredRun(
        name=str(r["name"]), run_id=str(r["run_id"]), reference=r["reference"],
        tier=str(r["tier"]), status=str(r["status"]), task=str(r["task"]),
        code_version=str(r["code_version"]), params=dict(r["params"]),
        base_model=None if r["base_model"] is None else dict(r["base_model"]),
        base_revision=r["base_revision"], corpus_view=dict(r["corpus_view"]),
        observed_s=_seconds(r["observed_hours"]), executions=int(r["executions"]),
        predictions=r["predictions"],
        figures=None if figures is None else RunFigures(**figures),
        seed_sd=None if r.get("seed_sd") is None else float(r["seed_sd"]))


def calibration_record(spec: CampaignSpec, *, runs: Sequence[Mapping[str, Any]],
                       trials: Mapping[str, Mapping[str, Any]],
                       rows: Mapping[str, Sequence[Row]], revisions: Mapping[str, Any],
                       predictions: Mapping[str, str], plan_vs_execution: Mapping[str, Any],
                       data_check: Mapping[str, Any] | None,
                       seed_sd: Mapping[str, float] | None = None) -> Calibration:
    """What ``close`` writes into ``results/calibration.json``.

    Args:
        spec: the campaign (offer, control, references, stages' ``uses``).
        runs: the ledger's runs the campaign owes (``{run_id, name, tier, status}``).
        trials: run id → its ``trial.json`` as published (``params/<id>.json``): task,
            code_version, params, base_model, corpus. A run without one is left out.
        rows: run id → its measurement rows. revisions: run id → the base revision its
            artifact names. predictions: run id → its predictions file (relative).
        plan_vs_execution: the ``plan_vs_execution.json`` object (observed durations,
            the decision point's pilot figures).
        data_check: ``data_check.json`` (split sizes), or None.
        seed_sd: run name → the standard deviation of its decision metric over its
            replicates (the conclusion's seed spread): every replicate of that run records
            it as ``seed_sd`` (a later campaign matches any one of them).
    """
    observed = {i["name"]: i for i in plan_vs_execution.get("items", [])}
    measured = []
    for run in runs:
        trial = trials.get(run["run_id"])
        if trial is None:
            continue
        item = observed.get(run["name"]) or {}
        run_rows = rows.get(run["run_id"])
        replicate = spec.replicate_named(run["name"])
        of = replicate.run if replicate is not None else None
        measured.append(MeasuredRun(
            name=run["name"], run_id=run["run_id"], reference=of.reference if of else None,
            tier=str(run["tier"]), status=str(run["status"]), task=str(trial.get("task")),
            code_version=str(trial.get("code_version")), params=dict(trial.get("params") or {}),
            base_model=trial.get("base_model"), base_revision=revisions.get(run["run_id"]),
            corpus_view=corpus_view(trial.get("corpus")),
            observed_s=_seconds(item.get("observed_hours")),
            executions=int(item.get("executions") or 0),
            predictions=predictions.get(run["run_id"]),
            figures=run_figures(run_rows) if run_rows else None,
            seed_sd=(seed_sd or {}).get(of.name) if of and replicate and replicate.count > 1
            else None))
    stages = []
    for stage in spec.stages:
        item = observed.get(stage.name) or {}
        stages.append(MeasuredStage(
            name=stage.name, uses=tuple(stage.uses), planned_s=_seconds(item.get("planned_hours")),
            observed_s=_seconds(item.get("observed_hours")),
            executions=int(item.get("executions") or 0)))
    pilots = [d.get("figures", {}).get("pilot") for d in plan_vs_execution.get("decisions", [])
              if d.get("kind") == "pilot"]
    split_rows, splits = _split_rows(data_check)
    return Calibration(
        campaign=spec.campaign.name, offer=spec.rental.offer,
        corpus_sha256=dict(spec.corpus.sha256) if spec.corpus else None,
        train_rows=split_rows.get("train"), test_rows=split_rows.get("test"),
        n_train=splits.get("train"), n_test=splits.get("test"), control=spec.control.name,
        pilot=next((p for p in reversed(pilots) if p), None), runs=tuple(measured),
        stages=tuple(stages))


def _split_rows(data_check: Mapping[str, Any] | None) -> tuple[dict[str, int], dict[str, int]]:
    """(split → rows of its files before the limits, split → rows after them) from the
    data check; a split whose files' rows are unknown is left out."""
    if not data_check:
        return {}, {}
    before: dict[str, int] = {}
    unknown: set[str] = set()
    for entry in (data_check.get("files") or {}).values():
        split, count = entry.get("split"), entry.get("rows")
        if not isinstance(count, int):
            unknown.add(split)
        else:
            before[split] = before.get(split, 0) + count
    after = {name: int(entry["rows"]) for name, entry in (data_check.get("splits") or {}).items()
             if isinstance(entry, dict) and isinstance(entry.get("rows"), int)}
    return {k: v for k, v in before.items() if k not in unknown}, after


# ---------------------------------------------------------------- estimates

@dataclass(frozen=True)
class Estimate:
    """One figure the plan rests on.

    Attributes:
        subject: the stage or run (a duration), or ``"variant − reference"`` (power).
        figure: ``duration`` (hours), ``disagreement`` (share of test examples) or
            ``difference_sd`` (the metric column's units).
        value, low, high: the estimate and its range (module docstring).
        source: ``guess``, ``measured`` or ``scaled``.
        detail: one line: where it came from, or why nothing measured replaced it.
    """

    subject: str
    figure: str
    value: float
    low: float
    high: float
    source: str
    detail: str

    @property
    def unit(self) -> str:
        """``h``, ``share`` or ``metric``."""
        return {"duration": "h", "disagreement": "share"}.get(self.figure, "metric")


@dataclass(frozen=True)
class Calibrated:
    """What :func:`calibrate` gives the plan.

    Attributes:
        durations: stage or run name → the duration that replaces the file's (measured or
            scaled), for :func:`flightplan.plan.campaign_plan.plan_campaign`.
        estimates: every duration and power figure, file order (stages, runs, comparisons).
        models: variant name → the model of paired outcomes measured for its comparison,
            for :func:`flightplan.plan.power.campaign_power`.
        seed_spread: variant name → (sd of the metric over seeds, source) the earlier
            campaign measured over the replicates of the same run (the variant's, else
            its reference's), for :func:`flightplan.plan.power.campaign_power`.
        campaign: the earlier campaign's name (None: nothing to calibrate from).
    """

    durations: Mapping[str, Duration]
    estimates: tuple[Estimate, ...]
    models: Mapping[str, PairedModel] = field(default_factory=dict)
    campaign: str | None = None
    seed_spread: Mapping[str, tuple[float, str]] = field(default_factory=dict)


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested params as dotted keys (``{"adapter": {"rank": 8}}`` → ``{"adapter.rank": 8}``)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def _corpus_identity(view: Mapping[str, Any]) -> dict[str, Any]:
    """The corpus view without its limits: what examples look like, not how many."""
    return {k: v for k, v in view.items() if k not in ("train_limit", "test_limit")}


@dataclass(frozen=True)
class _Candidate:
    """How far a measured run is from a run of the new campaign."""

    measured: MeasuredRun
    differing: tuple[str, ...]       # params that differ (dotted)
    same_view: bool                  # corpus limits equal too


class _Matcher:
    """Matches the new campaign's runs and stages against a calibration."""

    def __init__(self, spec: CampaignSpec, calibration: Calibration,
                 code_versions: Mapping[str, str]) -> None:
        self.spec, self.c, self.code_versions = spec, calibration, code_versions
        self.view = corpus_view(spec.corpus.model_dump(mode="json") if spec.corpus else None)
        self.base = spec.base_model.model_dump(mode="json") if spec.base_model else None
        self.same_offer = spec.rental.offer == calibration.offer
        self.same_files = spec.corpus is not None and calibration.corpus_sha256 is not None \
            and dict(spec.corpus.sha256) == dict(calibration.corpus_sha256)

    def why_not_same_run(self, run: Run, m: MeasuredRun) -> str | None:
        """Why ``m`` is not the same kind of run as ``run`` (params and limits aside)."""
        if m.task != run.task or m.code_version != self.code_versions.get(run.name):
            return f"task {run.task} at code version {self.code_versions.get(run.name)}"
        if (m.base_model or None) != self.base:
            return "its [base_model]"
        if not self.same_files or _corpus_identity(m.corpus_view) != _corpus_identity(self.view):
            return "its corpus (files or columns)"
        return None

    def candidates(self, run: Run) -> tuple[list[_Candidate], str]:
        """Measured runs like ``run`` (same task, code, base model, corpus files and
        columns), fewest differing params first; else ``([], what no run shared)``."""
        found, why = [], ""
        for m in self.c.runs:
            reason = self.why_not_same_run(run, m)
            if reason is not None:
                why = why or reason
                continue
            new, old = _flat(run.params), _flat(m.params)
            differing = tuple(sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k)
                                     or (k in new) != (k in old)))
            found.append(_Candidate(m, differing, dict(m.corpus_view) == dict(self.view)))
        found.sort(key=lambda c: (len(c.differing) + (not c.same_view),))
        return found, why

    def exact(self, run: Run) -> MeasuredRun | None:
        """The measured run with ``run``'s whole configuration (offer aside)."""
        found, _ = self.candidates(run)
        return next((c.measured for c in found if not c.differing and c.same_view), None)

    def examples(self, limit_key: str, split: str) -> int | None:
        """The new campaign's examples of ``split`` (its limit over the split's rows)."""
        total = self.c.train_rows if split == "train" else self.c.test_rows
        limit = self.view.get(limit_key)
        if total is None:
            return None
        return total if limit is None else min(int(limit), total)


def scale_run(m: MeasuredRun, *, n_train: tuple[int, int], n_test: tuple[int, int],
              epochs: tuple[float, float], length: tuple[float, float],
              steps: tuple[int, int] | None = None, batch: tuple[float, float] = (1.0, 1.0)
              ) -> tuple[float, float, float]:
    """A measured run's duration scaled to other work (module docstring's rule).

    Args:
        m: the measured run (its ``observed_s`` and ``figures`` are needed).
        n_train, n_test, epochs, length: (measured, new) training and test examples,
            epochs and max_length.
        steps: (measured, new) optimizer steps when the new run gives its ``steps``
            (then the train time scales with steps · batch instead of examples · epochs).
        batch: (measured, new) batch size.

    Returns:
        ``(value, low, high)`` in seconds: ℓ at the midpoint of [min(1, L'/L),
        max(1, L'/L)], and at its bounds widened by :data:`SCALED_SPREAD`.

    Raises:
        ValueError: the run has no observed duration or no figures.
    """
    if m.observed_s is None or m.figures is None:
        raise ValueError(f"{m.name} has no measured duration or figures")
    f = m.figures
    load, train, evals = f.load_s, f.train_s + f.save_stall_s, f.eval_s
    parts = load + train + evals
    if parts > m.observed_s > 0:            # the logged parts overlap: keep their shares
        load, train, evals = (x * m.observed_s / parts for x in (load, train, evals))
        parts = m.observed_s
    other = max(0.0, m.observed_s - parts)
    ratio = length[1] / length[0]
    bounds = (min(1.0, ratio), max(1.0, ratio))
    examples = (n_train[1] + n_test[1]) / (n_train[0] + n_test[0])
    train_factor = (steps[1] / steps[0] * batch[1] / batch[0] if steps
                    else n_train[1] / n_train[0] * epochs[1] / epochs[0])
    eval_factor = n_test[1] / n_test[0] * epochs[1] / epochs[0]

    def total(tokens: float) -> float:
        return (load * examples + train * train_factor + evals * eval_factor) * tokens + other

    return (total(sum(bounds) / 2), total(bounds[0]) * (1 - SCALED_SPREAD),
            total(bounds[1]) * (1 + SCALED_SPREAD))


def _number(params: Mapping[str, Any], key: str) -> float | None:
    value = params.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _guess(subject: str, seconds: float, where: str, why: str) -> Estimate:
    value_h = seconds / SECONDS_PER_HOUR
    return Estimate(subject, "duration", value_h, value_h / GUESS_FACTOR, value_h * GUESS_FACTOR,
                    "guess", f"campaign file ({where})" + (f"; {why}" if why else ""))


def _measured(subject: str, seconds: float, detail: str) -> Estimate:
    value_h = seconds / SECONDS_PER_HOUR
    return Estimate(subject, "duration", value_h, value_h, value_h, "measured", detail)


def _run_estimate(matcher: _Matcher, index: int, run: Run) -> Estimate:
    """The duration estimate of one run (module docstring)."""
    c, where = matcher.c, f"run[{index}].duration"
    file_s = float(run.duration.seconds)
    found, why = matcher.candidates(run)
    usable = [x for x in found if x.measured.observed_s is not None]
    if not found:
        return _guess(run.name, file_s, where, f"no run of campaign {c.campaign} shares "
                                                f"{why or 'its task'}")
    usable = [x for x in usable if x.measured.status == "finished"]
    if not usable:
        return _guess(run.name, file_s, where, f"campaign {c.campaign} finished no run like "
                                                f"it (one stopped by a rule is not timed whole)")
    if not matcher.same_offer:
        return _guess(run.name, file_s, where, f"measured on {c.offer}, planned on "
                                                f"{matcher.spec.rental.offer}: no rule relates "
                                                f"two offers' speeds")
    best = usable[0]
    m = best.measured
    if not best.differing and best.same_view:
        return _measured(run.name, m.observed_s or 0.0,
                         f"campaign {c.campaign}, run {m.name}, {_executions(m.executions)}")
    unscaled = [k for k in best.differing if k not in SCALED_PARAMS]
    if unscaled:
        return _guess(run.name, file_s, where, f"the nearest run measured in campaign "
                                                f"{c.campaign}, {m.name}, differs in "
                                                f"{', '.join(unscaled)}, which no rule scales")
    if m.figures is None:
        return _guess(run.name, file_s, where, f"{m.name} of campaign {c.campaign} left no "
                                                f"measurement rows to scale")
    notes = []
    pairs: dict[str, tuple[float, float]] = {}
    for key in SCALED_PARAMS:
        old, new = _number(m.params, key), _number(run.params, key)
        if key not in best.differing:
            pairs[key] = (1.0, 1.0)
        elif old is None or new is None or old <= 0 or new <= 0:
            return _guess(run.name, file_s, where, f"{key} of {m.name} or {run.name} is not a "
                                                    f"positive number, which the rule needs")
        else:
            pairs[key] = (old, new)
    n_train = (c.n_train, matcher.examples("train_limit", "train"))
    n_test = (c.n_test, matcher.examples("test_limit", "test"))
    if not best.same_view:
        if None in n_train or None in n_test or not all(n_train) or not all(n_test):
            return _guess(run.name, file_s, where, f"campaign {c.campaign}'s split sizes are "
                                                    f"unknown, so other corpus limits cannot "
                                                    f"be scaled")
        notes += [f"{label} examples {a}→{b}" for label, (a, b) in
                  (("training", n_train), ("test", n_test)) if a != b]
    else:
        n_train, n_test = (1, 1), (1, 1)
    steps = None
    if run.steps is not None and m.figures.steps:
        steps = (m.figures.steps, run.steps)
        notes.append(f"steps {m.figures.steps}→{run.steps}")
    for key in SCALED_PARAMS:
        old, new = pairs[key]
        if old != new:
            text = f"{old:g}→{new:g}"
            if key == "max_length":
                low, high = sorted((1.0, new / old))
                text += f" (tokens per input ×{low:.2g}–{high:.2g})"
            notes.append(f"{key} {text}")
    value, low, high = scale_run(m, n_train=(int(n_train[0] or 1), int(n_train[1] or 1)),
                                 n_test=(int(n_test[0] or 1), int(n_test[1] or 1)),
                                 epochs=pairs["epochs"], length=pairs["max_length"],
                                 steps=steps, batch=pairs["batch_size"])
    return Estimate(run.name, "duration", value / SECONDS_PER_HOUR, low / SECONDS_PER_HOUR,
                    high / SECONDS_PER_HOUR, "scaled",
                    f"from {m.name} of campaign {c.campaign} "
                    f"({m.observed_s / SECONDS_PER_HOUR if m.observed_s else 0:.4g} h): "
                    + "; ".join(notes or ["the same work"]))


def _stage_estimate(matcher: _Matcher | None, index: int, stage: Stage) -> Estimate:
    """The duration estimate of one stage (module docstring)."""
    where = f"stage[{index}].duration"
    file_s = float(stage.duration.seconds)
    if matcher is None:
        return _guess(stage.name, file_s, where, "")
    c = matcher.c
    m = next((s for s in c.stages if s.name == stage.name), None)
    if m is None or m.observed_s is None:
        return _guess(stage.name, file_s, where,
                      f"campaign {c.campaign} " + ("has no stage of that name" if m is None
                                                   else "did not time it (flightplan stage "
                                                        "start/done)"))
    if "gpu" in stage.uses and not matcher.same_offer:
        return _guess(stage.name, file_s, where, f"measured on {c.offer}, planned on "
                                                  f"{matcher.spec.rental.offer}")
    if stage.name == "pilot":
        control = matcher.spec.control
        measured = matcher.exact(control)
        if measured is None or measured.name != c.control:
            return _guess(stage.name, file_s, where, f"the pilot runs the control, and "
                                                      f"{control.name} is not the configuration "
                                                      f"of campaign {c.campaign}'s control "
                                                      f"{c.control} (params or corpus limits)")
    if stage.name == "data-check":
        if not matcher.same_files or matcher.spec.corpus is None:
            return _guess(stage.name, file_s, where, f"another corpus than campaign "
                                                      f"{c.campaign}'s")
        n = (matcher.examples("train_limit", "train"), matcher.examples("test_limit", "test"))
        if (c.n_train, c.n_test) != n:
            if None in n or not c.n_train or not c.n_test:
                return _guess(stage.name, file_s, where, "other corpus limits, and the split "
                                                          "sizes are unknown")
            scale = (int(n[0] or 0) + int(n[1] or 0)) / (c.n_train + c.n_test)
            value_h = m.observed_s * scale / SECONDS_PER_HOUR
            return Estimate(stage.name, "duration", value_h, value_h * (1 - SCALED_SPREAD),
                            value_h * (1 + SCALED_SPREAD), "scaled",
                            f"from the data check of campaign {c.campaign}, by its examples "
                            f"({c.n_train}+{c.n_test}→{n[0]}+{n[1]})")
    return _measured(stage.name, m.observed_s,
                     f"campaign {c.campaign}, {_executions(m.executions)}")


def _executions(count: int) -> str:
    return f"{count} execution{'s' if count != 1 else ''}"


def _power_estimates(spec: CampaignSpec, matcher: _Matcher | None,
                     predictions: Mapping[str, Predictions]
                     ) -> tuple[list[Estimate], dict[str, PairedModel]]:
    """Each comparison's disagreement (or difference sd): measured from the paired
    predictions of the two matching runs, else the file's or the default guess."""
    section = spec.campaign
    column = parse_metric(section.metric).kind == "column"
    estimates: list[Estimate] = []
    models: dict[str, PairedModel] = {}
    for run in spec.runs:
        if run.reference is None:
            continue
        subject = f"{run.name} − {run.reference}"
        model, note = _measured_model(spec, matcher, run, predictions)
        if model is not None:
            models[run.name] = model
            inputs = model.inputs
            n = int(inputs.get("examples") or 0)
            if column:
                sd = float(inputs["difference_sd"])
                spread = _Z / math.sqrt(2 * (n - 1)) if n > 1 else 0.0
                estimates.append(Estimate(subject, "difference_sd", sd, sd * max(0.0, 1 - spread),
                                          sd * (1 + spread), "measured",
                                          f"{note}, {n} paired test examples"))
            else:
                d = float(inputs["disagreement"])
                half = _Z * math.sqrt(d * (1 - d) / n) if n else 0.0
                estimates.append(Estimate(subject, "disagreement", d, max(0.0, d - half),
                                          min(1.0, d + half), "measured",
                                          f"{note}, {n} paired test examples"))
            continue
        if column:
            if section.expected_difference_sd is None:
                continue
            v = section.expected_difference_sd
            estimates.append(Estimate(subject, "difference_sd", v, v / GUESS_FACTOR,
                                      v * GUESS_FACTOR, "guess",
                                      "campaign file ([campaign] expected_difference_sd)"
                                      + (f"; {note}" if note else "")))
            continue
        given = section.expected_disagreement
        v = DEFAULT_DISAGREEMENT if given is None else given
        where = ("default (set [campaign] expected_disagreement)" if given is None
                 else "campaign file ([campaign] expected_disagreement)")
        estimates.append(Estimate(subject, "disagreement", v, v / GUESS_FACTOR,
                                  min(1.0, v * GUESS_FACTOR), "guess",
                                  where + (f"; {note}" if note else "")))
    return estimates, models


def _measured_model(spec: CampaignSpec, matcher: _Matcher | None, run: Run,
                    predictions: Mapping[str, Predictions]) -> tuple[PairedModel | None, str]:
    """The model of paired outcomes of ``run`` and its reference from the predictions of
    the two runs of the earlier campaign with their configurations, and where it came from;
    or (None, why not)."""
    if matcher is None:
        return None, ""
    c = matcher.c
    reference = spec.item(run.reference or "")
    assert isinstance(reference, Run)
    pair = []
    for wanted in (reference, run):
        found, _ = matcher.candidates(wanted)
        same = next((x.measured for x in found if not x.differing), None)
        if same is None or same.run_id not in predictions:
            return None, (f"campaign {c.campaign} has no predictions of a run like "
                          f"{wanted.name}")
        pair.append(same)
    if pair[0].run_id == pair[1].run_id:
        return None, f"{run.name} and {run.reference} match the same run of {c.campaign}"
    try:
        model = model_from_predictions(
            spec.campaign.metric, predictions[pair[0].run_id], predictions[pair[1].run_id],
            goal=spec.campaign.goal,
            source=f"measured in campaign {c.campaign} ({pair[1].name} vs {pair[0].name})")
    except CheckFailed as exc:
        return None, f"the predictions of campaign {c.campaign} do not give it ({exc})"
    return model, f"campaign {c.campaign}, predictions of {pair[1].name} vs {pair[0].name}"


def calibrate(spec: CampaignSpec, calibration: Calibration | None, *,
              code_versions: Mapping[str, str] | None = None,
              predictions: Mapping[str, Predictions] | None = None) -> Calibrated:
    """Every estimate of ``spec``, from ``calibration`` where it applies (module docstring).

    Args:
        spec: the new campaign.
        calibration: the earlier campaign's record, or None (every estimate a guess).
        code_versions: run name → its task's code version now
            (:attr:`flightplan.tasks.loader.TaskSource.code_version`).
        predictions: run id of the earlier campaign → its predictions.

    Returns:
        The durations that replace the file's, every estimate, the measured power models.
    """
    matcher = None if calibration is None else _Matcher(spec, calibration, code_versions or {})
    estimates = [_stage_estimate(matcher, i, s) for i, s in enumerate(spec.stages)]
    for index, run in enumerate(spec.runs):
        estimates.append(_guess(run.name, float(run.duration.seconds), f"run[{index}].duration",
                                "") if matcher is None else _run_estimate(matcher, index, run))
    power, models = _power_estimates(spec, matcher, predictions or {})
    durations = {e.subject: Duration(max(1, round(e.value * SECONDS_PER_HOUR))) for e in estimates
                 if e.source != "guess"}
    return Calibrated(durations, tuple(estimates + power), models,
                      None if calibration is None else calibration.campaign,
                      {} if matcher is None else _seed_spread(spec, matcher))


def _seed_spread(spec: CampaignSpec, matcher: "_Matcher") -> dict[str, tuple[float, str]]:
    """Variant → the seed spread the earlier campaign measured for the same run (its
    whole configuration: :meth:`_Matcher.exact`), the variant's, else its reference's."""
    out = {}
    for run in spec.runs:
        if run.reference is None:
            continue
        for side in [run] + [r for r in spec.runs if r.name == run.reference]:
            found = matcher.exact(side)
            if found is not None and found.seed_sd is not None:
                out[run.name] = (found.seed_sd, f"measured in campaign {matcher.c.campaign} "
                                                f"({found.name} over its replicates)")
                break
    return out


# ---------------------------------------------------------------- hours it can move

class _Sequence:
    """A plan's sequence: each placed stage with the stages that must end before it starts
    (its ``after``, its flight's set-up copies, the one before it on each of its GPUs and
    on its person line) and the groups of which one must (a person-only stage after an
    ``each_flight`` one waits for one of its copies), in planned order."""

    def __init__(self, plan: Schedule) -> None:
        slots = sorted(plan.slots, key=lambda s: (s.start_s, s.end_s, s.task.name))
        tasks = {s.task.name: s.task for s in slots}
        problem = Problem(list(tasks.values()), plan.flights, plan.gpus_per_flight, plan.people)
        single: dict[str, int] = {}
        copies: dict[str, dict[int | None, int]] = {}
        for i, slot in enumerate(slots):
            if slot.task.each_flight:
                copies.setdefault(slot.task.name, {})[slot.flight] = i
            else:
                single[slot.task.name] = i
        last_on_gpu: dict[tuple[int | None, int], int] = {}
        person_lines: list[tuple[int, int]] = []      # (planned end, slot index) per person
        self.slots = slots
        self.before: list[list[int]] = []
        self.choose_one: list[list[list[int]]] = []
        for i, slot in enumerate(slots):
            before, choose_one = _predecessors(slot, problem, single, copies)
            for gpu in slot.gpu_ids:
                if (slot.flight, gpu) in last_on_gpu:
                    before.append(last_on_gpu[(slot.flight, gpu)])
                last_on_gpu[(slot.flight, gpu)] = i
            if slot.task.person:
                free = [k for k, (end, _) in enumerate(person_lines) if end <= slot.start_s]
                if free:
                    k = max(free, key=lambda j: person_lines[j][0])
                    before.append(person_lines[k][1])
                    person_lines[k] = (slot.end_s, i)
                else:
                    person_lines.append((slot.end_s, i))
            self.before.append(before)
            self.choose_one.append(choose_one)

    def makespan(self, seconds: Mapping[str, int]) -> int:
        """The makespan with the durations in ``seconds`` (the others as planned)."""
        ends: list[int] = []
        for slot, before, choose_one in zip(self.slots, self.before, self.choose_one):
            start = max([ends[j] for j in before]
                        + [min(ends[j] for j in group) for group in choose_one] + [0])
            ends.append(start + seconds.get(slot.task.name, slot.end_s - slot.start_s))
        return max(ends, default=0)


def retimed_makespan(plan: Schedule, seconds: Mapping[str, int]) -> int:
    """The makespan of ``plan`` with the durations in ``seconds`` (name → s; the others as
    planned), every stage kept on its flight, GPUs and person line and in its planned order
    on each, each starting as soon as what precedes it there and its ``after`` have ended
    (a longest path through the plan's sequence).

    Raises:
        KeyError: a stage's ``after`` names a stage the plan did not place.
    """
    return _Sequence(plan).makespan(seconds)


def _predecessors(slot: Slot, problem: Problem, single: Mapping[str, int],
                  copies: Mapping[str, Mapping[int | None, int]]
                  ) -> tuple[list[int], list[list[int]]]:
    """The slots that must end before ``slot`` starts, and groups of which one must."""
    before: list[int] = []
    choose_one: list[list[int]] = []
    for dep in slot.task.after:
        if dep in single:
            before.append(single[dep])
        elif slot.flight is None:
            choose_one.append(list(copies[dep].values()))
    if slot.flight is not None:
        before += [copies[s][slot.flight] for s in problem.setups[slot.task.name]
                   if slot.flight in copies.get(s, {})]
    return before, choose_one


@dataclass(frozen=True)
class Uncertainty:
    """An estimate and the hours of the end-to-end schedule it can move (0 for a power
    figure, which moves the resolution instead)."""

    estimate: Estimate
    moves_hours: float

    def to_json(self) -> dict[str, Any]:
        """One entry of ``plan --json``'s ``uncertainties`` or ``measured``: ``{subject,
        figure, unit, value, low, high, source, detail, moves_hours}``."""
        e = self.estimate
        return {"subject": e.subject, "figure": e.figure, "unit": e.unit,
                "value": round(e.value, 6), "low": round(e.low, 6), "high": round(e.high, 6),
                "source": e.source, "detail": e.detail, "moves_hours": round(self.moves_hours, 6)}


def uncertainties(plan: Schedule, estimates: Sequence[Estimate]
                  ) -> tuple[tuple[Uncertainty, ...], tuple[Uncertainty, ...]]:
    """The hours each estimate can move (module docstring), split in two.

    Args:
        plan: the schedule planned with the estimates' values (and any ``--extend``, which
            stays added at both ends of a range).
        estimates: :attr:`Calibrated.estimates`.

    Returns:
        ``(uncertainties, measured)``: the guesses and scaled figures, most hours first
        (then the widest relative range; ties in ``estimates``' order), and the measured
        figures in ``estimates``' order.
    """
    planned = {s.task.name: s.end_s - s.start_s for s in plan.slots}
    sequence = _Sequence(plan)
    out = []
    for e in estimates:
        moves = 0.0
        if e.figure == "duration" and e.subject in planned and e.high > e.low:
            # what the plan added to the estimate (--extend) stays added at both ends
            added = planned[e.subject] - max(1, round(e.value * SECONDS_PER_HOUR))
            low, high = (max(1, added + round(x * SECONDS_PER_HOUR)) for x in (e.low, e.high))
            moves = (sequence.makespan({e.subject: high})
                     - sequence.makespan({e.subject: low})) / SECONDS_PER_HOUR
        out.append(Uncertainty(e, moves))
    measured = tuple(u for u in out if u.estimate.source == "measured")
    out.sort(key=lambda u: (-u.moves_hours,
                            -(u.estimate.high - u.estimate.low) / (u.estimate.value or 1.0)))
    return tuple(u for u in out if u.estimate.source != "measured"), measured
