"""``trial.json``: what the runner tells one run's process (keys in docs/internals.md).

Usage::

    config = read_trial_file(run_dir / "trial.json")    # TrialFile, or SpecError
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from flightplan.errors import SpecError
from flightplan.spec import CheckpointPolicy, StopRules

__all__ = ["TrialFile", "TRIAL_ENV", "read_trial_file"]

TRIAL_ENV = "FLIGHTPLAN_TRIAL"


class TrialFile(BaseModel):
    """``trial.json`` as the runner writes it (unknown keys are ignored, for newer runners)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    name: str | None = None
    tier: str | None = None
    task: str
    params: dict[str, Any] = {}
    planned_steps: int | None = None
    max_steps: int | None = None
    stop: StopRules = StopRules()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    corpus: dict[str, Any] | None = None
    base_model: dict[str, Any] | None = None
    campaign_dir: str | None = None
    resume: bool = False
    await_checkpoint: bool = False
    config_hash: str | None = None
    code_version: str | None = None
    deterministic: bool = True
    reshard: bool = False


def read_trial_file(path: Path | str) -> TrialFile:
    """The :class:`TrialFile` at ``path``.

    Raises:
        SpecError: the file is missing, not JSON, or a field is invalid (names the field).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError("no such file; give the trial.json the runner wrote",
                        file=str(path)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"not valid JSON ({exc}); rewrite it with the runner",
                        file=str(path)) from None
    try:
        config = TrialFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"{first['msg']} (given {first.get('input')!r}); fix trial.json",
                        file=str(path), field=field or None) from None
    return config
