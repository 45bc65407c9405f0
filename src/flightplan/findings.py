"""A finding: one fault a check found, the one shape every verifier reports.

Checkpoints (:mod:`flightplan.trial.checkpoint_io`, ``flightplan checkpoint verify``),
results directories (:mod:`flightplan.close.verify`, ``flightplan verify``) and artifacts
(a task's reload) all name each fault as a :class:`Finding`; JSON output writes it as
``{"check", "path", "message"}`` (:meth:`Finding.as_dict`), and
:class:`flightplan.errors.VerificationFailed` carries a list of them.

Usage::

    found = Finding("checksum", "predictions/control-1a2b.csv", "1204 bytes; the manifest says 1203")
    found.as_dict()      # {"check": "checksum", "path": "predictions/…", "message": "…"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """One fault: which ``check`` failed (a name of the verifier's JSON contract, e.g.
    ``checksum``, ``sha256``, ``reload``), on which ``path`` (relative to what was checked:
    the results directory, the checkpoint folder), and why (``message``, one line that says
    what is wrong and, where there is one, the fix)."""

    check: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """``{check, path, message}`` for JSON."""
        return {"check": self.check, "path": self.path, "message": self.message}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "Finding":
        """The finding a JSON object ``{check, path, message}`` holds (values as strings)."""
        return cls(str(value.get("check", "")), str(value.get("path", "")),
                   str(value.get("message", "")))
