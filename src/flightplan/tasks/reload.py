"""Reload any task's artifacts in a fresh process and re-create their predictions.

Usage::

    python -P -m flightplan.tasks.reload TASK_REF ARTIFACT_DIR --out FILE.csv
        [--pair ARTIFACT_DIR FILE.csv ...] [--json]
        [--task-root DIR] [--campaign-dir DIR] [--limit N]

``TASK_REF`` is what a campaign file's ``task`` may be: a built-in name (``textclf``), a
``.py`` file or a dotted module name. A file or module is found in ``--task-root`` (a
kept copy ``results/tasks/<hex>/``, see :mod:`flightplan.tasks.archive`), else in
``--campaign-dir``, else in the current directory. The task is loaded once with
:func:`flightplan.tasks.loader.load_task` and its reload hook is called for each artifact
in turn as ``reload_predictions(artifact_dir, out, campaign_dir=..., limit=...)``
(``campaign_dir``: the ``--campaign-dir`` given, else None: a results directory received
alone). Each ``--pair ARTIFACT_DIR FILE.csv`` adds an artifact of the same task (the
positional ``ARTIFACT_DIR --out FILE.csv`` may then be left out): the process starts and
imports once for all of them (``close`` and ``verify`` reload a task's artifacts so,
:func:`flightplan.close.verify.reproduce_runs`). One artifact refused does not stop the
others; each file is written by the task's hook as with one artifact.

The task computes where it chooses (:func:`flightplan.trial.accelerator.device`: the GPU
in ``CUDA_VISIBLE_DEVICES`` where there is one) with the thread count it recorded, else
``$FLIGHTPLAN_TORCH_THREADS``.

Loading a file or module task *runs its code*; ``close`` does so for the campaign's own
tasks, ``flightplan verify`` only with ``--trust-code``. A built-in task is flightplan's
installed code. ``-P`` keeps the working directory off ``sys.path``; no bytecode is
written, so a kept source folder gains no ``__pycache__/``.

Output: ``wrote N predictions to FILE.csv`` per artifact on stdout; each failure as one
line ``error: MESSAGE`` on stderr (``error: ARTIFACT_DIR: MESSAGE`` when several were
given). With ``--json``, stdout holds only one JSON object per artifact, in the order
given, as each ends: ``{"artifact", "out", "exit", "rows", "error"}`` (``exit`` as below
for that artifact alone, ``rows`` null and ``error`` the message unless it is 0); what the
task itself prints goes to stderr.

Exit codes, per artifact and of the process (the highest of its artifacts'): 0 written;
1 refused (the task's hook raised: a base model or corpus that differs, an unreadable
artifact); 2 bad arguments, a missing artifact folder, a task that cannot be loaded, or a
task without a ``reload_predictions`` hook (its artifact is not reloadable).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from flightplan.errors import ArgumentError, FlightplanError, TaskError
from flightplan.tasks.protocol import hook_signature

__all__ = ["main", "reload_argv", "NO_RELOAD_HOOK", "no_reload_hook"]

NO_RELOAD_HOOK = "task has no reload_predictions hook, artifact not reloadable"
"""Start of the message (and of close's rejection reason) for a task without the hook."""


def no_reload_hook(ref: str) -> str:
    """The message for task ``ref`` (as the entry takes it) without a reload hook."""
    return f"{NO_RELOAD_HOOK}: task {ref!r} does not define {hook_signature('reload_predictions')}"


def reload_argv(ref: str, artifact_dir: str, out: str, *, task_root: str | None = None,
                campaign_dir: str | None = None, limit: int | None = None,
                python: str | None = None, pairs: Sequence[tuple[str, str]] = (),
                as_json: bool = False) -> list[str]:
    """The command that re-creates artifacts' predictions in a fresh process.

    Args:
        ref: the task (built-in name, ``.py`` file or module), as :func:`main` takes it.
        artifact_dir, out: the artifact folder and the CSV to write.
        task_root: the folder a file or module task is found in (a kept copy).
        campaign_dir: passed to the task's reload hook.
        limit: re-create only the first ``limit`` test examples.
        python: the interpreter (default: this one).
        pairs: further ``(artifact folder, CSV)`` of the same task, reloaded by the same
            process (``--pair``).
        as_json: one JSON line per artifact on stdout (``--json``).

    Returns:
        ``[python, "-P", "-m", "flightplan.tasks.reload", ref, artifact_dir, "--out", out,
        ...]``.
    """
    argv = [python or sys.executable, "-P", "-m", "flightplan.tasks.reload", ref, artifact_dir,
            "--out", out]
    for artifact, csv_out in pairs:
        argv += ["--pair", artifact, csv_out]
    for flag, value in (("--task-root", task_root), ("--campaign-dir", campaign_dir),
                        ("--limit", limit)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--json"] if as_json else [])


@dataclass(frozen=True)
class _Outcome:
    """What became of one artifact: ``exit`` 0 with ``rows`` written, else ``error``."""

    artifact: Path
    out: Path
    exit: int
    rows: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"artifact": str(self.artifact), "out": str(self.out), "exit": self.exit,
                "rows": self.rows, "error": self.error}


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m flightplan.tasks.reload",
                                     description="Re-create runs' predictions from their "
                                                 "artifacts with their task's "
                                                 "reload_predictions hook.")
    parser.add_argument("task", help="built-in task name, .py file or module name")
    parser.add_argument("artifact_dir", type=Path, nargs="?", default=None,
                        help="the run's artifact folder")
    parser.add_argument("--out", type=Path, default=None, help="CSV file to write")
    parser.add_argument("--pair", nargs=2, action="append", default=[],
                        metavar=("ARTIFACT_DIR", "FILE"),
                        help="another artifact folder of the same task and its CSV (repeatable)")
    parser.add_argument("--task-root", type=Path, default=None,
                        help="folder the task file or module is found in")
    parser.add_argument("--campaign-dir", type=Path, default=None,
                        help="the campaign folder, passed to the task's reload hook")
    parser.add_argument("--limit", type=int, default=None, help="only the first N test examples")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per artifact on stdout")
    args = parser.parse_args(argv)
    if (args.artifact_dir is None) != (args.out is None):
        parser.error("give ARTIFACT_DIR with --out FILE (or neither, with --pair)")
    pairs = [(args.artifact_dir, args.out)] if args.artifact_dir is not None else []
    pairs += [(Path(a), Path(o)) for a, o in args.pair]
    if not pairs:
        parser.error("give ARTIFACT_DIR --out FILE or at least one --pair ARTIFACT_DIR FILE")
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no __pycache__/ inside a kept source (results stay exact)
    try:
        outcomes = _reload(args, pairs)
    finally:
        sys.dont_write_bytecode = previous
    return max(o.exit for o in outcomes)


def _report(outcome: _Outcome, *, as_json: bool, several: bool) -> None:
    """Say what became of one artifact (module docstring, "Output")."""
    if as_json:
        print(json.dumps(outcome.to_json()), flush=True)
    elif outcome.exit == 0:
        print(f"wrote {outcome.rows} predictions to {outcome.out}", flush=True)
    else:
        where = f"{outcome.artifact}: " if several else ""
        print(f"error: {where}{outcome.error}", file=sys.stderr, flush=True)


def _failed(artifact: Path, out: Path, exc: BaseException) -> _Outcome:
    """The outcome of an artifact whose reload raised ``exc``."""
    if isinstance(exc, FlightplanError):
        return _Outcome(artifact, out, exc.exit_code, error=str(exc))
    return _Outcome(artifact, out, 1, error=f"the task's reload_predictions failed: "
                                            f"{type(exc).__name__}: {exc}")


def _reload(args: argparse.Namespace, pairs: list[tuple[Path, Path]]) -> list[_Outcome]:
    """Load the task once, reload each pair, report each as it ends; the outcomes."""
    from flightplan.tasks.loader import load_task

    several = len(pairs) > 1
    task = None
    try:
        if args.limit is not None and args.limit < 1:
            raise ArgumentError(f"--limit {args.limit}: give a positive number of examples")
        root = args.task_root or args.campaign_dir or Path.cwd()
        task = load_task(args.task, root, field="TASK_REF", source="reload")
        if not task.can_predict:
            raise TaskError(no_reload_hook(args.task))
    except FlightplanError as exc:              # no artifact can be reloaded
        outcomes = [_failed(a, o, exc) for a, o in pairs]
        if args.json:
            for outcome in outcomes:
                _report(outcome, as_json=True, several=several)
        else:
            _report(_Outcome(pairs[0][0], pairs[0][1], exc.exit_code, error=str(exc)),
                    as_json=False, several=False)
        return outcomes
    outcomes = []
    for artifact, out in pairs:
        try:
            if not artifact.is_dir():
                raise ArgumentError(f"{artifact}: no such artifact folder; give the run's "
                                    f"artifact directory")
            # with --json, stdout holds only the outcomes: what the task prints goes to stderr
            with contextlib.redirect_stdout(sys.stderr) if args.json else \
                    contextlib.nullcontext():
                rows = task.predict(artifact, out, campaign_dir=args.campaign_dir,
                                    limit=args.limit)
            outcome = _Outcome(artifact, out, 0, rows=rows)
        except Exception as exc:  # noqa: BLE001 - the task's own refusal, named in one line
            outcome = _failed(artifact, out, exc)
        _report(outcome, as_json=args.json, several=several)
        outcomes.append(outcome)
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
