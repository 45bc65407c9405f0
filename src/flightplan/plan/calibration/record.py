"""calibration.json's layout: the one class that writes and reads it
(:class:`Calibration`) and the measured runs, stages and figures it holds.

``flightplan close`` fills it (:func:`flightplan.plan.calibration.measure.calibration_record`);
``flightplan plan --from`` reads it back (:meth:`Calibration.from_json`). Its keys are
listed in docs/internals.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from flightplan.units import SECONDS_PER_HOUR, hours

__all__ = ["FORMAT", "FILE_NAME", "RunFigures", "MeasuredRun", "MeasuredStage", "Calibration",
           "hours_to_seconds"]

FORMAT = "flightplan-calibration/1"
"""``format`` of ``calibration.json``."""
FILE_NAME = "calibration.json"
"""Its name inside ``results/``."""


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


@dataclass(frozen=True)
class MeasuredStage:
    """One stage of the earlier campaign: its ``uses``, planned and observed durations
    (seconds; observed None: never timed) and how many times it was executed."""

    name: str
    uses: tuple[str, ...]
    planned_s: float | None
    observed_s: float | None
    executions: int


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
                "runs": [self._run_json(r) for r in self.runs],
                "stages": [self._stage_json(s) for s in self.stages]}

    @staticmethod
    def _run_json(run: MeasuredRun) -> dict[str, Any]:
        """The ``runs[]`` entry of ``calibration.json`` (hours for the observed duration,
        the figures keyed as :class:`RunFigures`' attributes)."""
        out = {k: v for k, v in asdict(run).items() if k not in ("observed_s", "figures")}
        out["observed_hours"] = _hours(run.observed_s)
        out["figures"] = None if run.figures is None else asdict(run.figures)
        return out

    @staticmethod
    def _stage_json(stage: MeasuredStage) -> dict[str, Any]:
        """The ``stages[]`` entry of ``calibration.json`` (hours)."""
        return {"name": stage.name, "uses": list(stage.uses),
                "planned_hours": _hours(stage.planned_s),
                "observed_hours": _hours(stage.observed_s), "executions": stage.executions}

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
            runs = tuple(cls._run_from_json(r) for r in data["runs"])
            stages = tuple(MeasuredStage(
                name=str(s["name"]), uses=tuple(str(u) for u in s["uses"]),
                planned_s=hours_to_seconds(s["planned_hours"]),
                observed_s=hours_to_seconds(s["observed_hours"]),
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

    @staticmethod
    def _run_from_json(r: Mapping[str, Any]) -> MeasuredRun:
        """One ``runs[]`` entry read back."""
        figures = r["figures"]
        return MeasuredRun(
            name=str(r["name"]), run_id=str(r["run_id"]), reference=r["reference"],
            tier=str(r["tier"]), status=str(r["status"]), task=str(r["task"]),
            code_version=str(r["code_version"]), params=dict(r["params"]),
            base_model=None if r["base_model"] is None else dict(r["base_model"]),
            base_revision=r["base_revision"], corpus_view=dict(r["corpus_view"]),
            observed_s=hours_to_seconds(r["observed_hours"]), executions=int(r["executions"]),
            predictions=r["predictions"],
            figures=None if figures is None else RunFigures(**figures),
            seed_sd=None if r.get("seed_sd") is None else float(r["seed_sd"]))


def _hours(seconds: float | None) -> float | None:
    """Seconds as hours with 9 places (3.6 µs; plan versus execution keeps 6), or None."""
    return None if seconds is None else hours(seconds, places=9)


def hours_to_seconds(value_h: Any) -> float | None:
    """Hours as a JSON file gives them (a number, or None) in seconds, or None."""
    return None if value_h is None else float(value_h) * SECONDS_PER_HOUR


def _count(value: Any) -> int | None:
    return None if value is None else int(value)
