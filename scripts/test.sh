#!/usr/bin/env bash
# Sets up .venv if needed, then lints (ruff), type-checks (mypy, strict; configuration in
# pyproject.toml) and runs the whole test suite: any of the three failing fails it.
# The report test opens report.html in headless Chromium: Debian's package is
# installed here when missing (needs root and apt, as on the CI machine); without them
# that one check is skipped, and this script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,parquet,transformers,lightning,mlflow,ray
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "test: installing Debian's chromium with apt-get (the report's browser check)"
        apt-get update -qq && apt-get install -y -qq chromium >/dev/null
    else
        echo "test: no /usr/bin/chromium and no root apt-get to install it:" \
             "the report's headless-browser check is skipped (FLIGHTPLAN_NO_BROWSER=1)"
        export FLIGHTPLAN_NO_BROWSER=1
    fi
fi
.venv/bin/ruff check src tests bench examples
.venv/bin/mypy
# Two workers (pytest-xdist), one a core. --dist worksteal: a worker that runs out of tests
# takes half of what the other still has queued. xdist's default (load) hands tests out in
# long runs of the collection, so one worker could be left with a queue of the slow
# reliability cases while the other sat idle (the last 10 minutes of a 31-minute run at
# 50 % CPU, vmstat here).
exec .venv/bin/python -m pytest -q -n 2 --dist worksteal --durations=25 "$@"
