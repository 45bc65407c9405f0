"""Data once per campaign: a textclf run's data time when it tokenises (the first run of a
campaign) against a later run's, which loads the campaign's checked cache (target: later
≤ 0.3 s on the main job's corpus).

Each run is a fresh process that imports what the worker has imported when the loop
reaches its data stage (the task's loop module, torch) and then times that stage exactly
as the loop does (:func:`flightplan.tasks.textclf.prepared.read_and_encode` through
``Trial.cached``: the corpus read and its hashes checked, then tokenising or loading):
the figure is the run's ``data_s``. The campaign folder is a fresh temporary one (the
corpus comes from its package), so the first process finds no cache. ``--runs`` processes
go one after the other; the first builds, the others load. The splits every process
obtains are compared (sha256 of their token ids): all must be equal.

Usage::

    .venv/bin/python bench/data_once.py [--runs 3] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CAMPAIGN = Path(__file__).resolve().parents[1] / "examples" / "drug-reviews" / "campaign.toml"
TARGET_S = 0.3

_RUN = """
import hashlib, json, sys, time
from pathlib import Path
import torch
import flightplan.tasks.textclf.loop  # noqa: F401 - what the worker has imported by then
from flightplan.spec import load_spec
from flightplan.tasks.textclf import CODE_VERSION
from flightplan.tasks.textclf.prepared import read_and_encode
from flightplan.trial.trial import Trial

campaign_toml, campaign_dir, max_length = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
spec = load_spec(campaign_toml)
trial = Trial.local(Path(campaign_dir) / "runs" / sys.argv[4])
trial.campaign_dir = campaign_dir
began = time.perf_counter()
labels, train, test = read_and_encode(trial.cached, spec.corpus, spec.base_model,
                                      campaign_toml.parent, max_length=max_length,
                                      code_version=CODE_VERSION)
data_s = time.perf_counter() - began
rows = [json.loads(line) for line in (trial.run_dir / "measurements.jsonl").read_text().splitlines()]
digest = hashlib.sha256(json.dumps([labels, train.input_ids, train.n_tokens, train.gold,
                                    test.input_ids, test.n_tokens, test.gold]).encode()).hexdigest()
print(json.dumps({"data_s": data_s, "hit": rows[0]["data_cache_hit"], "sha256": digest,
                  "examples": len(train) + len(test)}))
"""


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print the figures; exit 1 when the splits differ between runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="processes, one after another")
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="data-once-") as campaign_dir:
        for i in range(args.runs):
            done = subprocess.run([sys.executable, "-c", _RUN, str(CAMPAIGN), campaign_dir,
                                   str(args.max_length), f"run-{i}"], capture_output=True,
                                  text=True, check=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, later = results[0], results[1:]
    print(f"textclf data time, drug-review corpus ({first['examples']} reviews, max_length "
          f"{args.max_length}), each run a fresh process:")
    print(f"  first run (tokenises, stores):  {first['data_s']:.3f} s  (cache hit: {first['hit']})")
    for i, r in enumerate(later, 1):
        print(f"  later run {i} (loads the cache): {r['data_s']:.3f} s  (cache hit: {r['hit']})")
    if later:
        median = statistics.median(r["data_s"] for r in later)
        print(f"  later runs' median {median:.3f} s = {median / first['data_s']:.3f} of the "
              f"first (target ≤ {TARGET_S} s: {'met' if median <= TARGET_S else 'NOT met'})")
    same = len({r["sha256"] for r in results}) == 1
    print(f"  splits equal in every run (sha256 of token ids, lengths, labels): {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
