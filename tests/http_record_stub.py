"""A counting HTTP server on 127.0.0.1 for the record_http tests, run in a thread of the
test process (or as `python http_record_stub.py` printing its URL):

    POST /v1/chat/completions   an OpenAI chat completion: the answer is the last user
                                message reversed plus the count of requests so far, so
                                a request sent twice gets a different answer; "stream":
                                true answers server-sent events, several chunks written
                                apart, with a final usage event
    GET  /search?q=...          a read: the query and its count
    POST /order                 a plain write (no idempotency): an order number
    POST /charge                honours Idempotency-Key: a key seen before gets the
                                same answer, and the server counts one charge per key
    POST /cookie                sets a cookie (Set-Cookie)

Every request is counted by "METHOD /path" and kept (headers, body) for the tests."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from stub_server import ThreadedStub


class RecordStub(ThreadedStub):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.requests: list[dict] = []
        self.charges: dict[str, dict] = {}
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                with stub.lock:
                    name = f"{method} {parts.path}"
                    n = stub.counts[name] = stub.counts.get(name, 0) + 1
                    total = len(stub.requests) + 1
                    stub.requests.append(
                        {
                            "method": method,
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": raw.decode("utf-8", "replace"),
                        }
                    )
                body = json.loads(raw) if raw.startswith(b"{") else {}
                headers = [("Content-Type", "application/json")]
                if parts.path.endswith("/chat/completions"):
                    text = str(body["messages"][-1]["content"])[::-1]
                    reply = {
                        "id": f"chatcmpl-{total}",
                        "object": "chat.completion",
                        "created": 1700000000 + total,
                        "model": body.get("model", "stub-model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": f"{text} #{n}"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                    }
                    if body.get("stream"):
                        self._stream(reply, n)
                        return
                elif parts.path == "/search":
                    q = parse_qs(parts.query).get("q", [""])[0]
                    with stub.lock:  # counted per query: answers do not depend on arrival
                        n = stub.counts[f"GET /search?q={q}"] = (
                            stub.counts.get(f"GET /search?q={q}", 0) + 1
                        )
                    reply = {"q": q, "n": n}
                elif parts.path == "/order":
                    reply = {"order": n}
                elif parts.path == "/charge":
                    key = self.headers.get("Idempotency-Key") or ""
                    with stub.lock:
                        reply = stub.charges.setdefault(key, {"charge": len(stub.charges) + 1})
                elif parts.path == "/cookie":
                    reply = {"n": n}
                    headers.append(("Set-Cookie", f"session=cookie-secret-{n}; Path=/"))
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: dict, n: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                text = reply["choices"][0]["message"]["content"]
                events = []
                for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                    chunk = {
                        "id": reply["id"],
                        "object": "chat.completion.chunk",
                        "created": reply["created"],
                        "model": reply["model"],
                        "choices": [
                            {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                        ],
                    }
                    events.append(f"data: {json.dumps(chunk)}\n\n")
                final = {
                    "id": reply["id"],
                    "object": "chat.completion.chunk",
                    "created": reply["created"],
                    "model": reply["model"],
                    "choices": [],
                    "usage": reply["usage"],
                }
                events += [f"data: {json.dumps(final)}\n\n", "data: [DONE]\n\n"]
                for event in events:
                    data = event.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.01)
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

        self.serve(Handler)

    def count(self, name: str) -> int:
        with self.lock:
            return self.counts.get(name, 0)


if __name__ == "__main__":
    stub = RecordStub()
    print(stub.url, flush=True)
    stub.server.serve_forever()
    sys.exit(0)
