"""The main job inside flightplan against its floor on the same device (issue 31, item 1).

1. flightplan: a copy of ``examples/drug-reviews/campaign.toml`` (or, with ``--tiny``,
   ``examples/tiny/campaign.toml``: a random 2-layer encoder) in a scratch folder, carried
   through the CLI as ``scripts/main.sh`` does: ``flightplan run --json`` (data check,
   pilot, decision, the three runs), ``close --json``, ``verify results``, each verb timed
   around its process. From ``run --json``: each run's wall time and its goodput parts
   (:mod:`flightplan.goodput`); a run's start → first step is ``waiting + start_load +
   data`` (from the executor starting it to its first step beginning).
2. The floor: the same three trainings (same params, batch size, epochs, evaluation of
   the test set after each epoch) as one bare loop in ONE process (a child of this one,
   timed from its start, so the interpreter and its imports count once), written as the
   PyTorch and PEFT docs write them: the corpus read and tokenized once (at the longest
   ``max_length``; a shorter one is a cut of it ending in the separator token); the
   control a frozen ``AutoModel`` whose mean-pooled embeddings are computed once, then a
   linear head trained on them with AdamW; each LoRA run
   ``get_peft_model(AutoModelForSequenceClassification, LoraConfig(SEQ_CLS, …))``, AdamW
   (the head at ``params.lr``, the adapters at ``adapter.lr``) and a linear warm-up
   schedule, ``model(**batch).loss.backward(); optimizer.step(); scheduler.step();
   optimizer.zero_grad()`` on batches padded to their longest. Same
   torch thread count as the runs (:func:`flightplan.trial.accelerator.torch_threads`).
   Its macro-F1 is printed beside the runs' for reference only: the PEFT model classifies
   from BERT's [CLS] pooler, not textclf's mean pooling, and at the main job's rates its
   LoRA runs stay near the majority class (0.264); the work per step is the same.

Printed: the run phase's wall time against the floor's (ratio), each run's start → first
step with its parts, the device-busy share (CUDA: the floor's steps and evaluations timed
with CUDA events over its wall time, and NVML utilisation sampled every 0.5 s by
``torch.cuda.utilization`` during ``flightplan run`` where NVML is installed; CPU: n/a),
and close + verify. The figures are measurements, not checks: exit 0 when every verb
exited 0 and the three runs finished, else 1.

``--cpu`` forces the CPU (``FLIGHTPLAN_DEVICE=cpu``, ``CUDA_VISIBLE_DEVICES=""``) for both
sides. ``--tiny``, ``--train-limit``, ``--test-limit`` and ``--epochs`` shrink the job (the
suite runs ``--cpu --tiny --train-limit 32 --test-limit 16 --epochs 1``).

Usage::

    .venv/bin/python bench/gpu_campaign.py [--cpu] [--tiny] [--train-limit N]
        [--test-limit N] [--epochs N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from flightplan_cli import flightplan

REPO = Path(__file__).resolve().parents[1]
_FLOOR = "--floor"
_HOUR = 3600.0


# --- the campaign folder ---------------------------------------------------------------------

def _campaign_text(source: Path, train_limit: int | None, test_limit: int | None,
                   epochs: int | None) -> str:
    """``source``'s text with ``[corpus] train_limit``/``test_limit`` set (replaced where the
    file has them, else added after ``label_column``) and every run's ``epochs = N``."""
    text = source.read_text(encoding="utf-8")
    for key, value in (("train_limit", train_limit), ("test_limit", test_limit)):
        if value is None:
            continue
        line = f"{key} = {value}"
        if re.search(rf"^{key} = \d+$", text, flags=re.M):
            text = re.sub(rf"^{key} = \d+$", line, text, flags=re.M)
        else:
            text = re.sub(r"^(label_column = .*)$", rf"\1\n{line}", text, count=1, flags=re.M)
    if epochs is not None:
        text = re.sub(r"\bepochs = \d+", f"epochs = {epochs}", text)
    return text


class _Utilisation:
    """NVML utilisation of GPU 0 (% of the last sample period the GPU ran a kernel),
    sampled every ``period`` s by ``torch.cuda.utilization`` in a thread while in use;
    ``samples`` stays empty where NVML is not installed or ``enabled`` is false."""

    def __init__(self, enabled: bool, period: float = 0.5) -> None:
        self.enabled, self.period, self.samples = enabled, period, list[int]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import torch
        while not self._stop.is_set():
            try:
                self.samples.append(int(torch.cuda.utilization(0)))
            except Exception:          # no pynvml / amdsmi: nothing to sample
                return
            self._stop.wait(self.period)

    def __enter__(self) -> "_Utilisation":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join()


# --- the floor (child process) ------------------------------------------------------------------

def _floor(spec_path: Path, device_name: str) -> dict[str, Any]:
    """The three trainings as one bare loop in this process (module docstring, 2). Returns
    ``{runs: {name: {seconds, macro_f1, steps}}, data_s, busy_s}`` (``busy_s``: the steps'
    and evaluations' time between CUDA events, None on the CPU)."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from sklearn.metrics import f1_score
    from transformers import (AutoModel, AutoModelForSequenceClassification, AutoTokenizer,
                              BertConfig, BertForSequenceClassification, BertModel,
                              get_linear_schedule_with_warmup)
    from transformers import logging as hf_logging

    from flightplan.spec import load_spec
    from flightplan.tasks.textclf.data import clean_text, read_corpus
    from flightplan.tasks.textclf.model import model_dir, torch_threads

    hf_logging.set_verbosity_error()
    torch.set_num_threads(torch_threads())
    dev = torch.device(device_name)
    spec = load_spec(spec_path)
    assert spec.corpus is not None and spec.base_model is not None
    base = spec.base_model
    folder = str(model_dir(base))

    data_began = time.perf_counter()
    corpus = read_corpus(spec.corpus, spec_path.parent)
    labels = corpus.labels
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    longest = max(int(run.params.get("max_length", 128)) for run in spec.runs)

    def tokenize(examples: Any) -> tuple[list[list[int]], list[int]]:
        texts = [clean_text(e) for e in examples]
        ids = tokenizer(texts, truncation=True, max_length=longest)["input_ids"]
        return [list(x) for x in ids], [index.get(e.label, -1) for e in examples]

    train_ids, train_gold = tokenize(corpus.train)
    test_ids, test_gold = tokenize(corpus.test)
    data_s = time.perf_counter() - data_began
    sep, pad = int(tokenizer.sep_token_id), int(tokenizer.pad_token_id or 0)

    def cut(rows: list[list[int]], length: int) -> list[list[int]]:
        return [r if len(r) <= length else [*r[:length - 1], sep] for r in rows]

    def batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.tensor([[*r, *[pad] * (width - len(r))] for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return ids.to(dev), mask.to(dev)

    cuda = dev.type == "cuda"
    spans: list[tuple[Any, Any]] = []

    class Busy:
        """CUDA events around a piece of device work (nothing on the CPU)."""

        def __enter__(self) -> None:
            if cuda:
                self.start = torch.cuda.Event(enable_timing=True)
                self.start.record()

        def __exit__(self, *exc: object) -> None:
            if cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                spans.append((self.start, end))

    @torch.inference_mode()
    def embed(encoder: Any, rows: list[list[int]]) -> torch.Tensor:
        """Mean-pooled embeddings (N, H) of ``rows``, 64 a batch."""
        out = []
        for at in range(0, len(rows), 64):
            with Busy():
                ids, mask = batch(rows[at:at + 64])
                hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                out.append((hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))
        return torch.cat(out)

    def random_config(**extra: Any) -> BertConfig:
        return BertConfig(hidden_size=base.hidden_size, num_hidden_layers=base.num_hidden_layers,
                          num_attention_heads=base.num_attention_heads,
                          intermediate_size=base.intermediate_size, vocab_size=len(tokenizer),
                          max_position_embeddings=512, **extra)

    def macro_f1(predicted: list[int]) -> float:
        return float(f1_score(test_gold, predicted, average="macro", zero_division=0))

    results: dict[str, dict[str, Any]] = {}
    for run in spec.runs:
        began = time.perf_counter()
        params = dict(run.params)
        length, size = int(params.get("max_length", 128)), int(params.get("batch_size", 16))
        epochs, seed = int(params.get("epochs", 3)), int(params.get("seed", 0))
        adapter = dict(params.get("adapter") or {})
        train_rows, test_rows = cut(train_ids, length), cut(test_ids, length)
        steps_per_epoch = math.ceil(len(train_rows) / size)
        torch.manual_seed(seed)
        gold = torch.tensor(train_gold, device=dev)
        predicted: list[int] = []
        if adapter.get("kind", "none") == "none":
            encoder = (BertModel(random_config()) if base.random_init
                       else AutoModel.from_pretrained(folder)).to(dev).eval()
            train_x, test_x = embed(encoder, train_rows), embed(encoder, test_rows)
            head = torch.nn.Sequential(torch.nn.Dropout(float(params.get("dropout", 0.1))),
                                       torch.nn.Linear(train_x.shape[1], len(labels))).to(dev)
            optimizer = torch.optim.AdamW(head.parameters(), lr=float(params.get("lr", 1e-3)),
                                          weight_decay=0.01)
            for _ in range(epochs):
                head.train()
                for rows in torch.randperm(len(train_rows)).split(size):
                    with Busy():
                        rows = rows.to(dev)
                        loss = torch.nn.functional.cross_entropy(head(train_x[rows]), gold[rows])
                        loss.backward()
                        optimizer.step()
                        optimizer.zero_grad()
                head.eval()
                with torch.inference_mode(), Busy():
                    predicted = head(test_x).argmax(-1).tolist()
        else:
            if base.random_init:
                model = BertForSequenceClassification(random_config(num_labels=len(labels)))
            else:
                model = AutoModelForSequenceClassification.from_pretrained(folder,
                                                                           num_labels=len(labels))
            config = LoraConfig(task_type=TaskType.SEQ_CLS, r=int(adapter.get("rank", 8)),
                                lora_alpha=float(adapter.get("alpha", 16)),
                                lora_dropout=float(adapter.get("dropout", 0.1)),
                                target_modules=list(adapter.get("target_modules", ["query", "value"])))
            model = get_peft_model(model, config).to(dev)
            # the head at params.lr, the adapters at adapter.lr, as the task trains them
            head = [p for n, p in model.named_parameters() if p.requires_grad and "classifier" in n]
            lora = [p for n, p in model.named_parameters() if p.requires_grad and "classifier" not in n]
            optimizer = torch.optim.AdamW(
                [{"params": head, "lr": float(params.get("lr", 1e-3))},
                 {"params": lora, "lr": float(adapter.get("lr") or params.get("lr", 1e-3))}],
                weight_decay=0.01)
            total = epochs * steps_per_epoch
            scheduler = get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)
            for _ in range(epochs):
                model.train()
                for rows in torch.randperm(len(train_rows)).split(size):
                    with Busy():
                        ids, mask = batch([train_rows[i] for i in rows.tolist()])
                        out = model(input_ids=ids, attention_mask=mask, labels=gold[rows.to(dev)])
                        out.loss.backward()
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad()
                model.eval()
                predicted = []
                with torch.inference_mode():
                    for at in range(0, len(test_rows), 64):
                        with Busy():
                            ids, mask = batch(test_rows[at:at + 64])
                            logits = model(input_ids=ids, attention_mask=mask).logits
                            predicted += logits.argmax(-1).tolist()
        if cuda:
            torch.cuda.synchronize()
        results[run.name] = {"seconds": time.perf_counter() - began, "steps": epochs * steps_per_epoch,
                             "macro_f1": macro_f1(predicted)}
    busy_s = sum(s.elapsed_time(e) for s, e in spans) / 1e3 if cuda else None
    return {"runs": results, "data_s": data_s, "busy_s": busy_s}


# --- the bench --------------------------------------------------------------------------------

def _fmt_parts(parts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * _HOUR:.1f}" for k, v in parts.items())


def main() -> int:
    """Run both sides and print the figures (module docstring); 0 when everything ran."""
    if len(sys.argv) > 2 and sys.argv[1] == _FLOOR:
        print(json.dumps(_floor(Path(sys.argv[2]), sys.argv[3])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="force the CPU for both sides")
    parser.add_argument("--tiny", action="store_true",
                        help="examples/tiny's campaign (a random 2-layer encoder) instead")
    parser.add_argument("--train-limit", type=int, default=None, help="[corpus] train_limit")
    parser.add_argument("--test-limit", type=int, default=None, help="[corpus] test_limit")
    parser.add_argument("--epochs", type=int, default=None, help="every run's params.epochs")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    import torch
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if args.cpu:
        env.update(FLIGHTPLAN_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    cuda = not args.cpu and torch.cuda.is_available()
    where = torch.cuda.get_device_name(0) if cuda else "the CPU"
    source = REPO / "examples" / ("tiny" if args.tiny else "drug-reviews") / "campaign.toml"
    with tempfile.TemporaryDirectory(prefix="fp-gpu-campaign-", dir=args.dir) as scratch:
        folder = Path(scratch)
        spec_file = folder / "campaign.toml"
        spec_file.write_text(_campaign_text(source, args.train_limit, args.test_limit, args.epochs),
                             encoding="utf-8")
        from flightplan.spec import load_spec
        spec = load_spec(spec_file)
        names = [run.name for run in spec.runs]
        corpus = spec.corpus
        assert corpus is not None
        print(f"gpu_campaign on {where}, torch {torch.__version__}: {spec.campaign.name} "
              f"(train_limit {corpus.train_limit}, test_limit {corpus.test_limit}), runs "
              f"{', '.join(names)}")

        run_began = time.time()
        with _Utilisation(cuda) as utilisation:
            run_s, ran = flightplan(folder, "run", "campaign.toml", "--json", env=env)
        if ran.returncode != 0:
            print(f"flightplan run FAILED (exit {ran.returncode}): {ran.stderr[-1500:]}")
            return 1
        outcome = json.loads(ran.stdout)
        runs = {r["name"]: r for r in outcome["runs"]}
        close_s, closed = flightplan(folder, "close", "campaign.toml", "--json", env=env)
        verify_s, verified = flightplan(folder, "verify", "results", env=env)

        floor_began = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, _FLOOR, str(spec_file),
                               "cuda" if cuda else "cpu"], env=env, capture_output=True,
                              text=True, timeout=3600)
        floor_s = time.perf_counter() - floor_began
        if done.returncode != 0:
            print(f"floor FAILED (exit {done.returncode}): {done.stderr[-1500:]}")
            return 1
        floor = json.loads(done.stdout.strip().splitlines()[-1])

    before_s = float((outcome.get("decision") or {}).get("at", run_began)) - run_began
    runs_s = run_s - before_s
    print(f"flightplan run: {run_s:.1f} s (start, data check, pilot and decision "
          f"{before_s:.1f} s; the runs {runs_s:.1f} s, each run's wall: "
          + ", ".join(f"{n} {float(runs[n]['wall_s']):.1f}" for n in names if n in runs) + ")")
    setup_s = floor_s - sum(r["seconds"] for r in floor["runs"].values())
    print(f"floor, one process: {floor_s:.1f} s (start, imports and data once {setup_s:.1f} s, "
          f"of which reading and tokenizing {floor['data_s']:.1f} s; "
          + ", ".join(f"{n} {r['seconds']:.1f}" for n, r in floor["runs"].items())
          + "); macro-F1 " + ", ".join(f"{n} {r['macro_f1']:.4f}" for n, r in floor["runs"].items())
          + " (flightplan: " + ", ".join(f"{n} {float(runs[n]['metric']):.4f}"
                                         for n in names if runs.get(n, {}).get("metric") is not None)
          + ")")
    print(f"-> run phase / floor = {run_s / floor_s:.2f}; the runs after the decision / floor = "
          f"{runs_s / floor_s:.2f}")
    for name in names:
        if name not in runs or not runs[name].get("goodput"):
            print(f"start -> first step, {name}: no goodput (status {outcome['statuses'].get(name)})")
            continue
        parts = runs[name]["goodput"]["parts_hours"]
        first = {k: parts[k] for k in ("waiting", "start_load", "data")}
        print(f"start -> first step, {name}: {sum(first.values()) * _HOUR:.1f} s "
              f"({_fmt_parts(first)}); steps {parts['steps'] * _HOUR:.1f} s, goodput "
              f"{runs[name]['goodput']['goodput']:.1%}")
    if cuda:
        floor_busy = floor["busy_s"] / floor_s
        nvml = (f"{sum(1 for s in utilisation.samples if s > 0) / len(utilisation.samples):.0%} of "
                f"{len(utilisation.samples)} NVML samples busy, mean "
                f"{sum(utilisation.samples) / len(utilisation.samples):.0f} %"
                if utilisation.samples else "NVML not installed (pip install nvidia-ml-py)")
        print(f"device busy: floor {floor_busy:.1%} of its wall (CUDA events around steps and "
              f"evaluations); flightplan run: {nvml}")
    else:
        print("device busy: n/a (CPU)")
    print(f"close {close_s:.1f} s (exit {closed.returncode}) + verify {verify_s:.1f} s "
          f"(exit {verified.returncode}) = {close_s + verify_s:.1f} s")
    finished = all(outcome["statuses"].get(n) == "finished" for n in names)
    return 0 if finished and closed.returncode == 0 and verified.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
