"""MLflow tracking: the campaign where people already look at their runs
(``pip install 'flightplan[mlflow]'``); flightplan's ledger and ``results/`` stay the record.

- :mod:`flightplan.tracking.store`: writing into a store, every write repeatable.
- :mod:`flightplan.tracking.export`: ``flightplan export mlflow RESULTS_DIR`` (after ``close``).
- :mod:`flightplan.tracking.live`: the observer ``flightplan run`` attaches to mirror runs as
  they train, through :mod:`flightplan.tracking.mirror`, a process of its own.

Each module imports MLflow when used, so flightplan works without the extra.
"""
