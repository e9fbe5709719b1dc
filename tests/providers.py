"""Real HTTP providers on 127.0.0.1 for effect-ledger tests, run in a thread of the
test process. Each counts deliveries per logical action (the "action" field of the
order), i.e. how many times the action was actually carried out.

    /keyed   honours an Idempotency-Key header: a repeated key returns the first result
    /lookup  no keys, but GET /lookup/<ref> says whether the order with that reference
             exists (200 + the order) or not (404)
    /plain   neither: every POST is a new order

Fencing tokens (snapstate's fencing_token=, the runner's lease epoch): an order whose
body carries "fencing_token", or a lookup with ?fencing_token=N, is checked against the
highest token seen for the same key (the Idempotency-Key, else the order's "ref", else
its "action") and refused with 409 if it is lower: a stale runner's late request does
nothing once a newer runner has been seen.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Provider:
    def __init__(self):
        self.deliveries: Counter = Counter()
        self.by_key: dict[str, dict] = {}
        self.by_ref: dict[str, dict] = {}
        self.tokens: dict[str, int] = {}  # highest fencing token seen per key
        self.refused: Counter = Counter()  # requests refused for a stale token
        self.lock = threading.Lock()
        self._next = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, body = provider.order(self.path, order, self.headers.get("Idempotency-Key"))
                self._reply(status, body)

            def do_GET(self):
                status, body = provider.find(self.path)
                self._reply(status, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def order(self, path: str, order: dict, key: str | None):
        with self.lock:
            stale = self._fence(
                key or order.get("ref") or order["action"], order.get("fencing_token")
            )
            if stale:
                self.refused[order["action"]] += 1
                return 409, {"error": stale}
            if path == "/keyed":
                if not key:
                    return 400, {"error": "Idempotency-Key required"}
                if key in self.by_key:
                    return 200, self.by_key[key]
            self._next += 1
            placed = {
                "id": f"po-{self._next}",
                "action": order["action"],
                "amount": order["amount"],
            }
            self.deliveries[order["action"]] += 1
            if path == "/keyed":
                self.by_key[key] = placed
            elif path == "/lookup":
                self.by_ref[order["ref"]] = placed
            return 200, placed

    def _fence(self, scope: str, token) -> str | None:
        """Record a request's fencing token; a message if it is stale. Under the lock."""
        if token is None:
            return None
        highest = self.tokens.get(scope, token)
        if token < highest:
            return f"stale fencing token {token}: {highest} was seen for {scope}"
        self.tokens[scope] = token
        return None

    def find(self, path: str):
        path, _, query = path.partition("?")
        ref = path.rsplit("/", 1)[-1]
        with self.lock:
            if query.startswith("fencing_token="):
                stale = self._fence(ref, int(query.partition("=")[2]))
                if stale:
                    return 409, {"error": stale}
            if ref in self.by_ref:
                return 200, self.by_ref[ref]
        return 404, {"error": "no such order"}

    def __enter__(self) -> Provider:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
