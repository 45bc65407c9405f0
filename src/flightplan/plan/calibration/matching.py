"""Durations from an earlier campaign: which measured run or stage a stage or run of the
new campaign matches, and a measured run's time scaled to other work.

Each duration is one of three (:class:`flightplan.plan.calibration.estimate.Estimate`'s
``source``):

- **measured**: a run whose task (and code version), ``[base_model]``, corpus (files,
  columns, limits), params and offer equal a run of the earlier campaign takes that run's
  observed duration; a person-only stage takes the observed duration of the stage of the
  same name; a GPU stage the same on the same offer (the data check also needs the same
  corpus, the pilot the same control).
- **scaled**: a run that differs from a measured one only in :data:`SCALED_PARAMS` or in
  the corpus limits (same task, base model, corpus files and columns, offer, every other
  param) is that run's measured time split in parts, each scaled by the work it does
  (time per example and per token kept; :func:`scale_run`)::

      load'  = load  · (n'_train + n'_test) / (n_train + n_test) · ℓ
      train' = train · n'_train / n_train · e'/e · ℓ        (train = Σ step times + Σ save
                                                            stalls; with the run's ``steps``
                                                            given: · s'/s · B'/B instead of
                                                            the examples and epochs)
      eval'  = eval  · n'_test / n_test · e'/e · ℓ          (the built-in task evaluates once
                                                            per epoch)
      other' = other = observed − load − train − eval       (writing outputs, start-up)

  with e the epochs, B the batch size (tokens per step ∝ B, steps ∝ 1/B: the train time of
  a fixed set of examples does not depend on it) and ℓ the tokens per input: between the
  measured ones and L'/L of them when max_length goes from L to L' (as many inputs as were
  cut at L grow up to L'; none, if none was longer than L), the midpoint as the estimate
  and the two bounds as its range. A data check on other corpus limits scales with the
  examples (n'_train + n'_test)/(n_train + n_test).
- **guess**: everything else keeps the campaign file's figure, and the plan says why
  (another offer: no rule relates two offers' speeds; a param no rule scales, e.g. a
  LoRA rank; another task, code version, base model or corpus; nothing measured).

A comparison's model of paired outcomes is matched by its two runs
(:mod:`flightplan.plan.calibration.power_models`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flightplan.ids import corpus_view
from flightplan.plan.calibration.estimate import (Estimate, duration_guess,
                                                  duration_measured)
from flightplan.plan.calibration.record import Calibration, MeasuredRun
from flightplan.spec import CampaignSpec, Run, Stage
from flightplan.units import SECONDS_PER_HOUR

__all__ = ["SCALED_SPREAD", "SCALED_PARAMS", "RUNNER_STAGES", "Candidate", "Matcher",
           "scale_run", "run_estimate", "stage_estimate"]

SCALED_SPREAD = 0.2
"""A scaled figure's range is widened by this share either way, for what the linear rules
leave out (per-step overhead, rounding up to whole batches, evaluations not one per
epoch)."""
SCALED_PARAMS = ("epochs", "max_length", "batch_size")
"""The params the scaling rules read, by the names the built-in task gives them
(docs/tasks.md): passes over the training set, tokens per input at most, inputs per step.
A run that differs from a measured one in any other param is left a guess."""
RUNNER_STAGES = ("data-check", "pilot")
"""The stages ``flightplan run`` executes itself (:data:`flightplan.run.stages.RUNNER_STAGES`):
the data check reads the corpus, the pilot is the control's short run."""


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested params as dotted keys (``{"adapter": {"rank": 8}}`` → ``{"adapter.rank": 8}``)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def _corpus_identity(view: Mapping[str, Any]) -> dict[str, Any]:
    """The corpus view without its limits: what examples look like, not how many."""
    return {k: v for k, v in view.items() if k not in ("train_limit", "test_limit")}


@dataclass(frozen=True)
class Candidate:
    """How far a measured run is from a run of the new campaign."""

    measured: MeasuredRun
    differing: tuple[str, ...]       # params that differ (dotted)
    same_view: bool                  # corpus limits equal too


class Matcher:
    """Matches the new campaign's runs and stages against a calibration."""

    def __init__(self, spec: CampaignSpec, calibration: Calibration,
                 code_versions: Mapping[str, str]) -> None:
        self.spec, self.c, self.code_versions = spec, calibration, code_versions
        self.view = corpus_view(spec.corpus.model_dump(mode="json") if spec.corpus else None)
        self.base = spec.base_model.model_dump(mode="json") if spec.base_model else None
        self.same_offer = spec.rental.offer == calibration.offer
        self.same_files = spec.corpus is not None and calibration.corpus_sha256 is not None \
            and dict(spec.corpus.sha256) == dict(calibration.corpus_sha256)

    def why_not_same_run(self, run: Run, m: MeasuredRun) -> str | None:
        """Why ``m`` is not the same kind of run as ``run`` (params and limits aside)."""
        if m.task != run.task or m.code_version != self.code_versions.get(run.name):
            return f"task {run.task} at code version {self.code_versions.get(run.name)}"
        if (m.base_model or None) != self.base:
            return "its [base_model]"
        if not self.same_files or _corpus_identity(m.corpus_view) != _corpus_identity(self.view):
            return "its corpus (files or columns)"
        return None

    def candidates(self, run: Run) -> tuple[list[Candidate], str]:
        """Measured runs like ``run`` (same task, code, base model, corpus files and
        columns), fewest differing params first; else ``([], what no run shared)``."""
        found, why = [], ""
        for m in self.c.runs:
            reason = self.why_not_same_run(run, m)
            if reason is not None:
                why = why or reason
                continue
            new, old = _flat(run.params), _flat(m.params)
            differing = tuple(sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k)
                                     or (k in new) != (k in old)))
            found.append(Candidate(m, differing, dict(m.corpus_view) == dict(self.view)))
        found.sort(key=lambda c: (len(c.differing) + (not c.same_view),))
        return found, why

    def exact(self, run: Run) -> MeasuredRun | None:
        """The measured run with ``run``'s whole configuration (offer aside)."""
        found, _ = self.candidates(run)
        return next((c.measured for c in found if not c.differing and c.same_view), None)

    def examples(self, limit_key: str, split: str) -> int | None:
        """The new campaign's examples of ``split`` (its limit over the split's rows)."""
        total = self.c.train_rows if split == "train" else self.c.test_rows
        limit = self.view.get(limit_key)
        if total is None:
            return None
        return total if limit is None else min(int(limit), total)


def scale_run(m: MeasuredRun, *, n_train: tuple[int, int], n_test: tuple[int, int],
              epochs: tuple[float, float], length: tuple[float, float],
              steps: tuple[int, int] | None = None, batch: tuple[float, float] = (1.0, 1.0)
              ) -> tuple[float, float, float]:
    """A measured run's duration scaled to other work (the module docstring's rule).

    Args:
        m: the measured run (its ``observed_s`` and ``figures`` are needed).
        n_train, n_test, epochs, length: (measured, new) training and test examples,
            epochs and max_length.
        steps: (measured, new) optimizer steps when the new run gives its ``steps``
            (then the train time scales with steps · batch instead of examples · epochs).
        batch: (measured, new) batch size.

    Returns:
        ``(value, low, high)`` in seconds: ℓ at the midpoint of [min(1, L'/L),
        max(1, L'/L)], and at its bounds widened by :data:`SCALED_SPREAD`.

    Raises:
        ValueError: the run has no observed duration or no figures.
    """
    if m.observed_s is None or m.figures is None:
        raise ValueError(f"{m.name} has no measured duration or figures")
    f = m.figures
    load, train, evals = f.load_s, f.train_s + f.save_stall_s, f.eval_s
    parts = load + train + evals
    if parts > m.observed_s > 0:            # the logged parts overlap: keep their shares
        load, train, evals = (x * m.observed_s / parts for x in (load, train, evals))
        parts = m.observed_s
    other = max(0.0, m.observed_s - parts)
    ratio = length[1] / length[0]
    bounds = (min(1.0, ratio), max(1.0, ratio))
    examples = (n_train[1] + n_test[1]) / (n_train[0] + n_test[0])
    train_factor = (steps[1] / steps[0] * batch[1] / batch[0] if steps
                    else n_train[1] / n_train[0] * epochs[1] / epochs[0])
    eval_factor = n_test[1] / n_test[0] * epochs[1] / epochs[0]

    def total(tokens: float) -> float:
        return (load * examples + train * train_factor + evals * eval_factor) * tokens + other

    return (total(sum(bounds) / 2), total(bounds[0]) * (1 - SCALED_SPREAD),
            total(bounds[1]) * (1 + SCALED_SPREAD))


def _number(params: Mapping[str, Any], key: str) -> float | None:
    value = params.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def run_estimate(matcher: Matcher, index: int, run: Run) -> Estimate:
    """The duration estimate of one run (module docstring)."""
    c, where = matcher.c, f"run[{index}].duration"
    file_s = float(run.duration.seconds)
    found, why = matcher.candidates(run)
    usable = [x for x in found if x.measured.observed_s is not None]
    if not found:
        return duration_guess(run.name, file_s, where, f"no run of campaign {c.campaign} shares "
                                                f"{why or 'its task'}")
    usable = [x for x in usable if x.measured.status == "finished"]
    if not usable:
        return duration_guess(run.name, file_s, where, f"campaign {c.campaign} finished no run like "
                                                f"it (one stopped by a rule is not timed whole)")
    if not matcher.same_offer:
        return duration_guess(run.name, file_s, where, f"measured on {c.offer}, planned on "
                                                f"{matcher.spec.rental.offer}: no rule relates "
                                                f"two offers' speeds")
    best = usable[0]
    m = best.measured
    if not best.differing and best.same_view:
        return duration_measured(run.name, m.observed_s or 0.0,
                         f"campaign {c.campaign}, run {m.name}, {_executions(m.executions)}")
    unscaled = [k for k in best.differing if k not in SCALED_PARAMS]
    if unscaled:
        return duration_guess(run.name, file_s, where, f"the nearest run measured in campaign "
                                                f"{c.campaign}, {m.name}, differs in "
                                                f"{', '.join(unscaled)}, which no rule scales")
    if m.figures is None:
        return duration_guess(run.name, file_s, where, f"{m.name} of campaign {c.campaign} left no "
                                                f"measurement rows to scale")
    notes = []
    pairs: dict[str, tuple[float, float]] = {}
    for key in SCALED_PARAMS:
        old, new = _number(m.params, key), _number(run.params, key)
        if key not in best.differing:
            pairs[key] = (1.0, 1.0)
        elif old is None or new is None or old <= 0 or new <= 0:
            return duration_guess(run.name, file_s, where, f"{key} of {m.name} or {run.name} is not a "
                                                    f"positive number, which the rule needs")
        else:
            pairs[key] = (old, new)
    n_train = (c.n_train, matcher.examples("train_limit", "train"))
    n_test = (c.n_test, matcher.examples("test_limit", "test"))
    if not best.same_view:
        if None in n_train or None in n_test or not all(n_train) or not all(n_test):
            return duration_guess(run.name, file_s, where, f"campaign {c.campaign}'s split sizes are "
                                                    f"unknown, so other corpus limits cannot "
                                                    f"be scaled")
        notes += [f"{label} examples {a}→{b}" for label, (a, b) in
                  (("training", n_train), ("test", n_test)) if a != b]
    else:
        n_train, n_test = (1, 1), (1, 1)
    steps = None
    if run.steps is not None and m.figures.steps:
        steps = (m.figures.steps, run.steps)
        notes.append(f"steps {m.figures.steps}→{run.steps}")
    for key in SCALED_PARAMS:
        old, new = pairs[key]
        if old != new:
            text = f"{old:g}→{new:g}"
            if key == "max_length":
                low, high = sorted((1.0, new / old))
                text += f" (tokens per input ×{low:.2g}–{high:.2g})"
            notes.append(f"{key} {text}")
    value, low, high = scale_run(m, n_train=(int(n_train[0] or 1), int(n_train[1] or 1)),
                                 n_test=(int(n_test[0] or 1), int(n_test[1] or 1)),
                                 epochs=pairs["epochs"], length=pairs["max_length"],
                                 steps=steps, batch=pairs["batch_size"])
    return Estimate(run.name, "duration", value / SECONDS_PER_HOUR, low / SECONDS_PER_HOUR,
                    high / SECONDS_PER_HOUR, "scaled",
                    f"from {m.name} of campaign {c.campaign} "
                    f"({m.observed_s / SECONDS_PER_HOUR if m.observed_s else 0:.4g} h): "
                    + "; ".join(notes or ["the same work"]))


def stage_estimate(matcher: Matcher | None, index: int, stage: Stage) -> Estimate:
    """The duration estimate of one stage (module docstring)."""
    where = f"stage[{index}].duration"
    file_s = float(stage.duration.seconds)
    if matcher is None:
        return duration_guess(stage.name, file_s, where, "")
    c = matcher.c
    m = next((s for s in c.stages if s.name == stage.name), None)
    if m is None or m.observed_s is None:
        return duration_guess(stage.name, file_s, where,
                      f"campaign {c.campaign} " + ("has no stage of that name" if m is None
                                                   else "did not time it (flightplan stage "
                                                        "start/done)"))
    if "gpu" in stage.uses and not matcher.same_offer:
        return duration_guess(stage.name, file_s, where, f"measured on {c.offer}, planned on "
                                                  f"{matcher.spec.rental.offer}")
    if stage.name == "pilot":
        control = matcher.spec.control
        measured = matcher.exact(control)
        if measured is None or measured.name != c.control:
            return duration_guess(stage.name, file_s, where, f"the pilot runs the control, and "
                                                      f"{control.name} is not the configuration "
                                                      f"of campaign {c.campaign}'s control "
                                                      f"{c.control} (params or corpus limits)")
    if stage.name == "data-check":
        if not matcher.same_files or matcher.spec.corpus is None:
            return duration_guess(stage.name, file_s, where, f"another corpus than campaign "
                                                      f"{c.campaign}'s")
        n = (matcher.examples("train_limit", "train"), matcher.examples("test_limit", "test"))
        if (c.n_train, c.n_test) != n:
            if None in n or not c.n_train or not c.n_test:
                return duration_guess(stage.name, file_s, where, "other corpus limits, and the split "
                                                          "sizes are unknown")
            scale = (int(n[0] or 0) + int(n[1] or 0)) / (c.n_train + c.n_test)
            value_h = m.observed_s * scale / SECONDS_PER_HOUR
            return Estimate(stage.name, "duration", value_h, value_h * (1 - SCALED_SPREAD),
                            value_h * (1 + SCALED_SPREAD), "scaled",
                            f"from the data check of campaign {c.campaign}, by its examples "
                            f"({c.n_train}+{c.n_test}→{n[0]}+{n[1]})")
    return duration_measured(stage.name, m.observed_s,
                     f"campaign {c.campaign}, {_executions(m.executions)}")


def _executions(count: int) -> str:
    return f"{count} execution{'s' if count != 1 else ''}"
