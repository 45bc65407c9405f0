"""The schedule: hand-worked makespans of the illustration campaign, each_flight copies,
and (hypothesis) that no plan ever puts two items on one GPU at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flightplan.plan.campaign_plan import tasks_for_spec
from flightplan.plan.problem import Task
from flightplan.plan.schedule import Schedule, schedule
from flightplan.units import Duration

H = 3600


def test_illustration_is_48_hours_on_one_gpu_and_one_person(illustration) -> None:
    tasks = tasks_for_spec(illustration)
    result = schedule(tasks, flights=1, gpus_per_flight=1, people=1)
    # GPU chain 2 + 2 + 10 + 10 + 14 = 38 h, then the 10 h report (a person): 48 h.
    assert result.makespan_s == 48 * H
    assert result.optimal
    assert result.gpu_seconds == 38 * H
    assert result.person_seconds == (2 + 10 + 10) * H   # install, error-analysis, report
    by_name = {s.task.name: s for s in result.slots}
    assert by_name["report"].start_s == 38 * H
    assert by_name["report"].flight is None and by_name["report"].gpu_ids == ()
    # error-analysis (a person) overlaps the GPU work after the control
    analysis = by_name["error-analysis"]
    assert analysis.start_s >= by_name["control"].end_s and analysis.end_s <= 38 * H


def test_essential_runs_come_first_when_the_makespan_allows(illustration) -> None:
    result = schedule(tasks_for_spec(illustration), flights=1)
    order = [s.task.name for s in result.slots if s.task.kind == "run"]
    assert order[-1] == "lora-r8-len256"            # the useful run last, still 48 h
    starts = {s.task.name: s.start_s for s in result.slots}
    assert starts["control"] == 4 * H and starts["error-analysis"] == 14 * H


def test_48_hours_lies_between_side_by_side_and_the_naive_sum(illustration) -> None:
    tasks = tasks_for_spec(illustration)
    naive = sum(t.seconds for t in tasks)
    assert naive == 58 * H
    # wrongly letting the three runs share the one GPU: 2 + 2 + 14 (longest run) = 18 h,
    # then the one person does error-analysis (14-24) and the report (24-34) → 34 h;
    # with a second person the report starts at 18 → 2 + 2 + 14 + 10 = 28 h.
    side_by_side = schedule(tasks, flights=1, gpus_per_flight=3, people=1)
    assert side_by_side.makespan_s == 34 * H
    assert schedule(tasks, flights=1, gpus_per_flight=3, people=2).makespan_s == 28 * H
    assert side_by_side.makespan_s < schedule(tasks, flights=1).makespan_s < naive


def test_extending_lora_r8_by_30_hours_gives_78_hours(illustration) -> None:
    tasks = tasks_for_spec(illustration, extend={"lora-r8": Duration.parse("30h")})
    assert schedule(tasks, flights=1).makespan_s == 78 * H


def test_two_flights_repeat_install_and_spread_the_runs(illustration) -> None:
    tasks = tasks_for_spec(illustration, extend={"lora-r8": Duration.parse("30h")})
    result = schedule(tasks, flights=2)
    # flight A: install 0-2, data-check 2-4, then control and len256 (24 h) → 28;
    # flight B: install 2-4 (the one person is busy 0-2), lora-r8 4-44; report 44-54.
    assert result.makespan_s == 54 * H
    installs = [s for s in result.slots if s.task.name == "install"]
    assert sorted(s.flight for s in installs) == [1, 2]
    assert sorted((s.start_s, s.end_s) for s in installs) == [(0, 2 * H), (2 * H, 4 * H)]
    for slot in result.slots:
        if slot.flight is not None and slot.task.name != "install":
            own_install = next(s for s in installs if s.flight == slot.flight)
            assert slot.start_s >= own_install.end_s


def test_each_flight_stage_without_dependents_runs_once() -> None:
    tasks = [Task("warmup", "stage", "essential", H, gpus=1, each_flight=True),
             Task("train", "run", "essential", 5 * H, gpus=1)]
    result = schedule(tasks, flights=3)
    assert [s.task.name for s in result.slots].count("warmup") == 1


def test_a_two_gpu_run_holds_two_gpus_of_one_flight() -> None:
    tasks = [Task("big", "run", "essential", 4 * H, gpus=2),
             Task("small", "run", "essential", 3 * H, gpus=1),
             Task("small2", "run", "essential", 3 * H, gpus=1)]
    result = schedule(tasks, flights=1, gpus_per_flight=2)
    big = next(s for s in result.slots if s.task.name == "big")
    assert big.gpu_ids == (0, 1)
    assert result.makespan_s == 7 * H
    assert result.gpu_seconds == (8 + 3 + 3) * H


# --- property: every plan respects the resources and the order ------------------------

@st.composite
def campaigns(draw) -> tuple[list[Task], int, int, int]:
    flights = draw(st.integers(1, 3))
    per_flight = draw(st.integers(1, 3))
    people = draw(st.integers(1, 2))
    count = draw(st.integers(1, 9))
    tasks: list[Task] = []
    for i in range(count):
        after = tuple(draw(st.sets(st.sampled_from([t.name for t in tasks]), max_size=2))) if tasks else ()
        gpus = draw(st.integers(0, per_flight))
        person = draw(st.booleans()) if gpus else True
        each = draw(st.integers(0, 4)) == 0
        tasks.append(Task(f"t{i}", "stage" if each or not gpus else "run", "essential",
                          draw(st.integers(1, 12)) * 1800, gpus=gpus, person=person,
                          after=tuple(sorted(after)), each_flight=each))
    return tasks, flights, per_flight, people


def _check(tasks: list[Task], result: Schedule) -> None:
    slots = result.slots
    busy: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for slot in slots:
        assert slot.end_s - slot.start_s == slot.task.seconds
        assert len(slot.gpu_ids) == slot.task.gpus
        assert (slot.flight is None) == (slot.task.gpus == 0 and not slot.task.each_flight)
        for gpu in slot.gpu_ids:
            busy.setdefault((slot.flight, gpu), []).append((slot.start_s, slot.end_s, slot.task.name))
    for intervals in busy.values():
        intervals.sort()
        for (_, end, a), (start, _, b) in zip(intervals, intervals[1:]):
            assert end <= start, f"{a} and {b} overlap on one GPU"
    edges = sorted({s.start_s for s in slots} | {s.end_s for s in slots})
    for t in edges:
        assert sum(1 for s in slots if s.task.person and s.start_s <= t < s.end_s) <= result.people
    by_name: dict[str, list] = {}
    for slot in slots:
        by_name.setdefault(slot.task.name, []).append(slot)
    for task in tasks:
        assert by_name.get(task.name), f"{task.name} was not placed"
        for slot in by_name[task.name]:
            for dep in task.after:
                copies = by_name[dep]
                if len(copies) == 1 or not _is_each(tasks, dep):
                    assert slot.start_s >= max(c.end_s for c in copies)
                elif slot.flight is not None:
                    assert slot.start_s >= next(c.end_s for c in copies if c.flight == slot.flight)
                else:
                    assert slot.start_s >= min(c.end_s for c in copies)
        for ancestor in _each_flight_ancestors(tasks, task.name):
            for slot in by_name[task.name]:
                if slot.flight is not None:   # its flight ran the set-up first
                    copy = next(c for c in by_name[ancestor] if c.flight == slot.flight)
                    assert slot.start_s >= copy.end_s
    assert result.makespan_s == max(s.end_s for s in slots)
    assert result.makespan_s >= result.lower_bound_s


def _is_each(tasks: list[Task], name: str) -> bool:
    return next(t for t in tasks if t.name == name).each_flight


def _each_flight_ancestors(tasks: list[Task], name: str) -> set[str]:
    by_name = {t.name: t for t in tasks}
    out: set[str] = set()
    stack = list(by_name[name].after)
    while stack:
        dep = stack.pop()
        if by_name[dep].each_flight:
            out.add(dep)
        stack.extend(by_name[dep].after)
    return out


@settings(max_examples=60, deadline=None)
@given(campaigns())
def test_no_two_items_share_a_gpu_and_every_order_holds(case) -> None:
    tasks, flights, per_flight, people = case
    result = schedule(tasks, flights=flights, gpus_per_flight=per_flight, people=people,
                      time_limit_s=0.2)
    _check(tasks, result)
    greedy = schedule(tasks, flights=flights, gpus_per_flight=per_flight, people=people,
                      time_limit_s=0)
    _check(tasks, greedy)
    assert result.makespan_s <= greedy.makespan_s
