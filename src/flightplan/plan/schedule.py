"""End-to-end schedule of a campaign: a resource-constrained project, solved with CP-SAT.

The problem (:mod:`flightplan.plan.problem`) is a resource-constrained project schedule.
Every GPU is its own unary resource with optional intervals (an item's GPU indices are
reported); flights never pool GPUs, so a task never spans two of them. A serial
list-scheduling pass (priority: longest remaining path) gives a feasible schedule; when
it already meets the lower bound max(critical path, GPU work / GPUs, person work /
people) it is optimal and CP-SAT is skipped, otherwise CP-SAT (:mod:`.cpsat`) starts
from it as a hint under a time limit and, once the makespan is proven minimal, moves
essential work first (Kolisch 1996 for the serial scheme; Laborie et al. 2018 for
interval-based CP scheduling).

Usage::

    tasks = [Task("train", "run", "essential", 36000, gpus=1)]
    result = schedule(tasks, flights=1, gpus_per_flight=1, people=1)
    result.makespan_s, result.slots[0].gpu_ids      # 36000, (0,)
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field, replace

from flightplan.plan.cpsat import solve_exact
from flightplan.plan.problem import Problem, Slot, Task

__all__ = ["Schedule", "schedule"]


@dataclass(frozen=True)
class Schedule:
    """A solved schedule. ``makespan_s`` runs from 0 (the first start) to the last end.

    ``optimal`` is True when the makespan is proven minimal (by CP-SAT or by meeting
    ``lower_bound_s``).
    """

    slots: tuple[Slot, ...]
    makespan_s: int
    optimal: bool
    lower_bound_s: int
    flights: int
    gpus_per_flight: int
    people: int

    @property
    def gpu_seconds(self) -> int:
        """Machine-busy time: sum of duration × GPUs held (each copy counted)."""
        return sum((s.end_s - s.start_s) * len(s.gpu_ids) for s in self.slots)

    @property
    def person_seconds(self) -> int:
        """Human time: sum of durations of the slots that hold a person."""
        return sum(s.end_s - s.start_s for s in self.slots if s.task.person)


@dataclass
class _Timeline:
    """Busy blocks of one unary resource: sorted, disjoint, touching blocks merged (so a
    resource packed back to back is one block, and a search skips it in one step)."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def first_fit(self, t: int, length: int) -> int:
        """The earliest s >= t with [s, s + length) free."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and ends[i] > t:
            t = ends[i]
        i += 1
        while i < len(starts) and starts[i] < t + length:
            t = ends[i]
            i += 1
        return t

    def add(self, start: int, end: int) -> None:
        """Mark [start, end) busy (it must be free)."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_left(starts, start)
        joins_left = i > 0 and ends[i - 1] == start
        joins_right = i < len(starts) and starts[i] == end
        if joins_left and joins_right:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif joins_left:
            ends[i - 1] = end
        elif joins_right:
            starts[i] = start
        else:
            starts.insert(i, start)
            ends.insert(i, end)


class _Greedy:
    """Serial list scheduling: each task, by priority, at its earliest feasible start."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.gpu = [[_Timeline() for _ in range(problem.gpus_per_flight)]
                    for _ in range(problem.flights)]
        self.person = [_Timeline() for _ in range(problem.people)]
        self.placed: dict[tuple[str, int | None], Slot] = {}   # (name, flight of a copy)
        self.copies: dict[str, list[Slot]] = {}                # each_flight name -> copies
        self.flights_used: set[int] = set()

    def run(self) -> list[Slot]:
        p = self.p
        waiting = {n: len(p.tasks[n].after) for n in p.tasks}
        ready = [(-p.tail[n], i, n) for i, n in enumerate(p.order) if waiting[n] == 0]
        heapq.heapify(ready)
        index = {n: i for i, n in enumerate(p.order)}
        while ready:
            _, _, name = heapq.heappop(ready)
            task = p.tasks[name]
            if task.gpus > 0 and not task.each_flight:
                self._place_on_best_flight(name)
            elif not task.each_flight:
                self._place_unbound(name)
            for child in p.children[name]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, (-p.tail[child], index[child], child))
        for name in p.topo:      # each_flight tasks nothing on a flight needed: one copy
            if p.tasks[name].each_flight and not self.copies.get(name):
                self._ensure_copy(name, 0)
        return list(self.placed.values())

    def _ready_time(self, name: str, flight: int | None) -> int:
        """Earliest start allowed by ``after`` (and the flight's each_flight copies)."""
        p, t = self.p, 0
        for dep in p.tasks[name].after:
            if not p.tasks[dep].each_flight:
                t = max(t, self.placed[(dep, None)].end_s)
            elif flight is None:
                t = max(t, min(s.end_s for s in self.copies[dep]))
        if flight is not None:
            for setup in p.setups[name]:
                t = max(t, self.placed[(setup, flight)].end_s)
        return t

    def _earliest(self, task: Task, flight: int | None, t: int) -> tuple[int, list[int], int | None]:
        """First start >= t with ``task.gpus`` free GPUs on ``flight`` and a free person.

        Returns (start, GPU indices, person index or None).
        """
        lines = self.gpu[flight] if flight is not None else []   # the flight's GPUs
        while True:
            gpu_ids: list[int] = []
            if task.gpus:
                fits = sorted((line.first_fit(t, task.seconds), k)
                              for k, line in enumerate(lines))
                if fits[task.gpus - 1][0] > t:
                    t = fits[task.gpus - 1][0]
                    continue
                gpu_ids = sorted(k for _, k in fits[:task.gpus])
            person = None
            if task.person:
                fit, person = min((line.first_fit(t, task.seconds), j)
                                  for j, line in enumerate(self.person))
                if fit > t:
                    t = fit
                    continue
            return t, gpu_ids, person

    def _commit(self, task: Task, flight: int | None, t: int) -> Slot:
        start, gpu_ids, person = self._earliest(task, flight, t)
        end = start + task.seconds
        if flight is not None:          # only a GPU task, placed on a flight, has GPU ids
            for k in gpu_ids:
                self.gpu[flight][k].add(start, end)
        if person is not None:
            self.person[person].add(start, end)
        slot = Slot(task, start, end, None if flight is None else flight + 1, tuple(gpu_ids))
        self.placed[(task.name, flight if task.each_flight else None)] = slot
        if task.each_flight:
            self.copies.setdefault(task.name, []).append(slot)
        if flight is not None:
            self.flights_used.add(flight)
        return slot

    def _ensure_copy(self, name: str, flight: int) -> None:
        if (name, flight) in self.placed:
            return
        for setup in self.p.setups[name]:
            self._ensure_copy(setup, flight)
        self._commit(self.p.tasks[name], flight, self._ready_time(name, flight))

    def _place_on_best_flight(self, name: str) -> None:
        """Try each flight (empty flights are alike: only the first is tried); keep the one
        where the task ends first, set-up copies it would need included."""
        task = self.p.tasks[name]
        best: tuple[int, int, _Greedy | None] | None = None
        tried_empty = False
        for flight in range(self.p.flights):
            empty = flight not in self.flights_used
            if empty and tried_empty:
                continue
            tried_empty |= empty
            missing = [s for s in self.p.setups[name] if (s, flight) not in self.placed]
            trial = None
            if missing:
                trial = self._fork(flight)
                for setup in missing:
                    trial._ensure_copy(setup, flight)
                end = trial._commit(task, flight, trial._ready_time(name, flight)).end_s
            else:
                end = self._earliest(task, flight, self._ready_time(name, flight))[0] + task.seconds
            if best is None or end < best[0]:
                best = (end, flight, trial)
        assert best is not None
        _, flight, trial = best
        if trial is None:
            self._commit(task, flight, self._ready_time(name, flight))
        else:
            self.gpu, self.person, self.placed, self.copies, self.flights_used = \
                trial.gpu, trial.person, trial.placed, trial.copies, trial.flights_used

    def _fork(self, flight: int) -> "_Greedy":
        """A copy that may place work on ``flight`` (and persons) without touching this one."""
        trial = _Greedy.__new__(_Greedy)
        trial.p = self.p
        trial.gpu = list(self.gpu)
        trial.gpu[flight] = [_Timeline(list(t.starts), list(t.ends)) for t in self.gpu[flight]]
        trial.person = [_Timeline(list(t.starts), list(t.ends)) for t in self.person]
        trial.placed = dict(self.placed)
        trial.copies = {k: list(v) for k, v in self.copies.items()}
        trial.flights_used = set(self.flights_used)
        return trial

    def _place_unbound(self, name: str) -> None:
        for dep in self.p.tasks[name].after:
            if self.p.tasks[dep].each_flight and not self.copies.get(dep):
                self._ensure_copy(dep, 0)
        self._commit(self.p.tasks[name], None, self._ready_time(name, None))


def schedule(tasks: list[Task], *, flights: int = 1, gpus_per_flight: int = 1, people: int = 1,
             time_limit_s: float = 2.0) -> Schedule:
    """Place ``tasks`` on ``flights`` flights of ``gpus_per_flight`` GPUs and ``people`` persons.

    Args:
        tasks: names unique, ``after`` naming other tasks, no cycle, ``gpus <= gpus_per_flight``.
        time_limit_s: CP-SAT wall-clock limit (s); a deterministic limit of the same size
            keeps repeated plans identical.

    Returns:
        The schedule with the smallest makespan found; ``optimal`` says if it is proven.

    Raises:
        ValueError: a task needs more GPUs than one flight has, or the graph has a cycle.
    """
    for task in tasks:
        if task.gpus > gpus_per_flight:
            raise ValueError(f"{task.name} needs {task.gpus} GPUs; a flight has {gpus_per_flight}")
    problem = Problem(tasks, flights, gpus_per_flight, people)
    slots = _Greedy(problem).run()
    makespan = max((s.end_s for s in slots), default=0)
    bound = problem.lower_bound()
    optimal = makespan <= bound
    if not optimal and time_limit_s > 0:
        solved = solve_exact(problem, slots, makespan, time_limit_s)
        if solved is not None:
            placements, optimal = solved
            slots = [Slot(problem.tasks[name], start, start + problem.tasks[name].seconds,
                          None if flight is None else flight + 1, gpu_ids)
                     for name, flight, start, gpu_ids in placements]
            makespan = max(s.end_s for s in slots)
    return Schedule(_in_order(slots), makespan, optimal, bound, flights, gpus_per_flight, people)


def _in_order(slots: list[Slot]) -> tuple[Slot, ...]:
    """Slots by start time, flights renumbered in the order they start work (flights are
    interchangeable, so flight 1 is the one that starts first)."""
    first: dict[int, tuple[int, int]] = {}
    for slot in slots:
        if slot.flight is not None:
            first[slot.flight] = min(first.get(slot.flight, (slot.start_s, slot.flight)),
                                     (slot.start_s, slot.flight))
    number = {old: new for new, (_, old) in enumerate(sorted(first.values()), start=1)}
    renumbered = [replace(s, flight=number[s.flight]) if s.flight is not None else s for s in slots]
    return tuple(sorted(renumbered, key=lambda s: (s.start_s, s.flight or 0, s.task.name)))
