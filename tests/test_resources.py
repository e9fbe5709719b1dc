"""Resources across snapshots: files, sqlite3, HTTP clients, resource() handles, and
the refusal of untracked handles."""

from __future__ import annotations

import json
import os
import random
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import AGENTS, snaprun

from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = json.dumps(
            {
                "path": self.path,
                "x-agent": self.headers.get("X-Agent"),
                "cookie": self.headers.get("Cookie"),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def echo_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("cycles", [25, pytest.param(100, marks=pytest.mark.slow)])
def test_appended_file_survives_kill_restore_cycles(tmp_path, cycles):
    """Crash windows: SIGKILL right after a snapshot, or after the file moved on past
    it (seeded mix), in each of the first `cycles` of the job's 100 steps (25 by
    default, 100 with --run-slow), then a resume runs it to its end; the files end
    byte-identical to an uninterrupted run."""
    base = tmp_path / "base"
    base.mkdir()
    env = {"STEPS": "100"}
    run = snaprun(
        "run", "--store", base / "s", "--job", "job", AGENTS / "res_append.py", cwd=base, env=env
    )
    assert run.returncode == 0, run.stderr
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(1234)
    cycle = snaprun(
        "run",
        "--store",
        work / "s",
        "--job",
        "job",
        AGENTS / "res_append.py",
        cwd=work,
        env=env,
        fault="after-snapshot:1",
    )
    assert cycle.returncode == -9
    for k in range(2, cycles + 1):
        if rng.random() < 0.5:
            cycle = snaprun(
                "resume",
                "--store",
                work / "s",
                "job",
                cwd=work,
                env=dict(env, KILL_AFTER_WRITE=str(k)),
            )
        else:
            cycle = snaprun(
                "resume",
                "--store",
                work / "s",
                "job",
                cwd=work,
                env=env,
                fault=f"after-snapshot:{k}",
            )
        assert cycle.returncode == -9, cycle.stderr
    final = snaprun("resume", "--store", work / "s", "job", cwd=work, env=env)
    assert final.returncode == 0, final.stderr
    for name in ("journal.txt", "blob.bin"):
        assert (work / name).read_bytes() == (base / name).read_bytes(), name


@pytest.mark.smoke
def test_sqlite_and_httpx_work_after_restore_in_a_new_process(tmp_path, echo_server):
    """Crash window: SIGKILL after the snapshot holding both; they work after resume."""
    env = {"SERVER_URL": echo_server, "DB_PATH": str(tmp_path / "notes.db")}
    killed = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        AGENTS / "res_clients.py",
        cwd=tmp_path,
        env=env,
        fault="after-snapshot:1",
    )
    assert killed.returncode == -9
    resumed = snaprun("resume", "--store", tmp_path / "s", "job", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == ("rows ['/echo', '/echo'] agent header res cookie session=s1\n")


def test_failed_reopen_leaves_the_job_resumable(tmp_path):
    """Crash window: SIGKILL after the snapshot; then the file is gone (resume exits 2,
    naming it) and the server is down (the handle's reopen fails: exit 1); once both
    causes are fixed, resume succeeds from the same snapshot."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    env = {"SERVER_PORT": str(port)}
    killed = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        AGENTS / "res_reopen.py",
        cwd=tmp_path,
        env=env,
        fault="after-snapshot:1",
    )
    assert killed.returncode == -9
    listener.close()  # the server goes down
    saved = (tmp_path / "notes.txt").read_bytes()
    (tmp_path / "notes.txt").unlink()  # and the file disappears
    gone = snaprun("resume", "--store", tmp_path / "s", "job", cwd=tmp_path, env=env)
    assert gone.returncode == 2
    assert f"file {tmp_path / 'notes.txt'}" in gone.stderr and "no longer exists" in gone.stderr
    (tmp_path / "notes.txt").write_bytes(saved)  # the file is put back
    down = snaprun("resume", "--store", tmp_path / "s", "job", cwd=tmp_path, env=env)
    assert down.returncode == 1
    assert "ResourceReopenError" in down.stderr and "'upstream'" in down.stderr
    assert "res_reopen.connect()" in down.stderr
    listener = socket.socket()  # the server comes back
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    try:
        fixed = snaprun("resume", "--store", tmp_path / "s", "job", cwd=tmp_path, env=env)
    finally:
        listener.close()
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout == "finished\n"
    assert (tmp_path / "notes.txt").read_text() == "before\nafter\n"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_fd_growth_over_100_snapshot_restore_cycles(tmp_path, monkeypatch):
    """No crash window: 100 in-process restores of a job holding a file, a sqlite3
    connection and a resource() handle leave the number of open descriptors as it was."""
    monkeypatch.chdir(tmp_path)
    home = Home(str(tmp_path / "s"))
    entry = EntryPoint("res_append", "main", str(AGENTS / "res_append.py"))
    monkeypatch.setenv("STEPS", "3")
    job = Job.create(home, entry, [], "job")
    assert job.run() == 3
    before = None
    for cycle in range(100):
        home.catalog.set_status("job", "interrupted")  # as a kill leaves it: a done job
        assert Job.open(home, "job").resume(at=2) == 3  # never resumes
        if cycle == 4:  # after warm-up (sqlite's own connections, caches)
            before = _open_fds()
    assert _open_fds() <= before
    home.close()


def test_each_untracked_handle_is_named(tmp_path, echo_server):
    """No crash window: a socket, a held lock, a thread, a subprocess and a streaming
    response each give a SnapshotError naming the local, what it is, its type and the fix
    for that kind (resource() only for the socket)."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        AGENTS / "res_untracked.py",
        cwd=tmp_path,
        env={"SERVER_URL": echo_server},
    )
    assert run.returncode == 0, run.stderr
    refused = dict(
        line.split(": ", 1)[0].split()[1:2] + [line.split(": ", 1)[1]]
        for line in run.stdout.splitlines()
        if line.startswith("REFUSED")
    )
    expected = {
        "socket": (
            "local 'sock'",
            "socket.socket",
            "a socket",
            "through snapstate.resource(factory)",
        ),
        "lock": (
            "local 'lock'",
            "_thread.lock",
            "a lock (threading.Lock)",
            "release it before snapshot()",
        ),
        "thread": (
            "local 'worker'",
            "threading.Thread",
            "a thread",
            "join it (thread.join()) before snapshot()",
        ),
        "subprocess": (
            "local 'proc'",
            "subprocess.Popen",
            "a subprocess",
            "wait for it (proc.wait()) before snapshot()",
        ),
        "streaming-response": (
            "local 'response'",
            "httpx.Response",
            "an HTTP response (httpx.Response)",
            "Read the body (response.read())",
        ),
    }
    assert sorted(refused) == sorted(expected)
    for case, (local, type_name, what, fix) in expected.items():
        message = refused[case]
        assert f"failed: {local} is {what}, which cannot be saved" in message, message
        assert f"{local} -> {type_name}" in message, message
        assert fix in message, message
        assert ("snapstate.resource(" in message) == (case == "socket"), message
