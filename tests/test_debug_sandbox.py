"""What leaves a `snaprun debug` session (docs/debugging.md, "Nothing leaves the
sandbox"), attacked: a job run with --record-http against tests/http_record_stub.py
on 127.0.0.1, and the store around the session.

* a request the job recorded is answered from the ledger; one it never recorded
  raises EffectRefused into the agent at the call and the session goes on (it ended
  the session before, blaming the agent); a request from a thread the job did not
  start, which a run sends unrecorded, is refused too (it reached the provider
  before). The provider sees no request, the store is byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from pathlib import Path

from helpers import AGENTS, SNAPRUN, clean_refusal, snaprun
from http_record_stub import RecordStub


def digests(root: Path) -> dict[str, str]:
    """Every file under `root` -> its sha256, but SQLite's shared-memory index (-shm),
    which every reader of a WAL database updates, and an empty WAL, which a reader
    creates where there was none (`snaprun ls` too): they hold no data."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def test_recorded_http_served_unrecorded_refused_at_the_call(tmp_path):
    """A --record-http job killed before its third request was recorded, debugged at
    snapshot 1 without stopping (PYTHONBREAKPOINT=0): request 2 gets the recorded
    answer, request 3 raises EffectRefused at the call (caught by the agent, which goes
    on to its end: exit 0), the thread's request raises EffectRefused in the thread;
    the stub sees no request and the store is unchanged."""
    stub = RecordStub().start()
    try:
        store = tmp_path / "store"
        run = snaprun(
            "run", "--record-http", "--store", store, "--job", "h", AGENTS / "dbg_http.py",
            stub.url, cwd=tmp_path, fault="effect-before-prepare:3",
        )  # fmt: skip
        assert run.returncode == -9, run.stderr
        sent = [r["path"] for r in stub.requests]
        assert sent == ["/search?q=one", "/search?q=two"]
        before = digests(store)
        session = snaprun(
            "debug", "--store", store, "h@1", cwd=tmp_path, env={"PYTHONBREAKPOINT": "0"}
        )
        assert session.returncode == 0, session.stderr
        assert "Traceback" not in session.stderr, session.stderr
        got = dict(line.split(" ", 1) for line in session.stdout.splitlines())
        assert got["one"].startswith("{") and got["two"].startswith("{"), got
        assert got["three"].startswith(
            "refused: the recorded history ends before effect 3 (http.GET at"
        ), got
        assert got["thread"].startswith(
            "refused: record_http: a request was not sent: it came from thread"
        ), got
        assert "main() returned 'end'; nothing was sent or written" in session.stderr
        assert [r["path"] for r in stub.requests] == sent  # nothing reached the provider
        assert digests(store) == before
    finally:
        stub.stop()


def test_a_failing_debugger_an_exiting_agent_and_odd_refs(tmp_path):
    """dbg_edges.py run to its end, then debugged: a PYTHONBREAKPOINT that is a relative
    name is refused (it was a raw traceback, exit 1); one that raises when called ends
    the session naming the debugger, not the agent (exit 1); the agent's sys.exit(5)
    ends it as the agent's failure (exit 1, said; it exited 5 silently); a snapshot
    number in other than ASCII digits is no snapshot number (`e@٣` was snapshot 3),
    for debug, diff and --until alike."""
    store = tmp_path / "store"
    agent = AGENTS / "dbg_edges.py"
    run = snaprun("run", "--store", store, "--job", "e", agent, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    relative = snaprun(
        "debug", "--store", store, "e@1", cwd=tmp_path, env={"PYTHONBREAKPOINT": ".."}
    )
    clean_refusal(relative, "PYTHONBREAKPOINT='..' names nothing that can be imported")
    failing = snaprun(
        "debug", "--store", store, "e@1", cwd=tmp_path, env={"PYTHONBREAKPOINT": "os.system"}
    )
    assert failing.returncode == 1, failing.stderr
    assert "Traceback" not in failing.stderr and failing.stdout == "", failing.stderr
    assert (
        "debug session of e@1 ended: the debugger PYTHONBREAKPOINT='os.system' names raised "
        "TypeError"
    ) in failing.stderr
    exiting = snaprun(
        "debug", "--store", store, "e@1", cwd=tmp_path,
        env={"PYTHONBREAKPOINT": "0", "DBG_EXIT": "1"},
    )  # fmt: skip
    assert exiting.returncode == 1, exiting.stderr
    assert "ended: the agent raised SystemExit: 5; nothing was sent or written" in exiting.stderr
    for args in (["debug", "e@\u0663"], ["diff", "e@1", "e@\u0663"]):
        clean_refusal(snaprun(*args[:1], "--store", store, *args[1:], cwd=tmp_path), "e@\u0663")
    until = snaprun(
        "debug", "--store", store, "--until", "\u0663", "e@1", cwd=tmp_path,
        env={"PYTHONBREAKPOINT": "0"},
    )  # fmt: skip
    assert until.returncode == 1, until.stderr  # a label no snapshot has, not snapshot 3
    assert "--until \u0663 was not reached (main() returned 3 first)" in until.stderr


def test_files_opened_by_the_agents_code_are_scratch_copies(tmp_path):
    """A job holding a log and a database through resource() (reopened by calling their
    factories) and writing files it opens itself after the snapshot (open(), pathlib),
    debugged at that snapshot without stopping: the session reads back its own writes
    (from scratch copies), and every original keeps its bytes and mtime (the factories
    and the agent's open() wrote the originals: the log got its line twice, the
    database its row twice). snaprun replay likewise."""
    store, agent = tmp_path / "store", AGENTS / "dbg_files.py"
    run = snaprun("run", "--store", store, "--job", "f", agent, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "log ['before', 'after']"
    names = ("res-log.txt", "res.db", "fresh.txt", "path.txt")
    before = {n: ((tmp_path / n).read_bytes(), (tmp_path / n).stat().st_mtime_ns) for n in names}
    session = snaprun("debug", "--store", store, "f@1", cwd=tmp_path, env={"PYTHONBREAKPOINT": "0"})
    assert session.returncode == 0, session.stderr
    assert session.stdout.splitlines() == [
        "log ['before', 'after', 'after']",  # the copy of the log as the run left it
        "rows [1, 2, 2] fresh ['fresh', 'fresh']",
    ]
    replay = snaprun("replay", "--store", store, "f@1", cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    after = {n: ((tmp_path / n).read_bytes(), (tmp_path / n).stat().st_mtime_ns) for n in names}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "store"])


def test_a_snapshot_taken_at_a_wait_opens_the_debugger_there(tmp_path):
    """A job waiting for an approval, debugged at its latest snapshot (taken at the
    wait, the default): pdb opens at the agent's wait call with its locals (the session
    ended at once before, saying the job waits, without a prompt); `next` ends it
    there, as the wait is not over; nothing is written."""
    store, agent = tmp_path / "store", AGENTS / "dbg_wait.py"
    run = snaprun("run", "--store", store, "--job", "w", agent, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    before = digests(store)
    session = subprocess.run(
        [SNAPRUN, "debug", "--store", str(store), "w"],
        input="p plan\nwhere\nnext\np 'never'\n",
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert session.returncode == 0, session.stderr
    wait_line = next(
        i for i, src in enumerate(agent.read_text().splitlines(), 1) if "# WAITS HERE" in src
    )
    prompts = session.stdout.split("(Pdb) ")
    assert prompts[0].startswith(f"> {agent}({wait_line})main()"), session.stdout
    assert prompts[1] == "['buy', 3]\n", session.stdout
    assert f"{agent}({wait_line})main()" in prompts[2] and "runtime" not in prompts[2]
    assert "'never'" not in session.stdout
    assert "ended: the job waits at" in session.stderr and "'purchase' pending" in session.stderr
    assert digests(store) == before


def test_ctrl_c_while_the_agent_runs_ends_the_session_with_130(tmp_path):
    """SIGINT while the debugged agent runs (no debugger: PYTHONBREAKPOINT=0): the
    session says it ended by Ctrl-C and exits 130, as run does (it printed
    "Aborted!" and exited 1)."""
    store, agent = tmp_path / "store", AGENTS / "dbg_sleep.py"
    run = snaprun(
        "run", "--store", store, "--job", "s", agent, cwd=tmp_path, fault="after-snapshot:1"
    )
    assert run.returncode == -9, run.stderr
    env = dict(os.environ, PYTHONBREAKPOINT="0", PYTHONUNBUFFERED="1")
    env.pop("SNAPSTATE_FAULT", None)
    session = subprocess.Popen(
        [SNAPRUN, "debug", "--store", str(store), "s@1"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert session.stdout is not None
        assert session.stdout.readline() == "running\n"  # the agent sleeps now
        session.send_signal(signal.SIGINT)
        _, err = session.communicate(timeout=60)
    finally:
        session.kill()
    assert session.returncode == 130, err
    assert "debug session of s@1 ended: Ctrl-C; nothing was sent or written" in err
    assert "Traceback" not in err and "Aborted!" not in err
