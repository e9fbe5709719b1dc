"""`snaprun crashtest` against the ways it could be wrong: a "no problem found" where a
problem is (its worst bug), a problem reported on a correct agent (its second worst),
and output a terminal would interpret.

Each test runs the real command over an agent of tests/crash_agents/ (its runs real
processes SIGKILLed at named fault points), limited to the kill points that show the
case (--point), so the default run stays short.
"""

from __future__ import annotations

import json
import sys

from test_crashtest import AGENTS, crashtest, problem_lines


def test_a_run_that_reaches_no_kill_point_is_untested_not_passed():
    """An uninterrupted run that fails before its first snapshot (here PROVIDER_URL is
    not set: the usual forgotten --setup), or that never reaches a snapshot, an effect
    or an approval, gives crashtest nothing to kill: that is reported (exit 1), never
    "no problem found". A crashtest option written after AGENT.py is passed to the
    agent, as with `snaprun run`, with a warning naming it."""
    run = crashtest("early_agent.py")
    assert run.returncode == 1, run.stderr
    (line,) = problem_lines(run)
    assert line.startswith(
        "baseline: untested: the uninterrupted run failed (exit 1: \"job crashtest failed: "
        "KeyError: 'PROVIDER_URL'\") before it reached any snapshot, effect or approval"
    ), line
    assert "make the run work first (its --setup providers" in line

    run = crashtest("--json", "early_agent.py", "quiet", "--max-kills", "3")
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert [(p["kind"], p["point"]) for p in report["problems"]] == [("untested", "baseline")]
    assert report["args"] == ["quiet", "--max-kills", "3"]  # the agent got it
    assert report["baseline"]["exit_code"] == 0
    assert (
        "crashtest: warning: '--max-kills' comes after the agent file, so it is passed to "
        "the agent (its sys.argv), not to crashtest"
    ) in run.stderr
    assert run.stderr.count("warning:") == 1  # "quiet" and "3" are no options of crashtest


def test_a_sqlite_database_is_compared_by_its_rows():
    """A database the agent keeps in a subfolder is compared by its content, not its
    bytes: the correct agent (INSERT OR REPLACE) passes a kill while each snapshot is
    written, though the file's bytes differ (SQLite's change counter), and though main()
    returns an object whose repr names a memory address (another in every process). The
    broken one (plain INSERT) is reported with the row written again."""
    points = ["--point", "before-commit:1", "--point", "before-commit:2"]
    run = crashtest(*points, "sqlite_agent.py", "upsert")
    assert run.returncode == 0 and run.stdout == "", (run.stdout, run.stderr)
    assert "2 kill point(s) tried: no problem found" in run.stderr

    run = crashtest(*points, "sqlite_agent.py", "append")
    assert run.returncode == 1, run.stderr
    assert problem_lines(run) == [
        "before-commit:1: files: file 'data/state.db' differs: an extra line 5: "
        "'INSERT INTO \"t\" VALUES(0,\\'step 0\\');' (a line written again after the kill)",
        "before-commit:2: files: file 'data/state.db' differs: an extra line 6: "
        "'INSERT INTO \"t\" VALUES(1,\\'step 1\\');' (a line written again after the kill)",
    ]


def test_hostile_text_is_printed_visibly_never_interpreted():
    """A problem line quoting the agent's own text (an escape sequence that would set
    the terminal's title, rich markup, a bidi override) prints it as visible text; so
    does a --setup error quoting its stderr."""
    run = crashtest("--point", "before-commit:2", "hostile_agent.py")
    assert run.returncode == 1, run.stderr
    (line,) = problem_lines(run)
    assert line.startswith("before-commit:2: files: file 'journal.txt' differs: an extra line 2")
    assert "\\x1b]0;pwned\\x07 [/] [link=http://x]y[/link] \\u202eevil" in line
    assert not any(c in run.stdout + run.stderr for c in "\x1b\x07\u202e")

    setup = f"{sys.executable} -c \"import sys; sys.stderr.write('\\x1b[2J[/]\\u202e'); sys.exit(3)\""
    run = crashtest("--setup", setup, "hostile_agent.py")
    assert run.returncode == 2, run.stderr
    assert "its stderr ends with: \\x1b[2J[/]\\u202e." in run.stderr
    assert "Traceback" not in run.stderr and "\x1b" not in run.stderr
    assert (AGENTS / "hostile_agent.py").exists() and not (AGENTS / "journal.txt").exists()
