"""The executor tests' Ray cluster: a loopback cluster with token authentication (a head
and two flights, ``tests/fixtures/ray_cluster.py``), started once per test module by its
first test that asks for it (the conformance suite starts Ray once), joined by this
process, and stopped after the module's last test (this process leaving it), so a later
module never finds this process joined to a cluster it did not start."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from ray_cluster import loopback_cluster  # noqa: E402 (fixtures put on the path)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """``(cluster, flight nodes, its temp folder)``; this process joined it with the
    cluster's token."""
    pytest.importorskip("ray", reason="Requires: ray (flightplan[ray])")
    import ray

    with loopback_cluster(flights=2) as made:
        ray.init(address=made[0].address, log_to_driver=False, logging_level="WARNING",
                 configure_logging=False)
        try:
            yield made
        finally:
            ray.shutdown()
