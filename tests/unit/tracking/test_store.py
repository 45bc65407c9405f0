"""How measurement rows become MLflow metric points and params, and what a real SQLite
store gives back of them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from flightplan.tracking.live import resolve_tracking_uri
from flightplan.errors import TrackingFailed
from flightplan.tracking.store import (
    MetricPoint, MlflowStore, artifact_location_for, failure_reason, flatten, metric_points)
from flightplan.rows import CheckpointSaved, Evaluation, Finished, Measurement, Restore, parse_rows


def test_a_training_row_gives_one_point_per_number():
    row = Measurement(3, 1700000000.5, {"loss": 0.5, "step_s": 0.01, "batch_size": 16})
    assert metric_points(row) == [MetricPoint("loss", 0.5, 3, 1700000000500),
                                  MetricPoint("step_s", 0.01, 3, 1700000000500),
                                  MetricPoint("batch_size", 16.0, 3, 1700000000500)]


def test_event_rows_prefix_their_keys_except_evaluation():
    checkpoint = CheckpointSaved(4, 10.0, name="step-000004", bytes=9000, stall_s=0.002,
                                 persist_s=0.5)
    assert metric_points(checkpoint) == [MetricPoint("checkpoint/bytes", 9000.0, 4, 10000),
                                         MetricPoint("checkpoint/stall_s", 0.002, 4, 10000),
                                         MetricPoint("checkpoint/persist_s", 0.5, 4, 10000)]
    evaluation = Evaluation(11, 2.0, {"macro_f1": 0.25})
    assert metric_points(evaluation) == [MetricPoint("macro_f1", 0.25, 11, 2000)]


def test_non_finite_strings_are_floats_and_other_values_are_skipped():
    row = Measurement(1, 1.0, {"loss": "nan", "grad": "-inf", "ok": True, "source": None,
                               "rejected": [], "message": "text", "f1@neg": 1})
    points = metric_points(row)
    assert [p.key for p in points] == ["loss", "grad", "f1_neg"]  # MLflow refuses "@"
    assert math.isnan(points[0].value) and points[1].value == -math.inf
    # NaN equals NaN when points are compared, so a NaN point is not sent twice
    assert points[0].identity() == metric_points(row)[0].identity()
    assert metric_points(Finished(4, 1.0)) == []
    assert metric_points(Restore(4, 1.0, source="step-000004", rejected=("step-000006",))) == []


def test_flatten_nested_adapter_settings():
    params = {"lr": 0.01, "seed": 0, "adapter": {"kind": "lora", "rank": 4,
                                                 "target_modules": ["query", "value"]},
              "extra": {}, "note": None, "frozen": True}
    assert flatten(params) == {"lr": "0.01", "seed": "0", "adapter.kind": "lora",
                               "adapter.rank": "4", "adapter.target_modules": '["query", "value"]',
                               "extra": "{}", "note": "null", "frozen": "true"}


def test_parse_rows_waits_for_a_torn_tail_and_skips_a_glued_line():
    data = (b'{"step": 0, "time": 1.0, "loss": 1.0}\n'
            b'{"step": 1, "lo{"step": 1, "time": 2.0, "loss": 0.5}\n'   # killed, then resumed
            b'{"step": 2, "time": 3.0, "loss": 0.25}\n{"step": 3')
    rows, consumed = parse_rows(data)
    assert rows == [Measurement(0, 1.0, {"loss": 1.0}), Measurement(2, 3.0, {"loss": 0.25})]
    assert data[consumed:] == b'{"step": 3'


def test_sqlite_paths_and_the_artifact_location(tmp_path):
    assert resolve_tracking_uri("sqlite:///mlflow.db", tmp_path) == f"sqlite:///{tmp_path}/mlflow.db"
    assert resolve_tracking_uri("sqlite:////abs/m.db", tmp_path) == "sqlite:////abs/m.db"
    assert resolve_tracking_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"
    assert artifact_location_for(f"sqlite:///{tmp_path}/m.db") == (tmp_path / "mlartifacts").as_uri()
    assert artifact_location_for("http://127.0.0.1:5000") is None


def test_the_tracking_section_of_a_campaign_file(tmp_path):
    from flightplan.errors import SpecError
    from flightplan.spec import load_spec

    tiny = (Path(__file__).resolve().parents[3] / "examples" / "tiny" / "campaign.toml").read_text()
    path = tmp_path / "campaign.toml"
    path.write_text(tiny + '\n[tracking]\nmlflow = "sqlite:///mlflow.db"\nexperiment = "mine"\n')
    tracking = load_spec(path).tracking
    assert (tracking.mlflow, tracking.experiment) == ("sqlite:///mlflow.db", "mine")
    path.write_text(tiny + '\n[tracking]\nmlflw = "sqlite:///mlflow.db"\n')
    with pytest.raises(SpecError, match=r"tracking"):
        load_spec(path)


def test_run_tracking_uri_on_the_command_line_is_taken_from_the_current_folder(
        tmp_path, monkeypatch):
    """``run --tracking-uri sqlite:///live.db`` and ``export mlflow … --tracking-uri
    sqlite:///live.db`` from the same folder name one store (the current folder's); the
    campaign file's ``[tracking] mlflow`` stays relative to the campaign folder."""
    from flightplan.spec import load_spec
    from flightplan.tracking.live import mirrored_store, resolve_tracking_uri

    tiny = (Path(__file__).resolve().parents[3] / "examples" / "tiny" / "campaign.toml").read_text()
    (tmp_path / "camp").mkdir()
    (tmp_path / "camp" / "campaign.toml").write_text(
        tiny + '\n[tracking]\nmlflow = "sqlite:///mlflow.db"\n')
    spec = load_spec(tmp_path / "camp" / "campaign.toml")
    monkeypatch.chdir(tmp_path)
    assert mirrored_store(spec, "sqlite:///live.db") == f"sqlite:///{tmp_path / 'live.db'}"
    assert mirrored_store(spec, "http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert mirrored_store(spec, None) == "sqlite:///mlflow.db"       # mirror_runs resolves it:
    assert resolve_tracking_uri("sqlite:///mlflow.db", spec.campaign_dir) == (
        f"sqlite:///{(tmp_path / 'camp' / 'mlflow.db').resolve()}")


def test_non_finite_points_are_sent_once_although_the_store_changes_infinity(tmp_path):
    pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    row = Measurement(2, 5.0, {"loss": "inf", "grad": "-inf", "lr": "nan", "step_s": 0.25})
    store = MlflowStore(uri)
    experiment = store.experiment("inf", tags={})
    run = store.run(experiment, "i-1", name="i", start_ms=5000, tags={})
    assert store.log_points(run, metric_points(row)) == 4
    # a later export or mirror reads the run back: MLflow holds inf as the largest float
    again = MlflowStore(uri)
    found = again.run(experiment, "i-1", name="i", start_ms=5000, tags={})
    history = {m.key: m.value for key in ("loss", "grad")
               for m in again.client.get_metric_history(found.mlflow_run_id, key)}
    assert history == {"loss": 1.7976931348623157e308, "grad": -1.7976931348623157e308}
    assert again.log_points(found, metric_points(row)) == 0


def test_failures_name_the_cause_alone():
    refused = Exception("API request to http://127.0.0.1:9/api/2.0/mlflow/experiments/get-by-name "
                        "failed with exception HTTPConnectionPool(host='127.0.0.1', port=9): Max "
                        "retries exceeded with url: /x (Caused by NewConnectionError(\"HTTP"
                        "Connection(host='127.0.0.1', port=9): Failed to establish a new "
                        "connection: [Errno 111] Connection refused\"))")
    assert failure_reason(refused) == "unreachable: [Errno 111] Connection refused"
    assert failure_reason(FileExistsError(17, "File exists", "/x/blocked")) == \
        "[Errno 17] File exists: '/x/blocked'"


def test_a_store_that_cannot_be_created_raises_tracking_failed(tmp_path):
    pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
    (tmp_path / "blocked").write_text("")
    uri = f"sqlite:///{tmp_path}/blocked/mlflow.db"
    with pytest.raises(TrackingFailed, match=rf"^MLflow at {uri}: opening the store failed "
                                             rf"\(\[Errno 17\] File exists: '{tmp_path}/blocked'\)"):
        MlflowStore(uri)


def test_a_run_id_is_never_written_into_a_search_filter_unchecked(tmp_path):
    pytest.importorskip("mlflow", reason="Requires: the mlflow extra")
    store = MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = store.experiment("ids", tags={})
    store.run(experiment, "control-1a2b3c4d5e", name="control", start_ms=1000, tags={})
    forged = "x' OR tags.`flightplan.run_id` LIKE '%"
    with pytest.raises(TrackingFailed, match=r"is not a flightplan run id \(lower-case letters, "
                                             r"digits and hyphens\); nothing sent for it$"):
        store.run(experiment, forged, name="forged", start_ms=2000, tags={})
    runs = store.client.search_runs([experiment])
    assert [r.data.tags["flightplan.run_id"] for r in runs] == ["control-1a2b3c4d5e"]
