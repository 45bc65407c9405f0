"""The exception tree that errors.py draws in its docstring is the real one: every class
is drawn under its real parent, and the exit codes it names are the ones the CLI uses."""

from __future__ import annotations

import re
import sys

import pytest

from flightplan import errors
from flightplan.errors import ArgumentError, SetupError, TaskHookFailed, TrialPreempted


def _drawn_tree() -> dict[str, tuple[str | None, int | None]]:
    """class name → (the name it is drawn under, the exit code its line names)."""
    block = errors.__doc__.split("::", 1)[1].split("\n\n")[1]
    drawn: dict[str, tuple[str | None, int | None]] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        found = re.search(r"([A-Z]\w+)", line)
        column = found.start()
        while stack and stack[-1][0] >= column:
            stack.pop()
        code = re.search(r"exit (\d+)", line)
        drawn[found.group(1)] = (stack[-1][1] if stack else None,
                                 int(code.group(1)) if code else None)
        stack.append((column, found.group(1)))
    return drawn


def test_every_error_is_drawn_under_its_parent_with_its_exit_code():
    drawn = _drawn_tree()
    assert set(drawn) == {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    for name, (parent, code) in drawn.items():
        cls = getattr(errors, name)
        if parent is None:
            assert cls is errors.FlightplanError
        else:       # the nearest public ancestor is the one it is drawn under
            ancestors = [c.__name__ for c in cls.__mro__[1:] if c.__name__ in errors.__all__]
            assert ancestors[0] == parent, name
        if code is not None:
            assert cls.exit_code == code, name


def test_a_run_that_left_its_flight_is_neither_bad_input_nor_a_failed_check():
    from flightplan.run.worker import EXIT_PREEMPTED

    left = TrialPreempted("control-0123456789", 40, "step-000040")
    assert left.exit_code == EXIT_PREEMPTED == 75
    assert not isinstance(left, (errors.InputError, errors.CheckFailed))


def test_a_missing_optional_package_is_the_set_up_not_an_argument(monkeypatch):
    from pathlib import Path

    from flightplan.run.commands import make_executor
    from flightplan.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "tiny" / "campaign.toml")
    monkeypatch.setitem(sys.modules, "flightplan.run.executors.ray_executor", None)
    with pytest.raises(SetupError, match=r"--executor ray: Ray is not installed .*; install it "
                                         r"with pip install 'flightplan\[ray\]'") as raised:
        make_executor(spec, engine="ray")
    assert not isinstance(raised.value, ArgumentError) and raised.value.exit_code == 2


def test_a_hook_failure_is_one_line_naming_the_task_the_hook_and_the_exception():
    try:
        raise ValueError("max_length must be positive\nsecond line")
    except ValueError as exc:
        failed = TaskHookFailed("train.py", "data_check", exc, details="Traceback ...")
    assert str(failed) == ("task 'train.py': its data_check hook raised ValueError: max_length "
                           "must be positive; fix the hook (docs/tasks.md)")
    assert str(failed.logged(".flightplan/runner.log")).endswith(
        "; its traceback is in .flightplan/runner.log")
    assert isinstance(failed, errors.TaskError) and failed.exit_code == 2


def test_a_misspelt_name_is_offered_only_when_it_is_close():
    assert errors.closest_name("lora-r9", ["control", "lora-r8"]) == "lora-r8"
    assert errors.closest_name("H100", ["B200", "RTX 4090"]) is None     # one digit in common
    assert errors.did_you_mean("RTX 4080", ["B200", "RTX 4090"]) == "; did you mean 'RTX 4090'?"
    assert errors.did_you_mean("H100", ["B200"], otherwise="; known: 'B200'") == "; known: 'B200'"
