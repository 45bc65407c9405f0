"""Every test: Ray never starts a cluster of its own.

A Ray call made by a process that joined no cluster (``ray.get``,
``ray.get_runtime_context``, ``ray.cluster_resources``) would call ``ray.init()`` with no
address and start a cluster bound to the machine's own address, off loopback. With Ray's
auto-connect off it raises instead, so the test that made the call fails and names
itself. Set before any test module imports Ray (Ray reads it once, on import); the
processes the tests start inherit it.
"""

import os

os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
