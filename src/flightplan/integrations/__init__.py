"""Integrations with the tools ML engineers already use, each an optional import.

- :mod:`flightplan.integrations.transformers`: the Hugging Face ``Trainer`` (and PEFT).
- :mod:`flightplan.integrations.lightning`: Lightning (``lightning.pytorch.Trainer``).
- :mod:`flightplan.integrations.mlflow_export`, ``mlflow_live``, ``mlflow_store``: MLflow
  tracking, after the fact and live (``pip install 'flightplan[mlflow]'``).

Each module imports its library when used, so flightplan works without the extras.
"""
