"""Warm starts: a template process that imported torch and the task once, forking each run.

A run's execution is still its own process, started fresh (its own pid, killed alone by a
SIGKILL, its output appended to its ``log.txt``, its exit status read by the executor as
a ``Popen``'s ``returncode``: ``-9`` for a SIGKILL), but it starts as a copy of a
*template* that already imported what every run imports (:func:`preload_modules`: torch,
:mod:`flightplan.trial`, :mod:`flightplan.integrations`, the worker and each built-in task
of the campaign with all its modules, so textclf's transformers and PEFT), so the
execution's start → first step is the task's own work. Python's ``multiprocessing``
``forkserver`` is the model.

How one execution starts (:meth:`WarmTemplate.start`), on Linux only:

1. the runner marks itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``) and
   sends the template one request (the worker's ``-m`` module and arguments, the
   environment, the working directory, the log file);
2. the template forks a helper that forks the execution and exits at once: the execution
   is orphaned and the kernel re-parents it to the runner, so it is the runner's own child,
   reaped with ``waitpid`` like a ``Popen`` (a pid is never reused while the runner may
   still signal it) and untouched when the template dies;
3. the execution waits to be the runner's child, asks for SIGKILL at the runner's death
   (``PR_SET_PDEATHSIG``, as :mod:`flightplan.run.executors.tether` does for a cold worker),
   points stdin at ``/dev/null`` and stdout/stderr at the log, takes the request's
   environment (``CUDA_VISIBLE_DEVICES`` among it: the template never initialised CUDA)
   and directory, sends its pid to the runner and runs the module: the worker, imported
   in the template, by calling its entry :func:`flightplan.run.worker.run_main` with the
   arguments (what ``python -m`` runs; ``runpy`` would execute the imported module a second
   time, and Python warns of that in the run's log), a module the template did not import
   as ``__main__`` (``runpy``); the worker sets the run's intra-op threads itself (the
   template never ran a parallel op, so torch's thread pool starts in the execution).

The template is started with the environment every worker of the executor shares
(``OMP_NUM_THREADS`` is read when torch loads), ignores SIGINT and dies with the runner
(:func:`~flightplan.run.executors.tether.tethered`); it serves every slot of the flight
(a fork takes milliseconds, the children are independent). A template that is not ready,
has died, fails a request, or whose imports started a thread or touched CUDA (loaded the
CUDA driver: a fork of it could not use a GPU) gives a cold start instead (:meth:`WarmTemplate.start` raises
:class:`TemplateUnavailable`; the executor writes the reason in the run's log) and is
started again for the runs after it.

**A user's task file is not imported in the template**: importing it runs the user's
top-level code (which may open files, start threads or initialise CUDA) in a process whose
copies become every run, and a file edited between runs must be read afresh by each. Its
libraries (torch, the integrations) are warm; its own module loads in the execution.
Built-in tasks import nothing at module level that touches a device.

Usage (the local executor)::

    template = WarmTemplate(env, preload_modules(["textclf"]))
    proc = template.start(["-m", "flightplan.run.worker", "trial.json"], env, run_dir, log)
    proc.poll()     # None while it runs, then the exit code (-9: killed)
    template.close()
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import pkgutil
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from flightplan.run.executors.tether import EXIT_ORPHANED, tethered
from flightplan.tasks import BUILTIN_TASKS

__all__ = ["WarmTemplate", "WarmProcess", "TemplateUnavailable", "preload_modules",
           "warm_supported", "main", "MAIN_ENTRY"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

READY_TIMEOUT_S = 300.0
"""Seconds the runner waits for the template's imports (several on a loaded machine)."""

FORK_TIMEOUT_S = 30.0
"""Seconds the runner waits for a started execution to report its pid."""

REPARENT_TIMEOUT_S = 10.0
"""Seconds an execution waits to become the runner's child before it gives up."""

_BASE_MODULES = ("torch", "flightplan.trial", "flightplan.integrations",
                 "flightplan.integrations.transformers", "flightplan.integrations.lightning",
                 "flightplan.run.worker", "flightplan.tasks.loader")


MAIN_ENTRY = "run_main"
"""The function (``run_main(argv)``) an execution calls, instead of running the module
with ``runpy``, when the module it asks for was imported in the template and defines it
(the worker: :func:`flightplan.run.worker.run_main`). A module the template did not import,
or one without it, is run as ``__main__`` by ``runpy``."""


class TemplateUnavailable(Exception):
    """The template cannot start this execution (the reason, one line): start it cold."""


def warm_supported() -> bool:
    """True where warm starts work: Linux (child subreapers and parent-death signals)."""
    return sys.platform == "linux"


def preload_modules(task_refs: Iterable[str]) -> list[str]:
    """The modules a template imports: torch, the trial API, the integrations, the worker,
    and each built-in task among ``task_refs`` (its package; the template imports every
    module under it). File and module tasks are not imported (module docstring)."""
    tasks = sorted({BUILTIN_TASKS[ref] for ref in task_refs if ref in BUILTIN_TASKS})
    return [*_BASE_MODULES, *tasks]


def _prctl(option: int, value: int) -> None:
    """``prctl(option, value)``.

    Raises:
        OSError: the call failed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


class WarmProcess:
    """One execution forked by the template, a child of this process: ``pid``,
    ``returncode`` and the ``Popen`` methods the executor uses (:meth:`poll`,
    :meth:`wait`, :meth:`send_signal`, :meth:`kill`), with ``Popen``'s codes (``-N``: killed
    by signal N)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, flags)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """The exit code once it ended (reaped then), else None."""
        return self._reap(os.WNOHANG)

    def wait(self) -> int:
        """Wait for the end; the exit code."""
        code = self._reap(0)
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless it has ended (and been reaped: the pid is never reused)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL it."""
        self.send_signal(signal.SIGKILL)


class WarmTemplate:
    """The runner's side of a template process (module docstring).

    Args:
        env: the template's environment (what every worker of the executor shares).
        modules: what it imports (:func:`preload_modules`).

    The template starts importing at once; :meth:`start` waits for it the first time.
    """

    def __init__(self, env: dict[str, str], modules: list[str]) -> None:
        self._env = dict(env)
        self._modules = list(modules)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ready = False
        self.import_s: float | None = None
        """Seconds the template's imports took (None until it is ready)."""
        self._launch()

    @property
    def modules(self) -> list[str]:
        """What the template imports."""
        return list(self._modules)

    def _launch(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                tethered([sys.executable, "-m", __name__, str(theirs.fileno()),
                          str(os.getpid()), *self._modules]),
                pass_fds=(theirs.fileno(),), env=self._env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = ours
        self._ready = False

    def _read(self, timeout: float) -> dict[str, Any]:
        """The template's (or an execution's) next message line.

        Raises:
            TemplateUnavailable: timed out, or every sender has gone (EOF).
        """
        assert self._sock is not None
        self._sock.settimeout(timeout)
        data = b""
        while not data.endswith(b"\n"):
            try:
                chunk = self._sock.recv(1)
            except (socket.timeout, OSError) as exc:
                raise TemplateUnavailable(f"no answer ({exc or 'timed out'})") from exc
            if not chunk:
                raise TemplateUnavailable("it ended")
            data += chunk
        message: dict[str, Any] = json.loads(data)
        return message

    def _wait_ready(self) -> None:
        if self._ready:
            return
        message = self._read(READY_TIMEOUT_S)
        if "error" in message:
            raise TemplateUnavailable(str(message["error"]))
        self.import_s = float(message["import_s"])
        self._ready = True

    def _restart(self) -> None:
        self.close()
        self._launch()

    def start(self, module_argv: list[str], env: dict[str, str], cwd: Path,
              log: Path) -> WarmProcess:
        """Start one execution of ``python -m MODULE ARG ...`` (``module_argv`` =
        ``["-m", MODULE, ARG, ...]``) with ``env`` in ``cwd``, its output appended to ``log``.

        Raises:
            TemplateUnavailable: the template has died, is not ready in
                :data:`READY_TIMEOUT_S` or failed the request (it is started again for the
                next execution); the caller starts this one cold.
        """
        with self._lock:
            try:
                return self._fork(module_argv, env, cwd, log)
            except TemplateUnavailable:
                self._restart()
                raise

    def _fork(self, module_argv: list[str], env: dict[str, str], cwd: Path,
              log: Path) -> WarmProcess:
        assert self._proc is not None and self._sock is not None
        if self._proc.poll() is not None:
            raise TemplateUnavailable(f"the template exited ({self._proc.returncode})")
        self._wait_ready()
        request = {"argv": module_argv, "env": env, "cwd": str(cwd), "log": str(log)}
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        try:
            try:
                self._sock.sendall(json.dumps(request).encode() + b"\n")
            except OSError as exc:
                raise TemplateUnavailable(f"cannot reach the template ({exc})") from exc
            message = self._read(FORK_TIMEOUT_S)
        finally:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        if "error" in message:
            raise TemplateUnavailable(str(message["error"]))
        return WarmProcess(int(message["pid"]))

    @property
    def pid(self) -> int | None:
        """The template's pid (None once closed)."""
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """End the template (its socket closed: it exits; killed if it has not in 5 s)
        and reap it. The executions it started run on."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


# --- the template process -------------------------------------------------------------

def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _import_all(modules: list[str]) -> list[str]:
    """Import ``modules`` (and every module under a built-in task's package); the lines
    of those that failed (an optional library absent), which the runs import cold."""
    failed = []
    tasks = set(BUILTIN_TASKS.values())
    for name in modules:
        try:
            module = importlib.import_module(name)
            if name in tasks and hasattr(module, "__path__"):
                for info in pkgutil.walk_packages(module.__path__, prefix=name + "."):
                    importlib.import_module(info.name)
        except Exception as exc:  # noqa: BLE001 - an import that fails is left to the run
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def _cuda_touched() -> bool:
    """True when this process initialised CUDA or loaded the CUDA driver (``libcuda`` in
    ``/proc/self/maps``: an import asked for a device count, say)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        return "libcuda.so" in Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _serve(sock: socket.socket) -> dict[str, Any] | None:
    """Answer requests until the runner closes the socket (None); in an execution, its
    request (the caller runs it)."""
    reader = sock.makefile("rb")
    for line in reader:
        request: dict[str, Any] = json.loads(line)
        helper = os.fork()
        if helper == 0:
            if os.fork() == 0:
                reader.close()
                return request
            os._exit(0)
        os.waitpid(helper, 0)
    return None


def _become_execution(sock: socket.socket, runner: int, request: dict[str, Any]) -> None:
    """In a forked execution: wait to be the runner's child, tie to it, take the request's
    output, environment and directory, report the pid; exits when it cannot."""
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    while os.getppid() != runner:
        if time.monotonic() > deadline:
            _send(sock, {"error": f"the execution was not re-parented to the runner "
                                  f"(parent {os.getppid()})"})
            os._exit(EXIT_ORPHANED)
        time.sleep(0.001)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != runner:
        os._exit(EXIT_ORPHANED)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:  # its global generator was seeded once, in the template
        sys.modules["numpy"].random.seed()
    _send(sock, {"pid": os.getpid()})
    sock.close()


def main(args: list[str]) -> int:
    """The template: ``SOCKET_FD RUNNER_PID MODULE ...``; imports the modules, serves
    requests, and in each forked execution runs its module as ``__main__``."""
    sock = socket.socket(fileno=int(args[0]))
    runner = int(args[1])
    started = time.perf_counter()
    failed = _import_all(args[2:])
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if threads:  # a fork copies only this thread: a lock another holds stays held
        _send(sock, {"error": f"the template's imports started threads ({', '.join(threads)})"})
        return 1
    if _cuda_touched():  # a forked copy of a process that touched CUDA cannot use it
        _send(sock, {"error": "the template's imports touched CUDA"})
        return 1
    _send(sock, {"import_s": time.perf_counter() - started, "failed": failed})
    request = _serve(sock)
    if request is None:
        return 0
    _become_execution(sock, runner, request)
    argv = request["argv"]
    module = sys.modules.get(argv[1])
    entry = getattr(module, MAIN_ENTRY, None)
    if module is not None and callable(entry):
        # imported here already (the worker): call its entry, as ``-m`` would run it;
        # runpy would execute the module a second time, beside the copy already imported
        # (RuntimeWarning "found in sys.modules ... prior to execution")
        sys.argv = [getattr(module, "__file__", None) or argv[1], *argv[2:]]
        entry(argv[2:])
        return 0
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
