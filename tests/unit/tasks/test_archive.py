"""Keeping a task's source with the results (flightplan.tasks.archive): the layout it is
imported from, the record, a re-hash that finds a replaced file, and what is not kept."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from flightplan.tasks.archive import check_kept, keep_task_source, kept_folder
from flightplan.tasks.loader import resolve_task

TRAIN = "def train(trial):\n    pass\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    folder = tmp_path / "camp"
    (folder / "tasks").mkdir(parents=True)
    (folder / "tasks" / "reg.py").write_text(TRAIN, encoding="utf-8")
    (folder / "pkg" / "sub").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "pkg" / "sub" / "__init__.py").write_text("# sub\n", encoding="utf-8")
    (folder / "pkg" / "sub" / "mod.py").write_text(TRAIN, encoding="utf-8")
    (folder / "whole").mkdir()
    (folder / "whole" / "__init__.py").write_text("from whole.loop import train\n",
                                                  encoding="utf-8")
    (folder / "whole" / "loop.py").write_text(TRAIN, encoding="utf-8")
    return folder


def _keep(campaign: Path, ref: str) -> tuple[dict, list[str], Path]:
    results = campaign / "results"
    source = resolve_task(ref, campaign)
    record, written = keep_task_source(results, source.to_json(), ref)
    return record, written, results


def test_a_file_task_is_kept_under_the_hash_of_its_code_version(campaign):
    record, written, results = _keep(campaign, "tasks/reg.py")
    version = "sha256:" + _sha(TRAIN)             # what sha256sum tasks/reg.py prints
    folder = "tasks/" + _sha(version)[:12]
    assert folder == kept_folder(version)
    assert record == {"kind": "file", "ref": "tasks/reg.py", "entry": "reg.py",
                      "code_version": version, "source": folder, "files": [f"{folder}/reg.py"],
                      "code_root": "", "code_files": ["reg.py"], "package": False}
    assert written == [f"{folder}/reg.py"]
    assert (results / folder / "reg.py").read_text() == TRAIN
    assert check_kept(results, record) == []
    (results / folder / "reg.py").write_text("import os\n" + TRAIN)   # replaced
    (problem,) = check_kept(results, record)
    assert problem.startswith(f"the kept source hashes to sha256:{_sha('import os' + chr(10) + TRAIN)}, "
                              f"not the run's code_version {version}")


def test_a_file_task_is_hashed_and_kept_with_the_modules_it_imports(campaign):
    helpers = "SCALE = 2\n"
    task = "import os\nimport helpers\nfrom whole.loop import train\n"
    (campaign / "task.py").write_text(task, encoding="utf-8")
    (campaign / "helpers.py").write_text(helpers, encoding="utf-8")
    (campaign / "unrelated.py").write_text("x = 1\n", encoding="utf-8")
    source = resolve_task("task.py", campaign)
    assert source.root == campaign.resolve()
    assert source.files == ("task.py", "helpers.py", "whole/__init__.py", "whole/loop.py")
    listing = "".join(f"{_sha(text)}  {name}\n" for name, text in sorted([
        ("task.py", task), ("helpers.py", helpers),
        ("whole/__init__.py", "from whole.loop import train\n"), ("whole/loop.py", TRAIN)]))
    assert source.code_version == "sha256:" + _sha(listing)   # sha256sum of the four, sorted
    (campaign / "unrelated.py").write_text("x = 2\n", encoding="utf-8")
    assert resolve_task("task.py", campaign).code_version == source.code_version
    (campaign / "helpers.py").write_text("SCALE = 3\n", encoding="utf-8")
    assert resolve_task("task.py", campaign).code_version != source.code_version
    (campaign / "helpers.py").write_text(helpers, encoding="utf-8")

    record, written, results = _keep(campaign, "task.py")
    folder = kept_folder(source.code_version)
    assert written == [f"{folder}/{name}" for name in sorted(source.files)]
    assert record["entry"] == "task.py" and record["code_files"] == sorted(source.files)
    assert check_kept(results, record) == []
    # a kept module edited, or one more planted for the entry to import, is found
    (results / folder / "helpers.py").write_text("SCALE = 4\n", encoding="utf-8")
    (problem,) = check_kept(results, record)
    assert problem.startswith("the kept source hashes to sha256:")
    (results / folder / "helpers.py").write_text(helpers, encoding="utf-8")
    (results / folder / "task.py").write_text(task + "import planted\n", encoding="utf-8")
    (results / folder / "planted.py").write_text("", encoding="utf-8")
    (problem,) = check_kept(results, record)
    assert problem.startswith("the task record's entry 'task.py' is not the kept code")


def test_a_module_keeps_its_parent_packages(campaign):
    record, written, results = _keep(campaign, "pkg.sub.mod")
    folder = record["source"]
    assert (record["entry"], record["code_root"], record["code_files"], record["package"]) == \
        ("pkg.sub.mod", "pkg/sub", ["mod.py"], False)
    assert written == [f"{folder}/pkg/__init__.py", f"{folder}/pkg/sub/__init__.py",
                       f"{folder}/pkg/sub/mod.py"]
    assert record["code_version"] == "sha256:" + _sha(TRAIN)
    assert check_kept(results, record) == []
    assert check_kept(results, record | {"entry": "pkg.sub.other"}) == [
        "the task record's entry 'pkg.sub.other' is not the kept code (pkg/sub: mod.py)"]


def test_a_package_is_hashed_by_its_listing(campaign):
    record, written, results = _keep(campaign, "whole")
    folder = record["source"]
    listing = (f"{_sha('from whole.loop import train' + chr(10))}  __init__.py\n"
               f"{_sha(TRAIN)}  loop.py\n")
    assert record["code_version"] == "sha256:" + _sha(listing)
    assert (record["code_root"], record["code_files"], record["package"]) == \
        ("whole", ["__init__.py", "loop.py"], True)
    assert written == [f"{folder}/whole/__init__.py", f"{folder}/whole/loop.py"]
    assert check_kept(results, record) == []
    (results / folder / "whole" / "loop.py").unlink()
    assert check_kept(results, record)[0].startswith("the kept source cannot be read")


def test_a_source_edited_after_the_run_is_not_kept(campaign):
    source = resolve_task("tasks/reg.py", campaign).to_json()
    (campaign / "tasks" / "reg.py").write_text(TRAIN + "# edited\n", encoding="utf-8")
    record, written = keep_task_source(campaign / "results", source, "tasks/reg.py")
    assert written == [] and record["source"] is None
    assert record["not_kept"].startswith("the task's source changed since the run")
    assert not (campaign / "results").exists()
    assert check_kept(campaign / "results", record) == [
        "the task record does not list the kept source files"]


def test_a_builtin_task_is_kept_by_name_and_code_version(tmp_path):
    from flightplan.tasks.textclf import CODE_VERSION

    source = resolve_task("textclf", tmp_path).to_json()
    record, written = keep_task_source(tmp_path / "results", source, "textclf")
    assert written == []
    assert record == {"kind": "builtin", "ref": "textclf", "entry": "textclf",
                      "code_version": CODE_VERSION, "source": None}


@pytest.mark.parametrize("change, problem", [
    ({"source": "../elsewhere"}, "the task record's path '../elsewhere' is not a plain relative path"),
    ({"source": "params"}, "the task record's source 'params' is not under tasks/"),
    ({"code_files": "reg.py"}, "the task record does not list the kept source files"),
    ({"entry": "os"}, "the task record's entry 'os' is not the kept code (.: reg.py)"),
])
def test_a_malformed_record_is_a_problem_not_a_read_outside(campaign, change, problem):
    record, _, results = _keep(campaign, "tasks/reg.py")
    assert check_kept(results, record | change) == [problem]


def test_a_copy_kept_earlier_serves_once_the_source_changed_or_moved(campaign):
    source = resolve_task("tasks/reg.py", campaign).to_json()
    results = campaign / "results"
    first, written = keep_task_source(results, source, "tasks/reg.py")
    assert written == first["files"] and len(written) == 1
    (campaign / "tasks" / "reg.py").write_text(TRAIN + "# edited\n", encoding="utf-8")
    again, written = keep_task_source(results, source, "tasks/reg.py")  # close, after an edit
    assert (again, written) == (first, [])
    moved = source | {"root": str(campaign / "gone")}
    assert keep_task_source(results, moved, "tasks/reg.py") == (first, [])
    (results / first["source"] / "reg.py").write_text("# damaged\n")
    record, written = keep_task_source(results, moved, "tasks/reg.py")
    assert written == [] and record["source"] is None
    assert record["not_kept"].startswith("the task's source cannot be read (No such file")
