"""Integrations with the training loops people already use, each an optional import.

- :mod:`flightplan.integrations.transformers`: the Hugging Face ``Trainer`` (and PEFT).
- :mod:`flightplan.integrations.lightning`: Lightning (``lightning.pytorch.Trainer``).

Each module imports its library at the top, so import the one you use; flightplan itself
never imports this package.
"""
