"""The decision metric the recorder stores in the ledger, for any metric."""

from __future__ import annotations

import json

from flightplan.run.ledger import Ledger
from flightplan.run.records import RunRecorder


def test_metric_is_computed_from_the_predictions_as_close_does(tmp_path):
    run_dir = tmp_path / "runs" / "r-1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"macro_f1": 0.5, "abs_error": 9.0}))
    (run_dir / "predictions.csv").write_text("example_id,abs_error\na,1.0\nb,0.5\n")
    ledger = Ledger.open(tmp_path)
    try:
        def value(metric):
            return RunRecorder(ledger, tmp_path, metric=metric)._metric(run_dir)

        assert value("macro_f1") is None                   # not the task's own figure
        assert value("mean:abs_error") == 0.75             # (1.0 + 0.5) / 2 from predictions
        assert value("mean:loss") is None                  # no such column
        assert value("accuracy") is None                   # no labels to compute it from
    finally:
        ledger.close()
