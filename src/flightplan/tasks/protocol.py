"""The task protocol: what a user's training code must provide, and what it may provide.

A **task** is the code a run executes through the :class:`~flightplan.trial.trial.Trial`
API. It is a Python module: a built-in one (``task = "textclf"``), a file beside the
campaign file (``task = "train.py"``) or an importable module (``task = "mypkg.train"``;
the campaign directory is first on ``sys.path`` while the task's code runs). Everything
flightplan knows about a model, a corpus format or a metric lives behind this protocol;
``docs/tasks.md`` is its user guide.

Required (one function)::

    def train(trial) -> None
        Train with the Trial API (register, restore, log, maybe_checkpoint, evaluate) and
        leave in ``trial.run_dir``: ``predictions.csv`` (one row per test example:
        ``example_id``, then ``gold``/``predicted`` for classification and any
        per-example numeric columns such as ``abs_error``), ``metrics.json`` and
        ``artifact/``. Raise nothing to finish; a stop rule raises ``TrialStopped`` itself.

Optional hooks (module-level functions; without one, the default after the arrow):

- ``reload_predictions(artifact_dir, out, *, campaign_dir, limit) -> rows``: reload the
  artifact in this (fresh) process and write the predictions CSV exactly as training did
  → none: the artifact is not reloadable, so the run's products are not accepted.
- ``base_revision(base_model, params)``: the exact base model revision (a JSON value),
  part of run ids and artifacts → ``None``.
- ``data_check(corpus, params_by_run, base_model) -> dict``: the task's own figures,
  merged into the data check report as top-level keys (textclf: ``lengths``,
  ``truncation``); a ``summary`` string is printed by ``flightplan run`` → ``{}``.
- ``estimate_run(pilot, data_check, params, *, tolerated_loss_s, mtbi_s) -> {total_s, ...}``:
  one run's re-estimate from the pilot's rows (a finer cost model) → steps × the pilot's
  step time and the formula every re-estimate shares (:mod:`flightplan.tasks.estimate`).
- ``pilot_examples(params, steps) -> int``: training examples the pilot's ``steps``
  steps read → ``None``: the whole training split.
- ``prepare_data(corpus_section, params_by_run, base_model, *, campaign_dir)``: build, in
  the runner right after the data check, the prepared data its runs will read from the
  campaign's cache (:mod:`flightplan.trial.data_cache`; textclf: the tokenised splits at
  every ``max_length`` its runs use), so that no run pays for it → nothing: the first
  run that asks builds it.

A hook that raises is one line naming the task, the hook and the exception
(:class:`~flightplan.errors.TaskHookFailed`, exit 2); ``flightplan run`` keeps its traceback
in ``.flightplan/runner.log``.

A module may declare the columns of its ``predictions.csv``::

    PREDICTION_COLUMNS = ("example_id", "gold", "predicted", "n_tokens", "prob_*")

a tuple (or list) of column names written out as literal strings, ``*`` standing for any
text (``prob_*``: one column per class). ``flightplan plan`` reads it without running the
task (from the file's text) and ``flightplan run`` before anything is written, and both
refuse a decision metric the declared columns cannot give (``mean:<column>`` of a column
not declared; a classification metric without ``gold`` and ``predicted``). Without it,
the pilot's predictions are the first check of the metric.

A module may also define ``CODE_VERSION`` (a string): for built-in tasks it stands for the
code in run ids; for a file or module task the sha256 of its source does (see
:mod:`flightplan.tasks.loader`).
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["REQUIRED", "HOOKS", "CALLS", "PREDICTION_COLUMNS", "hook_signature"]


PREDICTION_COLUMNS = "PREDICTION_COLUMNS"
"""The optional declaration of the columns of a task's ``predictions.csv`` (module
docstring)."""

REQUIRED: tuple[str, ...] = ("train",)
"""Functions every task defines."""

HOOKS: Mapping[str, str] = {
    "reload_predictions": "reload_predictions(artifact_dir, out, *, campaign_dir, limit) "
                          "-> rows written",
    "base_revision": "base_revision(base_model, params) -> JSON value or None",
    "data_check": "data_check(corpus, params_by_run, base_model) -> dict of figures",
    "estimate_run": "estimate_run(pilot, data_check, params, *, tolerated_loss_s, mtbi_s) "
                    "-> {total_s, ...} or None",
    "pilot_examples": "pilot_examples(params, steps) -> int or None",
    "prepare_data": "prepare_data(corpus_section, params_by_run, base_model, *, campaign_dir) "
                    "-> None",
}
"""Optional hooks and their signatures (for error messages and docs)."""

CALLS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "train": (("trial",), ()),
    "reload_predictions": (("artifact_dir", "out"), ("campaign_dir", "limit")),
    "base_revision": (("base_model", "params"), ()),
    "data_check": (("corpus", "params_by_run", "base_model"), ()),
    "estimate_run": (("pilot", "data_check", "params"), ("tolerated_loss_s", "mtbi_s")),
    "pilot_examples": (("params", "steps"), ()),
    "prepare_data": (("corpus_section", "params_by_run", "base_model"), ("campaign_dir",)),
}
"""How flightplan calls each function: ``(positional arguments, keyword arguments)``; the
loader checks that a task's function accepts that call before anything runs."""


def hook_signature(name: str) -> str:
    """The documented signature of hook ``name`` (for messages)."""
    return HOOKS.get(name, f"{name}(...)")

