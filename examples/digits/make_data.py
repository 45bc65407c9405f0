"""Write scikit-learn's bundled 8×8 digits as the campaign's frozen corpus (no download).

    python examples/digits/make_data.py      # rewrites data/digits_{train,test}.csv

1797 images, pixels 0–16; a stratified 80/20 split with a fixed seed: 1437 train and 360
test rows with the columns ``id, p0 … p63, label``. The files are committed and their
sha256 frozen in campaign.toml, so this script only documents where they came from.
"""

from __future__ import annotations

import csv
from pathlib import Path

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> None:
    digits = load_digits()
    ids = list(range(len(digits.target)))
    train, test = train_test_split(ids, test_size=0.2, random_state=0, stratify=digits.target)
    out = Path(__file__).resolve().parent / "data"
    out.mkdir(exist_ok=True)
    for name, rows in (("digits_train.csv", sorted(train)), ("digits_test.csv", sorted(test))):
        with open(out / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(["id", *(f"p{i}" for i in range(64)), "label"])
            for i in rows:
                writer.writerow([f"d{i:04d}", *(int(v) for v in digits.data[i]),
                                 int(digits.target[i])])


if __name__ == "__main__":
    main()
