"""Re-create a run's predictions in a fresh process from its artifact.

Usage::

    python -m flightplan.tasks.textclf.predict ARTIFACT_DIR --out FILE.csv [--limit N]
                                               [--campaign-dir DIR]

It reloads the artifact (refusing a base model whose weights hash differs) onto the
device a run would compute on (:func:`flightplan.trial.accelerator.device`: the GPU in
``CUDA_VISIBLE_DEVICES`` where there is one, unless ``$FLIGHTPLAN_DEVICE=cpu``), reads the
corpus recorded in ``artifact.json`` (its hashes are checked again), predicts the first
``N`` test examples (all by default; tokenised, or with ``--campaign-dir`` taken from the
campaign's data cache, :mod:`.prepared`) in length-sorted batches and writes the same CSV as training
(``example_id, gold, predicted, n_tokens, truncated, prob_<label>...``): on the same
machine the file is byte-identical to the run's ``predictions.csv``. With ``--limit`` the
N inputs form batches of their own (padded to other lengths than in the whole split), so
the first N rows agree in labels and within 1e-5 in probabilities, not always in the last
float32 bit.

A corpus given by ``path`` is resolved against ``--campaign-dir``, else against the
nearest folder above the artifact where that path exists.

Exit codes: 0 written; 1 refused (base model or corpus hash differs, unreadable
artifact); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flightplan.errors import ArgumentError, FlightplanError

__all__ = ["main", "predict_to_csv"]


def _campaign_dir(artifact_dir: Path, corpus: dict[str, Any], given: Path | None) -> Path:
    if given is not None or corpus.get("path") is None:
        return given or Path.cwd()
    for folder in artifact_dir.resolve().parents:
        if (folder / corpus["path"]).is_dir():
            return folder
    raise ArgumentError(f"corpus path {corpus['path']!r} of {artifact_dir} is not found above "
                        f"the artifact; give --campaign-dir (the folder of the campaign file)")


def _cached_test(predictor: Any, section: Any, campaign_dir: Path, limit: int | None) -> Any:
    """The test split the runs trained with, from ``campaign_dir``'s data cache (built
    there if absent), cut to the first ``limit`` examples: equal to tokenising them, as
    the tokenizer reads each text on its own; None when its labels are not the model's."""
    from flightplan.spec import BaseModelSection
    from flightplan.tasks.textclf.prepared import read_and_encode
    from flightplan.trial.data_cache import CACHE_DIR, cached

    config = predictor.config
    cut = section.model_copy(update={"test_limit": min(limit, section.test_limit or limit)
                                     if limit is not None else section.test_limit})
    labels, _, test = read_and_encode(
        lambda parts, build: cached(campaign_dir / CACHE_DIR, parts, build)[0], cut,
        BaseModelSection.model_validate(config["base_model"]), campaign_dir,
        max_length=predictor.max_length, code_version=str(config["code_version"]))
    return test if labels == predictor.labels else None


def predict_to_csv(artifact_dir: Path, out: Path, *, limit: int | None = None,
                   campaign_dir: Path | None = None) -> int:
    """Write the predictions of the artifact on the (first ``limit``) test examples.

    Returns:
        the number of rows written.

    Raises:
        VerificationFailed: the artifact is unreadable or its base model differs.
        CorpusMismatch: the corpus differs from the hashes recorded in the artifact.
        ArgumentError: a path corpus that cannot be found.
    """
    from flightplan.spec import CorpusSection
    from flightplan.tasks.textclf.artifact import ARTIFACT_JSON, load_artifact
    from flightplan.tasks.textclf.data import read_corpus
    from flightplan.tasks.textclf.inference import prediction_rows, write_predictions

    from flightplan.trial.accelerator import device, set_deterministic

    artifact_dir = Path(artifact_dir)
    predictor = load_artifact(artifact_dir)
    dev = device()              # the GPU the reload was given, as the run had its own
    set_deterministic(dev)
    predictor.model.to(dev)
    recorded = json.loads((artifact_dir / ARTIFACT_JSON).read_text(encoding="utf-8"))["corpus"]
    section = CorpusSection.model_validate(recorded)
    corpus = read_corpus(section, _campaign_dir(artifact_dir, recorded, campaign_dir))
    split = None
    if campaign_dir is not None and corpus.labels == predictor.labels:
        try:                       # the campaign's tokenised splits (tokenised once)
            split = _cached_test(predictor, section, Path(campaign_dir), limit)
        except OSError:            # a campaign folder this process cannot write: tokenise
            split = None
    if split is None:
        split = predictor.encode(corpus.test[:limit] if limit is not None else corpus.test)
    probs = predictor.predict_probabilities(split)
    write_predictions(Path(out), prediction_rows(split, probs, predictor.labels), predictor.labels)
    return len(split)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m flightplan.tasks.textclf.predict",
                                     description="Re-create a textclf run's predictions from its artifact.")
    parser.add_argument("artifact_dir", type=Path, help="the run's artifact/ folder")
    parser.add_argument("--out", type=Path, required=True, help="CSV file to write")
    parser.add_argument("--limit", type=int, default=None, help="only the first N test examples")
    parser.add_argument("--campaign-dir", type=Path, default=None,
                        help="folder a corpus path is relative to")
    args = parser.parse_args(argv)
    try:
        if args.limit is not None and args.limit < 1:
            raise ArgumentError(f"--limit {args.limit}: give a positive number of examples")
        rows = predict_to_csv(args.artifact_dir, args.out, limit=args.limit,
                              campaign_dir=args.campaign_dir)
    except FlightplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"wrote {rows} predictions to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
