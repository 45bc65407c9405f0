"""Ctrl-C and SIGTERM: the one line, the exit codes, the second signal, ignored SIGINT.

Each case runs in its own Python process (signals are process-wide), sending the signal
to itself from inside a :class:`Stoppable`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from flightplan import activity
from flightplan.activity import WaitDisplay, doing
from flightplan.interrupts import StopNotice

NOTICE = ('StopNotice("flightplan close campaign.toml", kept="every file of results/ written '
          'so far is kept", again="to complete and verify results/")')
LINE = ("interrupted: flightplan close stopped{how} (checking the files of results/, 1 of 3 "
        "files done); nothing finished was lost: every file of results/ written so far is "
        "kept; run `flightplan close campaign.toml` again to complete and verify results/")


def _python(body: str, **popen) -> subprocess.CompletedProcess:
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from flightplan.activity import doing
        from flightplan.interrupts import Stoppable, StopNotice
        stop = Stoppable({NOTICE})
        """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, **popen)


def test_the_line_names_the_activity_and_the_command_that_continues() -> None:
    notice = StopNotice("flightplan close campaign.toml", kept="every file of results/ "
                        "written so far is kept", again="to complete and verify results/")
    doing("checking the files of results/", done=1, total=3, unit="files")
    try:
        assert notice.line() == LINE.format(how="")
        assert notice.line(at_once=True) == LINE.format(how=" at once")
    finally:
        activity.clear()
    assert StopNotice("flightplan verify results").line() == (
        "interrupted: flightplan verify stopped; nothing finished was lost: it had changed "
        "nothing; run `flightplan verify results` again to start it over")


def test_the_activity_may_say_what_running_again_does_and_the_notice_stands_in() -> None:
    notice = StopNotice("flightplan run campaign.toml", kept="checkpoints are kept",
                        again="to go on")
    tail = "run `flightplan run campaign.toml` again "
    try:
        doing("run lora-1", again=lambda: "to start lora-1 over from step 0")
        assert notice.line().endswith(tail + "to start lora-1 over from step 0")
        doing("run lora-1", again=lambda: None)              # it does not know
        assert notice.line().endswith(tail + "to go on")
        doing("run lora-1", again=lambda: str(1 / 0))         # it fails: the line is written
        assert notice.line().endswith(tail + "to go on")
    finally:
        activity.clear()


def test_sigterm_prints_the_line_and_exits_143() -> None:
    done = _python("""
        with stop:
            doing("checking the files of results/", done=1, total=3, unit="files")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("not reached")
        sys.exit(stop.exit_code)
        """)
    assert done.returncode == 143 and done.stdout == ""
    assert done.stderr == LINE.format(how="") + "\n"


def test_a_second_ctrl_c_during_the_clean_up_stops_at_once_with_exit_130() -> None:
    done = _python("""
        with stop:
            doing("checking the files of results/", done=1, total=3, unit="files")
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            finally:                       # a slow clean-up, cut short by the second Ctrl-C
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
                print("clean-up not finished")
        print("not reached")
        """)
    assert done.returncode == 130 and done.stdout == ""
    assert done.stderr == "\n" + LINE.format(how=" at once") + "\n"


def test_sigint_ignored_at_start_stays_ignored_and_sigterm_still_stops() -> None:
    done = _python("""
        with stop:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            print("ignored")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        sys.exit(stop.exit_code)
        """, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 143 and done.stdout == "ignored\n"
    assert done.stderr.startswith("interrupted: flightplan close stopped;")


def test_planning_leaves_ctrl_c_to_python() -> None:
    """CP-SAT used to leave SIGINT at its default action after a solve: the next Ctrl-C
    killed the process without a word."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, pathlib, signal, time
        from flightplan.plan import plan_campaign
        from flightplan.spec import load_spec
        plan_campaign(load_spec(pathlib.Path("examples/tiny/campaign.toml")))
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        """)], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).resolve().parents[2])
    assert (done.returncode, done.stdout) == (0, "KeyboardInterrupt\n"), done.stderr


def test_the_wait_display_draws_nothing_off_a_terminal_but_records_the_activity(capsys) -> None:
    with WaitDisplay() as display:
        doing("reloading artifacts in fresh processes", done=2, total=3, unit="artifacts")
    assert display.enabled is False
    assert activity.current().describe() == ("reloading artifacts in fresh processes, 2 of 3 "
                                             "artifacts done")
    activity.clear()
    assert capsys.readouterr() == ("", "")
