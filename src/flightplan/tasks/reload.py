"""Reload any task's artifact in a fresh process and re-create its predictions.

Usage::

    python -P -m flightplan.tasks.reload TASK_REF ARTIFACT_DIR --out FILE.csv
        [--task-root DIR] [--campaign-dir DIR] [--limit N]

``TASK_REF`` is what a campaign file's ``task`` may be: a built-in name (``textclf``), a
``.py`` file or a dotted module name. A file or module is found in ``--task-root`` (a
kept copy ``results/tasks/<hex>/``, see :mod:`flightplan.tasks.archive`), else in
``--campaign-dir``, else in the current directory. The task is loaded with
:func:`flightplan.tasks.loader.load_task` and its reload hook is called as
``reload_predictions(artifact_dir, out, campaign_dir=..., limit=...)`` (``campaign_dir``:
the ``--campaign-dir`` given, else None: a results directory received alone).

Loading a file or module task *runs its code*; ``close`` does so for the campaign's own
tasks, ``flightplan verify`` only with ``--trust-code``. A built-in task is flightplan's
installed code. ``-P`` keeps the working directory off ``sys.path``; no bytecode is
written, so a kept source folder gains no ``__pycache__/``.

Exit codes: 0 written; 1 refused (the task's hook raised: a base model or corpus that
differs, an unreadable artifact); 2 bad arguments, a task that cannot be loaded, or a
task without a ``reload_predictions`` hook (its artifact is not reloadable).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
                python: str | None = None) -> list[str]:
    """The command that re-creates an artifact's predictions in a fresh process.

    Args:
        ref: the task (built-in name, ``.py`` file or module), as :func:`main` takes it.
        artifact_dir, out: the artifact folder and the CSV to write.
        task_root: the folder a file or module task is found in (a kept copy).
        campaign_dir: passed to the task's reload hook.
        limit: re-create only the first ``limit`` test examples.
        python: the interpreter (default: this one).

    Returns:
        ``[python, "-P", "-m", "flightplan.tasks.reload", ref, artifact_dir, "--out", out,
        ...]``.
    """
    argv = [python or sys.executable, "-P", "-m", "flightplan.tasks.reload", ref, artifact_dir,
            "--out", out]
    for flag, value in (("--task-root", task_root), ("--campaign-dir", campaign_dir),
                        ("--limit", limit)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m flightplan.tasks.reload",
                                     description="Re-create a run's predictions from its "
                                                 "artifact with its task's reload_predictions hook.")
    parser.add_argument("task", help="built-in task name, .py file or module name")
    parser.add_argument("artifact_dir", type=Path, help="the run's artifact folder")
    parser.add_argument("--out", type=Path, required=True, help="CSV file to write")
    parser.add_argument("--task-root", type=Path, default=None,
                        help="folder the task file or module is found in")
    parser.add_argument("--campaign-dir", type=Path, default=None,
                        help="the campaign folder, passed to the task's reload hook")
    parser.add_argument("--limit", type=int, default=None, help="only the first N test examples")
    args = parser.parse_args(argv)
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no __pycache__/ inside a kept source (results stay exact)
    try:
        return _reload(args)
    finally:
        sys.dont_write_bytecode = previous


def _reload(args: argparse.Namespace) -> int:
    from flightplan.tasks.loader import load_task

    try:
        if args.limit is not None and args.limit < 1:
            raise ArgumentError(f"--limit {args.limit}: give a positive number of examples")
        if not args.artifact_dir.is_dir():
            raise ArgumentError(f"{args.artifact_dir}: no such artifact folder; give the run's "
                                f"artifact directory")
        root = args.task_root or args.campaign_dir or Path.cwd()
        task = load_task(args.task, root, field="TASK_REF", source="reload")
        if not task.can_predict:
            raise TaskError(no_reload_hook(args.task))
        rows = task.predict(args.artifact_dir, args.out, campaign_dir=args.campaign_dir,
                            limit=args.limit)
    except FlightplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the task's own refusal, named in one line
        print(f"error: the task's reload_predictions failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    print(f"wrote {rows} predictions to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
