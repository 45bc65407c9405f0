"""The scheduling problem of a campaign: the tasks to place, the graph facts the solvers
share, and a placed task.

The problem, in seconds (integers)::

    minimise   M = max_i end_i
    subject to end_i = start_i + d_i
               start_i >= end_p                       for every p in after(i)
               each GPU task i holds g_i GPUs of ONE flight f_i for [start_i, end_i)
               no two tasks overlap on the same GPU    (one unary resource per GPU)
               person tasks use at most `people` persons at any time (cumulative)
               an each_flight task E has a copy E@f on every flight f that holds a task
               descending from E (at least one copy); a task on flight f descending from E
               starts after E@f ends; a person-only task right after E waits for one copy

Both solvers read it: the list-scheduling pass of :mod:`flightplan.plan.schedule` and the
exact CP-SAT model of :mod:`flightplan.plan.cpsat`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Task", "Slot", "Problem", "topological_order"]


@dataclass(frozen=True)
class Task:
    """One stage or run to place.

    Attributes:
        name: unique name. kind: ``"stage"`` or ``"run"``. tier: essential/useful/exploratory.
        seconds: duration (s, >= 1). gpus: GPUs held at once (0: none).
        person: holds one person. after: names that must end first.
        each_flight: repeated on every flight that runs anything after it.
    """

    name: str
    kind: str
    tier: str
    seconds: int
    gpus: int = 0
    person: bool = False
    after: tuple[str, ...] = ()
    each_flight: bool = False

    @property
    def uses(self) -> tuple[str, ...]:
        """``("gpu", "person")`` or a part of it."""
        return tuple(u for u, held in (("gpu", self.gpus > 0), ("person", self.person)) if held)


@dataclass(frozen=True)
class Slot:
    """A placed task. ``flight`` is 1-based (None for person-only work); ``gpu_ids`` are
    the GPU indices inside that flight (0-based, like CUDA device numbers)."""

    task: Task
    start_s: int
    end_s: int
    flight: int | None
    gpu_ids: tuple[int, ...] = ()

    @property
    def flight_index(self) -> int:
        """The 0-based index of the flight the slot is on.

        Raises:
            ValueError: person-only work, on no flight.
        """
        if self.flight is None:
            raise ValueError(f"{self.task.name!r} is placed on no flight")
        return self.flight - 1


class Problem:
    """Tasks with their graph facts: predecessors, each_flight ancestors, priorities."""

    def __init__(self, tasks: list[Task], flights: int, gpus_per_flight: int, people: int):
        self.tasks = {t.name: t for t in tasks}
        self.order = [t.name for t in tasks]
        self.flights, self.gpus_per_flight, self.people = flights, gpus_per_flight, people
        self.topo = topological_order(self.tasks)
        self.setups: dict[str, list[str]] = {}          # each_flight ancestors, topological
        position = {n: i for i, n in enumerate(self.topo)}
        for name in self.topo:
            found = set()
            for dep in self.tasks[name].after:
                found.update(self.setups[dep])
                if self.tasks[dep].each_flight:
                    found.add(dep)
            self.setups[name] = sorted(found, key=position.__getitem__)
        self.tail: dict[str, int] = {}                   # longest path from start to the end
        children: dict[str, list[str]] = {n: [] for n in self.tasks}
        for name, task in self.tasks.items():
            for dep in task.after:
                children[dep].append(name)
        self.children = children
        for name in reversed(self.topo):
            self.tail[name] = self.tasks[name].seconds + max(
                (self.tail[c] for c in children[name]), default=0)

    def bound(self, name: str) -> bool:
        """Placed on a flight: holds GPUs or repeats per flight."""
        task = self.tasks[name]
        return task.gpus > 0 or task.each_flight

    def lower_bound(self) -> int:
        """max(critical path, ceil(GPU work / all GPUs), ceil(person work / people))."""
        path = max(self.tail.values(), default=0)
        gpu_work = sum(t.seconds * t.gpus for t in self.tasks.values())
        person_work = sum(t.seconds for t in self.tasks.values() if t.person)
        gpus = self.flights * self.gpus_per_flight
        return max(path, -(-gpu_work // gpus), -(-person_work // self.people))


def topological_order(tasks: dict[str, Task]) -> list[str]:
    """Task names, each after everything in its ``after``. Raises ValueError on a cycle."""
    indegree = {n: len(t.after) for n, t in tasks.items()}
    children: dict[str, list[str]] = {n: [] for n in tasks}
    for name, task in tasks.items():
        for dep in task.after:
            children[dep].append(name)
    ready = [n for n in tasks if indegree[n] == 0]
    out = []
    while ready:
        name = ready.pop()
        out.append(name)
        for child in children[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if len(out) != len(tasks):
        raise ValueError("the tasks' after graph has a cycle")
    return out


