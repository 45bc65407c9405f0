"""Exceptions of flightplan, one tree, mapped to exit codes by the CLI.

::

    FlightplanError                  base; never raised itself
    ├── InputError                   exit 2: bad input, one line naming the field and the fix
    │   ├── SpecError                the campaign file (carries file, field, value)
    │   ├── CatalogError             the built-in or a user catalog (file, field, value)
    │   ├── TaskError                a task that cannot be found or breaks the protocol
    │   │   └── TaskHookFailed       a task's optional hook raised (task, hook, exception)
    │   ├── SetupError               this machine's set-up: an optional package not installed
    │   └── ArgumentError            a command-line argument, and only that
    ├── TrialPreempted               exit 75: a run left its flight with a durable checkpoint
    └── CheckFailed                  exit 1: a check ran and found faults
        ├── CheckpointError          a checkpoint is missing, corrupt or refused
        │   ├── TransferError        a file sent between machines arrived with another hash
        │   └── ChannelError         the direct connection for checkpoints failed (Ray carries them)
        ├── UnsafeFileError          a file that would run code or leave its directory
        ├── CorpusMismatch           a corpus file does not match the hash frozen in the spec
        ├── RunDirectoryDamaged      a run directory lacks or garbles a file the runner wrote
        ├── TrialStopped             a stop rule fired inside a trial (carries the record)
        ├── CampaignStopped          the campaign stopped (a rule or the decision point)
        ├── VerificationFailed       a results directory has findings
        ├── LockHeld                 another process holds the campaign lock
        └── TrackingFailed           the experiment tracker (MLflow) refused or could not be reached

Every message is complete on one line: what was given, why it is wrong, the fix; a
misspelt name gets the one hint every module gives (:func:`did_you_mean`).
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from flightplan.findings import Finding
from flightplan.redact import redact

__all__ = [
    "FlightplanError",
    "InputError",
    "SpecError",
    "CatalogError",
    "TaskError",
    "TaskHookFailed",
    "SetupError",
    "ArgumentError",
    "CheckFailed",
    "CheckpointError",
    "TransferError",
    "ChannelError",
    "UnsafeFileError",
    "CorpusMismatch",
    "RunDirectoryDamaged",
    "TrialStopped",
    "TrialPreempted",
    "CampaignStopped",
    "VerificationFailed",
    "LockHeld",
    "TrackingFailed",
    "closest_name",
    "did_you_mean",
]


def closest_name(bad: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` that ``bad`` most likely misspells (:mod:`difflib`'s ratio of
    at least 0.6: ``lora-r9`` for ``lora-r8``, not ``B200`` for ``H100``), else None."""
    close = difflib.get_close_matches(bad, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(bad: str, known: Iterable[str], *, otherwise: str = "") -> str:
    """The end of a message about a name that is not one of ``known``:
    ``"; did you mean 'x'?"`` for the :func:`closest_name`, else ``otherwise`` (e.g.
    ``"; known: 'a', 'b'"``; empty by default)."""
    close = closest_name(bad, known)
    return f"; did you mean {close!r}?" if close is not None else otherwise


class FlightplanError(Exception):
    """Base of all flightplan errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(FlightplanError):
    """Bad input from the user (exit code 2)."""

    exit_code = 2


class _LocatedInputError(InputError):
    """An input error that names the file and the field it comes from.

    Args:
        message: what is wrong and how to fix it.
        file: the file that holds the bad value, if any.
        field: dotted location of the value (``run[1].duration``), if any.
        value: the offending value as given.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 value: Any = None) -> None:
        self.file = file
        self.field = field
        self.value = value
        self.reason = message
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {message}" if where else message)


class SpecError(_LocatedInputError):
    """A campaign file is unreadable or invalid."""


class CatalogError(_LocatedInputError):
    """A catalog (built-in or user file) is invalid, or names an unknown offer/package."""


class TaskError(_LocatedInputError):
    """A task (built-in name, file or module) cannot be found, imported, or lacks a
    required function of the protocol (:mod:`flightplan.tasks.protocol`)."""


class TaskHookFailed(TaskError):
    """An optional hook of a task (``data_check``, ``estimate_run``, ``base_revision``,
    ``pilot_examples``: :mod:`flightplan.tasks.protocol`) raised while the runner called it.

    Attributes:
        task: the task as the campaign file names it. hook: the hook's name.
        error: the exception as one line (``ValueError: ...``). details: its traceback
            (for a log; the message stays one line). log: where the runner wrote the
            traceback, once it has (None before).
    """

    def __init__(self, task: str, hook: str, error: BaseException, *, details: str = "",
                 log: str | None = None) -> None:
        self.task, self.hook, self.details, self.log = task, hook, details, log
        self.error = f"{type(error).__name__}: {error}".strip().splitlines()[0] \
            if str(error).strip() else type(error).__name__
        self.exception = error
        where = f"; its traceback is in {log}" if log else ""
        super().__init__(f"task {task!r}: its {hook} hook raised {self.error}; fix the hook "
                         f"(docs/tasks.md){where}", value=task)

    def logged(self, log: str) -> "TaskHookFailed":
        """The same failure, its message naming ``log`` where the traceback was written."""
        return TaskHookFailed(self.task, self.hook, self.exception, details=self.details,
                              log=log)


class SetupError(InputError):
    """This machine's set-up cannot do what was asked: an optional package that is not
    installed (Ray for ``--executor ray``). The message names the package and how to
    install it."""


class ArgumentError(InputError):
    """A command-line argument is invalid (and only that: a task's or the machine's setting
    has its own class)."""


class CheckFailed(FlightplanError):
    """A check ran and found faults (exit code 1)."""

    exit_code = 1


class CheckpointError(CheckFailed):
    """A checkpoint is missing, corrupt, from another run, or refused by the safe loader."""


class TransferError(CheckpointError):
    """A file sent between the campaign's machine and a flight does not match its sha256
    (or the manifest that lists it); nothing of the transfer was committed."""


class ChannelError(CheckpointError):
    """The direct connection that brings checkpoints home from a flight could not be made,
    failed its authentication, broke its framing or went silent
    (:mod:`flightplan.run.executors.channel`); the transfer goes on over Ray's polls."""


class UnsafeFileError(CheckFailed):
    """A file would execute code when loaded (a pickle) or points outside its directory."""


class CorpusMismatch(CheckFailed):
    """A corpus file's sha256 differs from the hash frozen in the campaign file."""


class RunDirectoryDamaged(CheckFailed):
    """A run directory ``runs/<id>/`` lacks or garbles a file the runner or the task wrote
    (trial.json, stop.json, done.json, metrics.json): a check of what is on disk failed,
    not bad input."""


class TrialStopped(CheckFailed):
    """A stop rule fired. ``record`` is the stop record written to the run directory.

    The record has keys ``run_id, rule, step, value, threshold, message, time``.
    """

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        super().__init__(f"run {record.get('run_id')} stopped by rule "
                         f"'{record.get('rule')}': {record.get('message')}")


class TrialPreempted(FlightplanError):
    """The run left its flight before the package's end (:mod:`flightplan.run.executors.leave_watch`):
    its checkpoint at step ``steps_done`` is saved and durable; it is not over and resumes
    from that checkpoint. Neither bad input nor a failed check: the worker exits with
    ``exit_code`` 75 (``EX_TEMPFAIL`` of ``sysexits.h``: the work goes on elsewhere)."""

    exit_code = 75

    def __init__(self, run_id: str, steps_done: int, checkpoint: str) -> None:
        self.run_id, self.steps_done, self.checkpoint = run_id, steps_done, checkpoint
        super().__init__(f"run {run_id} left its flight after {steps_done} steps with "
                         f"checkpoint {checkpoint} saved; it resumes from there")


class CampaignStopped(CheckFailed):
    """The campaign stopped: a stop rule on an essential stage, or the decision point said stop."""


class VerificationFailed(CheckFailed):
    """A results directory, artifact or checkpoint failed verification. ``findings`` lists
    each fault (:class:`flightplan.findings.Finding`)."""

    def __init__(self, message: str, findings: list[Finding] | None = None) -> None:
        self.findings = findings or []
        super().__init__(message)


class LockHeld(CheckFailed):
    """Another flightplan process holds the campaign's lock."""


class TrackingFailed(CheckFailed):
    """The tracking store (MLflow) could not be reached or refused a write. ``uri`` names it;
    ``reason`` is the cause alone (``"unreachable: [Errno 111] Connection refused"``). All
    three are kept with their credentials masked (:func:`flightplan.redact.redact`): the
    error is printed, logged and sent between processes."""

    def __init__(self, message: str, *, uri: str, reason: str | None = None) -> None:
        self.uri = redact(uri)
        self.reason = redact(reason or message)
        super().__init__(redact(message))
