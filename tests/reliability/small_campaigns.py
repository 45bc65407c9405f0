"""Copies of the example campaigns cut to the least that still exercises each way a run
executes, for the crash tests and ``bench/faults.py``.

Each builder writes a campaign into an empty ``folder`` and returns its campaign file:

- :func:`small_tiny`: ``examples/tiny``, the built-in text classifier (control, LoRA), on 64
  train / 16 test reviews, without its useful run;
- :func:`small_digits`: ``examples/digits``, a plain PyTorch file task, on 128 / 32 digits,
  2 epochs, without its useful run;
- :func:`docs_task`: the regression of ``docs/tasks.md`` (its ``make_data.py``,
  ``campaign.toml`` and ``train.py``, copied from the page) on 64 / 16 rows, 2 epochs;
- :func:`docs_trainer`: the same with the page's ``trainer_train.py`` (the Hugging Face
  Trainer) in both runs;
- :func:`small_lightning`: ``examples/digits-lightning`` (Lightning) on 128 / 32 digits,
  2 epochs, without ``min_quality`` (a run that short may not reach it);
- :func:`small_ddp`: ``examples/digits-ddp`` (plain PyTorch DDP, each run two processes
  with gloo) on 128 / 32 digits, 2 epochs.

Each keeps two essential runs (a control and a variant), so the pilot (two processes: the
kill-and-resume check), both runs, ``close`` and ``verify`` all run, in about 20–45 s each
on a 2-core machine.

Usage::

    spec = docs_trainer(tmp_path / "trainer")
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from e2e.docs_examples import docs_files

from .cli_harness import ROOT, TINY

__all__ = ["small_tiny", "small_digits", "docs_task", "docs_trainer", "small_lightning",
           "small_ddp", "BUILDERS"]


def _edit(text: str, replacements: list[tuple[str, str]], *, drop_last_run: str | None = None) -> str:
    """``text`` with each ``old`` replaced by ``new`` (each must be there), and without its
    last ``[[run]]`` when that run is named ``drop_last_run``."""
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    if drop_last_run is not None:
        last = text.rindex("[[run]]")
        assert f'name = "{drop_last_run}"' in text[last:], drop_last_run
        text = text[:last]
    return text


def small_tiny(folder: Path) -> Path:
    """A copy of the tiny campaign in ``folder`` cut to fit a test budget: 64 train and 16
    test reviews (4 steps an epoch) and without its useful run ``lora-r4-len128``, so the
    control and a LoRA run remain. Returns the campaign file."""
    text = _edit(TINY.read_text(encoding="utf-8"),
                 [("train_limit = 240", "train_limit = 64"), ("test_limit = 80", "test_limit = 16")],
                 drop_last_run="lora-r4-len128")
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "campaign.toml"
    spec.write_text(text, encoding="utf-8")
    return spec


def _digits_like(example: str, folder: Path, *, epochs: str, drop: list[tuple[str, str]],
                 drop_last_run: str | None) -> Path:
    source = ROOT / "examples" / example
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "train.py", folder / "train.py")
    shutil.copytree(source / "data", folder / "data")
    text = _edit((source / "campaign.toml").read_text(encoding="utf-8"),
                 [('label_column = "label"', 'label_column = "label"\ntrain_limit = 128\ntest_limit = 32'),
                  (f"epochs = {epochs}", "epochs = 2"), *drop], drop_last_run=drop_last_run)
    spec = folder / "campaign.toml"
    spec.write_text(text, encoding="utf-8")
    return spec


def small_digits(folder: Path) -> Path:
    """``examples/digits`` (``train.py``, ``data/``) on 128 train and 32 test digits (4 steps
    an epoch), 2 epochs, without its useful run ``lr-3e-3``. Returns the campaign file."""
    return _digits_like("digits", folder, epochs="5", drop=[], drop_last_run="lr-3e-3")


def small_lightning(folder: Path) -> Path:
    """``examples/digits-lightning`` on 128 train and 32 test digits, 2 epochs, without its
    ``min_quality`` stop rule. Returns the campaign file."""
    rule = 'min_quality = { metric = "val_accuracy", below = 0.5, after_fraction = 0.5 }\n'
    return _digits_like("digits-lightning", folder, epochs="4", drop=[(rule, "")],
                        drop_last_run=None)


def small_ddp(folder: Path) -> Path:
    """``examples/digits-ddp`` (two processes a run, gloo) on 128 train and 32 test digits
    (2 steps an epoch a rank), 2 epochs. Returns the campaign file."""
    return _digits_like("digits-ddp", folder, epochs="3", drop=[], drop_last_run=None)


def docs_task(folder: Path, *, task: str = "train.py") -> Path:
    """The regression example of ``docs/tasks.md`` as a reader copies it (``make_data.py``
    run once), on 64 train and 16 test rows, 2 epochs (8 steps), ``task`` in both runs.
    Returns the campaign file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in docs_files().items():
        (folder / name).write_text(body, encoding="utf-8")
    subprocess.run([sys.executable, "make_data.py"], cwd=folder, check=True, timeout=120)
    spec = folder / "campaign.toml"
    text = _edit(spec.read_text(encoding="utf-8"), [
        ('input_columns = ["x1", "x2"]', 'input_columns = ["x1", "x2"]\ntrain_limit = 64\ntest_limit = 16'),
        ("params = { lr = 0.05 }", "params = { lr = 0.05, epochs = 2 }"),
        ("params = { lr = 0.2 }", "params = { lr = 0.2, epochs = 2 }")])
    spec.write_text(text.replace('task = "train.py"', f'task = "{task}"'), encoding="utf-8")
    return spec


def docs_trainer(folder: Path) -> Path:
    """:func:`docs_task` with the page's ``trainer_train.py`` (the Hugging Face Trainer
    through ``flightplan.integrations.transformers``) in both runs."""
    return docs_task(folder, task="trainer_train.py")


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "tiny": small_tiny, "digits": small_digits, "file-task": docs_task,
    "trainer": docs_trainer, "lightning": small_lightning, "ddp": small_ddp}
"""Every builder by the name the crash bench gives its kind."""
