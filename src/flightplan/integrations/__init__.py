"""Integrations with tools ML engineers already use (MLflow tracking).

Each module imports its tool lazily, so flightplan works without the optional extras;
``pip install 'flightplan[mlflow]'`` adds MLflow.
"""
