"""The trial across the ranks of a data-parallel run: who writes, and what is decided together.

A run with ``[[run]] processes = N`` executes as N worker processes (the ranks,
:mod:`flightplan.run.executors.ranks`), each with a :class:`~flightplan.trial.trial.Trial`
that reads its place from the environment ``torchrun`` sets (:meth:`Ranks.from_env`:
``RANK``, ``WORLD_SIZE``). The task initialises ``torch.distributed`` itself
(``init_process_group``, gloo on CPU, NCCL on GPUs) before ``trial.restore()``; from then
on the trial's own collectives run over that group:

- rank 0 (the leader) alone writes ``measurements.jsonl``, ``done.json``, ``stop.json``
  and the checkpoints;
- a stop rule that fires on any rank stops every rank: :meth:`Ranks.agree` picks the
  lowest rank whose rule fired and hands its verdict to all, so the run has one stop record;
- whether to checkpoint at a step is the leader's measured interval, and a leave request
  on any rank is honoured by all at the same step: decided in the same ``all_reduce`` as
  the stop verdict of the ``log`` that comes before ``maybe_checkpoint``;
- the ranks agree once every :data:`AGREEMENT_STEPS` steps, not at every step (one small
  ``all_reduce`` a step cost 5-20 % of a 10 ms step on two CPU ranks): a stop rule that
  fires in between is held by its rank and obeyed by all at the next agreement, and a save
  or a leave waits for it too. The agreements fall at the first step at or past each
  multiple of :data:`AGREEMENT_STEPS`, counted from step 0 also after a resume, so a
  resumed run stops and saves at the steps an uninterrupted one does;
- each rank's own state (its RNG streams, its loader's position, its ``extra`` objects)
  goes to the leader at the save (:meth:`Ranks.gather`), which writes it into the same
  step as ``state.pt``'s ``ranks`` entry; the model, optimizer, scheduler and scaler
  are replicas under DDP and only the leader's copy is saved;
- a checkpoint saved by another number of ranks is refused (:func:`check_world_size`),
  or with ``[[run]] reshard = true`` restored from its full state, each rank taking the
  own state of saved rank ``rank mod S`` (:func:`rank_files`): not bitwise.

With one process (no ``WORLD_SIZE``, or 1) nothing here calls ``torch.distributed``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, TextIO

from flightplan.errors import ArgumentError, CheckpointError
from flightplan.trial.checkpoint_io import CheckpointFiles
from flightplan.trial.stop_rules import Stop
from flightplan.units import counted

__all__ = ["Ranks", "AGREEMENT_STEPS", "rank_files", "check_world_size", "saved_by", "RESTART_COMMAND",
           "label_output", "RANK_STATE_KEY", "WORLD_SIZE_KEY"]

RANK_STATE_KEY = "ranks"
"""Key of ``state.pt`` holding ``{"1": state of rank 1, …}`` (each: ``rng``, and ``loader``,
``generators``, ``extra`` when registered) in a checkpoint of several ranks."""

WORLD_SIZE_KEY = "world_size"
"""Manifest key of the number of ranks that saved a checkpoint (absent: 1)."""

AGREEMENT_STEPS = 10
"""Steps between two agreements of a run's ranks (stop verdict, save, leave). Measured with
``bench/ddp_overhead.py`` on two CPU ranks (10 ms steps): the trial's hooks took 0.20 of the
step with an ``all_reduce`` every step, 0.026 with one every 10 steps (whole loop 0.98 of
the bare one). A stop or a save waits at most 9 steps."""

_LEAVE_CODES = {None: 0, False: 1, True: 2}   # no request, checkpoint and go on, then stop


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ArgumentError(f"{name}={value!r} is not an integer; the launcher sets it "
                            f"(flightplan run, torchrun)") from None


class Ranks:
    """This process's place in its run: ``rank`` of ``world_size`` (0 of 1 alone).

    Raises:
        ArgumentError: ``rank`` is not in ``0 … world_size − 1``.
    """

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ArgumentError(f"RANK={rank} of WORLD_SIZE={world_size} is not a place in a "
                                f"run; the launcher sets both (flightplan run, torchrun)")
        self.rank = rank
        self.world_size = world_size
        self._held_stop: Stop | None = None   # this rank's verdict since the last agreement
        self._next_agreement = 0              # the first step that agrees again
        self._last_flags: Any = None          # the last agreement's tensor (see agree)
        self._agreed_step: int | None = None  # the step of the last agreement

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Ranks":
        """From ``RANK`` and ``WORLD_SIZE`` (default 0 and 1).

        Raises:
            ArgumentError: a value is not an integer, or not a place in the run.
        """
        env = os.environ if environ is None else environ
        return cls(_env_int(env, "RANK", 0), _env_int(env, "WORLD_SIZE", 1))

    @property
    def leader(self) -> bool:
        """Whether this is rank 0, the one that writes the run's files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether the run has more than one rank."""
        return self.world_size > 1

    def _group(self) -> Any:
        """``torch.distributed``, checked to be initialised with this world size.

        Raises:
            CheckpointError: the task has not initialised it, or with another world size.
        """
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise CheckpointError(f"this run has {self.world_size} processes but "
                                  f"torch.distributed is not initialised; call "
                                  f"torch.distributed.init_process_group() before "
                                  f"trial.restore() (docs/distributed.md)")
        if dist.get_world_size() != self.world_size:
            raise CheckpointError(f"torch.distributed was initialised with world size "
                                  f"{dist.get_world_size()} but WORLD_SIZE is "
                                  f"{self.world_size}; initialise it from the environment")
        return dist

    def _tensor(self, values: list[int]) -> Any:
        """An int64 tensor of ``values`` on the device the group's backend computes on."""
        import torch

        dist = self._group()
        device = (torch.device("cuda", torch.cuda.current_device())
                  if dist.get_backend() == "nccl" else torch.device("cpu"))
        return torch.tensor(values, dtype=torch.int64, device=device)

    def resume_at(self, steps_done: int) -> None:
        """After a restore of ``steps_done`` steps: the next agreement falls where it does in
        an uninterrupted run (the first step at or past the next multiple of
        :data:`AGREEMENT_STEPS`)."""
        self._next_agreement = -(-steps_done // AGREEMENT_STEPS) * AGREEMENT_STEPS

    def agree(self, step: int | None, stop: Stop | None, due: bool, leave: bool | None
              ) -> tuple[Stop | None, bool, bool | None]:
        """What every rank acts on after ``step`` (0-based): at an agreement step, from one
        ``all_reduce`` (collective: every rank calls it at the same point), the verdict of
        the lowest rank whose rule fired (``stop``: this rank's, None when none fired here;
        a verdict held since the last agreement comes first), the leader's ``due`` (its
        measured interval passed, its writer free) and the strongest leave request of any
        rank (None: none; False: checkpoint and go on; True: then stop). Between agreements
        (``step`` before the next one) this rank holds ``stop`` and every rank gets
        ``(None, False, None)`` without a collective. ``step`` None agrees at once. With one
        rank: the arguments themselves, at every step."""
        if not self.distributed:
            return stop, due, leave
        if self._held_stop is None:
            self._held_stop = stop
        if step is not None and step < self._next_agreement:
            return None, False, None
        if step is not None:
            self._next_agreement = (step // AGREEMENT_STEPS + 1) * AGREEMENT_STEPS
            self._agreed_step = step
        stop, self._held_stop = self._held_stop, None
        dist = self._group()
        flags = self._tensor([self.world_size - self.rank if stop is not None else 0,
                              int(due and self.leader), _LEAVE_CODES[leave]])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        # kept until the next agreement: were gloo's thread to drop the last reference, it
        # would need the GIL, and at the end of a run (DDP's teardown holding it) it hung
        self._last_flags = flags
        first, agreed_due, code = (int(v) for v in flags.tolist())
        agreed_stop = None
        if first:
            verdict: list[Any] = [stop]
            dist.broadcast_object_list(verdict, src=self.world_size - first)
            agreed_stop = verdict[0]
        return agreed_stop, bool(agreed_due), {0: None, 1: False, 2: True}[code]

    def settle(self, step: int) -> Stop | None:
        """Before a save after ``step``: the verdict any rank holds, agreed now (collective)
        unless the ranks agreed at this very step, so that no checkpoint holds a state a
        rank's stop rule rejected. None with one rank."""
        if not self.distributed or step == self._agreed_step:
            return None
        return self.first_stop(None)

    def first_stop(self, stop: Stop | None) -> Stop | None:
        """The stop verdict of :meth:`agree` at once (with any verdict held). Collective."""
        return self.agree(None, stop, False, None)[0]

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's ``value`` (picklable), in rank order, on the leader; None elsewhere.
        Collective."""
        if not self.distributed:
            return [value]
        dist = self._group()
        gathered: list[Any] | None = [None] * self.world_size if self.leader else None
        dist.gather_object(value, gathered, dst=0)
        return gathered

    def broadcast(self, value: Any) -> Any:
        """The leader's ``value`` (picklable) on every rank. Collective."""
        if not self.distributed:
            return value
        dist = self._group()
        holder = [value if self.leader else None]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        """Wait until every rank reached this point (nothing with one rank). Collective."""
        if self.distributed:
            self._group().barrier()


def saved_by(name: str, processes: int) -> str:
    """``"<name> was saved by N process(es)"``: how the refusals and the reshard line name a
    checkpoint and the number of ranks that saved it."""
    return f"{name} was saved by {counted(processes, 'process', 'processes')}"


RESTART_COMMAND = "flightplan run CAMPAIGN_FILE --restart NAME"
"""How a refusal inside a run names the command that starts it over (the runner, which
knows the file and the run, names them: :func:`check_world_size`'s ``restart``)."""


def check_world_size(manifest: Mapping[str, Any], world_size: int, name: str, *,
                     reshard: bool = False, restart: str = RESTART_COMMAND) -> int:
    """Refuse to resume from a checkpoint saved by another number of ranks, unless the run
    allows it (``[[run]] reshard = true``) and the checkpoint is the trial API's. A
    library's checkpoint (Lightning's, the Trainer's: its manifest names the library as
    ``kind``, :mod:`flightplan.trial.library_checkpoint`) keeps its own per-rank files and
    is never resharded, so its refusal does not offer ``reshard``.

    Args:
        manifest: the checkpoint's manifest (``world_size``: absent for one rank).
        world_size: this run's number of ranks.   name: the checkpoint's folder name.
        reshard: another number is allowed (the resume is then not bitwise).
        restart: the command that starts the run over, as the refusal names it.

    Returns:
        The number of ranks that saved it.

    Raises:
        CheckpointError: the numbers differ and ``reshard`` is off, or the checkpoint is a
            library's (one line, naming both numbers and the fixes).
    """
    saved = int(manifest.get(WORLD_SIZE_KEY, 1))
    if saved == world_size:
        return saved
    if manifest.get("kind"):
        raise CheckpointError(
            f"{saved_by(name, saved)} but this run has {world_size}; [[run]] reshard "
            f"applies to tasks on flightplan's trial API, not to a Lightning or Trainer "
            f"checkpoint: give [[run]] processes = {saved}, or start the run over with "
            f"{restart}")
    if not reshard:
        raise CheckpointError(
            f"{saved_by(name, saved)} but this run has {world_size}; resuming at another "
            f"world size is not bitwise: give [[run]] processes = {saved}, set [[run]] "
            f"reshard = true to resume it at {world_size} anyway (not bitwise), or start the "
            f"run over with {restart}")
    return saved


def rank_files(files: CheckpointFiles, rank: int, saved_ranks: int) -> CheckpointFiles:
    """The checkpoint ``files``, saved by ``saved_ranks`` ranks (:func:`check_world_size`),
    as rank ``rank`` restores it: the replicas and the full state (model, optimizer,
    scheduler, scaler, counters) as saved, and the own entries (``rng``, ``loader``,
    ``generators``, ``extra``) of saved rank ``rank mod saved_ranks`` in place of the
    leader's.

    At the same world size each rank takes its own. Restored by another number of ranks
    (``reshard``), each rank of a smaller group goes on from its own old position, and in
    a larger one rank ``r`` repeats rank ``r mod S``'s random streams and data position (a
    data-parallel sampler then splits the data anew: until the epoch ends some examples
    are read twice or not at all, so the resume is not bitwise).
    """
    source = rank % saved_ranks
    if source == 0:
        return files
    own = files.state[RANK_STATE_KEY][str(source)]
    state = {**files.state, **own}
    return CheckpointFiles(model=files.model, optimizer=files.optimizer, state=state,
                           manifest=files.manifest)


class _Labelled:
    """A text stream that starts every line it writes with ``label``."""

    def __init__(self, stream: TextIO, label: str) -> None:
        self._stream = stream
        self._label = label
        self._line_start = True

    def write(self, text: str) -> int:
        if not text:
            return 0
        lines = text.split("\n")
        out = []
        for index, line in enumerate(lines):
            if line and self._line_start:
                out.append(self._label)
            out.append(line)
            if index < len(lines) - 1:
                out.append("\n")
                self._line_start = True
            elif line:
                self._line_start = False
        self._stream.write("".join(out))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def label_output(rank: int) -> None:
    """Start every line this process writes through ``sys.stdout``/``sys.stderr`` with
    ``[rank R] `` (the ranks of a run share its ``log.txt``). Output written below Python
    (a C library's own prints) is not labelled."""
    label = f"[rank {rank}] "
    sys.stdout = _Labelled(sys.stdout, label)
    sys.stderr = _Labelled(sys.stderr, label)
