"""`snaprun ui`, the dashboard (issue 23, part 4), over plain HTTP: a real `snaprun ui`
subprocess on a free port of 127.0.0.1 over a real store of jobs made by `snaprun run`
(tests/ui_server.py), requests sent with httpx. The browser's side (loading the pages,
approving, the live updates, a `<script>` label shown as text) is
tests/test_ui_browser.py.

Checked: every request without the token is refused (401), an unknown Host header too
(403); the token in the URL is traded for an HttpOnly SameSite=Strict cookie; every
response carries the security headers (a CSP without inline script, no framing); a POST
from another origin, without its session's CSRF token or with another session's is
refused (403) and decides nothing; a read-only dashboard (no --allow-decisions) decides
nothing; a decider must be a configured user; reading every page leaves the store's
files byte-identical; reject and reconcile through the dashboard record `by` and the job
goes on; the refusals of the command itself (no users, a busy port, the missing extra)
are one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import httpx
import markupsafe
import pytest
from helpers import clean_refusal, snaprun
from ui_server import XSS_LABEL, UiServer, make_store, start_ui


class _Clients:
    """The module's httpx clients, closed after each test."""

    def __init__(self) -> None:
        self.open: list[httpx.Client] = []

    def add(self, client: httpx.Client) -> httpx.Client:
        self.open.append(client)
        return client

    def close(self) -> None:
        while self.open:
            self.open.pop().close()


_CLIENTS = _Clients()


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    _CLIENTS.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("ui"))


@pytest.fixture(scope="module")
def deciding(store):
    server = start_ui(
        store, "--allow-decisions", "--user", "alice", "--user", "bob", cwd=store.parent
    )
    yield server
    assert server.stop() == 0, server.stderr()
    assert "Traceback" not in server.stderr(), server.stderr()


@pytest.fixture(scope="module")
def readonly(store):
    server = start_ui(store, cwd=store.parent)
    yield server
    assert server.stop() == 0, server.stderr()


def _client(server: UiServer) -> httpx.Client:
    """A client with the dashboard's session cookie (the URL's token traded for it)."""
    client = _CLIENTS.add(httpx.Client(base_url=server.base, follow_redirects=False, timeout=30))
    answer = client.get(f"/?token={server.token}")
    assert answer.status_code == 303, answer.text
    return client


def _csrf(client: httpx.Client, path: str = "/") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page.text)
    assert found, page.text
    return found.group(1)


def _approvals(store: Path) -> dict[str, dict]:
    run = snaprun("approvals", "--store", store, "--all", "--json", cwd=store.parent)
    assert run.returncode == 0, run.stderr
    return {r["job"]: r for r in json.loads(run.stdout)}


def _effects(store: Path, job: str) -> dict[int, dict]:
    run = snaprun("effects", "--store", store, job, "--json", cwd=store.parent)
    assert run.returncode == 0, run.stderr
    return {r["effect"]: r for r in json.loads(run.stdout)}


def _store_bytes(store: Path) -> dict[str, str]:
    return {
        str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(store.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------ the token
def test_requests_without_the_token_are_refused(deciding):
    """No token, a wrong one (URL, header, forged cookie): 401 on every page, the static
    files and a POST; the right token as a header is let in; a Host header other than
    the printed address (a DNS-rebinding page) is refused with 403 even with the token."""
    plain = _CLIENTS.add(httpx.Client(base_url=deciding.base, follow_redirects=False, timeout=30))
    for path in ("/", "/approvals", "/jobs/publisher", "/jobs/publisher/snapshots/1"):
        assert plain.get(path).status_code == 401, path
    assert plain.get("/static/ui.js").status_code == 401
    assert plain.get("/?token=" + "x" * len(deciding.token)).status_code == 401
    assert plain.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
    forged = {"Cookie": f"snaprun_ui_{deciding.base.rsplit(':', 1)[1]}=abc.def"}
    assert plain.get("/", headers=forged).status_code == 401
    assert (
        plain.post("/jobs/publisher/approvals/a2", data={"decision": "approve"}).status_code == 401
    )
    refused = plain.get("/")
    assert "token" in refused.text and "Traceback" not in refused.text
    bearer = {"Authorization": f"Bearer {deciding.token}"}
    assert plain.get("/", headers=bearer).status_code == 200
    rebound = plain.get("/", headers={**bearer, "Host": "attacker.example:80"})
    assert rebound.status_code == 403


def test_the_urls_token_becomes_a_strict_httponly_cookie(deciding):
    """GET /?token=T answers 303 to the same page without the token, with a session
    cookie that is HttpOnly and SameSite=Strict; the cookie alone then opens every
    page; every answer (a refusal too) carries the security headers."""
    client = _CLIENTS.add(httpx.Client(base_url=deciding.base, follow_redirects=False, timeout=30))
    answer = client.get(f"/approvals?all=1&token={deciding.token}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/approvals?all=1"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower(), cookie
    assert deciding.token not in cookie
    assert client.get("/approvals?all=1").status_code == 200
    for response in (client.get("/jobs/publisher"), httpx.get(deciding.base + "/")):
        headers = response.headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


# ------------------------------------------------------------------------ CSRF
def test_a_cross_site_post_is_refused(deciding, store):
    """With a valid session cookie, a POST approving `publisher`: from another Origin
    (or `null`) or another site (Sec-Fetch-Site), with no Origin nor Sec-Fetch-Site, without the CSRF token, with a wrong one, or with
    another session's token: 403 each time, and the approval is still pending."""
    client = _client(deciding)
    csrf = _csrf(client)
    other_csrf = _csrf(_client(deciding))
    assert other_csrf != csrf  # bound to the session
    approval = _approvals(store)["publisher"]["id"]
    path = f"/jobs/publisher/approvals/{approval}"
    form = {"decision": "approve", "by": "alice", "csrf": csrf}
    same = {"Origin": deciding.base}
    attempts = [
        (form, {"Origin": "http://attacker.example"}),
        (form, {"Origin": "null"}),
        (form, {"Origin": "null", "Sec-Fetch-Site": "cross-site"}),
        (form, {"Origin": "http://attacker.example", "Sec-Fetch-Site": "same-origin"}),
        (form, {"Sec-Fetch-Site": "cross-site"}),
        (form, {"Sec-Fetch-Site": "same-site"}),
        (form, {}),  # neither Origin nor Sec-Fetch-Site
        ({k: v for k, v in form.items() if k != "csrf"}, same),
        ({**form, "csrf": "0" * len(csrf)}, same),
        ({**form, "csrf": other_csrf}, same),
    ]
    for data, headers in attempts:
        answer = client.post(path, data=data, headers=headers)
        assert answer.status_code == 403, (data, headers, answer.text)
    assert _approvals(store)["publisher"]["state"] == "pending"
    assert "Traceback" not in deciding.stderr()


def test_a_readonly_dashboard_decides_nothing(readonly, store):
    """Without --allow-decisions no page offers a decision, and a POST that passes every
    other check (cookie, same origin, CSRF) is refused (403, naming --allow-decisions)."""
    client = _client(readonly)
    csrf = _csrf(client, "/approvals")
    page = client.get("/approvals").text
    assert "read-only" in page and "Approve" not in page
    assert 'method="post"' not in client.get("/jobs/parked").text
    approval = _approvals(store)["publisher"]["id"]
    answer = client.post(
        f"/jobs/publisher/approvals/{approval}",
        data={"decision": "approve", "by": "alice", "csrf": csrf},
        headers={"Origin": readonly.base},
    )
    assert answer.status_code == 403 and "--allow-decisions" in answer.text
    answer = client.post(
        "/jobs/parked/effects/1",
        data={"outcome": "committed", "by": "alice", "csrf": csrf},
        headers={"Origin": readonly.base},
    )
    assert answer.status_code == 403
    assert _approvals(store)["publisher"]["state"] == "pending"
    assert _effects(store, "parked")[1]["state"] == "ambiguous"


def test_reading_every_page_changes_no_byte_of_the_store(readonly, store):
    """The read pages open the store read-only: after the job list (filtered and
    searched), each job's timeline, each snapshot, a value drilled into, diffs (within a
    job and across two), the approvals and the live parts, every file of the store is
    byte-identical. The drill-down lists a value's children by path, and an unknown
    path is a 404 naming what is there; the diff of publisher@1 and @2 names the list
    item added and the effect recorded in between. A label holding `<script>` is in the
    HTML only escaped; an unknown job or snapshot is a 404 page naming it."""
    client = _client(readonly)
    before = _store_bytes(store)
    pages = ["/", "/?part=1", "/?status=waiting&q=pub", "/approvals", "/approvals?all=1&part=1"]
    for job, seqs in (("publisher", (1, 2, 3)), ("xss", (1, 2, 3)), ("parked", (1,))):
        pages += [f"/jobs/{job}", f"/jobs/{job}?part=1"]
        pages += [f"/jobs/{job}/snapshots/{seq}" for seq in seqs]
        pages += [f"/jobs/{job}/snapshots/1/value?path=frame[0].locals.notes"]
    pages += ["/diff", "/diff?a=publisher@1&b=publisher@2", "/diff?a=publisher@2&b=xss@3"]
    for path in pages:
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert "<script>window" not in answer.text, path
    assert _store_bytes(store) == before
    timeline = client.get("/jobs/xss").text  # the label of its snapshot 1
    assert str(markupsafe.escape(XSS_LABEL)) in timeline
    snapshot = client.get("/jobs/xss/snapshots/2").text
    assert "Notebook(title=" in snapshot and "&lt;script&gt;" in snapshot
    assert "publisher" in client.get("/?q=PUBL").text
    assert "publisher" not in client.get("/?status=parked").text.split("<main>", 1)[1]
    value = client.get(
        "/jobs/publisher/snapshots/2/value", params={"path": "frame[0].locals.notes"}
    )
    assert "frame[0].locals.notes.pages" in value.text and "draft two" in value.text
    wrong = client.get("/jobs/publisher/snapshots/2/value", params={"path": "frame[0].locals.nope"})
    assert wrong.status_code == 404 and "nope" in wrong.text and "notes" in wrong.text
    diff = client.get("/diff", params={"a": "publisher@1", "b": "publisher@2"}).text
    assert "frame[0].locals.notes.pages[1]" in diff and "&#39;draft two&#39;" in diff
    assert "publish(" in diff  # the effect recorded between the two
    missing = client.get("/jobs/nojob")
    assert missing.status_code == 404 and "nojob" in missing.text
    assert client.get("/jobs/publisher/snapshots/99").status_code == 404
    assert client.get("/jobs/..%2Fx").status_code in (400, 404)


# ------------------------------------------------------------------------ deciding
def test_reject_and_reconcile_record_the_configured_user(deciding, store):
    """A decider must be one of --user's names (mallory: 400, nothing decided). Rejected
    by bob in the dashboard: the approval's decided_by is bob and the note kept. The
    parked job's ambiguous effect 1 reconciled as committed by alice: the row is
    confirmed, its note names alice, and `snaprun resume parked` goes on past it to the
    approval (exit 3), publishing nothing again."""
    client = _client(deciding)
    csrf = _csrf(client, "/jobs/xss")
    same = {"Origin": deciding.base}
    approval = _approvals(store)["xss"]["id"]
    path = f"/jobs/xss/approvals/{approval}"
    mallory = client.post(
        path, data={"decision": "approve", "by": "mallory", "csrf": csrf}, headers=same
    )
    assert mallory.status_code == 400 and "mallory" in mallory.text
    assert _approvals(store)["xss"]["state"] == "pending"
    rejected = client.post(
        path,
        data={"decision": "reject", "by": "bob", "note": "<b>not</b> now", "csrf": csrf},
        headers=same,
    )
    assert rejected.status_code == 200, rejected.text
    assert "rejected by bob" in rejected.text
    decided = _approvals(store)["xss"]
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "rejected",
        "bob",
        "<b>not</b> now",
    )
    again = client.post(
        path, data={"decision": "approve", "by": "alice", "csrf": csrf}, headers=same
    )
    assert again.status_code == 400 and "already rejected" in again.text
    assert "&lt;b&gt;not&lt;/b&gt; now" in client.get("/jobs/xss").text

    reconciled = client.post(
        "/jobs/parked/effects/1",
        data={
            "outcome": "committed",
            "result": '{"published": "first"}',
            "by": "alice",
            "csrf": csrf,
        },
        headers=same,
    )
    assert reconciled.status_code == 200, reconciled.text
    row = _effects(store, "parked")[1]
    assert row["state"] == "confirmed" and row["note"] == "reconciled: committed by alice"
    resumed = snaprun("resume", "--store", store, "parked", cwd=store.parent)
    assert resumed.returncode == 3, resumed.stderr  # past the effect, at the approval
    assert _effects(store, "parked")[1]["attempts"] == row["attempts"]


# ------------------------------------------------------------------------ the command
def test_allow_decisions_needs_the_deciders_names(store):
    """--allow-decisions without --user or --users: exit 2, one line naming both."""
    run = snaprun("ui", "--store", store, "--allow-decisions", cwd=store.parent)
    clean_refusal(run, "--allow-decisions", "--user NAME", "--users FILE")


def test_a_busy_port_is_refused(store):
    """A port another program listens on: exit 2, one line naming it and --port."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        run = snaprun("ui", "--store", store, "--port", port, cwd=store.parent)
    clean_refusal(run, f"127.0.0.1:{port}", "--port")


def test_without_the_ui_extra_the_command_names_the_install(store, tmp_path):
    """starlette not importable (a package of that name that raises ImportError, first
    on the path): exit 2, one line naming `pip install 'snapstate[ui]'`, no traceback."""
    shadow = tmp_path / "shadow" / "starlette"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed', name='starlette')\n")
    run = snaprun(
        "ui",
        "--store",
        store,
        cwd=tmp_path,
        env={"PYTHONPATH": str(shadow.parent)},
        fresh=True,
    )
    clean_refusal(run, "pip install 'snapstate[ui]'", "starlette")


def test_users_come_from_the_options_and_the_file(store, tmp_path):
    """--users FILE: one name a line, blank lines and # comments skipped, each name once
    after the --user names; a name with a control character is refused (exit 2)."""
    from snapstate.runtime._cli._ui import _users

    users = tmp_path / "users.txt"
    users.write_text("# reviewers\ncarol\n\n  dave  \nalice\n")
    assert _users(("alice", "bob"), users) == ("alice", "bob", "carol", "dave")
    users.write_text("eve\x07\n")
    run = snaprun("ui", "--store", store, "--allow-decisions", "--users", users, cwd=store.parent)
    clean_refusal(run, "line 1")


def test_no_template_marks_text_safe():
    """Every page is autoescaped and none turns escaping off: no `safe` filter, no
    `{% autoescape false %}`, no Markup in the templates (the page's data is the store's,
    whatever an agent wrote); the environment escapes every template."""
    from snapstate.runtime._ui import _app

    folder = Path(_app.__file__).parent / "templates"
    templates = sorted(folder.glob("*.html"))
    assert len(templates) >= 8
    for template in templates:
        text = template.read_text()
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|Markup", text), template.name
    env = _app._environment()
    assert env.autoescape is True
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"
