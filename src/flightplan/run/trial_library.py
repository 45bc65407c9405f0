"""The part of :class:`~flightplan.run.trial.Trial` for loops whose library saves and loads
its own checkpoints (the Hugging Face Trainer, Lightning: ``flightplan.integrations``).

:class:`LibraryCheckpoints` is a base of ``Trial`` (kept apart for size): it picks the
checkpoint the library resumes from, asks the interval policy when to save and commits
each folder the library wrote, through the trial's own selection, rows, schedule and
request to leave.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from flightplan.run.checkpoint import SaveResult, prune
from flightplan.run.library_checkpoint import (commit_library_checkpoint,
                                               load_library_checkpoint, missing_files)
from flightplan.run.stop_rules import NoUsableResume

__all__ = ["LibraryCheckpoints"]


class LibraryCheckpoints:
    """Trial methods for library-written checkpoints (module docstring); they use the
    trial's ``_select``, ``_stop``, ``_row``, ``_saved``, ``_left``, ``_begin_loop``,
    ``_schedule`` and counters, so only ``Trial`` derives from it."""

    def restore_library(self, *, required: Mapping[str, str]) -> Path | None:
        """Pick the checkpoint a library (Trainer, Lightning) should resume from, instead of
        :meth:`restore`: the newest committed folder whose every byte matches its manifest
        (partials removed, bad ones set aside as in :meth:`restore`), and which holds every
        file of ``required`` (file name → what it holds).

        Returns:
            The folder to hand to the library, or None to start at step 0.

        Raises:
            TrialStopped: rule ``no_usable_resume``: as :meth:`restore`, or (with
                ``require_resume`` on) the newest valid checkpoint lacks a required file,
                e.g. one saved with the Trainer's ``save_only_model=True``.
        """
        start = time.monotonic()
        files, path, rejected = self._select(load_library_checkpoint)
        if files is None or path is None:
            return None
        missing = missing_files(files.manifest, required)
        if missing:
            reason = (f"{path.name} lacks {', '.join(missing)}: resuming from it would go on "
                      f"with a fresh optimizer, schedule and random streams; save full "
                      f"checkpoints (the Trainer's save_only_model=False)")
            if self.stop_rules.require_resume:
                self._stop(NoUsableResume().verdict([reason], rejected=len(rejected)))
            self._row(0, event="restore", source=None, rejected=[r.name for r in rejected],
                      message=f"{reason}; starting at step 0 (require_resume is off)")
            return None
        self._steps_done = int(files.manifest["step"])
        self.epoch = int(files.manifest.get("epoch", 0))
        restore_s = time.monotonic() - start
        self._schedule.record_restore(restore_s)
        self._row(self._steps_done, event="restore", source=path.name, restore_s=restore_s,
                  rejected=[r.name for r in rejected], not_yet_registered=[])
        return path

    def library_checkpoint_due(self) -> bool:
        """Whether the measured interval policy (:mod:`flightplan.run.interval`) wants a save
        now; the first call is True (that save measures its cost). True as well when the
        executor asked the run to leave its flight (:meth:`request_leave`)."""
        return self.leave_requested or self._schedule.due(time.monotonic())

    def commit_library_checkpoint(self, source: Path, steps_done: int, *, kind: str,
                                  save_s: float) -> Path:
        """Commit the library's finished folder ``source`` as ``step-{steps_done:06d}``
        (:func:`flightplan.run.library_checkpoint.commit_library_checkpoint`), keep the newest
        ``keep_last``, log the ``checkpoint`` row and feed the interval policy.

        Args:
            source: the folder the library wrote (in its staging folder).
            steps_done: optimizer steps done.   kind: the library (``"transformers"``).
            save_s: seconds the loop spent in the library's own save, before this call.

        Returns:
            The committed directory.

        Raises:
            CheckpointError: ``source`` is not a flat folder.   OSError: from the disk.
            TrialPreempted: the run was asked to leave its flight and stop (after the commit).
        """
        self._begin_loop()
        start = time.monotonic()
        meta = {"kind": kind, "run_id": self.run_id, "config_hash": self.config_hash,
                "epoch": self.epoch, "saved_at": time.time()}
        parent = self.run_dir / "checkpoints"
        path, size = commit_library_checkpoint(source, parent, steps_done, meta=meta)
        prune(parent, self.checkpoint_policy.keep_last)
        stall_s = save_s + time.monotonic() - start  # the save is synchronous: C = D
        self._schedule.record_start(start - save_s)
        self._saved(SaveResult(steps_done, path, size, stall_s, stall_s))
        if self._leave is not None:
            self._left(steps_done)
        return path
