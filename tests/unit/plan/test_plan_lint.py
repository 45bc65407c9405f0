"""Variant lint: one factor per variant, no duplicates, no full grids, references named."""

from __future__ import annotations

from flightplan.plan.lint import factor_changes, lint_variants

LORA = {"kind": "lora", "rank": 8, "alpha": 16}


def _run(name, reference=None, **params):
    run = {"name": name, "tier": "essential", "duration": "1h", "params": params}
    if reference:
        run["reference"] = reference
    return run


def test_the_examples_have_no_warnings(illustration) -> None:
    assert lint_variants(illustration) == []


def test_a_nested_table_counts_as_one_factor(make_spec) -> None:
    spec = make_spec(runs=[_run("control", max_length=128),
                           _run("lora", "control", max_length=128, adapter=LORA),
                           _run("lora-r16", "lora", max_length=128, adapter={**LORA, "rank": 16, "alpha": 32})])
    assert factor_changes(spec.runs[1], spec.runs[0]) == ["adapter"]
    assert factor_changes(spec.runs[2], spec.runs[1]) == ["adapter"]
    assert lint_variants(spec) == []


def test_two_changes_against_the_reference(make_spec) -> None:
    spec = make_spec(runs=[_run("control", max_length=128, lr=1e-3),
                           _run("lora-len256", "control", max_length=256, lr=1e-3, adapter=LORA)])
    [warning] = lint_variants(spec)
    assert (warning.code, warning.subject) == ("several-changes", "lora-len256")
    assert warning.message == (
        'lora-len256 differs from its reference control in 2 factors (adapter: not set → '
        '{"alpha":16,"kind":"lora","rank":8}; max_length: 128 → 256), so a '
        'difference in results cannot be attributed to one; split it into variants that change '
        'one factor each (a param set in only one of the two counts as a change: if adapter not '
        "set means the task's default, set it in both)")


def test_a_param_left_to_the_tasks_default_is_named_as_not_set(make_spec) -> None:
    spec = make_spec(runs=[_run("control", hidden=32), _run("lr-0.01", "control", lr=0.01)])
    [warning] = lint_variants(spec)
    assert "in 2 factors (hidden: 32 → not set; lr: not set → 0.01)" in warning.message
    assert warning.message.endswith("if hidden, lr not set means the task's default, set them "
                                    "in both)")


def test_identical_runs(make_spec) -> None:
    spec = make_spec(runs=[_run("control", lr=1e-3), _run("again", "control", lr=1e-3)])
    [warning] = lint_variants(spec)
    assert (warning.code, warning.subject) == ("identical-runs", "control, again")


def test_a_full_two_by_three_grid_says_what_one_factor_at_a_time_needs(make_spec) -> None:
    runs = [_run("control", lr=1e-3, rank=4)]
    for lr in (1e-3, 1e-4):
        for rank in (4, 8, 16):
            if (lr, rank) != (1e-3, 4):
                runs.append(_run(f"lr{lr}-r{rank}", "control", lr=lr, rank=rank))
    warnings = lint_variants(make_spec(runs=runs))
    grids = [w for w in warnings if w.code == "full-grid"]
    assert len(grids) == 1
    assert "full 2×3 grid over lr, rank (6 combinations)" in grids[0].message
    assert "one-factor-at-a-time plan needs 4 runs" in grids[0].message   # 1 + (2-1) + (3-1)
    assert grids[0].subject.split(", ")[0] == "control"
    several = {w.subject for w in warnings if w.code == "several-changes"}
    assert several == {"lr0.0001-r8", "lr0.0001-r16"}


def test_no_grid_for_one_factor_at_a_time(make_spec) -> None:
    spec = make_spec(runs=[_run("control", lr=1e-3, rank=4), _run("lr", "control", lr=1e-4, rank=4),
                           _run("rank", "control", lr=1e-3, rank=8)])
    assert lint_variants(spec) == []


def test_a_second_run_without_reference(make_spec) -> None:
    spec = make_spec(runs=[_run("control", lr=1e-3), _run("orphan", lr=1e-2)])
    [warning] = lint_variants(spec)
    assert (warning.code, warning.subject) == ("no-reference", "orphan")
    assert 'add reference = "control"' in warning.message
