"""The exact model of the schedule for OR-Tools CP-SAT (the problem is stated in
:mod:`flightplan.plan.problem`).

Variables, in seconds: a start per task instance; for a GPU task a literal per flight
(``x[i,f]``, exactly one) and, when it holds fewer GPUs than a flight has, a literal per
GPU (``g[i,f,k]``, ``sum_k g = gpus × x``); for an ``each_flight`` task a presence
literal per flight (``u[E,f]``, the max of the literals of the flight-bound tasks that
descend from it, or flight 0 alone when none does). Each GPU is a NoOverlap over the
optional intervals that may use it; persons are a NoOverlap (one person) or a
Cumulative of capacity ``people``. The list-scheduling solution is the hint and its
makespan the horizon, so the solver only ever improves on it. When the makespan is
proven minimal within the limit, a second pass keeps it and moves work earlier by tier
(minimise Σ weight × start, weights essential 100, useful 10, exploratory 1), so a
campaign cut short has its essential results first.

Usage::

    solved = solve_exact(problem, greedy_slots, greedy_makespan, time_limit_s=1.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ortools.sat.python import cp_model

if TYPE_CHECKING:
    from flightplan.plan.problem import Problem, Slot

__all__ = ["solve_exact", "Placement"]

#: weight of a task's start in the second pass (earlier essential work survives a cut)
_TIER_WEIGHT = {"essential": 100, "useful": 10, "exploratory": 1}

#: (task name, flight index 0-based or None for person-only work, start_s, GPU indices)
Placement = tuple[str, "int | None", int, tuple[int, ...]]


def solve_exact(problem: Problem, hint: list[Slot], horizon: int,
                time_limit_s: float) -> tuple[list[Placement], bool] | None:
    """CP-SAT on ``problem`` with ``hint`` (a feasible schedule of makespan ``horizon``).

    Returns the placements ``(name, flight index (0-based) or None, start_s, GPU ids)``
    and whether they are proven optimal, or None when the solver found nothing within
    the limit (the caller keeps the hint).
    """
    schedule = _ScheduleModel(problem, horizon)
    schedule.hint(hint)
    model = schedule.model
    solver = _solver(time_limit_s)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    left = time_limit_s - max(solver.wall_time, solver.deterministic_time)
    if status == cp_model.OPTIMAL and left > 0.01:
        # second pass, makespan kept: essential work as early as possible, then useful
        best = solver.value(schedule.makespan)
        values = [solver.value(model.get_int_var_from_proto_index(i))
                  for i in range(len(model.proto.variables))]
        model.clear_hints()  # type: ignore[no-untyped-call]  # OR-Tools leaves it unannotated
        for i, value in enumerate(values):
            model.add_hint(model.get_int_var_from_proto_index(i), value)
        model.add(schedule.makespan <= best)
        model.minimize(sum(_TIER_WEIGHT[problem.tasks[name].tier] * start
                           for (name, _), (start, _, _) in schedule.inst.items()))
        second = _solver(left)
        if second.solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solver = second
    return schedule.placements(solver), status == cp_model.OPTIMAL


class _ScheduleModel:
    """The CP-SAT model of one problem (module docstring), built in the order the
    constraints are stated: instances, which ``each_flight`` copies exist, precedence,
    the resources, the makespan (minimised)."""

    def __init__(self, problem: Problem, horizon: int) -> None:
        self.p = problem
        self.horizon = horizon
        self.flights, self.per_flight = range(problem.flights), range(problem.gpus_per_flight)
        self.model = cp_model.CpModel()
        self.gpu_intervals: list[list[list[cp_model.IntervalVar]]] = [
            [[] for _ in self.per_flight] for _ in self.flights]
        self.person_intervals: list[cp_model.IntervalVar] = []
        self.person_demands: list[int] = []
        # instances: (name, flight or None) -> (start var, end var, presence literal)
        self.inst: dict[tuple[str, int | None], tuple[Any, Any, Any]] = {}
        self.on_flight: dict[str, list[Any]] = {}   # name -> per flight literal (placed there)
        self.on_gpu: dict[tuple[str, int | None], dict[tuple[int, int], Any]] = {}
        for name in problem.topo:
            task = problem.tasks[name]
            if task.each_flight:
                for f in self.flights:
                    self._add_instance(name, f, self.model.new_bool_var(f"u[{name},{f}]"))
            else:
                if task.gpus:
                    self.on_flight[name] = [self.model.new_bool_var(f"x[{name},{f}]")
                                            for f in self.flights]
                    self.model.add_exactly_one(self.on_flight[name])
                self._add_instance(name, None, None)
        self._each_flight_copies()
        self._precedence()
        self.makespan = self._resources_and_makespan()

    def _add_instance(self, name: str, flight: int | None, present: Any) -> None:
        p, model = self.p, self.model
        task = p.tasks[name]
        start = model.new_int_var(0, self.horizon - task.seconds, f"s[{name},{flight}]")
        end = start + task.seconds
        self.inst[(name, flight)] = (start, end, present)
        if task.person:
            self.person_intervals.append(
                model.new_fixed_size_interval_var(start, task.seconds, f"p[{name}]")
                if present is None else model.new_optional_fixed_size_interval_var(
                    start, task.seconds, present, f"p[{name},{flight}]"))
            self.person_demands.append(1)
        if not task.gpus:
            return
        hosts = [flight] if flight is not None else list(self.flights)
        picks: dict[tuple[int, int], Any] = {}
        for f in hosts:
            here = present if flight is not None else self.on_flight[name][f]
            for k in self.per_flight:
                if p.gpus_per_flight == task.gpus:
                    lit = here
                else:
                    lit = picks[(f, k)] = model.new_bool_var(f"g[{name},{f},{k}]")
                self.gpu_intervals[f][k].append(model.new_optional_fixed_size_interval_var(
                    start, task.seconds, lit, f"i[{name},{f},{k}]"))
            if picks:
                model.add(sum(picks[(f, k)] for k in self.per_flight) == task.gpus * here)
        self.on_gpu[(name, flight)] = picks

    def _each_flight_copies(self) -> None:
        """Which copies of each each_flight task exist: those its flight-bound descendants
        need (flight 0 alone when none does)."""
        p, model, inst, flights = self.p, self.model, self.inst, self.flights
        needs: dict[tuple[str, int], list[Any]] = {}
        for name, task in p.tasks.items():
            for setup in p.setups[name]:
                for f in flights:
                    lit = (inst[(name, f)][2] if task.each_flight
                           else self.on_flight.get(name, [None] * p.flights)[f])
                    if lit is not None:
                        needs.setdefault((setup, f), []).append(lit)
        for name, task in p.tasks.items():
            if not task.each_flight:
                continue
            if not any((name, f) in needs for f in flights):
                for f in flights:
                    model.add(inst[(name, f)][2] == (1 if f == 0 else 0))
                continue
            for f in flights:
                model.add_max_equality(inst[(name, f)][2],
                                       needs.get((name, f), [model.new_constant(0)]))

    def _precedence(self) -> None:
        p, model, inst, flights = self.p, self.model, self.inst, self.flights
        for name, task in p.tasks.items():
            copies: list[tuple[int | None, Any, Any, Any]] = (
                [(f, *inst[(name, f)]) for f in flights] if task.each_flight
                else [(None, *inst[(name, None)])])
            for copy_flight, start, _, present in copies:
                for dep in task.after:
                    if not p.tasks[dep].each_flight:
                        model.add(start >= inst[(dep, None)][1])
                    elif copy_flight is None and not task.gpus:
                        chosen = [model.new_bool_var(f"c[{name},{dep},{g}]") for g in flights]
                        model.add_bool_or(chosen)
                        for g in flights:
                            model.add_implication(chosen[g], inst[(dep, g)][2])
                            model.add(start >= inst[(dep, g)][1]).only_enforce_if(chosen[g])
                for setup in (p.setups[name] if p.bound(name) else ()):
                    for g in ([copy_flight] if copy_flight is not None else flights):
                        lit = present if copy_flight is not None else self.on_flight[name][g]
                        model.add(start >= inst[(setup, g)][1]).only_enforce_if(lit)

    def _resources_and_makespan(self) -> Any:
        """GPUs (NoOverlap each), persons (NoOverlap or Cumulative), and the makespan
        variable, minimised."""
        p, model = self.p, self.model
        for f in self.flights:
            for k in self.per_flight:
                if len(self.gpu_intervals[f][k]) > 1:
                    model.add_no_overlap(self.gpu_intervals[f][k])
        if len(self.person_intervals) > 1:
            if p.people == 1:
                model.add_no_overlap(self.person_intervals)
            else:
                model.add_cumulative(self.person_intervals, self.person_demands, p.people)
        makespan = model.new_int_var(p.lower_bound(), self.horizon, "makespan")
        for _, end, present in self.inst.values():
            if present is None:
                model.add(makespan >= end)
            else:
                model.add(makespan >= end).only_enforce_if(present)
        model.minimize(makespan)
        return makespan

    def hint(self, slots: list[Slot]) -> None:
        """Give CP-SAT the greedy schedule as a complete starting solution."""
        placed = {(s.task.name, s.flight_index if s.task.each_flight else None): s
                  for s in slots}
        for (name, f), (start, _, present) in self.inst.items():
            slot = placed.get((name, f))
            self.model.add_hint(start, slot.start_s if slot else 0)
            if f is not None:
                self.model.add_hint(present, slot is not None)

    def placements(self, solver: cp_model.CpSolver) -> list[Placement]:
        """The solved instances that are present, with their flight and GPU ids."""
        placements: list[Placement] = []
        for (name, copy), (start, _, present) in self.inst.items():
            if present is not None and not solver.boolean_value(present):
                continue
            task = self.p.tasks[name]
            flight = copy
            if task.gpus and copy is None:
                flight = next(g for g in self.flights
                              if solver.boolean_value(self.on_flight[name][g]))
            picks = self.on_gpu.get((name, copy), {})
            gpu_ids = tuple(k for k in self.per_flight if task.gpus and flight is not None and
                            (not picks or solver.boolean_value(picks[(flight, k)])))
            placements.append((name, flight, solver.value(start), gpu_ids))
        return placements


def _solver(limit_s: float) -> cp_model.CpSolver:
    """One worker, fixed seed, the same wall and deterministic limit (repeatable plans).

    ``catch_sigint_signal`` off: CP-SAT otherwise installs its own C-level SIGINT handler
    during a solve and leaves SIGINT at its default action afterwards, so a later Ctrl-C
    killed ``flightplan run`` outright, with no "interrupted: …" line.
    """
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = limit_s
    solver.parameters.max_deterministic_time = limit_s
    return solver
