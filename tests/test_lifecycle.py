"""The job's lifecycle at its edges (runtime/_signals.py, runtime/_job.py, the CLI):
SIGTERM with and without --grace, the entry point validated before the job exists,
a failed resume not counted, a NamedTemporaryFile held at a snapshot.

The SIGTERM agent (tests/agents/life_steps.py) prints three steps with a snapshot
after each and waits after snapshot 1 for a `go` file, so the test can signal it at a
known point; its `finally` block writes a file, which must appear only at the real end
of the job (agent code never runs after the signal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, snaprun

from snapstate.runtime._agent import EntryPoint, EntryPointError
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog

STEPS = AGENTS / "life_steps.py"
# What life_steps.py prints and returns when it runs uninterrupted (plain Python or
# one `snaprun run`): the resumed runs below must add up to exactly this.
UNINTERRUPTED_STDOUT = "step 1 total 10\nstep 2 total 30\nstep 3 total 60\n"
UNINTERRUPTED_RESULT = "60"


def start(*args, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SNAPSTATE_FAULT", None)
    return subprocess.Popen(
        [SNAPRUN, *map(str, args)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"snaprun exited {proc.returncode} early: {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def catalog(tmp_path: Path) -> SqliteCatalog:
    return SqliteCatalog(str(tmp_path / ".snapstate"))


def assert_stopped_by_sigterm(
    tmp_path: Path, proc: subprocess.Popen, job: str, detail: str, latest: int
) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert f"snaprun resume {job}" in err and "Traceback" not in err, err
    store = catalog(tmp_path)
    row = store.get_job(job)
    assert store.effective_status(row, time.time()) == "interrupted"
    assert row.status == "interrupted" and detail in (row.error or ""), row
    assert store.get_lease(job) is None  # released, not just dead
    events = [(e.kind, e.detail) for e in store.events(job)]
    assert any(kind == "interrupted" and detail in text for kind, text in events), events
    assert store.latest(job).seq == latest
    assert not (tmp_path / "finally").exists(), "agent code ran after SIGTERM"
    store.close()
    return out


def finish(tmp_path: Path, job: str, first_stdout: str) -> None:
    (tmp_path / "go").touch()
    done = snaprun("resume", job, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.result == UNINTERRUPTED_RESULT
    assert first_stdout + done.stdout == UNINTERRUPTED_STDOUT
    assert (tmp_path / "finally").read_text() == "finally\n"  # once, at the real end


def test_sigterm_stops_at_once_records_it_and_resumes_to_the_same_output(tmp_path):
    """SIGTERM while the agent is between snapshots (asleep): exit 143 with the resume
    command, the timeline records the stop, the lease is released, the job is left
    interrupted at snapshot 1, the agent's finally block did not run; resuming ends
    with exactly the output of an uninterrupted run. (Before: the runner died silently
    with nothing in the log and a live-looking lease.)"""
    proc = start("run", "--job", "t", STEPS, tmp_path, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    out = assert_stopped_by_sigterm(tmp_path, proc, "t", "SIGTERM: stopped", latest=1)
    finish(tmp_path, "t", out)


def test_sigterm_with_grace_stops_right_after_the_next_snapshot(tmp_path):
    """With --grace the job runs on to its next snapshot() and stops right after it is
    committed: exit 143, snapshot 2 is the latest, step 3 has not run; resuming runs
    only step 3 and ends with the uninterrupted output."""
    proc = start("run", "--grace", "60", "--job", "g", STEPS, tmp_path, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # the job keeps running during the grace...
    assert proc.poll() is None
    (tmp_path / "go").touch()  # ...until its next snapshot
    out = assert_stopped_by_sigterm(tmp_path, proc, "g", "after snapshot 2", latest=2)
    assert out == "step 1 total 10\nstep 2 total 30\n"
    os.unlink(tmp_path / "ready")
    finish(tmp_path, "g", out)


def test_grace_running_out_stops_as_without_grace(tmp_path):
    """No snapshot comes within the grace: the job is stopped when it runs out, exactly
    as without grace (exit 143, interrupted at snapshot 1, lease released)."""
    proc = start("run", "--grace", "0.3", "--job", "x", STEPS, tmp_path, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert_stopped_by_sigterm(tmp_path, proc, "x", "no snapshot within the grace", latest=1)
    assert time.monotonic() - started >= 0.3


@pytest.mark.smoke
def test_script_without_main_creates_no_job(tmp_path):
    """`snaprun run` of a script without main(): exit 2 naming main(), and no job row
    (nothing to resume: before, a phantom interrupted job re-ran the module's code on
    every resume)."""
    script = tmp_path / "nomain.py"
    script.write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'ran'), 'a')"
        ".write('imported\\n')\n"
    )
    result = snaprun("run", "--job", "n", script, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "main()" in result.stderr and "Traceback" not in result.stderr
    assert "no job was created" in result.stderr
    store = catalog(tmp_path)
    assert store.list_jobs() == []
    store.close()


def test_script_without_py_suffix_creates_no_job(tmp_path):
    """`snaprun run` of a script whose name has no .py suffix (importlib has no loader
    for it): exit 2 saying so, no traceback, no job row (before, it was reported as an
    AttributeError raised by the agent's module, exit 1)."""
    script = tmp_path / "agent"
    script.write_text("def main():\n    return 1\n")
    result = snaprun("run", "--job", "n", script, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "not a Python source file" in result.stderr and "Traceback" not in result.stderr
    assert "no job was created" in result.stderr
    store = catalog(tmp_path)
    assert store.list_jobs() == []
    store.close()


def test_missing_module_function_creates_no_job(tmp_path):
    """The Python API refuses a module:function that does not exist before the job
    row is written (EntryPointError, no job)."""
    home = Home(str(tmp_path / "store"))
    with pytest.raises(EntryPointError, match="no function"):
        Job.create(home, EntryPoint.parse("json:no_such_function"), [], "m")
    assert home.catalog.list_jobs() == []
    home.close()


def test_a_failed_resume_is_not_counted(tmp_path, monkeypatch):
    """A resume whose restore fails (the agent's script is gone) leaves resume_count
    unchanged; the one that succeeds counts once. (Before: counted when the lease was
    taken, before the restore was known good.)"""
    script = tmp_path / "once.py"
    script.write_text("def main():\n    return 41 + 1\n")
    monkeypatch.chdir(tmp_path)
    home = Home(str(tmp_path / "store"))
    Job.create(home, EntryPoint.parse(str(script)), [], "r")  # never ran: interrupted
    hidden = tmp_path / "hidden.py"
    script.rename(hidden)
    with pytest.raises(EntryPointError):
        Job.open(home, "r").resume()
    assert home.catalog.get_job("r").resume_count == 0
    hidden.rename(script)
    assert Job.open(home, "r").resume() == 42
    row = home.catalog.get_job("r")
    assert (row.status, row.resume_count) == ("done", 1)
    home.close()


def test_named_temporary_file_resumes_and_is_deleted_at_its_close(tmp_path):
    """A NamedTemporaryFile held at a snapshot: killed right after the snapshot, the
    job resumes with the same file at its position (before: `KeyError: 'file'` at
    every restore); the file is still deleted when the agent closes it. If the file is
    gone, the resume fails naming it (exit 2), and succeeds once it is back."""
    agent = AGENTS / "life_tempfile.py"
    killed = snaprun("run", "--job", "tf", agent, tmp_path, cwd=tmp_path, fault="after-snapshot:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    path = Path(killed.stdout.split()[0])
    assert path.read_text() == "before;"
    moved = tmp_path / "moved-away"
    path.rename(moved)
    gone = snaprun("resume", "tf", cwd=tmp_path)
    assert gone.returncode == 2, gone.stderr
    assert str(path) in gone.stderr and "no longer exists" in gone.stderr
    assert "Traceback" not in gone.stderr
    moved.rename(path)
    done = snaprun("resume", "tf", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.result == "'before;after;'"
    assert not path.exists()  # delete-on-close kept


def test_ctrl_c_stops_at_once_like_sigterm_without_running_finally_blocks(tmp_path):
    """Ctrl-C (SIGINT) stops the job as SIGTERM does: exit 130 with the resume command,
    recorded, lease released, left interrupted, and none of the agent's except/finally
    code runs (before: a KeyboardInterrupt ran the finally block, which ran again after
    the resume); resuming ends with exactly the uninterrupted output."""
    proc = start("run", "--job", "c", STEPS, tmp_path, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "snaprun resume c" in err and "Traceback" not in err, err
    store = catalog(tmp_path)
    row = store.get_job("c")
    assert row.status == "interrupted" and "Ctrl-C" in (row.error or ""), row
    assert store.get_lease("c") is None
    store.close()
    assert not (tmp_path / "finally").exists(), "agent code ran after Ctrl-C"
    finish(tmp_path, "c", out)


def test_sigterm_in_an_encrypted_store_keeps_the_catalog_sealed(tmp_path):
    """The stop recorded by the SIGTERM handler (on a connection of its own) is sealed
    like every other row of an encrypted store: afterwards ls, log and resume work
    (before: the error and event were written in clear and every command refused the
    store as edited)."""
    assert snaprun("init", "--encrypt", cwd=tmp_path).returncode == 0
    proc = start("run", "--job", "e", STEPS, tmp_path, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    for command in (("ls",), ("log", "e"), ("stats", "e")):
        shown = snaprun(*command, cwd=tmp_path)
        assert shown.returncode == 0, (command, shown.stderr)
    assert "SIGTERM: stopped" in snaprun("log", "e", cwd=tmp_path).stdout
    catalog_bytes = b"".join(p.read_bytes() for p in (tmp_path / ".snapstate").glob("catalog.db*"))
    assert b"SIGTERM: stopped" not in catalog_bytes
    finish(tmp_path, "e", out)
