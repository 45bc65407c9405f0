"""Carry out a campaign: data check, kernel check (on GPUs), pilot, decision point, then the
runs.

The runs start longest first (by the decision point's re-estimates) when all of them fit,
one after another, in the time the rental has left; otherwise in tier order.

Running it again continues where it stopped: finished and stopped runs are skipped, an
interrupted run resumes from its checkpoints, a run whose configuration changed gets a
new id (the old id stays in the ledger as ``superseded``). The pilot that passed for the
control's id is kept (also after the control changed and was changed back), and the
decision is kept while it was made for this control and this decision rule and no
``--decide`` is given (:class:`~flightplan.run.decision.Decision`). Until a run beyond the
pilot has started, a corrected decision rule is accepted and recorded
(:mod:`flightplan.plan.decision_rule`). Everything is written under the campaign
directory.

The steps are collaborators over one :class:`~flightplan.run.invocation.Invocation` (what
they share under the lock): :class:`~flightplan.run.preparation.Preparation` (the plan
frozen, restarts, data check, kernel check, pilot),
:class:`~flightplan.run.decision_point.DecisionPoint`, and
:class:`~flightplan.run.run_loop.RunLoop` with the executor's callbacks in
:class:`~flightplan.run.job_events.JobEvents`.

Exit code of :func:`run_campaign` (in :class:`~flightplan.run.invocation.CampaignOutcome`): 0 when every run that
was not cut ended, finished or stopped by its own rule; 1 when the campaign was stopped
(corpus mismatch, an op without a deterministic kernel in the kernel check,
``no_usable_resume`` in the pilot, the decision ``stop``) or a run's
process crashed (running again retries it).

Usage::

    outcome = run_campaign(load_spec("campaign.toml"), decide=None, console=Console())
    outcome.exit_code, outcome.to_json()
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable, ContextManager, Sequence

from rich.console import Console

from flightplan.campaign_lock import CampaignLock
from flightplan.corpus import check_corpus_source
from flightplan.errors import ArgumentError, SpecError, TaskHookFailed
from flightplan.plan.calibration.calibrate import Calibrated
from flightplan.plan.catalog import catalog_for_spec, check_spec_against_catalog
from flightplan.run.decision import DECISIONS
from flightplan.run.decision_point import DecisionPoint
from flightplan.run.executors.contract import (Executor, ClusterJoined, check_gpus,
                                               check_processes)
from flightplan.run.executors.local import LocalExecutor
from flightplan.run.invocation import CampaignOutcome, Invocation
from flightplan.run.ledger import Ledger
from flightplan.run.planned import load_run_task
from flightplan.run.preparation import Preparation
from flightplan.run.progress import ProgressBoard
from flightplan.run.rental import left_flight
from flightplan.run.run_loop import RunLoop
from flightplan.spec import CampaignSpec
from flightplan.tasks.loader import check_metric_columns

__all__ = ["Observer", "run_campaign", "RUNNER_LOG"]

Observer = Callable[[CampaignSpec], ContextManager[object]]
"""Watches a campaign while it runs: called with the spec once ``run`` holds the campaign's
lock, entered for the rest of the command and left before the lock is released. It reads
only what the runs write (measurement rows, ``stop.json``, ``done.json``) and never stops a
run; the CLI attaches the live MLflow mirror (:func:`flightplan.tracking.live.observer`)."""

RUNNER_LOG = Path(".flightplan") / "runner.log"
"""Where the runner appends the traceback of a task hook that raised (relative to the
campaign folder); the error itself is one line."""


def run_campaign(spec: CampaignSpec, *, decide: str | None = None,
                 executor: Executor | None = None, console: Console | None = None,
                 quiet: bool = False, restart: Sequence[str] = (),
                 observer: Observer | None = None, past_end: bool = False,
                 calibrated: Calibrated | None = None) -> CampaignOutcome:
    """Carry out the campaign (see the module docstring) under its lock.

    Args:
        spec: the loaded campaign.
        decide: ``continue``, ``cut`` or ``stop`` to override the computed decision.
        executor: where runs execute (default :class:`LocalExecutor`).
        console: where messages, bars and tables go (default stdout).
        quiet: print nothing (``--json``).
        restart: run (or replicate) names to start over on purpose
            (:meth:`flightplan.run.preparation.Preparation.restart`).
        observer: watches the runs while the campaign holds its lock (:data:`Observer`;
            the CLI attaches the live MLflow mirror, :mod:`flightplan.tracking.live`).
        past_end: start runs that cannot finish before their flight's package ends
            (``--past-end``); without it they stay pending (:mod:`flightplan.run.rental`).
        calibrated: what an earlier campaign measured (``[calibrate] from``,
            :func:`flightplan.plan.commands.calibrated_estimates`): the frozen plan uses
            its durations, as ``flightplan plan`` did (the re-estimate after the pilot
            replaces them where the pilot measured), and the decision point's ranking its
            measured disagreement or difference spread per comparison
            (:func:`flightplan.run.decision.rank_variants`).

    Raises:
        ArgumentError: ``decide`` is not one of continue, cut, stop; a ``restart`` name is
            not a run (both before anything is written).
        SpecError: the campaign has no ``[corpus]``, or its folder or package is not there
            (:func:`flightplan.corpus.check_corpus_source`); a task's declared prediction columns
            cannot give the metric; the decision rule changed after a run started.
        LockHeld: another ``flightplan run`` (or a ``flightplan close``) holds the campaign.
        SpecError, CatalogError: the campaign does not plan, or a run asks for more GPUs
            than the executor's machine has (before anything is written); a run would resume
            from a checkpoint saved by another number of processes with ``reshard`` off
            (before the ledger records anything).
        InputError: the executor cannot or must not reach where runs execute (a Ray head
            that does not answer, or without token authentication on a network not stated
            trusted), before anything is written.
        TaskError: a run's task cannot be loaded; TaskHookFailed: one of its hooks raised
            (its traceback appended to :data:`RUNNER_LOG`, nothing of that step recorded).
    """
    if decide is not None and decide not in DECISIONS:
        raise ArgumentError(f"--decide {decide}: not a decision; give continue, cut or stop")
    runs = sorted({run.name for run in spec.runs} | {rep.name for rep in spec.executions})
    for name in restart:
        if name not in runs:
            raise ArgumentError(f"--restart {name}: not a run of the campaign; give one of "
                                f"{', '.join(runs)}")
    if spec.corpus is None:
        raise SpecError("the campaign has no [corpus], so it has nothing to train on; add "
                        "[corpus] with package or path and sha256 (plan works without it)",
                        file=spec.source, field="corpus")
    check_corpus_source(spec.corpus, spec.campaign_dir, source=spec.source)
    # a campaign that does not plan, or whose tasks cannot be loaded, is refused before
    # anything is written
    catalog = catalog_for_spec(spec)           # read once for the whole command
    check_spec_against_catalog(spec, catalog)
    tasks = {run.name: load_run_task(run, spec) for run in spec.runs}
    for run in spec.runs:       # a metric the declared prediction columns cannot give
        check_metric_columns(spec.campaign.metric, tasks[run.name].prediction_columns,
                             run.task, source=spec.source)
    executor = executor or LocalExecutor()
    joined = executor.connect()
    limit = executor.gpu_limit()
    check_gpus(spec.runs, limit, source=spec.source)
    check_processes(spec.runs, limit, source=spec.source)
    console = console or Console()
    with CampaignLock(spec.campaign_dir), Ledger.open(spec.campaign_dir) as ledger, \
            (observer(spec) if observer else contextlib.nullcontext()), \
            ProgressBoard(console, enabled=console.is_terminal and not quiet) as board:
        campaign = Invocation(spec, ledger, catalog=catalog, tasks=tasks, decide=decide,
                              executor=executor,
                              console=console, board=board, quiet=quiet, past_end=past_end,
                              calibrated=calibrated)
        try:
            return _carry_out(campaign, restart, joined)
        except TaskHookFailed as exc:
            raise exc.logged(str(_log_traceback(spec.campaign_dir, exc))) from exc.exception


def _log_traceback(campaign_dir: Path, failed: TaskHookFailed) -> Path:
    """Append a failed hook's traceback to :data:`RUNNER_LOG`; its path."""
    log = campaign_dir / RUNNER_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S %z')} task {failed.task!r}, hook "
                  f"{failed.hook}: {failed.error}\n{failed.details.rstrip()}\n")
    return log


def _carry_out(campaign: Invocation, restart: Sequence[str],
               joined: ClusterJoined | None) -> CampaignOutcome:
    """The steps of :func:`run_campaign` under the lock (``joined``: the cluster the
    executor connected to, recorded once the campaign is prepared)."""
    preparation = Preparation(campaign)
    preparation.prepare(restart)
    if joined is not None:
        campaign.ledger.add_event("cluster_joined", data=joined.to_json())
    preparation.restart(list(restart))
    report = preparation.data_check()
    if isinstance(report, CampaignOutcome):
        return report
    kernels = preparation.kernel_check(report)
    if isinstance(kernels, CampaignOutcome):
        return kernels
    pilot = preparation.pilot(report)
    if isinstance(pilot, CampaignOutcome):
        return pilot
    decision = DecisionPoint(campaign).decision(pilot, report)
    check = report.summary()
    if decision.decision == "stop":
        return campaign.stopped("decision", f"campaign stopped at the decision point: "
                                            f"{decision.reason}",
                                decision=decision, pilot=pilot, data_check=check)
    RunLoop(campaign).runs(list(decision.dropped) if decision.decision == "cut" else [])
    outcome = campaign.outcome("", code=0, decision=decision, pilot=pilot, data_check=check)
    failed = [r for r in outcome.runs if r["status"] == "failed"]
    waiting = [r for r in outcome.runs if r["status"] == "pending" and r["reason"]]
    left_ids = left_flight(campaign.ledger.events())
    left = [r for r in waiting if r["run_id"] in left_ids]
    waiting = [r for r in waiting if r not in left]
    stopped = [r for r in outcome.runs if r["status"] == "stopped"]
    outcome.exit_code = 1 if failed else 0
    outcome.message = (f"{sum(r['status'] == 'finished' for r in outcome.runs)} finished, "
                       f"{len(stopped)} stopped by a rule, "
                       f"{sum(r['status'] == 'cut' for r in outcome.runs)} cut, "
                       f"{len(failed)} failed"
                       + (f", {len(waiting)} not started (the rental ends first; "
                          f"--past-end starts them)" if waiting else "")
                       + (f", {len(left)} left a flight whose package ends (each resumes "
                          f"from its checkpoint on a flight with time left)" if left else "")
                       + ("; run again to retry the failed runs" if failed else ""))
    return outcome
