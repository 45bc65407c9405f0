"""The ``flightplan`` command: parse arguments, call one function per verb, map errors.

Exit codes: 0 success; 1 a check failed or a campaign stopped by a rule; 2 bad input
(one line on stderr naming the field and the fix; ``--debug``, before or after the verb,
prints the traceback above that line and keeps the exit code);
130 after Ctrl-C (SIGINT), 143 after SIGTERM, each with one "interrupted: …" line on stderr
naming what stopped and the command that continues (:mod:`flightplan.interrupts`).
Each verb's work lives in the ``commands`` module of its stage (``plan/``, ``run/``,
``close/``); heavy imports (torch) happen only inside the verbs that need them.

A reader that goes away (``flightplan run … | head -5``) stops nothing: once stdout is
found closed, the rest of the output is dropped and the verb goes on to its own end and
exit code (:class:`StdoutOutlivesReader`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import click
import typer

from flightplan.errors import FlightplanError
from flightplan.interrupts import Stoppable, StopNotice
from flightplan.redact import redact

__all__ = ["app", "main", "StdoutOutlivesReader"]

# Plain help text (rich_markup_mode=None): typer 0.29's boxed help gives every flag a value
# placeholder (`--json <bool>`, `--help <bool>`), as if it took one; the plain layout lists
# flags bare and the options that take a value with theirs.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Plan, run and close GPU training campaigns on flat-rate rental packages.")
checkpoint_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                             help="Inspect and verify checkpoints.")
app.add_typer(checkpoint_app, name="checkpoint")
stage_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Mark a person's stages (install, review) started or done.")
app.add_typer(stage_app, name="stage")

_state = {"debug": False}
DEBUG = typer.Option(False, "--debug", help="Show the traceback of an error (before or after "
                                            "the verb; the exit code stays the error's).")


@app.callback()
def _global(debug: bool = DEBUG) -> None:
    _state["debug"] = debug


class StdoutOutlivesReader:
    """``sys.stdout`` for the length of a verb, such that a closed pipe stops nothing.

    Writes and flushes pass to ``stream``; the first that finds the reader gone (EPIPE:
    ``| head`` exited) points the stream's file descriptor at ``/dev/null``, so that line and
    every later one are dropped without an error, also what the stream still buffers when
    the interpreter exits. Everything else (``isatty``, ``encoding``, ``fileno``) is the
    stream's.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reader_gone = False

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except OSError as exc:              # BrokenPipeError, or EPIPE from a raw write
            if exc.errno != errno.EPIPE:
                raise
            self.reader_gone = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
            return None

    def write(self, text: str) -> int:
        """Write ``text`` (dropped once the reader is gone); its length."""
        self._guard(lambda: self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream (to ``/dev/null`` once the reader is gone)."""
        self._guard(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_outlives_reader() -> Iterator[None]:
    """:class:`StdoutOutlivesReader` as ``sys.stdout`` inside the block."""
    original = sys.stdout
    sys.stdout = StdoutOutlivesReader(original)
    try:
        yield
    finally:
        sys.stdout = original


def _json_error(message: str, exit_code: int) -> None:
    """The one JSON object ``--json`` promises, for a verb that ended in an error:
    ``{"error": message, "exit_code": exit_code}`` on stdout (the line on stderr stays)."""
    print(json.dumps({"error": message, "exit_code": exit_code}))


def _verb(resume: str, *, kept: str = "it had changed nothing", again: str = "to start it over"
          ) -> Callable[[Callable[..., int]], Callable[..., None]]:
    """Run a verb; turn its return value, flightplan errors and interruptions into exit codes.

    Args:
        resume: the command that continues the verb's work, formatted with the verb's
            arguments (``"flightplan run {spec}"``); the interruption line names it.
        kept: what "nothing finished was lost" means for this verb.
        again: what running ``resume`` again does.
    """

    def decorate(func: Callable[..., int]) -> Callable[..., None]:
        @functools.wraps(func)
        def wrapper(*args: Any, debug: bool = False, **kwargs: Any) -> None:
            notice = StopNotice(resume.format(**kwargs), kept=kept, again=again)
            stop = Stoppable(notice)
            code = 0
            try:
                with stop, _stdout_outlives_reader():
                    code = func(*args, **kwargs)
            except FlightplanError as exc:
                if debug or _state["debug"]:
                    traceback.print_exc(file=sys.stderr)
                message = redact(str(exc))     # a store's URI may carry a credential
                print(f"error: {message}", file=sys.stderr)
                if kwargs.get("json"):
                    _json_error(message, exc.exit_code)
                raise typer.Exit(exc.exit_code) from None
            raise typer.Exit(stop.exit_code if stop.signum is not None else code or 0)

        # every verb also takes --debug after its name (typer reads the signature)
        signature = inspect.signature(func, eval_str=True)
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(),
                        inspect.Parameter("debug", inspect.Parameter.KEYWORD_ONLY,
                                          default=DEBUG, annotation=bool)])
        return wrapper

    return decorate


JSON = typer.Option(False, "--json", help="Print one JSON object on stdout.")
DEFAULT_SPEC = Path("campaign.toml")
SPEC_HELP = "Campaign file (TOML), or the folder holding its campaign.toml."


def _campaign_file(path: Path) -> Path:
    """A campaign argument as the verbs take it: a folder holding ``campaign.toml`` stands
    for that file (``flightplan plan examples/drug-reviews``); anything else is kept as
    given (the verb names what is wrong with it: :func:`flightplan.spec.load_spec`)."""
    if path.is_dir() and (path / DEFAULT_SPEC).is_file():
        return path / DEFAULT_SPEC
    return path


@app.command()
@_verb("flightplan plan {spec}")
def plan(spec: Path = typer.Argument(..., help=SPEC_HELP, callback=_campaign_file),
         extend: list[str] = typer.Option([], "--extend", metavar="NAME=+DURATION",
                                          help="Lengthen a stage or run, e.g. lora-r8=+30h (repeatable)."),
         gantt: Optional[Path] = typer.Option(None, "--gantt", help="Write a PNG Gantt chart here."),
         power_plot: Optional[Path] = typer.Option(
             None, "--power-plot", help="Write each comparison's power curve here (PNG)."),
         from_: Optional[Path] = typer.Option(
             None, "--from", metavar="RESULTS_DIR",
             help="Plan from an earlier campaign's verified results: its measured figures "
                  "replace this file's guesses where they apply."),
         json: bool = JSON) -> int:
    """Schedule the campaign and compare packages. Checks the schedule against the window,
    says what the test set can decide and which estimates are still uncertain."""
    from flightplan.close.verify import verify_results   # plan reads a verified results
    from flightplan.plan.commands import plan_command     # directory; the CLI wires the stages
    from flightplan.run.commands import frozen_rule_drift
    return plan_command(spec, extend=extend, gantt=gantt, as_json=json, power_plot=power_plot,
                        calibrate_from=from_, rule_drift=frozen_rule_drift,
                        verify=functools.partial(verify_results, reload=False))


@app.command()
@_verb("flightplan quote")    # instant: the interruption line need not repeat its options
def quote(offer: Optional[str] = typer.Option(None, "--offer",
                                              help="Catalog offer, e.g. \"RTX 4090\"."),
          hours: Optional[str] = typer.Option(
              None, "--hours", metavar="HOURS|DURATION",
              help="Length of one continuous job: hours (78, 1.5) or a duration (10h, 90m, "
                   "2d)."),
          gpus: int = typer.Option(1, "--gpus", help="GPUs the job needs at once."),
          catalog: Optional[Path] = typer.Option(None, "--catalog", help="User catalog file (TOML)."),
          list_: bool = typer.Option(False, "--list",
                                     help="List the catalog's offers and their packages."),
          json: bool = JSON) -> int:
    """Price one continuous job: its packages, cheapest first. With --list, every offer
    of the catalog."""
    from flightplan.plan.commands import quote_command
    return quote_command(offer=offer, hours=hours, gpus=gpus, catalog=catalog, as_json=json,
                         list_offers=list_)


@app.command()
@_verb("flightplan run {spec}", kept="finished runs and saved checkpoints are kept",
       again="to go on (a run resumes from its last checkpoint, or starts over from step 0 "
             "when it saved none)")
def run(spec: Path = typer.Argument(..., help=SPEC_HELP, callback=_campaign_file),
        decide: Optional[str] = typer.Option(None, "--decide", metavar="continue|cut|stop",
                                             help="Override the decision computed after the pilot."),
        restart: list[str] = typer.Option([], "--restart", metavar="NAME",
                                          help="Start this run over from step 0 on purpose "
                                               "(its folder is kept aside)."),
        tracking_uri: Optional[str] = typer.Option(
            None, "--tracking-uri", help="Mirror the runs into this MLflow store while they "
                                         "train (default: [tracking] mlflow); a relative "
                                         "sqlite:/// path is from the current folder."),
        executor: Optional[str] = typer.Option(
            None, "--executor", metavar="local|ray",
            help="Where runs execute (default: the campaign file's execution.engine, else "
                 "local)."),
        address: Optional[str] = typer.Option(None, "--address", metavar="HOST:PORT",
                                              help="The Ray head of the flights (--executor ray)."),
        past_end: bool = typer.Option(False, "--past-end",
                                      help="Start runs even where they cannot finish before "
                                           "their flight's package ends."),
        trusted_network: bool = typer.Option(
            False, "--trusted-network",
            help="Join a Ray head without token authentication that the network can reach "
                 "(only your own machines can reach it; recorded in the ledger)."),
        json: bool = JSON) -> int:
    """Carry out the campaign; run it again to resume. Data check, pilot, decision point,
    then the runs."""
    from flightplan.close.verify import verify_results   # [calibrate] from: a verified
    from flightplan.run.commands import run_command      # results directory
    from flightplan.tracking.live import observer
    return run_command(spec, decide=decide, as_json=json, restart=restart,
                       observer=observer(tracking_uri), executor=executor, address=address,
                       past_end=past_end, trusted_network=trusted_network,
                       verify=functools.partial(verify_results, reload=False))


@app.command()
@_verb("flightplan status {spec}")
def status(spec: Path = typer.Argument(DEFAULT_SPEC, help=SPEC_HELP, callback=_campaign_file),
           json: bool = JSON) -> int:
    """Show the ledger: plan versions, runs, events, expenses, notes."""
    from flightplan.run.commands import status_command
    return status_command(spec, as_json=json)


@app.command()
@_verb("flightplan note {name} ...", kept="a note is recorded whole or not at all",
       again="if `flightplan status` does not list it")
def note(name: str = typer.Argument(..., help="Stage or run the note explains."),
         text: str = typer.Argument(..., help="The explanation."),
         spec: Path = typer.Option(DEFAULT_SPEC, "--spec", help=SPEC_HELP, callback=_campaign_file),
         json: bool = JSON) -> int:
    """Record why a stage or run deviated from the plan."""
    from flightplan.run.commands import note_command
    return note_command(spec, name=name, text=text, as_json=json)


@app.command()
@_verb("flightplan close {spec}", kept="every file of results/ written so far is kept",
       again="to complete and verify results/")
def close(spec: Path = typer.Argument(..., help=SPEC_HELP, callback=_campaign_file),
          again: bool = typer.Option(False, "--again",
                                     help="Close again even when nothing changed since the "
                                          "last close."),
          json: bool = JSON) -> int:
    """Complete and verify results/. Conclusion, budget, plan vs execution, report."""
    from flightplan.close.commands import close_command
    from flightplan.run.ledger import Ledger       # close reads it; the CLI wires the stages
    return close_command(spec, as_json=json, open_ledger=Ledger.open_existing, again=again)


@app.command()
@_verb("flightplan report {spec}")
def report(spec: Path = typer.Argument(DEFAULT_SPEC, help=SPEC_HELP, callback=_campaign_file),
           open_: bool = typer.Option(False, "--open", help="Open it in the web browser."),
           json: bool = JSON) -> int:
    """Say where the closed campaign's report is, or open it. It is results/report.html."""
    from flightplan.close.commands import report_command
    return report_command(spec, open_browser=open_, as_json=json)


@app.command()
@_verb("flightplan verify {directory}")
def verify(directory: Path = typer.Argument(..., metavar="DIR", help="A results directory."),
           trust_code: bool = typer.Option(False, "--trust-code",
                                           help="Also reload artifacts by running the task "
                                                "source kept in DIR/tasks/ (code that came "
                                                "with the directory)."),
           json: bool = JSON) -> int:
    """Re-verify a results directory from its files alone."""
    from flightplan.close.commands import verify_command
    return verify_command(directory, as_json=json, trust_code=trust_code)


@checkpoint_app.command("verify")
@_verb("flightplan checkpoint verify {directory}")
def checkpoint_verify(directory: Path = typer.Argument(..., metavar="DIR",
                                                       help="A checkpoint (step-NNNNNN) directory."),
                      json: bool = JSON) -> int:
    """Check a checkpoint against its save-time digests. It is reloaded in a fresh process."""
    from flightplan.run.commands import checkpoint_verify_command
    return checkpoint_verify_command(directory, as_json=json)


@stage_app.command("start")
@_verb("flightplan stage start {name} --spec {spec}", kept="a mark is recorded whole or not at all",
       again="if `flightplan status` does not show it")
def stage_start(name: str = typer.Argument(..., help="A [[stage]] of the campaign file."),
                spec: Path = typer.Option(DEFAULT_SPEC, "--spec", help=SPEC_HELP, callback=_campaign_file),
                json: bool = JSON) -> int:
    """Record that a stage started now. For stages flightplan does not execute (a review,
    an install)."""
    from flightplan.run.commands import stage_command
    return stage_command(spec, name=name, action="start", took=None, as_json=json)


@stage_app.command("done")
@_verb("flightplan stage done {name} --spec {spec}", kept="a mark is recorded whole or not at all",
       again="if `flightplan status` does not show it")
def stage_done(name: str = typer.Argument(..., help="A [[stage]] of the campaign file."),
               took: Optional[str] = typer.Option(None, "--took", metavar="DURATION",
                                                  help="It ended now and took this long "
                                                       "(e.g. 2h), when it was not started."),
               spec: Path = typer.Option(DEFAULT_SPEC, "--spec", help=SPEC_HELP, callback=_campaign_file),
               json: bool = JSON) -> int:
    """Record that a stage ended now. Plan vs execution compares its observed time."""
    from flightplan.run.commands import stage_command
    return stage_command(spec, name=name, action="done", took=took, as_json=json)


@app.command()
@_verb("flightplan export {target} {results}",
       kept="an export is repeatable: runs already sent are found by their id",
       again="to send what is missing")
def export(target: str = typer.Argument(..., metavar="mlflow", help="Where to export (mlflow)."),
           results: Path = typer.Argument(..., metavar="RESULTS_DIR", help="A results directory."),
           tracking_uri: Optional[str] = typer.Option(
               None, "--tracking-uri", help="MLflow store (default $MLFLOW_TRACKING_URI or "
                                            "sqlite:///mlflow.db here)."),
           experiment: Optional[str] = typer.Option(None, "--experiment",
                                                    help="Experiment name (default the campaign's)."),
           json: bool = JSON) -> int:
    """Write verified results into an MLflow tracking store. Again: updates them."""
    from flightplan.tracking.export import export_command
    return export_command(target, results, tracking_uri=tracking_uri, experiment=experiment,
                          as_json=json)


def main() -> None:
    """Console-script entry point."""
    # typer 0.29 vendors its own click: catch both families of exceptions
    try:
        # without standalone mode the app returns a verb's exit code instead of exiting
        sys.exit(app(standalone_mode=False) or 0)
    except (click.exceptions.Exit, typer.Exit) as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, typer.Abort):  # Ctrl-C before a verb began
        print("interrupted: stopped before any verb began; nothing was changed", file=sys.stderr)
        sys.exit(130)
    except (click.ClickException, typer.TyperException) as exc:
        message = exc.format_message()
        context = getattr(exc, "ctx", None)      # a usage error knows the verb it came from
        if context is not None:
            message = f"{message.rstrip('.')}; `{context.command_path} --help` lists what it takes"
        print(f"error: {message}", file=sys.stderr)
        if "--json" in sys.argv[1:]:
            _json_error(message, 2)
        sys.exit(2)
