"""The runs of a campaign file as the runner carries them out: each execution with its id,
its task loaded as the worker will load it, and its ``trial.json``.

A run with ``seeds`` = K ≥ 2 executes K times, one :class:`PlannedRun` per replicate
(:meth:`flightplan.spec.CampaignSpec.replicates`): replicate i is named ``<name>
seed=<seed + i>`` and trains with ``params.seed`` = seed + i, so each has its own id,
folder, checkpoints and rows. A run of one seed is planned as before (same name, same id).

An execution's id is ``slug(name)-hash[:10]`` over its task, params, corpus hashes, base
revision and code version (:mod:`flightplan.ids`); runs come in tier order
(essential, useful, exploratory; file order within a tier), a run's replicates in seed
order.

Usage::

    for planned in plan_runs(spec):
        write_json_atomic(planned.run_dir / "trial.json",
                          trial_document(spec, planned, resume=False))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from flightplan.corpus import corpus_root
from flightplan.errors import CheckpointError, SpecError
from flightplan.ids import config_hash, corpus_view, run_config, run_id
from flightplan.spec import BaseModelSection, CampaignSpec, Replicate, Run
from flightplan.rundir import RunDir, list_checkpoints, shown_path
from flightplan.tasks.loader import LoadedTask, TaskSource, load_task
from flightplan.trial.checkpoint_io import BadCheckpoint, read_manifest
from flightplan.trial.distributed import check_world_size

__all__ = ["PlannedRun", "TIER_ORDER", "plan_runs", "trial_document", "load_run_task"]

TIER_ORDER = {"essential": 0, "useful": 1, "exploratory": 2}
"""Order in which tiers run (and sort)."""


@dataclass(frozen=True)
class PlannedRun:
    """One execution of a run of the spec with its id: ``run_id = slug(name)-hash[:10]``
    (ids.py) over the replicate's name and params; ``run`` is the spec's run it executes."""

    replicate: Replicate
    run_id: str
    config_hash: str
    run_dir: Path
    task_source: TaskSource

    @property
    def run(self) -> Run:
        """The spec's run this execution replicates (tier, task, GPUs, reference…)."""
        return self.replicate.run

    @property
    def name(self) -> str:
        """The execution's name: the run's, or ``<name> seed=<seed>`` for a replicate."""
        return self.replicate.name

    @property
    def replicate_of(self) -> str | None:
        """The run this execution replicates when the run has several seeds, else None."""
        return self.run.name if self.replicate.count > 1 else None

    @property
    def params(self) -> dict[str, Any]:
        """The params it trains with (``params.seed`` replaced for replicate i ≥ 1)."""
        return self.replicate.params


def load_run_task(run: Run, spec: CampaignSpec) -> LoadedTask:
    """The run's task, loaded as the worker will load it.

    Raises:
        TaskError: no such task, or it breaks the protocol (names ``run[i].task``).
    """
    index = spec.runs.index(run)
    return load_task(run.task, spec.campaign_dir, field=f"run[{index}].task", source=spec.source)


def plan_runs(spec: CampaignSpec, *, tasks: Mapping[str, LoadedTask] | None = None
              ) -> list[PlannedRun]:
    """Every execution of the spec's runs with its id, in tier order (essential, useful,
    exploratory; file order within a tier; a run's replicates in seed order).

    Args:
        tasks: run name → its task, already loaded (:func:`load_run_task`); None: each
            run's task is loaded here.

    Raises:
        TaskError: a run's task cannot be loaded.
    """
    corpus = dict(spec.corpus.sha256) if spec.corpus else {}
    view = corpus_view(spec.corpus.model_dump(mode="json") if spec.corpus else None)
    base_model = spec.base_model or BaseModelSection()
    planned = []
    for run in sorted(spec.runs, key=lambda r: TIER_ORDER[r.tier]):
        task = tasks[run.name] if tasks is not None else load_run_task(run, spec)
        for rep in spec.replicates(run):
            params = rep.params
            identity = (run.task, params, corpus, task.base_revision(base_model, params),
                        task.source.code_version, view)
            ident = run_id(rep.name, *identity)
            planned.append(PlannedRun(rep, ident, config_hash(run_config(*identity)),
                                      spec.campaign_dir / "runs" / ident, task.source))
    return planned


def check_saved_world_sizes(spec: CampaignSpec, planned: Sequence[PlannedRun],
                            restart: Collection[str]) -> None:
    """Refuse, before anything is written, to resume a run from a checkpoint saved by
    another number of processes than its ``[[run]] processes`` while ``reshard`` is off,
    or from a library's checkpoint (the Trainer's, Lightning's), which is never resharded
    (inside the run, the trial would refuse it after a process start, and running again
    would repeat that). A run that finished, or that ``restart`` starts over, is not
    resumed; the newest committed ``step-*`` folder is the one read (one whose manifest
    cannot be read is left to the trial, which sets it aside).

    Raises:
        SpecError: naming ``run[i].processes``, the checkpoint, both numbers and the
            fixes (with the real ``flightplan run FILE --restart NAME``).
    """
    for execution in planned:
        if execution.name in restart or execution.run.name in restart:
            continue
        folder = RunDir(execution.run_dir)
        complete, _ = list_checkpoints(folder.checkpoints)
        if folder.done_json.exists() or not complete:
            continue
        newest = complete[0][1]
        try:
            manifest = read_manifest(newest)
        except BadCheckpoint:
            continue
        index = spec.runs.index(execution.run)
        try:
            check_world_size(manifest, execution.run.processes, shown_path(newest),
                             reshard=execution.run.reshard,
                             restart=f"flightplan run {spec.source} --restart {execution.name}")
        except CheckpointError as exc:
            raise SpecError(f"{execution.name}: {exc}", file=spec.source,
                            field=f"run[{index}].processes") from None


def trial_document(spec: CampaignSpec, planned: PlannedRun, *, resume: bool) -> dict[str, Any]:
    """The run's ``trial.json`` (keys in docs/internals.md)."""
    corpus = None
    if spec.corpus is not None:
        corpus = dict(spec.corpus.model_dump(mode="json"),
                      root=corpus_root(spec.corpus, spec.campaign_dir))
    return {"run_id": planned.run_id, "name": planned.name,
            "replicate_of": planned.replicate_of,
            "tier": planned.run.tier,
            "task": planned.run.task, "params": planned.params, "planned_steps": None,
            "stop": spec.stop.model_dump(mode="json"),
            "checkpoint": spec.checkpoint.model_dump(mode="json"), "corpus": corpus,
            "base_model": None if spec.base_model is None
            else spec.base_model.model_dump(mode="json"),
            "campaign_dir": str(spec.campaign_dir), "resume": resume,
            "config_hash": planned.config_hash, "max_steps": None,
            "code_version": planned.task_source.code_version,
            "deterministic": planned.run.deterministic, "reshard": planned.run.reshard,
            "task_source": planned.task_source.to_json()}
