"""Tasks: the code a run executes, behind the protocol of :mod:`flightplan.tasks.protocol`.

This module is the registry of built-in tasks; :mod:`flightplan.tasks.loader` finds a
run's task (a built-in name, a file beside the campaign, or a module).
"""

from __future__ import annotations

from typing import Mapping

from flightplan.spec import DEFAULT_TASK

__all__ = ["BUILTIN_TASKS", "DEFAULT_TASK"]

BUILTIN_TASKS: Mapping[str, str] = {DEFAULT_TASK: "flightplan.tasks.textclf"}
"""Built-in task names and their modules (:data:`flightplan.spec.DEFAULT_TASK` among them)."""
