"""Finding, hashing and importing a task named in a campaign file.

A run's ``task`` is one of:

- a built-in task name (``"textclf"``): the module ``flightplan.tasks.textclf``;
- a Python file relative to the campaign directory (``"train.py"``, ``"tasks/reg.py"``);
- a dotted module name importable with the campaign directory first on ``sys.path``
  (``"mypkg.train"``).

**The campaign folder on ``sys.path``**: it is first on the path only while the task's code
runs (its import, ``train`` and every hook, so the task's own sibling imports work, lazily
too), and off it otherwise: a ``ray.py``, ``mlflow.py`` or ``utils.py`` beside the campaign
file never shadows what the runner imports.

**A hook that raises** (any exception but flightplan's own one-line errors) is a
:class:`~flightplan.errors.TaskHookFailed` naming the task, the hook and the exception, with
the traceback in its ``details``.

**Code identity** (part of every run id, ``docs/tasks.md``): a built-in task stands for its
code with its ``CODE_VERSION``; a file task with ``sha256:<hex>`` of the file's bytes (what
``sha256sum train.py`` prints) when it imports no module of the campaign folder, else of
the listing ``"<sha256>  <relative path>\\n"`` of the task file and every module of the
campaign folder it imports, directly or through one another (:func:`task_files`: found by
reading the ``import`` statements, nothing is run); a module task with ``sha256:<hex>`` of
the file's bytes when it is one file, or, for a package, of the listing of every ``*.py``
file under the package folder sorted by path (what ``sha256sum`` prints for those files,
sorted). Editing the code gives new run ids; unchanged code resumes.

Usage::

    task = load_task("train.py", campaign_dir)     # TaskError if missing or no train()
    task.source.code_version                       # "sha256:…"
    task.train(trial); task.base_revision(base_model, params)
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Literal, Mapping

from flightplan.errors import FlightplanError, SpecError, TaskError, TaskHookFailed
from flightplan.tasks import BUILTIN_TASKS
from flightplan.metrics import parse_metric
from flightplan.tasks.protocol import CALLS, HOOKS, PREDICTION_COLUMNS, REQUIRED, hook_signature

__all__ = ["BUILTIN_TASKS", "TaskSource", "LoadedTask", "resolve_task", "load_task",
           "source_listing", "hash_code", "task_files", "check_task", "check_metric_columns",
           "lacks_reload", "visibly_lacks_reload"]



@dataclass(frozen=True)
class TaskSource:
    """Where a task's code is and what stands for it in run ids.

    ``ref``: as written in the campaign file; ``kind``: ``builtin``, ``file`` or
    ``module``; ``module_name``: what it is imported as; ``files``: the source files
    hashed, relative to ``root`` (empty for a built-in task; a file task's own file first,
    then the campaign folder's modules it imports, :func:`task_files`); ``code_version``: the
    built-in ``CODE_VERSION`` or ``sha256:<hex>`` (module docstring).
    """

    ref: str
    kind: Literal["builtin", "file", "module"]
    module_name: str
    root: Path | None
    files: tuple[str, ...]
    code_version: str

    def to_json(self) -> dict[str, Any]:
        """``{ref, kind, module, root, files, code_version}`` (trial.json's ``task_source``)."""
        return {"ref": self.ref, "kind": self.kind, "module": self.module_name,
                "root": None if self.root is None else str(self.root),
                "files": list(self.files), "code_version": self.code_version}


def source_listing(root: Path, files: tuple[str, ...]) -> str:
    """``"<sha256>  <path>\\n"`` per file, sorted by path (``sha256sum``'s format).

    Raises:
        OSError: a file cannot be read.
    """
    lines = []
    for name in sorted(files):
        digest = hashlib.sha256((root / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}\n")
    return "".join(lines)


def hash_code(root: Path, files: tuple[str, ...], *, package: bool) -> str:
    """``sha256:<hex>`` of a task's code: the one file's bytes, or for a package or several
    files the :func:`source_listing` of its files (the module docstring's recipe).

    Raises:
        OSError: a file cannot be read.
    """
    if not package and len(files) == 1:
        return "sha256:" + hashlib.sha256((root / files[0]).read_bytes()).hexdigest()
    return "sha256:" + hashlib.sha256(source_listing(root, files).encode("utf-8")).hexdigest()


# CPython 3.11's AST conversion keeps its recursion depth per interpreter, not per
# thread: two parses interleaved (verify reads kept task sources from its reload threads)
# fail with "SystemError: AST constructor recursion depth mismatch". One at a time.
_PARSING = threading.Lock()


def _ast_parse(path: Path) -> ast.Module:
    """``ast.parse`` of the Python file ``path``, one call at a time in this process.

    Raises:
        OSError: unreadable. SyntaxError, ValueError: not Python source.
    """
    data = path.read_bytes()
    with _PARSING:
        return ast.parse(data, filename=str(path))


def _parse(path: Path) -> ast.Module | None:
    """The syntax tree of the Python file ``path``, or None when it cannot be read or
    parsed (importing it will say why). Nothing is run."""
    try:
        return _ast_parse(path)
    except (OSError, SyntaxError, ValueError):
        return None


def _imported_names(path: Path) -> set[str]:
    """Top-level names of the absolute imports in the Python file ``path`` (anywhere in it,
    also inside functions); none when it cannot be parsed."""
    tree = _parse(path)
    if tree is None:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def task_files(folder: Path, entry: str) -> tuple[str, ...]:
    """The task file ``entry`` (relative to ``folder``) and every module of ``folder`` it
    imports, directly or through one another: ``import x`` or ``from x import y`` where
    ``folder/x.py`` is a file or ``folder/x/__init__.py`` a package (then all its ``*.py``).
    The campaign folder is first on ``sys.path`` while the task's code runs, so these are
    the modules it loads from there. Found by parsing; nothing is imported.

    Returns:
        Relative POSIX paths: ``entry`` first, the others sorted.
    """
    folder = Path(folder)
    seen, todo = {entry}, [entry]
    while todo:
        for name in sorted(_imported_names(folder / todo.pop())):
            if (folder / f"{name}.py").is_file():
                found = [f"{name}.py"]
            elif (folder / name / "__init__.py").is_file():
                found = sorted(p.relative_to(folder).as_posix()
                               for p in (folder / name).rglob("*.py")
                               if "__pycache__" not in p.parts)
            else:
                continue
            todo.extend(f for f in found if f not in seen)
            seen.update(found)
    return (entry, *sorted(seen - {entry}))


def _file_module_name(path: Path, digest: str) -> str:
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"flightplan_task_{stem}_{digest[7:19]}"


def resolve_task(ref: str, campaign_dir: Path | str, *, field: str = "run.task",
                 source: str | None = None) -> TaskSource:
    """Find the task ``ref`` and hash its code, without running it (a dotted module name
    imports its parent packages to locate it).

    Args:
        ref: the run's ``task`` value.
        campaign_dir: the campaign file's folder (file tasks are relative to it).
        field, source: where ``ref`` came from, for error messages.

    Raises:
        TaskError: no built-in task, file or module of that name (names the fix).
    """
    ref = str(ref).strip()
    campaign_dir = Path(campaign_dir).resolve()
    if ref in BUILTIN_TASKS:
        module = importlib.import_module(BUILTIN_TASKS[ref])
        return TaskSource(ref, "builtin", module.__name__, None, (),
                          str(getattr(module, "CODE_VERSION", "0")))
    if ref.endswith(".py"):
        path = (campaign_dir / ref).resolve()
        if not path.is_file():
            raise TaskError(f"no task file {path}; give a Python file relative to the campaign "
                            f"file, a module name, or a built-in task "
                            f"({', '.join(BUILTIN_TASKS)})", file=source, field=field, value=ref)
        local = task_files(campaign_dir, path.relative_to(campaign_dir).as_posix()) \
            if path.is_relative_to(campaign_dir) else ()
        # the task file alone keeps its own folder (and its id); with modules it imports,
        # they are all hashed and kept relative to the campaign folder
        root, files = (campaign_dir, local) if len(local) > 1 else (path.parent, (path.name,))
        version = hash_code(root, files, package=False)
        return TaskSource(ref, "file", _file_module_name(path, version), root, files, version)
    if not all(part.isidentifier() for part in ref.split(".")):
        raise TaskError(f"{ref!r} is not a built-in task ({', '.join(BUILTIN_TASKS)}), a .py "
                        f"file or a dotted module name; fix the run's task", file=source,
                        field=field, value=ref)
    with _on_path(campaign_dir):
        try:
            spec = importlib.util.find_spec(ref)
        except (ImportError, ValueError) as exc:
            spec, reason = None, f" ({type(exc).__name__}: {exc})"
        else:
            reason = ""
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        raise TaskError(f"no module {ref!r} importable from {campaign_dir}{reason}; give a "
                        f".py file, a module under the campaign folder, or a built-in task "
                        f"({', '.join(BUILTIN_TASKS)})", file=source, field=field, value=ref)
    origin = Path(spec.origin).resolve()
    if spec.submodule_search_locations:
        root = origin.parent
        files = tuple(sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                             if "__pycache__" not in p.parts))
        version = hash_code(root, files, package=True)
    else:
        root, files = origin.parent, (origin.name,)
        version = hash_code(root, files, package=False)
    return TaskSource(ref, "module", ref, root, files, version)


@contextlib.contextmanager
def _on_path(folder: Path | None) -> Iterator[None]:
    """``folder`` first on ``sys.path`` inside the block and off it again after (an entry
    that was there before stays where it was); nothing for None (a built-in task)."""
    if folder is None:
        yield
        return
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)          # the first occurrence: the one put there


def _import(source: TaskSource, campaign_dir: Path) -> ModuleType:
    if source.kind == "builtin":
        return importlib.import_module(source.module_name)
    if source.module_name in sys.modules:
        return sys.modules[source.module_name]
    with _on_path(campaign_dir):
        if source.kind == "module":
            return importlib.import_module(source.module_name)
        if source.root is None:
            raise TaskError(f"task {source.ref!r}: a file task without its folder")
        path = source.root / source.files[0]
        spec = importlib.util.spec_from_file_location(source.module_name, path)
        if spec is None or spec.loader is None:
            raise TaskError(f"task {source.ref!r}: {path} cannot be imported as Python; "
                            f"name a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[source.module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[source.module_name]
            raise
        return module


@dataclass(frozen=True)
class LoadedTask:
    """An imported task: its :class:`TaskSource`, its module, and the protocol's hooks
    with their defaults (:mod:`flightplan.tasks.protocol`). ``path`` is the folder put first
    on ``sys.path`` while the task's code runs (the campaign folder; None for a built-in
    task: module docstring).

    Every optional hook raises :class:`~flightplan.errors.TaskHookFailed` when the task's
    function raises anything but a :class:`~flightplan.errors.FlightplanError`."""

    source: TaskSource
    module: ModuleType
    path: Path | None = None

    def train(self, trial: Any) -> None:
        """Run the task's ``train(trial)`` (its exceptions propagate: the worker maps them)."""
        with _on_path(self.path):
            self.module.train(trial)

    def _hook(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call hook ``name`` with the campaign folder on the path; a failure is one
        :class:`TaskHookFailed` (flightplan's own errors pass as they are)."""
        with _on_path(self.path):
            try:
                return getattr(self.module, name)(*args, **kwargs)
            except FlightplanError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's hook: named, not a traceback
                raise TaskHookFailed(self.source.ref, name, exc,
                                     details=traceback.format_exc()) from exc

    def _has(self, name: str) -> bool:
        return getattr(self.module, name, None) is not None

    def base_revision(self, base_model: Any, params: Mapping[str, Any]) -> Any:
        """The task's ``base_revision(base_model, params)``, or None without the hook."""
        if not self._has("base_revision"):
            return None
        return self._hook("base_revision", base_model, dict(params))

    def data_check(self, corpus: Any, params_by_run: Mapping[str, Mapping[str, Any]],
                   base_model: Any = None) -> dict[str, Any]:
        """The task's own data-check figures (``{}`` without the hook); ``base_model`` is
        the spec's ``[base_model]`` or None."""
        if not self._has("data_check"):
            return {}
        figures = self._hook("data_check", corpus,
                             {k: dict(v) for k, v in params_by_run.items()}, base_model)
        return dict(figures)

    def estimate_run(self, pilot: Any, data_check: Mapping[str, Any],
                     params: Mapping[str, Any], *, tolerated_loss_s: float,
                     mtbi_s: float | None) -> dict[str, Any] | None:
        """One run's re-estimate ``{total_s, ...}`` by the task's cost model (None without
        the hook: the generic estimate of :mod:`flightplan.tasks.estimate` applies)."""
        if not self._has("estimate_run"):
            return None
        estimate = self._hook("estimate_run", pilot, data_check, dict(params),
                              tolerated_loss_s=tolerated_loss_s, mtbi_s=mtbi_s)
        return None if estimate is None else dict(estimate)

    def prepare_data(self, corpus_section: Any, params_by_run: Mapping[str, Mapping[str, Any]],
                     base_model: Any, *, campaign_dir: Path) -> bool:
        """Run the task's ``prepare_data`` hook (the data its runs read, built once into the
        campaign's cache); False without the hook."""
        if not self._has("prepare_data"):
            return False
        self._hook("prepare_data", corpus_section, {k: dict(v) for k, v in params_by_run.items()},
                   base_model, campaign_dir=Path(campaign_dir))
        return True

    def pilot_examples(self, params: Mapping[str, Any], steps: int) -> int | None:
        """Training examples the pilot's ``steps`` steps read (None: the whole split)."""
        if not self._has("pilot_examples"):
            return None
        wanted = self._hook("pilot_examples", dict(params), steps)
        return None if wanted is None else int(wanted)

    @property
    def prediction_columns(self) -> tuple[str, ...] | None:
        """The task's declared ``PREDICTION_COLUMNS`` (None: it declares none).

        Raises:
            TaskError: the declaration is not a tuple or list of strings.
        """
        if not hasattr(self.module, PREDICTION_COLUMNS):
            return None
        return _columns(getattr(self.module, PREDICTION_COLUMNS), self.source.ref)

    @property
    def can_predict(self) -> bool:
        """Whether the task has a reload entry (the ``reload_predictions`` hook)."""
        return callable(getattr(self.module, "reload_predictions", None))

    def predict(self, artifact_dir: Path, out: Path, *, campaign_dir: Path | None = None,
                limit: int | None = None) -> int:
        """Reload ``artifact_dir`` and write its predictions to ``out``; rows written.

        Raises:
            TaskError: the task has no ``reload_predictions`` hook.
        """
        if not self.can_predict:
            raise TaskError(f"task {self.source.ref!r} has no reload_predictions hook, so its "
                            f"artifact cannot be reloaded; define "
                            f"{hook_signature('reload_predictions')}")
        with _on_path(self.path):
            return int(self.module.reload_predictions(Path(artifact_dir), Path(out),
                                                      campaign_dir=campaign_dir, limit=limit))


def load_task(ref: str, campaign_dir: Path | str, *, field: str = "run.task",
              source: str | None = None) -> LoadedTask:
    """Resolve and import the task ``ref`` and check it against the protocol.

    Raises:
        TaskError: not found, fails to import (the exception named), lacks ``train``, or
            defines a hook that is not a function.
    """
    campaign_dir = Path(campaign_dir).resolve()
    found = resolve_task(ref, campaign_dir, field=field, source=source)
    try:
        module = _import(found, campaign_dir)
    except TaskError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's import error, named in one line
        raise TaskError(f"importing task {ref!r} failed ({type(exc).__name__}: {exc}); fix "
                        f"the task's code", file=source, field=field, value=ref) from None
    for name in REQUIRED:
        if not callable(getattr(module, name, None)):
            raise _missing(ref, name, field=field, source=source)
    for name in HOOKS:
        if hasattr(module, name) and not callable(getattr(module, name)):
            raise TaskError(f"task {ref!r}: {name} is not a function; define "
                            f"{hook_signature(name)} or remove it", file=source, field=field,
                            value=ref)
    for name in (*REQUIRED, *HOOKS):
        function = getattr(module, name, None)
        if callable(function) and not _accepts_call(function, name):
            call = hook_signature(name) if name in HOOKS else f"{name}(trial)"
            raise TaskError(f"task {ref!r}: {name}{_signature_text(function)} cannot be called "
                            f"as flightplan calls it, {call}; fix its parameters, or rename it "
                            f"if it is a helper of your own", file=source, field=field,
                            value=ref)
    return LoadedTask(found, module, None if found.kind == "builtin" else campaign_dir)


def _accepts_call(function: Any, name: str) -> bool:
    """Whether ``function`` accepts the call flightplan makes to ``name``
    (:data:`flightplan.tasks.protocol.CALLS`); True when its signature cannot be read."""
    positional, keywords = CALLS[name]
    try:
        inspect.signature(function).bind(*positional, **{k: None for k in keywords})
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): let the call decide
        return True
    return True


def _signature_text(function: Any) -> str:
    try:
        return str(inspect.signature(function))
    except (TypeError, ValueError):
        return "(...)"


def _missing(ref: str, name: str, *, field: str, source: str | None) -> TaskError:
    return TaskError(f"task {ref!r} defines no function {name}(trial); every task defines "
                     f"def {name}(trial): ... (docs/tasks.md)", file=source, field=field,
                     value=ref)


def lacks_reload(ref: str, campaign_dir: Path | str) -> bool:
    """Whether a file or one-file module task visibly defines no ``reload_predictions``
    (read, not run; :func:`visibly_lacks_reload`): ``close`` then cannot reload its
    artifacts and accepts none of its products. False where that cannot be told without
    running it (built-in tasks, packages, a task not found).
    """
    if str(ref).strip() in BUILTIN_TASKS:
        return False
    try:
        found = resolve_task(ref, campaign_dir)
    except TaskError:
        return False
    if found.root is None or "__init__.py" in found.files:
        return False
    return visibly_lacks_reload(found.root / found.files[0])


def visibly_lacks_reload(path: Path) -> bool:
    """Whether the Python file ``path`` visibly defines no ``reload_predictions`` hook,
    read and never run: it parses, the name occurs nowhere in its code (no definition,
    assignment, import, attribute, argument or string; docstrings and other bare string
    statements aside), and nothing could bind it unseen (``from x import *``, a module
    ``__getattr__``). False where that cannot be told without running it. A name put
    together at run time from pieces (``"reload_" + "predictions"``) is not seen: such a
    file is said to lack the hook although running it would find one.
    """
    tree = _parse(path)
    if tree is None:
        return False
    hook = "reload_predictions"
    bare = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
           for node in tree.body):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.name == "*":
            return False
        if id(node) in bare:
            continue
        for _, value in ast.iter_fields(node):
            texts = value if isinstance(value, list) else [value]
            if any(isinstance(text, str) and hook in text for text in texts):
                return False
    return True


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a parsed module binds at its top level (functions, classes, imports,
    assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _columns(value: Any, ref: str) -> tuple[str, ...]:
    """A ``PREDICTION_COLUMNS`` value checked: a tuple or list of strings.

    Raises:
        TaskError: anything else (names the fix).
    """
    if not isinstance(value, (tuple, list)) or not all(isinstance(c, str) for c in value):
        raise TaskError(f"task {ref!r}: {PREDICTION_COLUMNS} must be a tuple of column names "
                        f"written out as strings, e.g. (\"example_id\", \"gold\", "
                        f"\"predicted\", \"prob_*\"); got {value!r}",
                        field=PREDICTION_COLUMNS, value=ref)
    return tuple(value)


def _declared_columns(path: Path, ref: str) -> tuple[str, ...] | None:
    """``PREDICTION_COLUMNS`` as assigned at the top level of the Python file ``path``,
    read from its text (nothing is run); None when it assigns none or cannot be parsed.

    Raises:
        TaskError: assigned something other than literal strings.
    """
    tree = _parse(path)
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.Assign):
            targets, expression = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, expression = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == PREDICTION_COLUMNS for t in targets):
            try:
                value: Any = ast.literal_eval(expression)
            except ValueError:          # a computed value: named as written
                value = ast.unparse(expression)
            return _columns(value, ref)
    return None


def check_metric_columns(metric: str, columns: tuple[str, ...] | None, ref: str, *,
                         source: str | None = None) -> None:
    """Refuse a decision metric that a task's declared prediction columns cannot give:
    ``mean:<column>`` when no declared name (``*`` matching any text) is the column, a
    classification metric when ``gold`` or ``predicted`` is not declared. Nothing is
    checked without a declaration (``columns`` None).

    Raises:
        SpecError: field ``campaign.metric``, naming the task, its columns and the fix.
    """
    if columns is None:
        return
    parsed = parse_metric(metric)
    wanted = [parsed.column] if parsed.kind == "column" else ["gold", "predicted"]
    missing = [c for c in wanted if not any(fnmatch.fnmatchcase(str(c), p) for p in columns)]
    if not missing:
        return
    numeric = "give mean:<one of its numeric columns>" if parsed.kind == "column" else \
        "give a mean:<column> metric"
    raise SpecError(f"{metric!r}: task {ref!r} declares the columns of its predictions.csv "
                    f"({PREDICTION_COLUMNS}: {', '.join(columns)}), and none is "
                    f"{' or '.join(map(repr, missing))}; fix the metric's spelling or "
                    f"{numeric}", file=source, field="campaign.metric", value=metric)


def check_task(ref: str, campaign_dir: Path | str, *, field: str = "run.task",
               source: str | None = None, metric: str | None = None) -> None:
    """What can be checked of a task without running it (``flightplan plan`` runs no task
    code; only a dotted module name's parent packages are imported, as Python must to find
    it): it is found (:func:`resolve_task`), a file or one-file module task binds
    ``train`` at its top level (by parsing it; ``from x import *`` and packages are left to
    the import at ``flightplan run``), and, given the campaign's ``metric``, the columns the
    task declares can give it (:func:`check_metric_columns`; a built-in task's declaration
    is read from its module, a file's from its text).

    Raises:
        TaskError: not found, no top-level ``train``, or a malformed declaration.
        SpecError: the declared columns cannot give ``metric``.
    """
    if str(ref).strip() in BUILTIN_TASKS:
        if metric is not None:
            module = importlib.import_module(BUILTIN_TASKS[str(ref).strip()])
            declared = getattr(module, PREDICTION_COLUMNS, None)
            check_metric_columns(metric, None if declared is None else _columns(declared, ref),
                                 ref, source=source)
        return
    found = resolve_task(ref, campaign_dir, field=field, source=source)
    if found.root is None or (found.kind == "module" and "__init__.py" in found.files):
        return
    path = found.root / found.files[0]
    try:
        tree = _ast_parse(path)
    except SyntaxError as exc:
        raise TaskError(f"task {ref!r} cannot be imported: {path.name}, line {exc.lineno}: "
                        f"{type(exc).__name__}: {exc.msg}; fix the file", file=source,
                        field=field, value=ref) from None
    except (OSError, ValueError):
        return                                  # importing it at `run` will say why
    names = _bound_names(tree)
    if "*" in names:
        return
    for name in REQUIRED:
        if name not in names:
            raise _missing(ref, name, field=field, source=source)
    if metric is not None:
        check_metric_columns(metric, _declared_columns(found.root / found.files[0], ref), ref,
                             source=source)
