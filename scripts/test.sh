#!/usr/bin/env bash
# Sets up .venv if needed, then runs the whole test suite.
# The report test opens report.html in headless Chromium: Debian's package is
# installed here when missing (needs root and apt, as on the CI machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
exec .venv/bin/python -m pytest -q "$@"
