"""The process that runs one trial: ``python -m flightplan.run.worker <run_dir>/trial.json``.

It builds the :class:`~flightplan.run.trial.Trial` from the file, sets ``FLIGHTPLAN_TRIAL``
for code that calls ``Trial.from_env()``, imports ``flightplan.tasks.<task>`` only then and
calls its ``train(trial)``. If ``train`` returns without calling ``trial.finish()``, the
worker calls it.

Exit codes:

====  ==================================================================
0     finished (``done.json`` written)
1     stopped by a rule (``stop.json`` written)
2     bad trial.json, or no task of that name
3     crashed (traceback on stderr, which the executor keeps in log.txt)
====  ==================================================================
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from flightplan.errors import InputError, TrialStopped

__all__ = ["main", "EXIT_FINISHED", "EXIT_STOPPED", "EXIT_BAD_INPUT", "EXIT_CRASHED"]

EXIT_FINISHED, EXIT_STOPPED, EXIT_BAD_INPUT, EXIT_CRASHED = 0, 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    """Run the trial named by ``argv[0]`` (a trial.json path); the exit code (see above)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flightplan.run.worker RUN_DIR/trial.json", file=sys.stderr)
        return EXIT_BAD_INPUT
    from flightplan.run.trial import TRIAL_ENV, Trial

    try:
        trial = Trial.from_file(args[0])
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    os.environ[TRIAL_ENV] = os.path.abspath(args[0])
    try:
        task = importlib.import_module(f"flightplan.tasks.{trial.task}")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"flightplan.tasks.{trial.task}", "flightplan.tasks"):
            raise
        print(f"error: {args[0]}: task: no task {trial.task!r} in flightplan.tasks; "
              f"fix the run's task in the campaign file", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        task.train(trial)
        if not trial.finished:
            trial.finish()
    except TrialStopped as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except Exception:  # noqa: BLE001 - any crash of the task is exit 3, with its traceback
        traceback.print_exc()
        return EXIT_CRASHED
    return EXIT_FINISHED


if __name__ == "__main__":
    sys.exit(main())
