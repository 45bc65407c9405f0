"""The task protocol: what a user's training code must provide, and what it may provide.

A **task** is the code a run executes through the :class:`~flightplan.run.trial.Trial`
API. It is a Python module: a built-in one (``task = "textclf"``), a file beside the
campaign file (``task = "train.py"``) or an importable module (``task = "mypkg.train"``;
the campaign directory is on ``sys.path``). Everything flightplan knows about a model, a
corpus format or a metric lives behind this protocol; ``docs/tasks.md`` is its user guide.

Required (one function)::

    def train(trial) -> None
        Train with the Trial API (register, restore, log, maybe_checkpoint, evaluate) and
        leave in ``trial.run_dir``: ``predictions.csv`` (one row per test example:
        ``example_id``, then ``gold``/``predicted`` for classification and any
        per-example numeric columns such as ``abs_error``), ``metrics.json`` and
        ``artifact/``. Raise nothing to finish; a stop rule raises ``TrialStopped`` itself.

Optional hooks (module-level functions; each has the default given):

================  ==========================================================  ============
hook              called                                                      default
================  ==========================================================  ============
``predict``       ``predict(artifact_dir, out, *, campaign_dir, limit)``:     none: the
                  reload the artifact in this (fresh) process and write the   products are
                  predictions CSV exactly as training did; returns the rows   not accepted
``base_revision`` ``base_revision(base_model, params)``: the exact base        ``None``
                  model revision (a JSON value) for run ids and artifacts
``data_check``    ``data_check(corpus, params_by_run, base_model)``: task     ``{}``
                  figures merged into the data check report as top-level
                  keys (textclf: ``lengths``, ``truncation``)
``estimate_run``  ``estimate_run(pilot, data_check, params)``: seconds one    steps × the
                  run takes, from the pilot's figures (a finer cost model)    pilot's step
================  ==========================================================  ============

A module may also define ``CODE_VERSION`` (a string): for built-in tasks it stands for the
code in run ids; for a file or module task the sha256 of its source does (see
:mod:`flightplan.tasks.loader`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

__all__ = ["Task", "REQUIRED", "HOOKS", "hook_signature"]


@runtime_checkable
class Task(Protocol):
    """The one required part of a task module."""

    def train(self, trial: Any) -> None:
        """Train one run through ``trial`` and leave predictions, metrics and artifact."""


REQUIRED: tuple[str, ...] = ("train",)
"""Functions every task defines."""

HOOKS: Mapping[str, str] = {
    "predict": "predict(artifact_dir, out, *, campaign_dir, limit) -> rows written",
    "base_revision": "base_revision(base_model, params) -> JSON value or None",
    "data_check": "data_check(corpus, params_by_run, base_model) -> dict of figures",
    "estimate_run": "estimate_run(pilot, data_check, params) -> seconds or None",
}
"""Optional hooks and their signatures (for error messages and docs)."""


def hook_signature(name: str) -> str:
    """The documented signature of hook ``name`` (for messages)."""
    return HOOKS.get(name, f"{name}(...)")

