"""Loading a user's task: the campaign folder is on ``sys.path`` only while the task's code
runs (its sibling imports work, also lazily inside a hook, and nothing in the folder
shadows what the runner imports afterwards), and a hook that raises is one named error."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from flightplan.errors import SpecError, TaskHookFailed
from flightplan.tasks.loader import load_task

TASK = '''
import helper                      # a sibling module, imported with the task


def train(trial):
    return None


def pilot_examples(params, steps):
    import lazy_helper             # a sibling module, imported only when the hook runs
    return lazy_helper.PER_STEP * steps + helper.EXTRA


def estimate_run(pilot, data_check, params, *, tolerated_loss_s, mtbi_s):
    return {"total_s": 1.0 / params["zero"]}


def base_revision(base_model, params):
    raise SpecError("params.revision: give a tag", field="run[0].params")
'''


@pytest.fixture()
def folder(tmp_path):
    (tmp_path / "train.py").write_text("from flightplan.errors import SpecError\n" + TASK)
    (tmp_path / "helper.py").write_text("EXTRA = 1\n")
    (tmp_path / "lazy_helper.py").write_text("PER_STEP = 16\n")
    for shadow in ("mlflow.py", "ray.py", "utils.py"):     # names the runner may import
        (tmp_path / shadow).write_text("raise RuntimeError('the campaign folder shadowed me')\n")
    yield tmp_path
    for name in ("helper", "lazy_helper"):
        sys.modules.pop(name, None)


def test_the_campaign_folder_shadows_nothing_after_a_task_is_loaded(folder):
    before = list(sys.path)
    task = load_task("train.py", folder)
    assert sys.path == before and str(folder) not in sys.path
    for name in ("mlflow", "ray"):              # installed: found where they are installed
        assert not importlib.util.find_spec(name).origin.startswith(str(folder))
    assert importlib.util.find_spec("utils") is None
    # while the task's code runs its folder is first again, so lazy sibling imports work
    assert task.pilot_examples({}, 3) == 16 * 3 + 1
    assert sys.path == before


def test_a_hook_that_raises_is_one_line_naming_the_task_the_hook_and_the_exception(folder):
    task = load_task("train.py", folder)
    with pytest.raises(TaskHookFailed) as failed:
        task.estimate_run(None, {}, {"zero": 0}, tolerated_loss_s=60.0, mtbi_s=None)
    assert str(failed.value) == ("task 'train.py': its estimate_run hook raised "
                                 "ZeroDivisionError: float division by zero; fix the hook "
                                 "(docs/tasks.md)")
    assert failed.value.exit_code == 2 and failed.value.hook == "estimate_run"
    assert 'train.py", line' in failed.value.details          # the traceback, for the log
    assert "1.0 / params[\"zero\"]" in failed.value.details
    # flightplan's own one-line errors pass as they are
    with pytest.raises(SpecError, match="params.revision: give a tag"):
        task.base_revision(None, {})


def test_textclf_declares_the_columns_it_writes():
    from flightplan.tasks import textclf
    from flightplan.tasks.textclf import inference

    assert textclf.PREDICTION_COLUMNS == (*inference.PREDICTION_COLUMNS, "prob_*")
    assert load_task("textclf", ".").prediction_columns == textclf.PREDICTION_COLUMNS


@pytest.mark.parametrize("source, lacks", [
    ('"""Defines no reload_predictions hook."""\ndef train(trial):\n    pass\n', True),
    ("def train(trial):\n    '''reload_predictions is written later'''\n", True),
    ("def train(trial):\n    pass\n\n\ndef reload_predictions(a, o, **kw):\n    return 0\n",
     False),
    ("try:\n    import torch\n    def reload_predictions(a, o, **kw):\n        return 0\n"
     "except ImportError:\n    pass\n", False),                        # not at the top level
    ("from helpers import reload_predictions\n", False),
    ("import helpers\nreload_predictions = helpers.reload\n", False),
    ("import sys\nsetattr(sys.modules[__name__], 'reload_predictions', print)\n", False),
    ("def train(trial):\n    pass\n\ndel reload_predictions\n", False),
    ("from helpers import *\n", False),                               # cannot be told
    ("def __getattr__(name):\n    return print\n", False),
    ("def train(trial)\n", False),                                    # does not parse
])
def test_a_file_is_said_to_lack_the_reload_hook_only_where_reading_shows_it(
        tmp_path, source, lacks):
    from flightplan.tasks.loader import visibly_lacks_reload

    path = tmp_path / "task.py"
    path.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n" + source)
    assert visibly_lacks_reload(path) is lacks
    assert not (tmp_path / "ran").exists()                            # read, never run
