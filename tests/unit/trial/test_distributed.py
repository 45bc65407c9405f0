"""The trial's place among the ranks of a run: the environment it reads, the one-rank
no-ops, a checkpoint restored by another rank or at another world size, labelled output."""

from __future__ import annotations

import io

import pytest
import torch

from flightplan.errors import ArgumentError, CheckpointError
from flightplan.trial.checkpoint_io import CheckpointFiles
from flightplan.trial.distributed import Ranks, _Labelled, check_world_size, rank_files
from flightplan.trial.stop_rules import Stop


def test_ranks_come_from_torchruns_variables() -> None:
    ranks = Ranks.from_env({"RANK": "1", "WORLD_SIZE": "2"})
    assert (ranks.rank, ranks.world_size, ranks.leader, ranks.distributed) == (1, 2, False, True)
    alone = Ranks.from_env({})
    assert (alone.rank, alone.world_size, alone.leader, alone.distributed) == (0, 1, True, False)


@pytest.mark.parametrize("env, message", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 of WORLD_SIZE=2 is not a place in a run"),
    ({"WORLD_SIZE": "0"}, "RANK=0 of WORLD_SIZE=0")])
def test_a_bad_place_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        Ranks.from_env(env)


def test_one_rank_decides_alone_without_torch_distributed() -> None:
    ranks = Ranks()
    stop = Stop("non_finite_loss", 3, float("nan"), None, "loss is nan at step 3")
    assert ranks.first_stop(stop) is stop and ranks.first_stop(None) is None
    assert ranks.agree(3, None, True, None) == (None, True, None)   # every step alone
    assert ranks.agree(4, stop, False, True) == (stop, False, True)
    assert ranks.gather({"a": 1}) == [{"a": 1}]
    assert ranks.broadcast("step-000003") == "step-000003"
    ranks.barrier()


def test_several_ranks_without_a_process_group_are_told_to_initialise_it() -> None:
    with pytest.raises(CheckpointError, match="this run has 2 processes but torch.distributed "
                                              "is not initialised"):
        Ranks(1, 2).barrier()


@pytest.mark.parametrize("steps_done, quiet, agrees", [
    (0, [], 0), (1, [1, 5, 9], 10), (13, [13, 19], 20), (20, [], 20)])
def test_several_ranks_agree_at_the_first_step_past_each_multiple_of_ten(
        steps_done: int, quiet: list[int], agrees: int) -> None:
    """Between agreements a rank answers alone (None, False, None) and holds its verdict; at
    the first step at or past the next multiple of AGREEMENT_STEPS (10) after the steps
    restored it needs the process group (here: none, so the collective is refused)."""
    ranks = Ranks(1, 2)
    ranks.resume_at(steps_done)
    stop = Stop("non_finite_loss", 3, float("nan"), None, "loss is nan at step 3")
    for step in quiet:
        assert ranks.agree(step, stop, True, True) == (None, False, None)
    with pytest.raises(CheckpointError, match="torch.distributed is not initialised"):
        ranks.agree(agrees, None, False, None)
    for step in range(agrees + 1, agrees + 10):  # the next one is 10 steps on
        assert ranks.agree(step, None, True, None) == (None, False, None)
    with pytest.raises(CheckpointError):
        ranks.agree(agrees + 13, None, False, None)   # a skipped multiple: the first past it


def _files(world_size: int) -> CheckpointFiles:
    state = {"counters": {"step": 4}, "rng": {"torch_cpu": torch.tensor([0], dtype=torch.uint8)},
             "loader": {"pos": 0}, "scheduler": {"last_epoch": 4},
             "ranks": {"1": {"rng": {"torch_cpu": torch.tensor([1], dtype=torch.uint8)},
                             "loader": {"pos": 1}, "extra": {}}}}
    return CheckpointFiles(model={"w": torch.zeros(2)}, optimizer=None, state=state,
                           manifest={"step": 4, "world_size": world_size})


def test_each_rank_restores_its_own_state_and_the_shared_replicas() -> None:
    files = _files(2)
    assert check_world_size(files.manifest, 2, "step-000004") == 2
    assert rank_files(files, 0, 2) is files
    own = rank_files(files, 1, 2)
    assert own.state["loader"] == {"pos": 1} and own.state["rng"]["torch_cpu"].item() == 1
    assert own.state["scheduler"] == {"last_epoch": 4} and own.model is files.model


def test_another_world_size_is_refused_in_one_line_naming_both() -> None:
    with pytest.raises(CheckpointError) as refused:
        check_world_size(_files(2).manifest, 3, "step-000004")
    assert str(refused.value) == (
        "step-000004 was saved by 2 processes but this run has 3; resuming at another world "
        "size is not bitwise: give [[run]] processes = 2, set [[run]] reshard = true to "
        "resume it at 3 anyway (not bitwise), or start the run over with flightplan run "
        "CAMPAIGN_FILE --restart NAME")
    one = CheckpointFiles(model={}, optimizer=None, state={}, manifest={"step": 4})
    with pytest.raises(CheckpointError, match="saved by 1 process but this run has 2"):
        check_world_size(one.manifest, 2, "step-000004")


def test_a_library_checkpoint_at_another_world_size_is_refused_also_with_reshard() -> None:
    """Lightning's and the Trainer's checkpoints (their manifest names the library as
    ``kind``) keep their own per-rank files: the refusal says reshard is for the trial API,
    with reshard on or off (it never advises it)."""
    library = {**_files(2).manifest, "kind": "transformers"}
    refusal = ("step-000004 was saved by 2 processes but this run has 1; [[run]] reshard "
               "applies to tasks on flightplan's trial API, not to a Lightning or Trainer "
               "checkpoint: give [[run]] processes = 2, or start the run over with flightplan "
               "run CAMPAIGN_FILE --restart NAME")
    for reshard in (False, True):
        with pytest.raises(CheckpointError) as refused:
            check_world_size(library, 1, "step-000004", reshard=reshard)
        assert str(refused.value) == refusal
    assert check_world_size(library, 2, "step-000004") == 2


def test_with_reshard_rank_r_takes_the_own_state_of_saved_rank_r_mod_s() -> None:
    """Saved by 2 ranks (rank 0's own entries at the top, rank 1's under ``ranks``): at 1
    rank, rank 0 takes rank 0's; at 3 ranks, ranks 0, 1, 2 take those of 0, 1, 0. Saved by 1
    rank and resumed by 2, both take the one saved. The shared state is the same object."""
    files = _files(2)
    saved = check_world_size(files.manifest, 1, "step-000004", reshard=True)
    assert saved == 2 and check_world_size(files.manifest, 3, "step-000004", reshard=True) == 2
    assert rank_files(files, 0, saved) is files
    taken = [rank_files(files, r, saved) for r in range(3)]
    assert [(t.state["loader"]["pos"], t.state["rng"]["torch_cpu"].item()) for t in taken] \
        == [(0, 0), (1, 1), (0, 0)]
    assert all(t.model is files.model and t.state["scheduler"] == {"last_epoch": 4}
               for t in taken)
    one = CheckpointFiles(model={}, optimizer=None, state={"loader": {"pos": 0}},
                          manifest={"step": 4})
    assert check_world_size(one.manifest, 2, "step-000004", reshard=True) == 1
    assert [rank_files(one, r, 1).state["loader"]
            for r in range(2)] == [{"pos": 0}, {"pos": 0}]


def test_labelled_output_starts_every_line_with_the_rank() -> None:
    out = io.StringIO()
    labelled = _Labelled(out, "[rank 1] ")
    labelled.write("Traceback (most recent call last):\n  File")
    labelled.write(" x.py\n\nRuntimeError: boom\n")
    assert out.getvalue() == ("[rank 1] Traceback (most recent call last):\n[rank 1]   File"
                              " x.py\n\n[rank 1] RuntimeError: boom\n")
