"""The drug-review question written the way a Hugging Face Trainer + PEFT user writes it.

A flightplan *file task*: ``campaign.toml`` names this file (``task = "train.py"``); the
worker imports it and calls ``train(trial)``; the hooks ``base_revision`` (the exact base
model, part of run ids) and ``reload_predictions`` (``flightplan close`` and ``verify
--trust-code`` re-create the predictions in a fresh process) use ``load_artifact``.
Compared with a plain Trainer script, two lines change: ``trainer.train()`` becomes
``train_in_flightplan(trainer, trial)`` (atomic verified checkpoints, resume, stop rules,
measurements) and ``write_outputs`` leaves what ``flightplan close`` needs.

- control (no ``lora`` in params): all-MiniLM-L6-v2 with its encoder frozen; only the
  pooler and the classification head train (a probe of the frozen encoder).
- LoRA (``params.lora = {r, alpha}``): rank-r adapters on the attention's query and value
  projections, head and pooler trained with them (PEFT ``SEQ_CLS``).

Params: ``max_length`` (tokens), ``lr`` (AdamW peak, linear decay), ``epochs``,
``batch_size``, ``seed``, optional ``lora``. Evaluation on the test set every epoch feeds
``min_quality``; ``train_in_flightplan`` applies the pilot's step cap (``trial.max_steps``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (AutoModelForSequenceClassification, AutoTokenizer,
                          DataCollatorWithPadding, Trainer, TrainingArguments, set_seed)

from flightplan.corpus import load_corpus
from flightplan.integrations.transformers import train as train_in_flightplan
from flightplan.integrations.transformers import write_outputs
from flightplan.spec import BaseModelSection, CorpusSection
from flightplan.tasks.textclf.data import clean_text
from flightplan.tasks.textclf.inference import classification_metrics
from flightplan.tasks.textclf.model import base_revision as model_revision
from flightplan.tasks.textclf.model import model_dir

def _prediction(example: Any, n_tokens: int, probs: Any, labels: list[str],
                max_length: int) -> dict[str, Any]:
    """One predictions.csv row: the example, its label and every label's probability."""
    return {"example_id": example.id, "gold": example.label,
            "predicted": labels[int(probs.argmax())], "n_tokens": n_tokens,
            "truncated": n_tokens > max_length,
            **{f"prob_{label}": float(probs[j]) for j, label in enumerate(labels)}}


def _encode(tokenizer: Any, examples: list, labels: list[str], max_length: int) -> list[dict]:
    texts = [clean_text(e) for e in examples]      # the review without its quotes and entities
    cut = tokenizer(texts, truncation=True, max_length=max_length)
    full = tokenizer(texts, truncation=False, verbose=False)["input_ids"]
    return [{"input_ids": ids, "attention_mask": mask, "labels": labels.index(e.label),
             "n_tokens": len(whole)}
            for e, ids, mask, whole in zip(examples, cut["input_ids"], cut["attention_mask"], full)]


def base_revision(base_model: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The hook: the exact base model (package, version, weights sha256), part of run ids."""
    section = base_model if isinstance(base_model, BaseModelSection) \
        else BaseModelSection.model_validate(base_model or {})
    return model_revision(section)


def train(trial: Any) -> None:
    """Train one run of the campaign and write predictions, metrics and the artifact."""
    params = trial.params
    torch.set_num_threads(1)
    set_seed(params["seed"])
    corpus_section = CorpusSection.model_validate(
        {k: v for k, v in trial.corpus.items() if k != "root"})
    corpus = load_corpus(corpus_section, trial.campaign_dir)
    base = BaseModelSection.model_validate(trial.base_model or {})
    folder = str(model_dir(base))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    labels = corpus.labels
    train_rows = _encode(tokenizer, corpus.train, labels, params["max_length"])
    test_rows = _encode(tokenizer, corpus.test, labels, params["max_length"])
    rows = train_rows + test_rows
    trial.check_truncation(sum(r["n_tokens"] > params["max_length"] for r in rows) / len(rows))

    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=len(labels))
    if params.get("lora"):
        lora = params["lora"]
        model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=lora["r"],
                                                 lora_alpha=lora["alpha"], lora_dropout=0.1,
                                                 target_modules=["query", "value"],
                                                 modules_to_save=["classifier", "pooler"]))
    else:
        for parameter in model.bert.encoder.parameters():
            parameter.requires_grad = False
        for parameter in model.bert.embeddings.parameters():
            parameter.requires_grad = False

    def metrics(prediction: Any) -> dict[str, float]:
        predicted = np.argmax(prediction.predictions, axis=1).tolist()
        scores = classification_metrics(prediction.label_ids.tolist(), predicted, labels)
        return {"macro_f1": scores["macro_f1"], "accuracy": scores["accuracy"]}

    args = TrainingArguments(
        output_dir=str(trial.run_dir), num_train_epochs=params["epochs"],
        per_device_train_batch_size=params["batch_size"], per_device_eval_batch_size=32,
        learning_rate=params["lr"], lr_scheduler_type="linear", seed=params["seed"],
        logging_steps=1, eval_strategy="epoch", report_to=[], disable_tqdm=True,
        remove_unused_columns=True, dataloader_num_workers=0)
    drop = ("n_tokens",)
    trainer = Trainer(model=model, args=args,
                      train_dataset=[{k: v for k, v in r.items() if k not in drop}
                                     for r in train_rows],
                      eval_dataset=[{k: v for k, v in r.items() if k not in drop}
                                    for r in test_rows],
                      data_collator=DataCollatorWithPadding(tokenizer),
                      compute_metrics=metrics)
    train_in_flightplan(trainer, trial)

    output = trainer.predict(trainer.eval_dataset)
    probs = torch.softmax(torch.from_numpy(output.predictions), dim=-1)
    predictions = [_prediction(example, row["n_tokens"], p, labels, params["max_length"])
                   for example, row, p in zip(corpus.test, test_rows, probs)]
    scores = classification_metrics([labels.index(e.label) for e in corpus.test],
                                    probs.argmax(dim=1).tolist(), labels)
    write_outputs(trial, trainer, predictions=predictions, metrics=scores,
                  base_revision=model_revision(base),
                  extra={"labels": labels, "max_length": params["max_length"],
                         "corpus": corpus_section.model_dump(mode="json")})
    trial.evaluate(max(trainer.state.global_step - 1, 0), macro_f1=scores["macro_f1"])


def reload_predictions(artifact_dir: Path | str, out: Path | str, *, campaign_dir: Any = None,
                       limit: int | None = None) -> int:
    """The hook: reload ``artifact/`` in this process and write the test split's predictions
    the way training did (``predicted`` and every ``prob_*`` are what verify compares);
    returns the rows written."""
    import csv
    import json

    artifact_dir = Path(artifact_dir)
    config = json.loads((artifact_dir / "artifact.json").read_text())
    corpus = load_corpus(CorpusSection.model_validate(config["corpus"]), campaign_dir or ".")
    examples = corpus.test[:limit] if limit is not None else corpus.test
    rows = load_artifact(artifact_dir).rows(examples)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


class Predictor:
    """A reloaded run: ``predict(texts) -> labels``, ``rows(examples)`` as predictions.csv."""

    def __init__(self, model: Any, tokenizer: Any, config: dict[str, Any]) -> None:
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.labels: list[str] = config["labels"]

    @torch.no_grad()
    def rows(self, examples: list) -> list[dict[str, Any]]:
        """One predictions.csv row per corpus example (the cleaned review, one at a time)."""
        out = []
        max_length = self.config["max_length"]
        for example in examples:
            text = clean_text(example)
            batch = self.tokenizer(text, truncation=True, max_length=max_length,
                                   return_tensors="pt")
            n_tokens = len(self.tokenizer(text, truncation=False, verbose=False)["input_ids"])
            p = torch.softmax(self.model(**batch).logits[0], dim=-1)
            out.append(_prediction(example, n_tokens, p, self.labels, max_length))
        return out

    @torch.no_grad()
    def predict(self, texts: list[str]) -> list[str]:
        """The predicted label of each text (one at a time: no padding effects)."""
        out = []
        for text in texts:
            batch = self.tokenizer(text, truncation=True, max_length=self.config["max_length"],
                                   return_tensors="pt")
            out.append(self.labels[int(self.model(**batch).logits.argmax())])
        return out


def load_artifact(artifact_dir: Path | str) -> Predictor:
    """Reload ``artifact/``: the packaged base (its weights' sha256 must be the recorded one)
    plus the adapter, or the whole fine-tuned model for the control.

    Raises:
        ValueError: the installed base model differs from the one the run trained on.
    """
    import json

    artifact_dir = Path(artifact_dir)
    config = json.loads((artifact_dir / "artifact.json").read_text())
    recorded = config["base_revision"]
    base = BaseModelSection(package=recorded["package"])
    if model_revision(base) != recorded:
        raise ValueError(f"{artifact_dir}: the installed {recorded['package']} is not the base "
                         f"this run trained on ({recorded}); install that version")
    folder = str(model_dir(base))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if config.get("peft"):
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, num_labels=len(config["labels"]))
        model = PeftModel.from_pretrained(model, str(artifact_dir))
    else:
        model = AutoModelForSequenceClassification.from_pretrained(str(artifact_dir))
    return Predictor(model, tokenizer, config)
