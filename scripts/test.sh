#!/usr/bin/env bash
# Sets up .venv if needed, then lints (ruff), type-checks (mypy, strict; configuration in
# pyproject.toml) and runs the whole test suite: any of the three failing fails it.
# The report test opens report.html in headless Chromium: Debian's package is
# installed here when missing (needs root and apt, as on the CI machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check src tests bench examples
.venv/bin/mypy
# Two workers (pytest-xdist): most cases wait on processes they start (runners, Ray nodes,
# MLflow stores), so two at once keep this machine's two cores busy (17 min against 32 in
# one process here).
exec .venv/bin/python -m pytest -q -n 2 --durations=25 "$@"
