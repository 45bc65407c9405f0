"""``python -m closefake.textclf.predict ARTIFACT_DIR --out FILE.csv [--limit N]``."""

import argparse
from pathlib import Path

from closefake.textclf import load_artifact, rows, write_csv

parser = argparse.ArgumentParser()
parser.add_argument("artifact_dir", type=Path)
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--limit", type=int, default=None)
args = parser.parse_args()
model = load_artifact(args.artifact_dir)
write_csv(args.out, rows(model["shift"], model["max_length"], args.limit))
