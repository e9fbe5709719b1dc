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

import pytest
from helpers import snaprun
from test_crashtest import AGENTS, counted, crashtest, problem_lines

from snapstate.runtime import _crashtest_report as _report
from snapstate.runtime._crashtest_runs import _ledger, approval_ids, write_values


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
        'baseline: untested: the uninterrupted run failed (exit 1: "job crashtest failed: '
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

    setup = (
        f"{sys.executable} -c \"import sys; sys.stderr.write('\\x1b[2J[/]\\u202e'); sys.exit(3)\""
    )
    run = crashtest("--setup", setup, "hostile_agent.py")
    assert run.returncode == 2, run.stderr
    assert "its stderr ends with: \\x1b[2J[/]\\u202e." in run.stderr
    assert "Traceback" not in run.stderr and "\x1b" not in run.stderr
    assert (AGENTS / "hostile_agent.py").exists() and not (AGENTS / "journal.txt").exists()


def test_values_of_now_random_and_uuid4_are_no_difference():
    """snapstate.now(), random() and uuid4() differ between two runs by design: every run
    after the first gets the values the first recorded (SNAPSTATE_FAULT_VALUES), so
    the correct agent printing them is no "nondeterministic" problem, and a kill before
    its values are durable resumes to the same output. Python's own uuid.uuid4() is
    still reported (and only it: now() printed on the line before is the same)."""
    run = crashtest(
        "--json", "--point", "before-commit:2", "--point", "after-snapshot:3",
        "values_agent.py", "snapstate",
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout, run.stderr)
    report = json.loads(run.stdout)
    assert [t["point"] for t in report["trials"]] == ["before-commit:2", "after-snapshot:3"]
    assert "the second uninterrupted run: the same" in run.stderr

    run = crashtest("--point", "before-commit:2", "values_agent.py", "python")
    assert run.returncode == 1, run.stderr
    (line,) = problem_lines(run)
    assert line.startswith(
        "baseline: nondeterministic: two uninterrupted runs printed different stdout "
        "(line 2 is 'order "
    ), line


def test_recorded_values_are_taken_only_when_signed_with_the_stores_key(tmp_path):
    """The seam under the test above: with SNAPSTATE_FAULT_VALUES naming the values one
    job recorded, another job's uuid4() at the same position is that value, when its
    store has the key that signed it (as all of one crashtest's stores do). Under
    another key the value is refused (the job fails, nothing printed), and a file that
    is not the seam's is refused with a message naming the variable."""
    agent = tmp_path / "agent.py"
    agent.write_text(
        "from snapstate import snapshot, uuid4\n"
        "def main():\n"
        "    snapshot('a')\n"
        "    print('order', uuid4())\n"
        "    return 1\n"
    )
    key, other = "11" * 32, "22" * 32
    first = snaprun(
        "run", "--store", tmp_path / "a", "--job", "crashtest", agent, cwd=tmp_path,
        env={"SNAPSTATE_KEY": key},
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    rows = _ledger(tmp_path / "a", key)  # job "crashtest"'s rows, as crashtest reads them
    values = tmp_path / "values"
    assert write_values(rows, values) == 1

    same = snaprun(
        "run", "--store", tmp_path / "b", agent, cwd=tmp_path,
        env={"SNAPSTATE_KEY": key, "SNAPSTATE_FAULT_VALUES": str(values)},
    )  # fmt: skip
    assert same.returncode == 0 and same.stdout == first.stdout, (same.stdout, same.stderr)

    foreign = snaprun(
        "run", "--store", tmp_path / "c", agent, cwd=tmp_path,
        env={"SNAPSTATE_KEY": other, "SNAPSTATE_FAULT_VALUES": str(values)},
    )  # fmt: skip
    assert foreign.returncode == 1 and foreign.stdout == "", foreign.stderr
    assert "UnknownKey: signed with key" in foreign.stderr

    values.write_text("not the seam's file\n")
    broken = snaprun(
        "run", "--store", tmp_path / "d", agent, cwd=tmp_path,
        env={"SNAPSTATE_KEY": key, "SNAPSTATE_FAULT_VALUES": str(values)},
    )  # fmt: skip
    assert broken.returncode == 1 and broken.stdout == "", broken.stderr
    assert "SNAPSTATE_FAULT_VALUES=" in broken.stderr and "line 1 is not" in broken.stderr


def test_a_difference_only_in_a_multi_line_return_value_is_reported():
    """main()'s value is compared whole, though its repr takes more than one line (a
    table, an array): the difference here is only on the second line."""
    run = crashtest("--point", "before-commit:2", "return_agent.py")
    assert run.returncode == 1, run.stderr
    assert problem_lines(run) == [
        "before-commit:2: result: ended with exit 0 ('returned Report\\n  attempts: 1'); the "
        "uninterrupted run with exit 0 ('returned Report\\n  attempts: 0')"
    ]


def test_record_http_runs_the_agent_as_snaprun_run_record_http(tmp_path):
    """`crashtest --record-http` runs the agent as `snaprun run --record-http` does: the
    POST (a write: its body names no model) re-executed after a kill while snapshot 2 is
    written gets its recorded answer, and every run's provider answered it once; it is
    the same effect in every run although each run's provider has another port (the
    URL is read as $PROVIDER_URL), so nothing is reported. Without the option the call
    is sent again and answered otherwise, which crashtest reports."""
    counts = tmp_path / "counts"
    run = crashtest("--record-http", "--point", "before-commit:2", "http_agent.py", counts=counts)
    assert run.returncode == 0 and run.stdout == "", (run.stdout, run.stderr)
    assert counted(counts) == [{"ask": 1}] * 3  # two uninterrupted runs and the trial

    counts.unlink()
    run = crashtest("--point", "before-commit:2", "http_agent.py", counts=counts)
    assert run.returncode == 1, run.stderr
    lines = problem_lines(run)
    assert lines[0] == (
        "before-commit:2: stdout: stdout differs from the uninterrupted run's: line 1 is "
        "'answer ask-2', the uninterrupted run's is 'answer ask-1'"
    ), lines
    assert counted(counts)[-1] == {"ask": 2}


def test_a_symbolic_link_out_of_the_folder_is_warned_about(tmp_path):
    """The agent's folder is copied with its symbolic links: one that leads out of it
    makes every run write in the user's own files (and crashtest compares nothing
    there), so crashtest says so before it runs anything."""
    folder, outside = tmp_path / "agent", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "data").symlink_to(outside)
    (folder / "inside").symlink_to("agent.py")  # a link within the folder is fine
    (folder / "agent.py").write_text(
        "from snapstate import snapshot\ndef main():\n    snapshot('a')\n    return 1\n"
    )
    run = crashtest("--max-kills", "0", "agent/agent.py", cwd=tmp_path)
    assert run.returncode == 0, (run.stdout, run.stderr)
    warnings = [line for line in run.stderr.splitlines() if "warning:" in line]
    assert warnings == [
        f"snaprun: crashtest: warning: 'data' in {folder} is a symbolic link out of the "
        "folder: every run reads and writes through it, in your own files (give another "
        "--workdir, or copy what it points to)"
    ]


def test_a_long_output_is_compared_without_quadratic_time(monkeypatch):
    """A kill changes a few lines of a long output: the lines both share at their start
    and end are left out before difflib (quadratic over many equal lines: 20,000
    identical lines took 90 s), and a longer middle is located without it. difflib is
    watched, not replaced: the message is the one it gives."""
    seen: list[int] = []
    real = _report.difflib.SequenceMatcher

    def watched(junk, a, b, autojunk):
        seen.append(max(len(a), len(b)))
        return real(junk, a, b, autojunk=autojunk)

    monkeypatch.setattr(_report.difflib, "SequenceMatcher", watched)
    want = b"tick\n" * 20000
    have = b"tick\n" * 10000 + b"tock\n" + b"tick\n" * 10000
    assert _report._first_difference(want, have) == "an extra line 10001: 'tock'"
    assert _report._first_difference(b"step 0\nstep 1\n", b"step 0\nstep 1\nstep 1\n") == (
        "an extra line 3: 'step 1' (a line written again after the kill)"
    )
    many = b"".join(b"%d\n" % i for i in range(5000))
    assert _report._first_difference(many, many.replace(b"\n17\n", b"\n71\n")) == (
        "line 18 is '71', the uninterrupted run's is '17'"
    )
    assert _report._first_difference(b"x\n" * 3000, b"y\n" * 3001) == (
        "line 1 is 'y', the uninterrupted run's is 'x'"
    )
    assert max(seen) <= 1, seen


def test_the_time_of_an_approval_request_is_not_replayed(tmp_path):
    """The values every later run gets from the first leave out the time of each
    approval request (the approval's id names that value's ordinal): its expiry counts
    from it, and a trial's approval is decided minutes after the first run's."""
    agent = tmp_path / "agent.py"
    agent.write_text(
        "from snapstate import now, request_approval, snapshot\n"
        "def main():\n"
        "    print(now())\n"
        "    request_approval('publish', {'post': 1}, expires_in=60)\n"
        "    print(now())\n"
    )
    key = "33" * 32
    run = snaprun(
        "run", "--store", tmp_path / "s", "--job", "crashtest", agent, cwd=tmp_path,
        env={"SNAPSTATE_KEY": key, "SNAPSTATE_HIBERNATE_AFTER": "0"},
    )  # fmt: skip
    assert run.returncode == 3, run.stderr  # hibernated, waiting for the approval
    rows = _ledger(tmp_path / "s", key)
    asked = approval_ids(tmp_path / "s", key)
    assert asked == {"a2"} and [r.ordinal for r in rows] == [1, 2]
    values = tmp_path / "values"
    assert write_values(rows, values, asked) == 1
    assert values.read_text().startswith("1 snapstate.now ")


@pytest.mark.slow
def test_an_approval_that_expires_soon_passes():
    """End to end: an approval that expires 5 s after its request, decided in a trial
    that starts more than 6 s after the first run requested its own (the first run and
    the second each work 3 s after it): no problem."""
    run = crashtest("--jobs", "1", "--point", "approval-after-request:1", "expiring_agent.py")
    assert run.returncode == 0 and run.stdout == "", (run.stdout, run.stderr)
