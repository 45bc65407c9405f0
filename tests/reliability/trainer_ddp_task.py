"""The tiny Trainer of ``tests/unit/integrations/trainer_script.py`` (a 1-layer BERT with
dropout on 48 random sequences) as a task of several processes: the Trainer runs DDP in the
ranks flightplan started (gloo on the CPU), each rank reading its shard, through
:func:`flightplan.integrations.transformers.train`.

Params: ``steps``, ``save_steps`` (absent: flightplan's interval policy), ``pause_after``
(when a step begins after that many steps, and so after their save, rank 0 writes
``paused`` in the run directory and every rank sleeps until killed), ``step_sleep_s``
(before every step), ``nan_at`` (every weight NaN before that step, on every rank). At the
end rank 0 writes ``final/model.safetensors``, ``final/optimizer.safetensors``,
``predictions.csv``, ``metrics.json`` and ``artifact/``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ddp_products import write_final
from flightplan.integrations.transformers import train as train_with_flightplan
from flightplan.integrations.transformers import write_outputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "integrations"))
from trainer_script import build_trainer  # noqa: E402  # the folder above, added just now


class Pause(TrainerCallback):
    """Sleep ``step_s`` before every step; sleep until killed when a step begins after
    ``after`` steps."""

    def __init__(self, run_dir: Path, after: int | None, step_s: float) -> None:
        self.run_dir, self.after, self.step_s = run_dir, after, step_s

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(self.step_s)
        if state.global_step == self.after:
            if state.is_world_process_zero:
                (self.run_dir / "paused").write_text(str(self.after))
            while True:
                time.sleep(1)


def train(trial) -> None:
    params = trial.params
    run_dir = Path(trial.run_dir)
    trainer = build_trainer(run_dir, steps=int(params["steps"]),
                            save_steps=params.get("save_steps"), nan_at=params.get("nan_at"))
    trainer.add_callback(Pause(run_dir, params.get("pause_after"),
                               float(params.get("step_sleep_s", 0))))
    train_with_flightplan(trainer, trial)
    prediction = trainer.predict(trainer.train_dataset[:16])
    rows = [{"example_id": str(i), "gold": str(int(gold)), "predicted": str(int(p.argmax())),
             **{f"logit_{c}": repr(float(p[c])) for c in range(3)}}
            for i, (p, gold) in enumerate(zip(prediction.predictions, prediction.label_ids))]
    accuracy = float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())
    write_outputs(trial, trainer, predictions=rows, metrics={"accuracy": accuracy})
    if trial.rank == 0:
        write_final(run_dir, trainer.model, trainer.optimizer)
