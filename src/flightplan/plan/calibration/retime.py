"""The hours each estimate can move: the plan's sequence re-timed with the estimate at
either end of its range.

**Hours it can move** (:func:`uncertainties`): the end-to-end schedule's makespan with the
estimate at the high end of its range minus the makespan with it at the low end, every
other estimate at its value, each stage kept on the flight, GPUs and person line and in
the order the plan gave it (the plan's sequence re-timed: :func:`retimed_makespan`;
re-solving instead could reorder the stages, and a list schedule can get shorter when a
stage gets longer, Graham 1969, so the difference would not be the estimate's alone). A
disagreement moves no hours; it moves the resolution (docs/decisions.md).

The **uncertainties** are the estimates nothing has measured in this configuration (the
guesses and the scaled ones), largest first; the measured ones are listed apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from flightplan.plan.calibration.estimate import Estimate
from flightplan.plan.problem import Problem, Slot
from flightplan.plan.schedule import Schedule
from flightplan.units import SECONDS_PER_HOUR

__all__ = ["retimed_makespan", "Uncertainty", "uncertainties"]


class _Sequence:
    """A plan's sequence: each placed stage with the stages that must end before it starts
    (its ``after``, its flight's set-up copies, the one before it on each of its GPUs and
    on its person line) and the groups of which one must (a person-only stage after an
    ``each_flight`` one waits for one of its copies), in planned order."""

    def __init__(self, plan: Schedule) -> None:
        slots = sorted(plan.slots, key=lambda s: (s.start_s, s.end_s, s.task.name))
        tasks = {s.task.name: s.task for s in slots}
        problem = Problem(list(tasks.values()), plan.flights, plan.gpus_per_flight, plan.people)
        single: dict[str, int] = {}
        copies: dict[str, dict[int | None, int]] = {}
        for i, slot in enumerate(slots):
            if slot.task.each_flight:
                copies.setdefault(slot.task.name, {})[slot.flight] = i
            else:
                single[slot.task.name] = i
        last_on_gpu: dict[tuple[int | None, int], int] = {}
        person_lines: list[tuple[int, int]] = []      # (planned end, slot index) per person
        self.slots = slots
        self.before: list[list[int]] = []
        self.choose_one: list[list[list[int]]] = []
        for i, slot in enumerate(slots):
            before, choose_one = _predecessors(slot, problem, single, copies)
            for gpu in slot.gpu_ids:
                if (slot.flight, gpu) in last_on_gpu:
                    before.append(last_on_gpu[(slot.flight, gpu)])
                last_on_gpu[(slot.flight, gpu)] = i
            if slot.task.person:
                free = [k for k, (end, _) in enumerate(person_lines) if end <= slot.start_s]
                if free:
                    k = max(free, key=lambda j: person_lines[j][0])
                    before.append(person_lines[k][1])
                    person_lines[k] = (slot.end_s, i)
                else:
                    person_lines.append((slot.end_s, i))
            self.before.append(before)
            self.choose_one.append(choose_one)

    def makespan(self, seconds: Mapping[str, int]) -> int:
        """The makespan with the durations in ``seconds`` (the others as planned)."""
        ends: list[int] = []
        for slot, before, choose_one in zip(self.slots, self.before, self.choose_one):
            start = max([ends[j] for j in before]
                        + [min(ends[j] for j in group) for group in choose_one] + [0])
            ends.append(start + seconds.get(slot.task.name, slot.end_s - slot.start_s))
        return max(ends, default=0)


def retimed_makespan(plan: Schedule, seconds: Mapping[str, int]) -> int:
    """The makespan of ``plan`` with the durations in ``seconds`` (name → s; the others as
    planned), every stage kept on its flight, GPUs and person line and in its planned order
    on each, each starting as soon as what precedes it there and its ``after`` have ended
    (a longest path through the plan's sequence).

    Raises:
        KeyError: a stage's ``after`` names a stage the plan did not place.
    """
    return _Sequence(plan).makespan(seconds)


def _predecessors(slot: Slot, problem: Problem, single: Mapping[str, int],
                  copies: Mapping[str, Mapping[int | None, int]]
                  ) -> tuple[list[int], list[list[int]]]:
    """The slots that must end before ``slot`` starts, and groups of which one must."""
    before: list[int] = []
    choose_one: list[list[int]] = []
    for dep in slot.task.after:
        if dep in single:
            before.append(single[dep])
        elif slot.flight is None:
            choose_one.append(list(copies[dep].values()))
    if slot.flight is not None:
        before += [copies[s][slot.flight] for s in problem.setups[slot.task.name]
                   if slot.flight in copies.get(s, {})]
    return before, choose_one


@dataclass(frozen=True)
class Uncertainty:
    """An estimate and the hours of the end-to-end schedule it can move (0 for a power
    figure, which moves the resolution instead)."""

    estimate: Estimate
    moves_hours: float

    def to_json(self) -> dict[str, Any]:
        """One entry of ``plan --json``'s ``uncertainties`` or ``measured``: ``{subject,
        figure, unit, value, low, high, source, detail, moves_hours}``."""
        e = self.estimate
        return {"subject": e.subject, "figure": e.figure, "unit": e.unit,
                "value": round(e.value, 6), "low": round(e.low, 6), "high": round(e.high, 6),
                "source": e.source, "detail": e.detail, "moves_hours": round(self.moves_hours, 6)}


def uncertainties(plan: Schedule, estimates: Sequence[Estimate]
                  ) -> tuple[tuple[Uncertainty, ...], tuple[Uncertainty, ...]]:
    """The hours each estimate can move (the module docstring), split in two.

    Args:
        plan: the schedule planned with the estimates' values (and any ``--extend``, which
            stays added at both ends of a range).
        estimates: :attr:`Calibrated.estimates`.

    Returns:
        ``(uncertainties, measured)``: the guesses and scaled figures, most hours first
        (then the widest relative range; ties in ``estimates``' order), and the measured
        figures in ``estimates``' order.
    """
    planned = {s.task.name: s.end_s - s.start_s for s in plan.slots}
    sequence = _Sequence(plan)
    out = []
    for e in estimates:
        moves = 0.0
        if e.figure == "duration" and e.subject in planned and e.high > e.low:
            # what the plan added to the estimate (--extend) stays added at both ends
            added = planned[e.subject] - max(1, round(e.value * SECONDS_PER_HOUR))
            low, high = (max(1, added + round(x * SECONDS_PER_HOUR)) for x in (e.low, e.high))
            moves = (sequence.makespan({e.subject: high})
                     - sequence.makespan({e.subject: low})) / SECONDS_PER_HOUR
        out.append(Uncertainty(e, moves))
    measured = tuple(u for u in out if u.estimate.source == "measured")
    out.sort(key=lambda u: (-u.moves_hours,
                            -(u.estimate.high - u.estimate.low) / (u.estimate.value or 1.0)))
    return tuple(u for u in out if u.estimate.source != "measured"), measured
