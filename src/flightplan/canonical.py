"""Canonical JSON: the one byte form that run ids and plan hashes are computed from.

Sorted keys, no spaces, UTF-8, no NaN or infinity, so the same value gives the same bytes
in every process, machine and Python version.

Usage::

    canonical_json({"b": 1, "a": [1.5]})   # b'{"a":[1.5],"b":1}'
    plan_sha256(plan)                       # sha256 hex of those bytes
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flightplan.errors import SpecError

__all__ = ["canonical_json", "plan_sha256"]


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes: sorted keys, no spaces, UTF-8, no NaN/inf.

    Raises:
        SpecError: ``value`` holds something JSON cannot represent exactly (NaN, a set,
            an object); the message names the offending type.
    """
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"the run configuration cannot be written as canonical JSON ({exc}); "
                        f"use only strings, numbers, booleans, lists and tables in params",
                        field="params") from None
    return text.encode("utf-8")


def plan_sha256(plan: dict[str, Any]) -> str:
    """sha256 (hex) of the plan's canonical JSON bytes: what freezes the original plan."""
    return hashlib.sha256(canonical_json(plan)).hexdigest()
