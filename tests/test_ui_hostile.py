"""`snaprun ui` against a hostile store and a hostile client (the review of issue 23,
part 4), over HTTP against a real `snaprun ui` subprocess (tests/ui_server.py).

Checked: text an agent or a person wrote is shown as written, its bidi overrides and
isolates, zero-width characters and escape sequences as their escapes (a label, an
approval's note), as the CLI's visible() shows them; a huge label does not make every
row of the job list carry it whole (its hover text is cut); a damaged time in a catalog
row is shown as such instead of making the job's page an error; the URL's token traded
for the cookie never redirects to another site (`//evil.example/?token=...`), and a
HEAD with the token is answered as a GET is."""

from __future__ import annotations

import http.client
import re
import socket
import sqlite3
import time
from contextlib import closing

import httpx
import pytest
from helpers import clean_refusal, snaprun
from ui_server import UI_AGENT, UiServer, start_ui

# A label that reads "pay bob 1000" once the right-to-left override has reordered it,
# with an escape sequence that would clear a terminal, then 50,000 characters.
BIDI = "pay \u202e0001 bob\u202c \x1b[2J"
HUGE_TAIL = "x" * 50_000
NOTE = "fine \u2066hidden\u2069 \u200bzero-width"
# Objects whose restore would run code: __setstate__ and a __reduce__ calling a function
# of the agent; each leaves a mark beside the agent if it ever runs.
TRAP_AGENT = """\
import os
from snapstate import snapshot

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restored-for-real")


def fire():
    open(MARK, "a").write("reduce\\n")
    return Trap()


class Trap:
    def __init__(self):
        self.x = 1

    def __setstate__(self, state):
        open(MARK, "a").write("setstate\\n")
        self.__dict__.update(state)


class Reducer:
    def __reduce__(self):
        return (fire, ())


def main():
    t, r = Trap(), Reducer()
    snapshot("one")
    t.x = 2
    snapshot("two")
    return t.x
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    run = snaprun("run", "--store", store, "--job", "bidi", UI_AGENT, BIDI, cwd=root)
    assert run.returncode == 3, run.stderr  # waiting for its approval
    # Killed right after its snapshot 1 (its effect 1 sent): that label is its latest.
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "huge",
        UI_AGENT,
        BIDI + HUGE_TAIL,
        cwd=root,
        fault="effect-after-send:1",
    )
    assert killed.returncode == -9, killed.stderr
    (root / "trap_agent.py").write_text(TRAP_AGENT)
    trap = snaprun("run", "--store", store, "--job", "trap", root / "trap_agent.py", cwd=root)
    assert trap.returncode == 0, trap.stderr
    with closing(sqlite3.connect(store / "catalog.db", isolation_level=None)) as db:
        # A damaged event row: its time is text.
        db.execute(
            "INSERT INTO events (job_id, at, kind, detail) VALUES ('bidi', 'x', 'note', 'damaged')"
        )
    ui = start_ui(store, "--allow-decisions", "--user", "alice", cwd=root)
    yield ui
    assert ui.stop() == 0, ui.stderr()
    assert "Traceback" not in ui.stderr(), ui.stderr()


def _client(server: UiServer) -> httpx.Client:
    client = httpx.Client(base_url=server.base, follow_redirects=False, timeout=30)
    assert client.get(f"/?token={server.token}").status_code == 303
    return client


def test_bidi_and_control_characters_are_shown_as_their_escapes(server):
    with closing(_client(server)) as client:
        page = client.get("/jobs/bidi")
        csrf = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page.text)
        assert csrf, page.text
        decided = client.post(
            "/jobs/bidi/approvals/a2",
            data={"csrf": csrf.group(1), "decision": "approve", "by": "alice", "note": NOTE},
            headers={"Origin": server.base, "Sec-Fetch-Site": "same-origin"},
        )
        assert decided.status_code == 200, decided.text
        pages = ["/", "/?part=1", "/jobs/bidi", "/jobs/bidi?part=1", "/jobs/bidi/snapshots/1"]
        pages += ["/jobs/huge", "/jobs/huge/snapshots/1"]
        pages += ["/approvals?all=1", "/approvals?all=1&part=1"]
        for path in pages:
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text[:2000])
            for char in "\u202e\u202c\u2066\u2069\u200b\x1b":
                assert char not in answer.text, (path, repr(char))
        job = client.get("/jobs/bidi").text
        assert r"pay \u202e0001 bob\u202c \x1b[2J" in job  # the snapshots' label
        approvals = client.get("/approvals?all=1").text
        assert r"fine \u2066hidden\u2069 \u200bzero-width" in approvals  # the note


def test_a_huge_label_is_cut_in_the_job_lists_hover_text(server):
    with closing(_client(server)) as client:
        listing = client.get("/").text
    titles = re.findall(r'title="([^"]*)"', listing)
    assert any(t.startswith("pay ") for t in titles), titles
    assert max(len(t) for t in titles) < 1100, max(len(t) for t in titles)
    assert len(listing) < 20_000, len(listing)


def test_a_damaged_time_in_a_row_is_shown_not_an_error(server):
    with closing(_client(server)) as client:
        job = client.get("/jobs/bidi")
    assert job.status_code == 200, job.text[:2000]
    assert "(not a time: &#39;x&#39;)" in job.text


def _raw(server: UiServer, method: str, target: str) -> http.client.HTTPResponse:
    """A request whose target is sent exactly as written (httpx would read `//host` as
    another site's URL)."""
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(method, target)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer


def test_trading_the_token_never_redirects_to_another_site(server):
    for target in ("//evil.example/?token=", "///evil.example/x?token=", "/\\evil.example?token="):
        answer = _raw(server, "GET", target + server.token)
        location = answer.getheader("location") or ""
        assert answer.status == 303, (target, answer.status)
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location
        assert "evil.example" in location  # the same (unknown, so 404) page, on this site
        assert server.token not in location
    head = _raw(server, "HEAD", f"/jobs/bidi?token={server.token}")
    assert head.status == 303, head.status
    assert head.getheader("location") == "/jobs/bidi"
    assert "snaprun_ui_" in (head.getheader("set-cookie") or "")


def test_a_user_name_with_a_bidi_or_zero_width_character_is_refused(server, tmp_path):
    """The page shows such a character as its escape, so the name could never be picked
    (and two names could look alike): refused with the control characters, exit 2."""
    store = server.log.parent / "store"
    for name in ("ali\u202ece", "bob\u200b", "car\u2028ol"):
        run = snaprun(
            "ui",
            "--store",
            store,
            "--port",
            "0",
            "--allow-decisions",
            "--user",
            name,
            cwd=tmp_path,
            timeout=20,
        )
        clean_refusal(run, "--user", "bidi")


def test_the_read_pages_never_run_agent_code(server):
    """A snapshot holding objects whose restore runs the agent's code (__setstate__, a
    __reduce__ calling its function): its page, its values, and the diff of two such
    snapshots show them (decoded inertly) and nothing of the agent runs."""
    mark = server.log.parent / "restored-for-real"
    with closing(_client(server)) as client:
        for path in (
            "/jobs/trap/snapshots/1",
            "/jobs/trap/snapshots/2",
            "/jobs/trap/snapshots/2/value?path=frame[0].locals.t",
            "/jobs/trap/snapshots/2/value?path=frame[0].locals.r",
            "/diff?a=trap@1&b=trap@2",
        ):
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text[:2000])
        value = client.get("/jobs/trap/snapshots/2/value", params={"path": "frame[0].locals.r"})
        assert "fire()" in value.text, value.text
        diff = client.get("/diff", params={"a": "trap@1", "b": "trap@2"}).text
        assert "frame[0].locals.t.x" in diff
    assert not mark.exists(), mark.read_text()


def _send_raw(server: UiServer, data: bytes) -> bytes:
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        return sock.recv(200)


def test_a_strangers_odd_requests_leave_no_noise_on_stderr(server):
    """A WebSocket upgrade and malformed requests, without the token: refused (401,
    400), and snaprun's stderr holds only its own lines (uvicorn's warnings, which any
    client could trigger, are not printed)."""
    host = server.base.removeprefix("http://")
    upgrade = (
        f"GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert _send_raw(server, upgrade.encode()).startswith(b"HTTP/1.1 401")
    assert _send_raw(server, b"GARBAGE\x00 / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    bad_length = f"GET / HTTP/1.1\r\nHost: {host}\r\nContent-Length: x\r\n\r\n"
    assert _send_raw(server, bad_length.encode()).startswith(b"HTTP/1.1 400")
    time.sleep(0.2)  # a warning would be written after the answer
    lines = server.stderr().splitlines()
    assert all(line.startswith("snaprun: ") for line in lines), lines
