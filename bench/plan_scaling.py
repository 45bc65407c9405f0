"""Planning time of synthetic campaigns of 10, 100 and 500 stages (quality bar: 500 < 5 s).

Each synthetic campaign looks like a real one, scaled: an ``each_flight`` install, a data
check, then groups of (a GPU preparation stage → 3 runs that vary one factor of the
group's control → a person's review), with a few cross-group ``after`` edges, tiers
mixed (so the reduced protocol is exercised when the package is too short), on
RTX 4090 flights with 2 people. ``plan_campaign`` does everything ``flightplan plan``
does: the chosen schedule (CP-SAT), every quote option, the reduced protocol, the lint.

Printed per size: wall time of ``plan_campaign``, of the list-scheduling pass alone on
the chosen rental (the baseline, measured in the same run), their ratio, the time as a
fraction of the 5 s bar, and the makespan against its lower bound (1.000 = proven
optimal by bound; ``optimal`` also counts a proof by CP-SAT).

Usage::

    .venv/bin/python bench/plan_scaling.py            # sizes 10 100 500
    .venv/bin/python bench/plan_scaling.py 1000
"""

from __future__ import annotations

import random
import sys
import time

from flightplan.plan import plan_campaign, tasks_for_spec
from flightplan.plan.schedule import schedule
from flightplan.spec import CampaignSpec, parse_spec

BAR_S = 5.0


def synthetic_campaign(stages: int, *, seed: int = 0) -> CampaignSpec:
    """A valid campaign with ``stages`` stages and runs in all (>= 5), reproducible."""
    rng = random.Random(seed)
    stage = [{"name": "install", "duration": "2h", "uses": ["gpu", "person"], "each_flight": True},
             {"name": "data-check", "duration": "1h", "uses": ["gpu"], "after": ["install"]}]
    run: list[dict] = []
    group = 0
    while len(stage) + len(run) + 5 <= stages:
        prep, control = f"prep-{group}", f"g{group}-control"
        after = ["data-check"] + ([f"review-{rng.randrange(group)}"] if group and rng.random() < 0.2 else [])
        stage.append({"name": prep, "duration": f"{rng.randint(10, 60)}m", "uses": ["gpu"], "after": after})
        base = {"lr": 1e-3, "rank": 8, "group": group}
        run.append({"name": control, "tier": "essential", "duration": f"{rng.randint(2, 12)}h",
                    "params": base, "after": [prep]})
        for i, (key, value) in enumerate((("lr", 1e-4), ("rank", 16), ("rank", 4))):
            run.append({"name": f"g{group}-v{i}", "tier": rng.choice(["essential", "useful", "exploratory"]),
                        "reference": control, "duration": f"{rng.randint(2, 12)}h",
                        "params": {**base, key: value}, "after": [prep]})
        stage.append({"name": f"review-{group}", "duration": f"{rng.randint(1, 4)}h", "uses": ["person"],
                      "after": [control] + [f"g{group}-v{i}" for i in range(3)]})
        group += 1
    while len(stage) + len(run) < stages:
        stage.append({"name": f"note-{len(stage)}", "duration": "30m", "uses": ["person"],
                      "after": ["data-check"]})
    if not run:
        run.append({"name": "control", "tier": "essential", "duration": "1h", "after": ["data-check"]})
    doc = {"campaign": {"name": f"synthetic-{stages}", "question": "scaling?", "min_gain": 0.05},
           "rental": {"offer": "RTX 4090", "package_days": 30, "people": 2},
           "stage": stage, "run": run}
    return parse_spec(doc, source=f"synthetic-{stages}.toml")


def main(sizes: list[int]) -> None:
    print(f"{'stages':>6} {'plan (s)':>9} {'greedy (s)':>10} {'plan/greedy':>11} "
          f"{'plan/5 s':>8} {'reserved/bound':>14} {'optimal':>7} {'options':>7} {'fits':>5}")
    for size in sizes:
        spec = synthetic_campaign(size)
        tasks = tasks_for_spec(spec)
        start = time.perf_counter()
        greedy = schedule(tasks, flights=1, gpus_per_flight=1, people=2, time_limit_s=0)
        greedy_s = time.perf_counter() - start
        start = time.perf_counter()
        result = plan_campaign(spec)
        plan_s = time.perf_counter() - start
        bound = result.schedule.lower_bound_s
        print(f"{len(tasks):>6} {plan_s:>9.3f} {greedy_s:>10.4f} {plan_s / greedy_s:>11.1f} "
              f"{plan_s / BAR_S:>8.2f} {result.schedule.makespan_s / bound:>14.4f} "
              f"{str(result.schedule.optimal):>7} "
              f"{len(result.quote.options):>7} {str(result.fits):>5}")
        assert greedy.makespan_s >= result.schedule.makespan_s


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 500])
