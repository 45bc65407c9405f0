"""A test split with a label the training split lacks, through plan → run → close: the
data check names it, and every figure of the decision (the run table, the manifest's
metric values, the conclusion, the error analysis) equals scikit-learn's on the
predictions file, for a metric of each family (macro-F1, balanced accuracy, mean of a
column). The task learns only the training split's classes and writes their prob_ columns,
the case where the test-only label used to vanish from the macro metrics."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import subprocess
from pathlib import Path

import pytest
from sklearn import metrics as sk

from cli_run import run_cli
from flightplan.run.ledger import Ledger

HANG_S = 600
"""A campaign that takes longer has hung (a safety net, not a speed check)."""

pytestmark = pytest.mark.slow

TASK = '''"""A softmax classifier of two features; its classes are the training split's labels."""
import csv
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def read(path):
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    x = torch.tensor([[float(r["x1"]), float(r["x2"])] for r in rows])
    return [r["id"] for r in rows], x, [r["y"] for r in rows]


def write_predictions(path, ids, gold, model, x, labels):
    with torch.no_grad():
        probs = model(x).softmax(dim=1)                     # (N, C)
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle, lineterminator="\\n")
        out.writerow(["example_id", "gold", "predicted", "correct",
                      *(f"prob_{c}" for c in labels)])
        for i, example in enumerate(ids):
            predicted = labels[int(probs[i].argmax())]
            out.writerow([example, gold[i], predicted, str(predicted == gold[i]).lower(),
                          *(repr(float(p)) for p in probs[i])])


def train(trial):
    params = {"lr": 0.1, "steps": 12, **trial.params}
    torch.manual_seed(0)
    root = Path(trial.corpus["root"])
    _, x, y = read(root / "train.csv")
    test_ids, test_x, test_y = read(root / "test.csv")
    labels = sorted(set(y))
    target = torch.tensor([labels.index(label) for label in y])
    model = torch.nn.Linear(2, len(labels))
    optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
    trial.planned_steps = params["steps"]
    trial.register(model=model, optimizer=optimizer)
    step = trial.restore()
    last = params["steps"] if trial.max_steps is None else min(params["steps"], trial.max_steps)
    while step < last:
        loss = torch.nn.functional.cross_entropy(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trial.log(step, loss=loss.item())
        trial.maybe_checkpoint(step)
        step += 1
    run_dir = Path(trial.run_dir)
    write_predictions(run_dir / "predictions.csv", test_ids, test_y, model, test_x, labels)
    (run_dir / "metrics.json").write_text(json.dumps({"labels": labels}))
    (run_dir / "artifact").mkdir(exist_ok=True)
    save_file(model.state_dict(), str(run_dir / "artifact" / "model.safetensors"))
    (run_dir / "artifact" / "artifact.json").write_text(json.dumps(
        {"labels": labels, "corpus": {k: trial.corpus.get(k) for k in ("path", "sha256")}}))


def reload_predictions(artifact_dir, out, *, campaign_dir=None, limit=None):
    meta = json.loads((Path(artifact_dir) / "artifact.json").read_text())
    if campaign_dir is None:
        campaign_dir = next(p for p in Path(artifact_dir).resolve().parents
                            if (p / meta["corpus"]["path"]).is_dir())
    ids, x, y = read(Path(campaign_dir) / meta["corpus"]["path"] / "test.csv")
    model = torch.nn.Linear(2, len(meta["labels"]))
    model.load_state_dict(load_file(str(Path(artifact_dir) / "model.safetensors")))
    n = len(ids) if limit is None else min(limit, len(ids))
    write_predictions(out, ids[:n], y[:n], model, x[:n], meta["labels"])
    return n
'''

CAMPAIGN = '''
[campaign]
name = "unseen"
question = "Does a higher learning rate beat the control by 0.05 {metric}?"
metric = "{metric}"
goal = "max"
min_gain = 0.05

[rental]
offer = "RTX 4090"
package_days = 3

[corpus]
path = "data"
sha256 = {{ "train.csv" = "{train}", "test.csv" = "{test}" }}
id_column = "id"
input_columns = ["x1", "x2"]
label_column = "y"

[[stage]]
name = "data-check"
duration = "10s"
uses = ["gpu"]

[[stage]]
name = "pilot"
duration = "20s"
uses = ["gpu"]
after = ["data-check"]

[[run]]
name = "control"
tier = "essential"
task = "train.py"
params = {{ lr = 0.05 }}
duration = "1m"
after = ["pilot"]

[[run]]
name = "lr-1"
tier = "essential"
reference = "control"
task = "train.py"
params = {{ lr = 1.0 }}
duration = "1m"
after = ["pilot"]
'''

CENTRES = {"a": (-1.0, 0.0), "b": (1.0, 0.0), "c": (0.0, 1.0)}


def _split(rng: random.Random, name: str, labels: str) -> str:
    """A CSV of points around each label's centre (noise 0.6: some land on another's)."""
    lines = ["id,x1,x2,y"]
    for i, label in enumerate(labels):
        cx, cy = CENTRES[label]
        lines.append(f"{name}-{i},{cx + rng.gauss(0, 0.6):.4f},{cy + rng.gauss(0, 0.6):.4f},"
                     f"{label}")
    return "\n".join(lines) + "\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, hang_s=HANG_S)


def _sklearn(metric: str, gold: list[str], predicted: list[str], rows: list[dict]) -> float:
    if metric == "macro_f1":
        return sk.f1_score(gold, predicted, average="macro", zero_division=0)
    if metric == "balanced_accuracy":
        return sk.balanced_accuracy_score(gold, predicted)
    return sum(r["correct"] == "true" for r in rows) / len(rows)       # mean:correct


@pytest.mark.parametrize("metric", ["macro_f1", "balanced_accuracy", "mean:correct"])
def test_a_label_only_in_the_test_split_counts_in_every_figure(tmp_path, metric):
    rng = random.Random(1)
    data = tmp_path / "data"
    data.mkdir()
    files = {"train.csv": _split(rng, "train", "ab" * 15),
             "test.csv": _split(rng, "test", "ab" * 8 + "cccc")}
    for name, text in files.items():
        (data / name).write_text(text, encoding="utf-8")
    digests = {f"{name[:-4]}": hashlib.sha256(text.encode()).hexdigest()
               for name, text in files.items()}
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(metric=metric, **digests))
    (tmp_path / "train.py").write_text(TASK)

    ran = _cli("run", "campaign.toml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ("data check: label(s) of the test split that no training example has: "
            "'c' (4 test examples)") in ran.stdout
    with Ledger.open(tmp_path, create=False) as ledger:
        table = {r.name: r for r in ledger.runs()}          # what status and run show
        assert ledger.events(kind="data_check")[-1].data["test_labels_not_in_train"] == ["c"]
    closed = _cli("close", "campaign.toml", "--json", cwd=tmp_path)
    assert closed.returncode == 0, closed.stderr[-3000:]

    results = tmp_path / "results"
    assert json.loads((results / "data_check.json").read_text())[
        "test_labels_not_in_train"] == ["c"]
    manifest = json.loads((results / "MANIFEST.json").read_text())
    expected = {}
    for name, run_id in {name: row.run_id for name, row in table.items()}.items():
        with open(results / "predictions" / f"{run_id}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert [c for c in rows[0] if c.startswith("prob_")] == ["prob_a", "prob_b"]
        gold, predicted = [r["gold"] for r in rows], [r["predicted"] for r in rows]
        assert gold.count("c") == 4 and "c" not in predicted
        value = expected[name] = _sklearn(metric, gold, predicted, rows)
        assert manifest["runs"][run_id]["metric_value"] == round(value, 6)
        assert table[name].metric == pytest.approx(value, abs=1e-12)
        errors = json.loads((results / "errors" / f"{run_id}.json").read_text())
        assert errors["metric"]["value"] == round(value, 6)
        assert errors["labels"] == ["a", "b", "c"]
        counts = sk.confusion_matrix(gold, predicted, labels=["a", "b", "c"])
        assert errors["confusion_matrix"]["counts"] == counts.tolist()
        assert int(counts.sum()) == errors["n_test"] == 20
        assert errors["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                            "support": 4}
        assert errors["macro_f1"] == round(sk.f1_score(gold, predicted, average="macro"), 6)
    comparison, = json.loads((results / "conclusion.json").read_text())["comparisons"]
    assert comparison["reference_value"] == round(expected["control"], 6)
    assert comparison["variant_value"] == round(expected["lr-1"], 6)
    assert comparison["difference"] == round(expected["lr-1"] - expected["control"], 6)
