"""MLflow's record of a replicate names the run it replicates and carries that run's
reference (``run_record`` on a results directory written here)."""

from __future__ import annotations

import json

from flightplan.tracking.export import run_record


def test_a_replicate_is_tagged_with_its_run_and_that_runs_reference(tmp_path):
    (tmp_path / "params").mkdir()
    for run_id, name, of in (("lora-seed-1-0000000001", "lora seed=1", "lora"),
                             ("control-0000000000", "control", None)):
        (tmp_path / "params" / f"{run_id}.json").write_text(json.dumps(
            {"run_id": run_id, "name": name, "replicate_of": of, "tier": "essential",
             "task": "textclf", "params": {"seed": 1}, "config_hash": "ab"}))
    manifest = {"runs": {}}
    replicate = run_record(tmp_path, "lora-seed-1-0000000001", manifest, {"lora": "control"}, {})
    assert replicate["name"] == "lora seed=1"
    assert replicate["tags"]["flightplan.replicate_of"] == "lora"
    assert replicate["tags"]["flightplan.reference"] == "control"
    single = run_record(tmp_path, "control-0000000000", manifest, {"lora": "control"}, {})
    assert "flightplan.replicate_of" not in single["tags"]
    assert "flightplan.reference" not in single["tags"]
