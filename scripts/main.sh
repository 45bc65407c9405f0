#!/usr/bin/env bash
# The main job: the drug-review campaign on the real corpus and base model,
# plan → run → close → verify. Sets up .venv first if needed.
# Running it again resumes: finished runs are skipped, interrupted ones resume.
# Prints each verb's wall time and the whole job's, after set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
FP=.venv/bin/flightplan
SPEC=${1:-examples/drug-reviews/campaign.toml}
start=$(date +%s)
timed() {
    local began
    began=$(date +%s)
    "$FP" "$@"
    echo "$1 took $(( $(date +%s) - began )) s"
}
timed plan "$SPEC"
timed run "$SPEC"
timed close "$SPEC"
timed verify "$(dirname "$SPEC")/results"
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "unknown")
echo "main job finished in $(( $(date +%s) - start )) s (load average $load)"
