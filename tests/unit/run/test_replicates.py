"""Replicates (``seeds`` = K): each run executes K times, each execution with its own
name, params, run id and folder; the plan schedules and prices K executions; the decision
point keys replicated runs by their run; a replicate name that clashes is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flightplan.errors import SpecError
from flightplan.ids import run_config, run_id
from flightplan.plan.campaign_plan import plan_campaign, tasks_for_spec
from flightplan.run.decision import replan_from_options
from flightplan.run.planned import plan_runs, trial_document
from flightplan.spec import load_spec, parse_spec
from flightplan.units import Duration

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny" / "campaign.toml"

TINY_IDS = {"control": "control-f36b1c050a", "lora-r4": "lora-r4-8bb443097e",
            "lora-r4-len128": "lora-r4-len128-57ddd24939"}
"""The tiny campaign's run ids before replicates existed (computed on the code of main
before this change): a campaign of one seed must keep them."""


def _tiny(tmp_path: Path, *, campaign: str = "", runs: dict[str, str] | None = None) -> Path:
    """A copy of the tiny campaign file with ``campaign`` added to ``[campaign]`` and
    ``runs[name]`` added to that run's table."""
    text = TINY.read_text(encoding="utf-8")
    text = text.replace("accept_at_least = 0.0\n", f"accept_at_least = 0.0\n{campaign}\n")
    for name, extra in (runs or {}).items():
        marker = f'name = "{name}"\n'
        assert marker in text
        text = text.replace(marker, marker + extra + "\n")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "campaign.toml"
    path.write_text(text, encoding="utf-8")
    return path


MAIN_IDS = {"control": "control-34e88d51b5", "lora-r8": "lora-r8-174d689da4",
            "lora-r8-len256": "lora-r8-len256-7dc6f84de5"}
"""The main job's run ids (examples/drug-reviews), computed on main before this change."""


def test_one_seed_keeps_every_run_id_of_the_tiny_campaign_and_the_main_job():
    planned = plan_runs(load_spec(TINY))
    assert {p.name: p.run_id for p in planned} == TINY_IDS
    assert all(p.name == p.run.name and p.replicate.count == 1 for p in planned)
    main = plan_runs(load_spec(REPO / "examples" / "drug-reviews" / "campaign.toml"))
    assert {p.name: p.run_id for p in main} == MAIN_IDS


def test_seeds_3_executes_each_run_three_times_with_its_own_name_params_and_id(tmp_path):
    spec = load_spec(_tiny(tmp_path, campaign="seeds = 3", runs={"lora-r4": "seeds = 2"}))
    planned = plan_runs(spec)
    names = [p.name for p in planned]
    assert names == ["control seed=0", "control seed=1", "control seed=2",
                     "lora-r4 seed=0", "lora-r4 seed=1",
                     "lora-r4-len128 seed=0", "lora-r4-len128 seed=1", "lora-r4-len128 seed=2"]
    assert [p.params["seed"] for p in planned] == [0, 1, 2, 0, 1, 0, 1, 2]
    assert len({p.run_id for p in planned}) == 8
    assert len({p.run_dir for p in planned}) == 8
    # replicate 0 trains with the run's own params: its hash part is the K=1 id's
    assert planned[0].run_id == "control-seed-0-" + TINY_IDS["control"].rsplit("-", 1)[1]
    # replicate 1: params.seed = 1, everything else the run's
    control = spec.runs[0]
    params = dict(control.params, seed=1)
    assert planned[1].params == params
    assert re.fullmatch(r"control-seed-1-[0-9a-f]{10}", planned[1].run_id)
    assert planned[1].run_id.rsplit("-", 1)[1] != planned[0].run_id.rsplit("-", 1)[1]
    trial = trial_document(spec, planned[4], resume=False)
    assert (trial["name"], trial["replicate_of"], trial["params"]["seed"], trial["run_id"]) \
        == ("lora-r4 seed=1", "lora-r4", 1, planned[4].run_id)
    one = trial_document(load_spec(TINY), plan_runs(load_spec(TINY))[0], resume=False)
    assert one["replicate_of"] is None


def test_run_id_of_a_replicate_follows_the_recipe(tmp_path):
    spec = load_spec(_tiny(tmp_path, runs={"control": "seeds = 2"}))
    planned = plan_runs(spec)[1]
    task = "textclf"
    corpus = dict(spec.corpus.sha256)
    # the recipe of ids.py, by hand: slug of the replicate name + the hash of its config
    assert planned.run_id.startswith("control-seed-1-")
    from flightplan.ids import config_hash, corpus_view
    view = corpus_view(spec.corpus.model_dump(mode="json"))
    from flightplan.run.planned import load_run_task
    loaded = load_run_task(spec.runs[0], spec)
    identity = (task, planned.params, corpus,
                loaded.base_revision(spec.base_model, planned.params),
                loaded.source.code_version, view)
    assert planned.run_id == run_id("control seed=1", *identity)
    assert planned.config_hash == config_hash(run_config(*identity))


def test_the_schedule_counts_k_executions(tmp_path):
    spec = load_spec(_tiny(tmp_path, campaign="seeds = 3"))
    tasks = tasks_for_spec(spec)
    runs = [t for t in tasks if t.kind == "run"]
    assert len(runs) == 9
    # 3 × (15 + 20 + 30) s of runs, + 2 stages of 10 s: GPU-seconds of the schedule
    plan = plan_campaign(spec)
    assert plan.to_json()["gpu_hours"] == pytest.approx((3 * 65 + 20) / 3600, abs=1e-4)
    one = plan_campaign(load_spec(TINY))
    assert one.to_json()["gpu_hours"] == pytest.approx((65 + 20) / 3600, abs=1e-4)
    # a measured duration given for the run sets each replicate
    measured = tasks_for_spec(spec, durations={"lora-r4": Duration(100)})
    assert [t.seconds for t in measured if t.name.startswith("lora-r4 seed")] == [100] * 3
    # what comes after a replicated run waits for every replicate
    path = _tiny(tmp_path / "b", runs={"control": "seeds = 2"})
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('after = ["pilot"]\n\n[[run]]\nname = "lora-r4-len128"',
                                 'after = ["control"]\n\n[[run]]\nname = "lora-r4-len128"'),
                    encoding="utf-8")
    lora = next(t for t in tasks_for_spec(load_spec(path)) if t.name == "lora-r4")
    assert set(lora.after) == {"control seed=0", "control seed=1"}


def test_the_reduced_protocol_drops_every_replicate_of_a_cut_run():
    plan = {"offer": "RTX 4090", "package_days": 3, "flights": 1, "fits": False,
            "reserved_hours": 80.0, "window_hours": 72.0,
            "options": [{"offer": "RTX 4090", "package_days": 3, "flights": 1, "fits": True,
                         "reserved_hours": 60.0,
                         "dropped": ["len seed=0", "len seed=1", "len-check"]}]}
    replan = replan_from_options(plan, {"control", "len"},
                                 replicates={"len seed=0": "len", "len seed=1": "len"})
    assert replan(["len"]) == {"fits": True, "reserved_hours": 60.0, "window_hours": 72.0}
    # without the mapping, the option drops no run of that name: not computed
    assert replan_from_options(plan, {"control", "len"})(["len"])["fits"] is False


def test_a_replicate_name_that_clashes_is_refused_in_one_line(tmp_path):
    text = TINY.read_text(encoding="utf-8").replace('name = "lora-r4-len128"',
                                                    'name = "control seed=1"')
    path = tmp_path / "campaign.toml"
    path.write_text(text.replace("accept_at_least = 0.0\n", "accept_at_least = 0.0\nseeds = 2\n"),
                    encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert "replicate 'control seed=1' of run 'control' has the name of run 'control seed=1'" \
        in message
    # the same names with one seed each do not clash
    path.write_text(text, encoding="utf-8")
    assert len(plan_runs(load_spec(path))) == 3


def test_replicates_of_a_parsed_spec_without_files():
    spec = parse_spec({
        "campaign": {"name": "c", "question": "q?", "min_gain": 0.05, "seeds": 2},
        "rental": {"offer": "RTX 4090", "package_days": 3},
        "run": [{"name": "a", "tier": "essential", "duration": "1h", "params": {"seed": 7}},
                {"name": "b", "tier": "essential", "duration": "1h", "reference": "a",
                 "seeds": 1, "params": {"seed": 7}}]})
    assert [(r.name, r.seed, r.index, r.count) for r in spec.executions] == [
        ("a seed=7", 7, 0, 2), ("a seed=8", 8, 1, 2), ("b", 7, 0, 1)]
    assert spec.replicate_named("a seed=8").run.name == "a"
    assert spec.replicate_named("b").run.name == "b"
    assert spec.replicate_named("a") is None


def test_a_replicated_run_is_done_only_when_every_replicate_ended():
    from flightplan.run.decision import cut_steps, runs_done
    executions = {"control": ["control-1"], "lora": ["lora-seed-0-a", "lora-seed-1-b"],
                  "len": ["len-seed-0-c", "len-seed-1-d"]}
    ended = {"control-1", "lora-seed-0-a", "lora-seed-1-b", "len-seed-0-c"}
    done = runs_done(executions, ended)
    assert done == {"control", "lora"}
    # len (useful) has a replicate left: the cut may still drop it; lora (done) never
    steps = cut_steps([("control", "essential"), ("lora", "useful"), ("len", "useful")],
                      done=done)
    assert steps == [[], ["len"]]
