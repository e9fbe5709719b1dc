"""The Python API's approvals (runtime/_api.py over runtime/_approvals.py), in process:
store.approvals() lists what a job waits for, store.approve()/reject() record who decided,
store.resume() continues the job where request_approval() hibernated it; and docs/api.md's
approval endpoint on a real HTTP server (http.server on 127.0.0.1)."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import snapstate

AGENT = """\
import os
import snapstate
from snapstate import effect, request_approval

SENT = os.path.join(os.path.dirname(__file__), "orders.txt")

@effect(requires="purchase", within=lambda scope, amount, **_: amount <= scope["max_usd"])
def order(vendor, amount):
    with open(SENT, "a") as f:
        f.write(f"{vendor} {amount}\\n")
    return f"PO-{vendor}-{amount}"

def main():
    try:
        ok = request_approval(
            "purchase", scope={"vendor": "acme", "max_usd": 500}, expires_in=86400,
            approvers=["alice", "bob"],
        )
    except snapstate.ApprovalRejected as exc:
        return f"rejected: {exc.note}" if getattr(exc, "note", None) else "rejected"
    return [ok.by, ok.scope["max_usd"], order("acme", 420)]
"""


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = tmp_path / "agentdir"
    folder.mkdir()
    (folder / "buyer.py").write_text(AGENT)
    monkeypatch.chdir(tmp_path)
    yield snapstate.Store(tmp_path / "store"), folder / "buyer.py", folder / "orders.txt"
    sys.modules.pop("buyer", None)


def _app(store: snapstate.Store) -> ThreadingHTTPServer:
    """docs/api.md's endpoint: POST /jobs/JOB/approvals/ID?user=NAME approves and resumes."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            user = urllib.parse.parse_qs(url.query).get("user", [None])[0]
            if len(parts) != 4 or parts[0] != "jobs" or parts[2] != "approvals":
                return self._reply(404, {"error": "no such endpoint"})
            try:
                store.approve(parts[1], parts[3], by=user)
                outcome = store.resume(parts[1])
            except snapstate.LeaseHeld as exc:
                return self._reply(409, {"error": str(exc)})
            except snapstate.JobNotFound as exc:
                return self._reply(404, {"error": str(exc)})
            except snapstate.SnapstateError as exc:
                return self._reply(400, {"error": str(exc)})
            self._reply(200, {"status": outcome.status, "result": outcome.result})

        def log_message(self, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _post(url: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_an_approval_endpoint_approves_and_resumes(store):
    """start -> waiting for the approval (listed by store.approvals()); a POST by someone
    who is not an approver is refused (400) and changes nothing; alice's POST records
    her decision and the job finishes, the order sent once within the granted scope; a
    second POST is refused (the decision is final, the job done)."""
    store_, script, orders = store
    outcome = store_.start(script, job_id="buy")
    assert outcome.status == "waiting" and outcome.exit_code == 3
    assert outcome.wait is not None and outcome.wait.kind == "approval"
    pending = store_.approvals()
    assert [(a.job_id, a.name, a.scope) for a in pending] == [
        ("buy", "purchase", {"max_usd": 500, "vendor": "acme"})
    ]
    approval_id = pending[0].approval_id
    server = _app(store_)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/jobs/buy/approvals/{approval_id}"
    try:
        code, body = _post(f"{base}?user=mallory")
        assert code == 400 and "mallory" in body["error"], body
        assert store_.job("buy").status == "waiting" and not orders.exists()
        code, body = _post(f"{base}?user=alice")
        assert (code, body) == (200, {"status": "done", "result": ["alice", 500, "PO-acme-420"]})
        code, body = _post(f"{base}?user=bob")
        assert code == 400, body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
    assert orders.read_text() == "acme 420\n"
    assert store_.approvals() == []
    assert store_.job("buy").status == "done"


def test_a_rejection_reaches_the_agent(store):
    """store.reject() with a reason: the resumed agent catches ApprovalRejected carrying
    it; nothing was ordered."""
    store_, script, orders = store
    assert store_.start(script, job_id="no").status == "waiting"
    (approval,) = store_.approvals()
    store_.reject("no", approval.approval_id, by="bob", reason="over budget")
    outcome = store_.resume("no")
    assert (outcome.status, outcome.result) == ("done", "rejected: over budget")
    assert not orders.exists()
