"""results/README.md speaks of a base model only for artifacts that record one."""

from __future__ import annotations

from flightplan.close.report import render_readme


def _readme(*revisions: bool) -> str:
    artifacts = [{"run_id": f"r-{i}", "command": f"python -P -m flightplan.tasks.reload r-{i}",
                  "package": None, "base_revision": based}
                 for i, based in enumerate(revisions)]
    return render_readme({"campaign": "line", "order_number": None,
                          "conclusion": {"question": "Lower error?", "verdict": "No."},
                          "products": [], "artifacts": artifacts})


def test_a_task_without_a_base_model_is_not_told_to_install_one():
    text = _readme(False, False)
    assert "base model revision" not in text and "base_revision" not in text
    assert "the plan's and the corpus's hashes, and the provider's order number\n" \
           "(none recorded)" in text
    assert "Each artifact needs the corpus named in `params/<run_id>.json` installed (no " \
           "artifact here\nrecords a base model). Run from this" in text


def test_artifacts_that_record_their_base_model_are_told_to_install_it():
    text = _readme(True, True)
    assert "the plan's and the corpus's hashes, the base model revision and the provider's " \
           "order number" in text
    assert "Each artifact\nneeds the base model revision it records (`base_revision` in its" \
           in text
    assert "An artifact that records one\nneeds the base model revision" in _readme(True, False)
