#!/usr/bin/env bash
# The main job: the drug-review campaign on the real corpus and base model,
# plan → run → close → verify. Sets up .venv first if needed.
# Running it again resumes: finished runs are skipped, interrupted ones resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
FP=.venv/bin/flightplan
SPEC=${1:-examples/drug-reviews/campaign.toml}
start=$(date +%s)
"$FP" plan "$SPEC"
"$FP" run "$SPEC"
"$FP" close "$SPEC"
"$FP" verify "$(dirname "$SPEC")/results"
echo "main job finished in $(( $(date +%s) - start )) s"
