"""The Python API (snapstate.Store, runtime/_api.py) used from a test, without
subprocesses: jobs run in this process, in the calling thread, on a real store (real
SQLite, real snapshot files), and waits end through the clock seam (runtime/_clock.py
set_clock(FakeClock)) rather than real sleeping. Also a small real HTTP app on
127.0.0.1 (the standard library's http.server, in a thread) whose endpoint resumes a job,
as docs/api.md's embedding example does."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import snapstate
from snapstate.runtime._agent import EntryPointError
from snapstate.runtime._api import exit_code
from snapstate.runtime._clock import FakeClock, set_clock
from snapstate.runtime._lease import Lease
from snapstate.serializers._home import Home

AGENT = """\
import os, sys
import snapstate
from snapstate import effect, snapshot

SENT = os.path.join(os.path.dirname(__file__), "sent.txt")

@effect
def send(text):
    with open(SENT, "a") as f:
        f.write(text + "\\n")
    return f"sent {text}"

def main():
    os.environ["AGENT_WAS_HERE"] = "1"
    os.chdir(os.path.dirname(__file__))
    import logging
    logging.basicConfig(level=logging.DEBUG)
    first = send("hello " + " ".join(sys.argv[1:]))
    snapshot("sent", meta={"step": 1})
    if "--sleep" in sys.argv:
        snapstate.sleep(7200)
    second = send("after")
    snapshot("done")
    return [first, second]
"""


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A store and an agent script (its effect appends to sent.txt); the test runs in
    a different working directory than the agent changes into."""
    folder = tmp_path / "agentdir"
    folder.mkdir()
    script = folder / "api_agent.py"
    script.write_text(AGENT)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    yield snapstate.Store(tmp_path / "store"), script, folder / "sent.txt"
    sys.modules.pop("api_agent", None)


@pytest.fixture
def fake_clock():
    clock = FakeClock()
    old = set_clock(clock)
    yield clock
    set_clock(old)


def _host():
    root = logging.getLogger()
    return (
        list(sys.argv),
        list(sys.path),
        os.getcwd(),
        dict(os.environ),
        list(root.handlers),
        root.level,
        random.getstate(),
    )


def test_start_runs_the_job_here_to_done_and_leaves_the_host_as_it_was(agent):
    """start() runs the script in this process: done, main()'s value, its snapshots and
    effects readable through jobs()/job(); sys.argv, sys.path, the working directory,
    the environment, the root logger and the random state are what they were."""
    store, script, sent = agent
    before = _host()
    outcome = store.start(script, "world", job_id="j1")
    assert _host() == before  # the agent set a variable, chdir'ed, configured logging
    assert "AGENT_WAS_HERE" not in os.environ
    assert (outcome.job_id, outcome.status, outcome.exit_code) == ("j1", "done", 0)
    assert outcome.result == ["sent hello world", "sent after"]
    assert outcome.error is None and outcome.seq == 2
    assert sent.read_text() == "hello world\nafter\n"
    (listed,) = store.jobs()
    assert (listed.job_id, listed.status, listed.argv) == ("j1", "done", ["world"])
    assert listed.entry == str(script) and listed.wait is None
    job = store.job("j1")
    assert [(s.seq, s.label) for s in job.snapshots] == [(1, "sent"), (2, "done")]
    assert [(e.ordinal, e.name.rsplit(".", 1)[-1], e.state) for e in job.effects] == [
        (1, "send", "confirmed"),
        (2, "send", "confirmed"),
    ]
    assert job.meta is None and job.pins == {}  # the latest snapshot has no meta
    with pytest.raises(AttributeError):
        job.status = "failed"  # type: ignore[misc]  # a read-only view


def test_a_long_sleep_waits_then_resumes_through_the_clock_seam(agent, fake_clock):
    """A 2-hour sleep: start() returns status waiting (JobWaiting caught, exit code 3)
    with the wait's kind, reason and due; resume() before the due time hibernates again
    (no new snapshot, nothing sent again); two hours later (FakeClock) it is done with
    each effect sent exactly once."""
    store, script, sent = agent
    t0 = fake_clock.now
    before = _host()
    outcome = store.start(script, "--sleep", job_id="sleepy")
    assert _host() == before  # a hibernated run leaves the host as it was too
    assert (outcome.status, outcome.exit_code, outcome.result) == ("waiting", 3, None)
    assert isinstance(outcome.error, snapstate.JobWaiting)
    assert outcome.wait is not None and outcome.wait.kind == "timer"
    assert outcome.wait.due == pytest.approx(t0 + 7200, abs=1)
    assert "sleep" in outcome.wait.reason and outcome.seq == 2
    job = store.job("sleepy")
    assert job.status == "waiting" and job.wait == outcome.wait
    assert job.snapshots[-1].label.startswith("waiting: ")

    fake_clock.advance(3600)  # an hour later: not due yet
    again = store.resume("sleepy")
    assert again.status == "waiting" and again.wait.due == outcome.wait.due
    assert len(store.job("sleepy").snapshots) == 2  # hibernated again at the same one

    fake_clock.advance(3700)
    done = store.resume("sleepy")
    assert _host() == before  # and so does a restored one
    assert (done.status, done.result) == ("done", ["sent hello --sleep", "sent after"])
    assert sent.read_text() == "hello --sleep\nafter\n"
    job = store.job("sleepy")
    assert job.status == "done" and job.wait is None and job.resumes == 2
    sends = [e for e in job.effects if e.name.endswith("send")]
    assert [(e.state, e.attempts) for e in sends] == [("confirmed", 1), ("confirmed", 1)]


def test_errors_are_the_exceptions_the_cli_maps(agent, monkeypatch):
    """Invalid input raises what `snaprun` reports with exit 2, a conflict LeaseHeld
    (exit 5); an agent that raises is an outcome (failed, exit 1), not an exception."""
    store, script, _ = agent
    monkeypatch.setenv("SNAPSTATE_LEASE_TTL", "forever")
    with pytest.raises(snapstate.SnapstateError, match="SNAPSTATE_LEASE_TTL='forever'"):
        store.start(script, job_id="ttl")
    monkeypatch.delenv("SNAPSTATE_LEASE_TTL")
    monkeypatch.setenv("SNAPSTATE_CLOCK_OFFSET", "later")
    with pytest.raises(snapstate.SnapstateError, match="SNAPSTATE_CLOCK_OFFSET='later'"):
        store.start(script, job_id="clock")
    monkeypatch.delenv("SNAPSTATE_CLOCK_OFFSET")
    with pytest.raises(snapstate.InvalidJobId):
        store.start(script, job_id="../escape")
    with pytest.raises(EntryPointError, match="no agent script"):
        store.start(script.parent / "missing.py")
    assert not os.path.exists(store.path)  # refused before the store was even created
    with pytest.raises(snapstate.StoreError, match="no store at"):
        store.resume("nope")  # `snaprun resume` says the same, exit 2

    assert store.start(script, job_id="once").status == "done"
    with pytest.raises(snapstate.JobNotFound) as unknown:
        store.resume("nope")
    with pytest.raises(snapstate.JobNotFound):
        store.job("nope")
    with pytest.raises(snapstate.InvalidJobId) as invalid:
        store.job("../x")
    with pytest.raises(snapstate.InvalidJobId):
        store.resume("a b/c")
    assert exit_code(unknown.value) == exit_code(invalid.value) == 2
    with pytest.raises(snapstate.JobExists):
        store.start(script, job_id="once")
    with pytest.raises(snapstate.JobFinished) as finished:
        store.resume("once")
    assert exit_code(finished.value) == 2

    failing = script.parent / "api_failing.py"
    failing.write_text("def main():\n    raise ValueError('boom')\n")
    outcome = store.start(failing, job_id="bad")
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert isinstance(outcome.error, ValueError) and str(outcome.error) == "boom"
    assert store.job("bad").status == "failed"
    assert store.job("bad").error == "ValueError: boom"
    sys.modules.pop("api_failing", None)

    held = script.parent / "api_held.py"
    held.write_text("import snapstate\ndef main():\n    snapstate.sleep(7200)\n")
    assert store.start(held, job_id="held").status == "waiting"
    home = Home(store.path)
    lease = Lease(home.catalog, "held")
    lease.acquire(resuming=True)  # a live runner (this very process) holds the job
    try:
        with pytest.raises(snapstate.LeaseHeld) as conflict:
            store.resume("held")
        assert exit_code(conflict.value) == 5
    finally:
        lease.release()
        home.close()
    sys.modules.pop("api_held", None)


def test_start_takes_module_functions_and_refuses_what_a_resume_cannot_find(tmp_path, monkeypatch):
    """A module-level function (or "module:function") of an importable module runs,
    recorded as module:function found from its own directory; a lambda, a nested
    function, a function of __main__ and non-str arguments are refused before any
    job exists."""
    pkg = tmp_path / "mods" / "apipkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "flow.py").write_text(
        "import sys\nfrom snapstate import snapshot\n"
        "def main():\n    snapshot('s')\n    return sys.argv[1:]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.chdir(tmp_path)
    import apipkg.flow

    store = snapstate.Store(tmp_path / "store")
    outcome = store.start(apipkg.flow.main, "a", "b", job_id="fn")
    assert (outcome.status, outcome.result) == ("done", ["a", "b"])
    assert store.job("fn").entry == "apipkg.flow:main"
    assert store.start("apipkg.flow:main", job_id="by-name").result == []

    def nested():
        return 1

    for target in (nested, lambda: 1):
        with pytest.raises(EntryPointError, match="module-level function"):
            store.start(target)
    main_fn = type(nested)(nested.__code__, {"__name__": "__main__"}, "main")
    main_fn.__module__ = "__main__"
    with pytest.raises(EntryPointError, match="__main__"):
        store.start(main_fn)
    with pytest.raises(TypeError, match=r"sys.argv\[1:\]"):
        store.start(apipkg.flow.main, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="module-level function"):
        store.start(42)  # type: ignore[arg-type]
    assert [j.job_id for j in store.jobs()] == ["by-name", "fn"] or sorted(
        j.job_id for j in store.jobs()
    ) == ["by-name", "fn"]
    for name in ("apipkg.flow", "apipkg"):
        sys.modules.pop(name, None)


def test_a_job_cannot_start_a_job_from_its_own_code(agent):
    """Calling start() from inside a running job is refused (RuntimeError raised into
    the agent, so the outer job fails with it), and the host can still run jobs after."""
    store, script, _ = agent
    inner = script.parent / "api_inner.py"
    inner.write_text(
        "import snapstate\n"
        f"def main():\n    return snapstate.Store({store.path!r}).start({str(script)!r})\n"
    )
    outcome = store.start(inner, job_id="outer")
    assert outcome.status == "failed" and isinstance(outcome.error, RuntimeError)
    assert "inside a running job" in str(outcome.error)
    assert [j.job_id for j in store.jobs()] == ["outer"]
    assert store.start(script, job_id="after").status == "done"
    sys.modules.pop("api_inner", None)


def test_runs_from_several_threads_are_serialized(agent):
    """Jobs started from four threads at once (the active job is process-global) run
    one after the other, each to done, each in its own thread's greenlet hub."""
    store, script, sent = agent
    store.start(script, "warm-up", job_id="first")  # creates the store
    outcomes: dict[str, object] = {}

    def run(i: int) -> None:
        outcomes[f"t{i}"] = store.start(script, f"from-{i}", job_id=f"t{i}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes) == ["t0", "t1", "t2", "t3"]
    for i in range(4):
        outcome = outcomes[f"t{i}"]
        assert outcome.status == "done", outcome  # type: ignore[attr-defined]
        assert outcome.result == [f"sent hello from-{i}", "sent after"]  # type: ignore[attr-defined]
    assert sorted(sent.read_text().splitlines()) == sorted(
        ["hello warm-up", "after"] + [f"hello from-{i}" for i in range(4)] + ["after"] * 4
    )


# ------------------------------------------------------------------------ HTTP app
def _app(store: snapstate.Store) -> ThreadingHTTPServer:
    """docs/api.md's embedding example on the standard library: POST /jobs/JOB/resume
    resumes the job in the server's thread; GET /jobs/JOB shows it."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            job_id = self.path.split("/")[2]
            try:
                job = store.job(job_id)
            except snapstate.JobNotFound as exc:
                return self._reply(404, {"error": str(exc)})
            except snapstate.SnapstateError as exc:
                return self._reply(400, {"error": str(exc)})
            wait = job.wait
            self._reply(200, {"status": job.status, "due": wait.due if wait else None})

        def do_POST(self) -> None:  # noqa: N802
            parts = self.path.strip("/").split("/")
            if len(parts) != 3 or parts[0] != "jobs" or parts[2] != "resume":
                return self._reply(404, {"error": "no such endpoint"})
            try:
                outcome = store.resume(parts[1])
            except snapstate.LeaseHeld as exc:
                return self._reply(409, {"error": str(exc)})
            except snapstate.JobNotFound as exc:
                return self._reply(404, {"error": str(exc)})
            except snapstate.SnapstateError as exc:
                return self._reply(400, {"error": str(exc)})
            self._reply(
                200,
                {
                    "status": outcome.status,
                    "result": outcome.result,
                    "due": outcome.wait.due if outcome.wait else None,
                },
            )

        def log_message(self, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _call(url: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_an_http_endpoint_resumes_a_waiting_job(agent, fake_clock):
    """A real HTTP server on 127.0.0.1 (http.server, in a thread): the job hibernates in
    the test's thread; POST /jobs/sleepy/resume runs it in the server's thread: still
    waiting before its due time, done after (the clock seam moved two hours); the
    effects were each sent once; unknown and invalid ids are 404 and 400."""
    store, script, sent = agent
    assert store.start(script, "--sleep", job_id="sleepy").status == "waiting"
    server = _app(store)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, body = _call(f"{base}/jobs/sleepy")
        assert (code, body["status"]) == (200, "waiting") and body["due"] > time.time()
        code, body = _call(f"{base}/jobs/sleepy/resume", "POST")
        assert (code, body["status"]) == (200, "waiting")
        fake_clock.advance(7300)
        code, body = _call(f"{base}/jobs/sleepy/resume", "POST")
        assert (code, body) == (
            200,
            {"status": "done", "result": ["sent hello --sleep", "sent after"], "due": None},
        )
        assert _call(f"{base}/jobs/sleepy")[1]["status"] == "done"
        code, body = _call(f"{base}/jobs/sleepy/resume", "POST")
        assert code == 400 and "is done" in body["error"]
        assert _call(f"{base}/jobs/ghost/resume", "POST")[0] == 404
        assert _call(f"{base}/jobs/..%2Fx/resume", "POST")[0] in (400, 404)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
    assert sent.read_text() == "hello --sleep\nafter\n"


def test_store_path_defaults_like_the_cli(tmp_path, monkeypatch):
    """Store() uses $SNAPSTATE_HOME, else ./.snapstate, as snaprun does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SNAPSTATE_HOME", raising=False)
    assert snapstate.Store().path == str(tmp_path / ".snapstate")
    monkeypatch.setenv("SNAPSTATE_HOME", str(tmp_path / "elsewhere"))
    assert snapstate.Store().path == str(tmp_path / "elsewhere")
    assert snapstate.Store(Path("rel")).path == str(tmp_path / "rel")


def test_sys_exit_is_a_failure_and_ctrl_c_is_the_hosts(agent):
    """The agent's sys.exit() never ends the host: it is the job's failure (exit code
    1). A KeyboardInterrupt in the agent propagates to the caller (it is the host's
    Ctrl-C), the job is left interrupted and resumes from its snapshot; the host's
    state is put back either way."""
    store, script, _ = agent
    quits = script.parent / "api_quits.py"
    quits.write_text("import sys\ndef main():\n    sys.exit(3)\n")
    outcome = store.start(quits, job_id="quits")
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert isinstance(outcome.error, SystemExit) and outcome.error.code == 3
    assert store.job("quits").status == "failed"

    flag = script.parent / "interrupt-once"
    flag.write_text("")
    ctrl_c = script.parent / "api_ctrl_c.py"
    ctrl_c.write_text(
        "import os\nfrom snapstate import snapshot\n"
        f"FLAG = {str(flag)!r}\n"
        "def main():\n    snapshot('before')\n"
        "    if os.path.exists(FLAG):\n        os.remove(FLAG)\n        raise KeyboardInterrupt\n"
        "    return 'finished'\n"
    )
    before = _host()
    with pytest.raises(KeyboardInterrupt):
        store.start(ctrl_c, job_id="ctrl-c")
    assert _host() == before
    job = store.job("ctrl-c")
    assert (job.status, [s.seq for s in job.snapshots]) == ("interrupted", [1])
    resumed = store.resume("ctrl-c")
    assert (resumed.status, resumed.result, resumed.seq) == ("done", "finished", 1)
    for name in ("api_quits", "api_ctrl_c"):
        sys.modules.pop(name, None)


HOSTED_AGENT = """\
import os
import snapstate

FLAG = os.path.join(os.path.dirname(__file__), "fail-once")

def main():
    snapstate.snapshot("one")
    if os.path.exists(FLAG):
        os.remove(FLAG)
        raise RuntimeError("once")
    return "ok"
"""

HOST = """\
import json
import sys

import snapstate

COUNTER = 1

def run():
    global COUNTER
    store = snapstate.Store(sys.argv[1])
    first = store.start(sys.argv[2], job_id="hosted")
    COUNTER = 2  # the host's own state moves on while the job is stopped
    second = store.resume("hosted")
    print(json.dumps([first.status, str(first.error), second.status, second.result, COUNTER]))

if __name__ == "__main__":
    run()
"""


def test_a_host_scripts_main_module_is_never_the_jobs(tmp_path):
    """A host script that lives in the agent's folder runs as __main__ and starts the
    job through the API: its globals are not frozen with the job (only the agent's own
    modules are), so the resume after the failed first run leaves the host's COUNTER
    as the host set it (before: the resume put back the value frozen at the snapshot,
    overwriting the host's global)."""
    folder = tmp_path / "agentdir"
    folder.mkdir()
    (folder / "hosted_agent.py").write_text(HOSTED_AGENT)
    (folder / "host.py").write_text(HOST)
    (folder / "fail-once").write_text("")
    proc = subprocess.run(
        [sys.executable, str(folder / "host.py"), str(tmp_path / "store"), "hosted_agent.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == ["failed", "once", "done", "ok", 2]
