"""Integrations with the training libraries ML engineers already use, each an optional import
(MLflow tracking is :mod:`flightplan.tracking`).

- :mod:`flightplan.integrations.transformers`: the Hugging Face ``Trainer`` (and PEFT).
- :mod:`flightplan.integrations.lightning`: Lightning (``lightning.pytorch.Trainer``).

Each module imports its library when used, so flightplan works without the extras.
"""
