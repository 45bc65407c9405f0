"""How often to checkpoint, from measured costs (Young 1974, Daly 2006).

Symbols (all seconds):

    C  save cost: the stall the training loop sees per checkpoint (snapshot into memory)
    D  persist time: from the snapshot until the background write is durable (renamed, fsync'd)
    X  transfer time: from durable on a remote flight until durable at home (the Ray
       executor measures it, :mod:`flightplan.transfer_time`); 0 for a run at home
    R  restore time: reading and applying a checkpoint at start (measured by ``restore()``;
       until one is measured, D stands in for it and the record says so)
    L  tolerated loss: work one accepts to redo after an interruption (``[checkpoint]``)
    M  mean time between interruptions (optional, ``[checkpoint]``)

Interval between the starts of two saves::

    with M:     T = min(T_opt(C, M), L − D − X − R),  at least D
    without M:  T = L − D − X − R,                    at least D

``T_opt`` is Young's first-order optimum ``√(2·C·M)`` (J. W. Young, "A first order
approximation to the optimum checkpoint interval", CACM 17(9), 1974) while ``C/M`` is small
(below :data:`DALY_ABOVE`), and Daly's higher-order estimate otherwise (J. T. Daly, "A higher
order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), 2006)::

    T_opt = √(2CM)·[1 + ⅓·√(C/2M) + ⅑·(C/2M)] − C     if C < 2M
    T_opt = M                                         otherwise

``L − D − X − R`` bounds the work lost to one interruption by L: the last checkpoint
durable where the run resumes from is at most ``T + D + X`` old when the process dies
(on a remote flight a checkpoint protects work only once it is home), and restarting costs
R more. X does not move the optimum: a transfer runs beside the training loop and stalls
nothing, so C alone is the price of a save. "At least D" keeps a single save in flight: a
save never waits long for the previous one (a save made while an older one travels is
sent when it is the newest, and skipped otherwise).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from flightplan.rows import CheckpointInterval

__all__ = ["DALY_ABOVE", "RECORD_CHANGE", "IntervalChoice", "young_interval", "daly_interval",
           "choose_interval", "CheckpointSchedule"]

DALY_ABOVE = 0.01
"""C/M ratio from which Daly's refinement replaces Young's formula (a correction ≥ 2 % there)."""

RECORD_CHANGE = 0.25
"""A new interval is recorded in measurements when it differs from the last recorded one by
more than this fraction."""


@dataclass(frozen=True)
class IntervalChoice:
    """A chosen checkpoint interval and the numbers behind it (seconds).

    ``formula`` is ``"young"``, ``"daly"`` or ``"tolerated_loss"`` (no M); ``bound`` names
    what decided T: ``"optimum"``, ``"tolerated_loss"`` or ``"persist_time"``;
    ``transfer_s`` is X (0.0 for a run at home).
    """

    interval_s: float
    save_stall_s: float
    persist_s: float
    restore_s: float
    restore_measured: bool
    tolerated_loss_s: float
    mtbi_s: float | None
    optimum_s: float | None
    formula: str
    bound: str
    transfer_s: float = 0.0

    def as_row(self, step: int, at: float) -> CheckpointInterval:
        """The ``checkpoint_interval`` row for ``measurements.jsonl`` at ``step``, unix ``at``."""
        return CheckpointInterval(step, at, **asdict(self))


def young_interval(save_s: float, mtbi_s: float) -> float:
    """Young (1974): ``√(2·C·M)`` seconds.

    Args:
        save_s: C, seconds the loop stalls per checkpoint (≥ 0).
        mtbi_s: M, mean seconds between interruptions (> 0).
    """
    return math.sqrt(2.0 * save_s * mtbi_s)


def daly_interval(save_s: float, mtbi_s: float) -> float:
    """Daly (2006), higher-order optimum (seconds); ``M`` when ``C ≥ 2M``.

    Args: as :func:`young_interval`.
    """
    if save_s >= 2.0 * mtbi_s:
        return mtbi_s
    ratio = save_s / (2.0 * mtbi_s)
    return math.sqrt(2.0 * save_s * mtbi_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_s


def choose_interval(*, save_stall_s: float, persist_s: float, restore_s: float,
                    tolerated_loss_s: float, mtbi_s: float | None = None,
                    restore_measured: bool = True, transfer_s: float = 0.0) -> IntervalChoice:
    """The checkpoint interval T (see the module docstring for the formula).

    Args:
        save_stall_s: C.   persist_s: D.   restore_s: R.   tolerated_loss_s: L.
        mtbi_s: M, or None when the campaign file gives none.
        restore_measured: False when ``restore_s`` is an estimate (D), kept in the record.
        transfer_s: X, seconds until a checkpoint durable on a remote flight is durable at
            home (0.0: the run is at home).

    Returns:
        The choice with every input, the optimum (None without M) and what bounded T.
    """
    budget = tolerated_loss_s - persist_s - transfer_s - restore_s
    if mtbi_s is None:
        optimum, formula = None, "tolerated_loss"
        interval, bound = budget, "tolerated_loss"
    else:
        use_daly = save_stall_s / mtbi_s >= DALY_ABOVE
        optimum = (daly_interval if use_daly else young_interval)(save_stall_s, mtbi_s)
        formula = "daly" if use_daly else "young"
        interval, bound = (optimum, "optimum") if optimum <= budget else (budget, "tolerated_loss")
    if interval < persist_s:
        interval, bound = persist_s, "persist_time"
    return IntervalChoice(interval_s=interval, save_stall_s=save_stall_s, persist_s=persist_s,
                          restore_s=restore_s, restore_measured=restore_measured,
                          tolerated_loss_s=tolerated_loss_s, mtbi_s=mtbi_s, optimum_s=optimum,
                          formula=formula, bound=bound, transfer_s=transfer_s)


class CheckpointSchedule:
    """Decides when the next save is due, from the costs measured so far in this process.

    The first call to :meth:`due` is True (the first save measures C and D); afterwards a
    save is due once ``interval_s`` seconds have passed since the last save started. C and
    D are the means over the saves seen; R is the last measured restore; X is the one given
    with the latest save (it is already a mean over the transfers measured at home).

    Args:
        tolerated_loss_s: L.   mtbi_s: M or None.
    """

    def __init__(self, tolerated_loss_s: float, mtbi_s: float | None = None) -> None:
        self.tolerated_loss_s = tolerated_loss_s
        self.mtbi_s = mtbi_s
        self._stalls: list[float] = []
        self._persists: list[float] = []
        self._restore_s: float | None = None
        self._started_any = False
        self._last_start_s: float | None = None
        self.choice: IntervalChoice | None = None
        self._recorded_s: float | None = None

    def record_restore(self, restore_s: float) -> None:
        """Remember the measured restore time R (seconds)."""
        self._restore_s = restore_s

    def record_start(self, now_s: float) -> None:
        """A save started at monotonic time ``now_s`` (seconds)."""
        self._started_any = True
        self._last_start_s = now_s

    def record_save(self, stall_s: float, persist_s: float,
                    transfer_s: float = 0.0) -> IntervalChoice | None:
        """Add one save's C and D (seconds), take X = ``transfer_s`` and recompute T.

        Returns:
            The new choice when it should be recorded (the first one, or one that moved by
            more than :data:`RECORD_CHANGE`), else None.
        """
        self._stalls.append(stall_s)
        self._persists.append(persist_s)
        save_s = sum(self._stalls) / len(self._stalls)
        persist = sum(self._persists) / len(self._persists)
        restore = self._restore_s
        measured = restore is not None
        self.choice = choose_interval(save_stall_s=save_s, persist_s=persist,
                                      restore_s=restore if restore is not None else persist,
                                      tolerated_loss_s=self.tolerated_loss_s, mtbi_s=self.mtbi_s,
                                      restore_measured=measured, transfer_s=transfer_s)
        new = self.choice.interval_s
        last = self._recorded_s
        if last is None or abs(new - last) > RECORD_CHANGE * last:
            self._recorded_s = new
            return self.choice
        return None

    def due(self, now_s: float) -> bool:
        """Whether a save should start at monotonic time ``now_s`` (seconds)."""
        if not self._started_any:
            return True
        if self.choice is None or self._last_start_s is None:
            return False  # the first save is still being written: C and D are not known yet
        return now_s - self._last_start_s >= self.choice.interval_s
