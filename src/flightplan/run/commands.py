"""``flightplan`` verbs of the run stage: ``checkpoint verify`` (and, below, the runner's verbs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from flightplan.errors import ArgumentError, SetupError, did_you_mean

if TYPE_CHECKING:
    from flightplan.plan.commands import ResultsVerifier
    from flightplan.run.campaign import Observer
    from flightplan.run.executors.contract import Executor
    from flightplan.run.ledger import Ledger
    from flightplan.spec import CampaignSpec


def checkpoint_verify_command(directory: Path, *, as_json: bool) -> int:
    """``flightplan checkpoint verify DIR``: reload a checkpoint in a fresh process, re-hash
    every file, load every tensor and compare it with its save-time digest.

    Prints one JSON object (``--json``) or one line per finding; returns 0 when verified,
    1 when anything is wrong (each finding named: check, path, message).
    """
    from flightplan.activity import WaitDisplay, doing
    from flightplan.trial.checkpoint_check import verify_checkpoint

    if directory.exists() and not directory.is_dir():
        raise ArgumentError(f"{directory} is a file, not a checkpoint; give the checkpoint "
                            f"folder that holds it"
                            + (f": {directory.parent}"
                               if (directory.parent / "manifest.json").is_file() else
                               ", such as runs/<run_id>/checkpoints/step-000010"))
    if not directory.is_dir():
        raise ArgumentError(f"{directory}: no such directory; give a checkpoint folder "
                            f"such as runs/<run_id>/checkpoints/step-000010")
    if not (directory / "manifest.json").exists():
        _not_a_checkpoint(directory)
    with WaitDisplay():
        doing(f"reloading {directory.name} and checking its digests")
        report = verify_checkpoint(directory)
    if as_json:
        print(json.dumps(report, indent=2))
    elif report["verified"]:
        print(f"{directory}: verified ({report['files']} files, {report['tensors']} tensors, "
              f"step {report['step']}, run {report['run_id']})")
    else:
        for finding in report["findings"]:
            print(f"{directory}: {finding['check']}: {finding['path']}: {finding['message']}")
    return 0 if report["verified"] else 1


CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "state.pt")
"""Files every checkpoint holds beside its manifest (docs/internals.md, "Run directory")."""


def _not_a_checkpoint(directory: Path) -> None:
    """Refuse a folder that holds checkpoints (a ``checkpoints/`` folder, or a run folder
    whose ``checkpoints/`` does) with the checkpoint to give instead, and a folder with
    none of a checkpoint's files (a campaign, ``results/``); return for a checkpoint whose
    manifest is missing (the verifier then says the save never finished).

    Raises:
        ArgumentError: ``directory`` is a run's artifact, a run folder, a ``checkpoints/``
            folder or no checkpoint at all.
    """
    from flightplan.rundir import RunDir

    if (directory / "artifact.json").is_file():
        raise ArgumentError(f"{directory} is a run's artifact (artifact.json), not a "
                            f"checkpoint; flightplan verify RESULTS_DIR reloads artifacts and "
                            f"checks their predictions, and checkpoint verify takes a folder "
                            f"such as runs/<run_id>/checkpoints/step-000010")
    run_folder = RunDir(directory).trial_json.is_file() or (directory / "checkpoints").is_dir()
    folder = directory / "checkpoints" if run_folder else directory
    steps = sorted(p.name for p in folder.glob("step-*")
                   if p.is_dir() and (p / "manifest.json").is_file())
    if run_folder and not steps:
        raise ArgumentError(f"{directory} is a run folder, not a checkpoint, and its "
                            f"checkpoints/ holds no finished checkpoint to verify")
    if steps and run_folder:
        raise ArgumentError(f"{directory} is a run folder, not a checkpoint; give one of its "
                            f"checkpoints ({', '.join(steps[-3:])} in {folder}), e.g. "
                            f"{folder / steps[-1]}")
    if steps:
        raise ArgumentError(f"{directory} holds checkpoints ({', '.join(steps[-3:])}), it is "
                            f"not one; give one of them, e.g. {folder / steps[-1]}")
    if not any((directory / name).exists() for name in CHECKPOINT_FILES):
        raise ArgumentError(f"{directory} is not a checkpoint (it holds no manifest.json and "
                            f"none of {', '.join(CHECKPOINT_FILES)}); give a checkpoint folder "
                            f"such as runs/<run_id>/checkpoints/step-000010")


# -- the runner's verbs: run, status, note (run/campaign.py, run/ledger.py) ---------------

def make_executor(spec: "CampaignSpec", *, engine: str | None = None,
                  address: str | None = None, trusted_network: bool = False) -> "Executor":
    """The executor of ``flightplan run``: ``engine``/``address`` (the command line) over
    the spec's ``[execution]``; ``local`` processes or Ray nodes (``flightplan[ray]``),
    joining a head without token authentication that the network can reach only with
    ``trusted_network`` (:mod:`flightplan.run.executors.ray_head`).

    Raises:
        ArgumentError: an unknown engine, ``--address`` or ``--trusted-network`` without
            Ray.
        SetupError: Ray is not installed.
    """
    engine = engine or spec.execution.engine
    if engine not in ("local", "ray"):
        raise ArgumentError(f"--executor {engine}: not an executor; give local or ray")
    if engine == "local":
        if address:
            raise ArgumentError(f"--address {address}: only the ray executor takes an "
                                f"address; add --executor ray")
        if trusted_network:
            raise ArgumentError("--trusted-network: only the ray executor joins a network; "
                                "add --executor ray, or leave it out")
        from flightplan.run.executors.local import LocalExecutor
        return LocalExecutor()
    try:
        from flightplan.run.executors.ray_executor import RayExecutor
    except ImportError as exc:
        raise SetupError(f"--executor ray: Ray is not installed ({exc}); install it with "
                         f"pip install 'flightplan[ray]'") from None
    return RayExecutor(address=address or spec.execution.address,
                       trusted_network=trusted_network)


def run_command(spec_path: Path, *, decide: str | None, as_json: bool,
                restart: Sequence[str] = (), observer: Observer | None = None,
                executor: str | None = None, address: str | None = None,
                past_end: bool = False, trusted_network: bool = False,
                verify: ResultsVerifier | None = None) -> int:
    """``flightplan run SPEC [--decide continue|cut|stop] [--restart NAME]...
    [--tracking-uri URI] [--executor local|ray] [--address HOST:PORT] [--trusted-network]
    [--past-end] [--json]``.

    Carries out the campaign (:func:`flightplan.run.campaign.run_campaign`, with ``observer``
    watching it: the CLI's live MLflow mirror for ``--tracking-uri``), then prints
    one line per run under its tier (full run id, status, metric, wall time, stop reason;
    :func:`flightplan.run.status.run_lines`) or, with
    ``--json``, one object ``{campaign, exit_code, status, stopped_by, message,
    data_check, pilot, decision, runs, statuses, wall_s}``. A campaign stop is also
    written to stderr as one line.

    A campaign file with ``[calibrate] from`` freezes the plan ``flightplan plan`` shows:
    its durations from that earlier campaign's results, which ``verify`` (the command
    line's results verifier; ``run/`` may not import ``close/``) checks first.

    Returns:
        0 when the runs ended (a run stopped by its own rule included); 1 when the
        campaign was stopped (data check, pilot resume check, decision) or a run crashed.
        Ctrl-C and SIGTERM propagate (:class:`flightplan.interrupts.Interrupted`) after the
        worker was killed; the CLI prints the resume line and exits 130 or 143.
    """
    import contextlib
    import sys

    from rich.console import Console

    from flightplan.run.campaign import run_campaign
    from flightplan.run.status import run_lines
    from flightplan.spec import load_spec

    spec = load_spec(spec_path)
    calibrated = None
    if spec.calibrate is not None and verify is not None:
        from flightplan.plan.commands import calibrated_estimates
        calibrated = calibrated_estimates(spec, None, verify)[0]
    console = Console()
    runner = make_executor(spec, engine=executor, address=address,
                           trusted_network=trusted_network)
    # with --json, stdout holds the one JSON object: what an executor's library prints
    # there (Ray's node-death notices) goes to stderr
    quiet_stdout = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with quiet_stdout:
        try:
            outcome = run_campaign(spec, decide=decide, console=console, quiet=as_json,
                                   restart=restart, observer=observer, executor=runner,
                                   past_end=past_end, calibrated=calibrated)
        finally:
            runner.close()
    if as_json:
        print(json.dumps(outcome.to_json(), indent=2, allow_nan=False, default=str))
    else:
        width = console.size.width if console.is_terminal else UNCUT_WIDTH  # a pipe: uncut
        for line in run_lines(outcome.runs, metric=spec.campaign.metric, title="campaign runs",
                              width=width, now=time.time()):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print(outcome.message, markup=False, highlight=False, soft_wrap=True)
    if outcome.stopped_by:
        line = outcome.message if outcome.message.startswith("campaign stopped") else \
            f"campaign stopped: {outcome.message}"
        print(line, file=sys.stderr)
    return outcome.exit_code


UNCUT_WIDTH = 10_000
"""The width ``status`` and the table at the end of ``run`` lay their lines out for when
the output is not a terminal (a pipe, a log file): wide enough that no line is cut."""


def frozen_rule_drift(spec: "CampaignSpec") -> str | None:
    """What ``flightplan run`` and ``close`` would refuse in ``spec``'s decision rule: the
    one-line reason when the file's ``metric``, ``goal``, ``min_gain`` or
    ``accept_at_least`` differs from the rule frozen with the plan and a run has started
    (:func:`flightplan.plan.decision_rule.check_rule_unchanged`); None when the campaign
    never ran, no run started yet (``run`` would record the change as a correction) or the
    rule is unchanged. Reads the ledger only; ``plan`` prints it as a warning."""
    from flightplan.errors import SpecError
    from flightplan.plan.decision_rule import RULE_CHANGED, check_rule_unchanged
    from flightplan.run.ledger import LEDGER_FILE, Ledger

    if not (spec.campaign_dir / LEDGER_FILE).is_file():
        return None
    with Ledger.open_existing(spec.campaign_dir) as ledger:
        frozen = ledger.original_plan()
        if frozen is None or not ledger.events(kind="started"):
            return None
        try:
            check_rule_unchanged(spec, frozen.plan, ledger.events(kind=RULE_CHANGED))
        except SpecError as changed:
            return str(changed)
    return None


def status_command(spec_path: Path, *, as_json: bool) -> int:
    """``flightplan status [SPEC] [--json]``: the ledger as lines that fit the terminal
    (:func:`flightplan.run.status.status_lines`) or one JSON object
    (:meth:`flightplan.run.ledger.Ledger.snapshot` plus ``runner``: ``{pid, since, verb}``
    of the ``flightplan run`` holding the lock, or null; runs left ``running`` by a runner
    that is gone show as ``interrupted``, or as ``finished``/``stopped`` when their folder
    holds ``done.json``/``stop.json`` (the next run records them so); ``flights``: each
    flight's package window and hours left, or when it was lost and why; ``cluster``: the
    Ray cluster the last run joined, how it authenticates and whether the network was
    stated trusted, or null; ``results``:
    whether results/ exists and, once closed, the answer: :func:`_add_results`; a pending
    run that was not started because its flight's package ends first has that ``reason``;
    ``goodput`` per run and for the campaign: :func:`_add_goodput`; ``progress`` of each
    running or interrupted run: :func:`_add_progress`; ``replicate_of``: the run a
    replicate of a run of several seeds executes, else null).

    Raises:
        SpecError: the campaign file is missing or invalid.
        ArgumentError: the campaign has no ledger yet (it was never run).
    """
    from flightplan.run.ledger import Ledger
    from flightplan.campaign_lock import lock_holder
    from flightplan.spec import load_spec

    spec = load_spec(spec_path)
    ledger = Ledger.open(spec.campaign_dir, create=False)
    with ledger:
        snapshot = ledger.snapshot()
        _add_goodput(snapshot, spec, ledger)
    for run in snapshot["runs"]:        # the run a replicate of several seeds belongs to
        replicate = spec.replicate_named(run.get("name") or "")
        run["replicate_of"] = replicate.run.name if replicate and replicate.count > 1 \
            else None
    _add_rental(snapshot, now=time.time())
    holder = lock_holder(spec.campaign_dir)
    if holder is not None and holder.get("verb", "run") != "run":
        holder = None                   # `flightplan close` holds it: no run is going on
    snapshot["runner"] = holder
    if holder is None:
        from flightplan.rundir import RunDir
        for run in snapshot["runs"]:
            if run["status"] == "running":     # its folder says whether it ended meanwhile
                run["status"] = RunDir.of(spec.campaign_dir, run["run_id"]).status() \
                    or "interrupted"
    _add_progress(snapshot, spec.campaign_dir, now=time.time())
    _add_results(snapshot, spec.campaign_dir)
    if as_json:
        print(json.dumps(snapshot, indent=2, default=str))
        return 0
    # the campaign file as this command was given it: the commands shown work from here
    snapshot["campaign"] = {**(snapshot.get("campaign") or {}), "spec_path": str(spec_path)}
    _print_status(snapshot, metric=spec.campaign.metric)
    return 0


def _add_results(snapshot: dict[str, Any], campaign_dir: Path) -> None:
    """Add ``results``: ``{dir, exists (results/ holds a manifest), report (the path of
    report.html, or null), closed}``; ``closed`` is null until ``flightplan close`` ran,
    then ``{at, answer, verdict, verified (at the end of that close), accepted}`` of its
    last close (:mod:`flightplan.publish.close_record`) and ``changed_since``: the files
    its manifest lists that are gone or of another size now
    (:func:`flightplan.publish.manifest.resized_files`)."""
    from flightplan.publish.close_record import read_close_record, report_path
    from flightplan.publish.manifest import MANIFEST_NAME, resized_files
    from flightplan.publish.results import RESULTS_DIRNAME

    results = Path(campaign_dir) / RESULTS_DIRNAME
    record = read_close_record(campaign_dir)
    report = report_path(campaign_dir)
    snapshot["results"] = {
        "dir": str(results), "exists": (results / MANIFEST_NAME).is_file(),
        "report": str(results / report.name) if report else None,
        "closed": None if record is None else {
            "at": record.closed_at, "verified": record.verified,
            "changed_since": resized_files(results),
            **{key: record.summary.get(key) for key in ("answer", "verdict", "accepted")}}}


def _add_goodput(snapshot: dict[str, Any], spec: CampaignSpec, ledger: Ledger) -> None:
    """Add each run's ``goodput`` (its wall time by cause, :mod:`flightplan.goodput`; null
    for a run that never ran) and the campaign's ``goodput``: ``{stages_hours, flights
    (per flight: slot-hours bought, productive, overheads by cause, uncommitted), total}``.
    An execution the ledger holds open (a run ``running``, or left so by a runner stopped
    by Ctrl-C or killed) counts until its folder's last write, as the next ``flightplan
    run`` records it (``ledger_goodput(count_open=True)``)."""
    from flightplan.campaign_goodput import ledger_goodput
    from flightplan.plan.catalog import flight_gpus

    goodput = ledger_goodput(ledger, spec, gpus_per_flight=flight_gpus(spec), count_open=True)
    for run in snapshot["runs"]:
        split = goodput.runs.get(run["run_id"])
        run["goodput"] = None if split is None else split.to_json()
    snapshot["goodput"] = {key: value for key, value in goodput.to_json().items()
                           if key != "runs"}


def _add_progress(snapshot: dict[str, Any], campaign_dir: Path, *, now: float) -> None:
    """Add ``progress`` ``{steps_done, planned_steps}`` (planned: None until the run's task
    says) to each run that is ``running`` or ``interrupted``, read from its measurement
    rows, and give a running run the wall time since it first started, an interrupted one
    (its runner gone) from its first start to its last sign of life
    (:meth:`RunDir.last_written`; the ledger holds a run's wall time only once it ended)."""
    from flightplan.run.executors.contract import MeasurementTail
    from flightplan.rundir import RunDir

    for run in snapshot["runs"]:
        if run["status"] not in ("running", "interrupted"):
            continue
        run_dir = RunDir.of(campaign_dir, run["run_id"])
        seen = MeasurementTail(run_dir.path).read()
        run["progress"] = {"steps_done": seen.completed, "planned_steps": seen.total}
        if not run.get("started_at"):
            continue
        if run["status"] == "running":
            run["wall_s"] = max(0.0, now - float(run["started_at"]))
        else:                                   # left running by a runner that is gone
            last = run_dir.last_written()
            if last is not None:
                run["wall_s"] = max(0.0, last - float(run["started_at"]))


def _add_rental(snapshot: dict[str, Any], *, now: float) -> None:
    """Add ``flights`` (:meth:`FlightWindow.to_json`), ``cluster`` (the latest
    ``cluster_joined`` event's data, or null) and each waiting run's ``reason``."""
    from flightplan.ledger_rows import EventRow
    from flightplan.run.rental import flight_windows, waiting_reasons

    events = [EventRow(**event) for event in snapshot["events"]]
    snapshot["flights"] = [w.to_json(now=now) for w in flight_windows(events).values()]
    joined = [e.data for e in events if e.kind == "cluster_joined"]
    snapshot["cluster"] = joined[-1] if joined else None
    waiting = waiting_reasons(events)
    for run in snapshot["runs"]:
        if run["status"] == "pending" and run["run_id"] in waiting:
            run["reason"] = waiting[run["run_id"]]


def _print_status(snapshot: dict[str, Any], *, metric: str) -> None:
    import time

    from rich.console import Console

    from flightplan.run.status import status_lines

    console = Console()
    # a terminal's lines are cut to fit it; into a pipe or a file (grep, a log) nothing is cut
    width = console.size.width if console.is_terminal else UNCUT_WIDTH
    for line in status_lines(snapshot, metric=metric, width=width, now=time.time()):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def note_command(spec_path: Path, *, name: str, text: str, as_json: bool) -> int:
    """``flightplan note NAME TEXT [--spec SPEC] [--json]``: record in the ledger why a
    stage or run deviated from the plan. ``NAME`` is a stage or run of the campaign file
    (or one of the run ids in the ledger).

    Raises:
        ArgumentError: ``NAME`` is not a stage, run or run id (with a "did you mean"),
            ``TEXT`` is empty, or the campaign never ran (no ledger: ``flightplan run``
            first; none is created).
        SpecError: the campaign file is missing or invalid.
    """

    from flightplan.run.ledger import Ledger
    from flightplan.spec import load_spec

    spec = load_spec(spec_path)
    if not text.strip():
        raise ArgumentError("the note is empty; say why the stage or run deviated")
    with Ledger.open_existing(spec.campaign_dir) as ledger:
        known = [e.name for e in spec.items] + \
                [r.run_id for r in ledger.runs()]
        if name not in known:
            hint = did_you_mean(name, known, otherwise=f"; known: "
                                f"{', '.join(sorted(set(e.name for e in spec.items)))}")
            raise ArgumentError(f"note {name!r}: not a stage or run of {spec.source}{hint}")
        note = ledger.add_note(name, text.strip())
    if as_json:
        print(json.dumps(note.to_json()))
    else:
        print(f"noted for {name}: {note.text}")
    return 0


def stage_command(spec_path: Path, *, name: str, action: str, took: str | None,
                  as_json: bool) -> int:
    """``flightplan stage start|done NAME [--took DURATION] [--spec SPEC] [--json]``
    (:mod:`flightplan.run.stages`): prints one line, or the record as one JSON object.

    Raises:
        ArgumentError: not a stage a person marks, already started, not started, a
            ``--took`` that is not a duration, or a campaign that never ran.
        SpecError: the campaign file is missing or invalid.
    """
    from flightplan.run.stages import mark_stage_done, mark_stage_start
    from flightplan.spec import load_spec
    from flightplan.units import Duration

    spec = load_spec(spec_path)
    if action == "start":
        record = mark_stage_start(spec, name)
        line = f"{name}: started at {time.strftime('%H:%M:%S', time.localtime(record['started_at']))}"
    else:
        try:
            duration = None if took is None else Duration.parse(took)
        except ValueError as exc:
            raise ArgumentError(f"--took {took}: {exc}") from None
        record = mark_stage_done(spec, name, took=duration)
        line = (f"{name}: done, {record['hours']:.2f} h observed "
                f"(planned {record['planned_hours']:.2f} h)")
        if record["marks"] > 1:
            line += (f"; marked done {record['marks']} times, {record['total_hours']:.2f} h in "
                     f"all, which plan vs execution counts")
    print(json.dumps(record) if as_json else line)
    return 0
