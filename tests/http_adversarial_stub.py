"""A counting HTTP server on 127.0.0.1 for tests/test_record_http_adversarial.py, run in
a thread of the test process. Every request is counted by "METHOD /path" and kept.

    POST /v1/chat/completions   500 the first time, 429 the second (retry-after-ms: 5), then
                          an OpenAI chat completion "answer #N"
    GET  /flaky           the first request's connection is closed without an answer
                          (the client raises a transport error), later ones answer
    POST /v1/messages     a messaging API's "send a message" (a write: no model in it)
    POST /upload          a multipart upload: answers the file's size and the count
    GET  /gzip            a gzip-encoded JSON body, two Set-Cookie headers, headers in
                          a fixed unusual order; HEAD /gzip the same headers, no body
    GET  /empty           204 No Content
    POST /redirect        303 to GET /final
    GET  /final           the count
    GET  /presign         302 to /final?X-Amz-Signature=... (a presigned URL)
    GET  /slow?id=X&ms=N  answers {"id", "n"} after N milliseconds
    POST /services/...    "ok": a Slack webhook, reached with the stub as the proxy
    POST /oauth/token[?encoding=gzip]   {"access_token": "ya29.t0ken-N-zQx", ...}
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from stub_server import ThreadedStub


class AdversarialStub(ThreadedStub):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.requests: list[dict] = []
        self.sent: list[bytes] = []  # the bodies of /oauth/token, as sent
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                try:
                    self._write(status, headers, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed while it waited

            def _write(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if status != 204:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD" and status != 204:
                    self.wfile.write(body)

            def _body(self) -> bytes:
                if "chunked" not in self.headers.get("Transfer-Encoding", ""):
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if not size:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()

            def _answer(self) -> None:
                method = self.command
                raw = self._body()
                parts = urlsplit(self.path)
                with stub.lock:
                    name = f"{method} {parts.path}"
                    n = stub.counts[name] = stub.counts.get(name, 0) + 1
                    stub.requests.append(
                        {
                            "method": method,
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": raw,
                        }
                    )
                as_json = [("Content-Type", "application/json")]
                if parts.path == "/flaky":
                    if n == 1:
                        self.close_connection = True  # no answer at all
                        return
                    self._send(200, as_json, json.dumps({"flaky": n}).encode())
                elif parts.path == "/v1/messages":
                    self._send(200, as_json, json.dumps({"message_id": f"m-{n}"}).encode())
                elif parts.path == "/v1/chat/completions":  # 500, then 429, then answers
                    if n <= 2:
                        status = 500 if n == 1 else 429
                        error = {"error": {"message": f"try again ({n})", "type": "server"}}
                        retry = [("retry-after-ms", "5")]  # the SDK waits 5 ms
                        self._send(status, as_json + retry, json.dumps(error).encode())
                        return
                    reply = {
                        "id": f"chatcmpl-{n}",
                        "object": "chat.completion",
                        "created": 1700000000 + n,
                        "model": "stub-model",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": f"answer #{n}"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                    }
                    self._send(200, as_json, json.dumps(reply).encode())
                elif parts.path == "/oauth/token":  # an OAuth token endpoint
                    token = {"access_token": f"ya29.t0ken-{n}-zQx", "token_type": "Bearer"}
                    body = json.dumps({**token, "expires_in": 3599}).encode()
                    headers = list(as_json)
                    if "gzip" in parse_qs(parts.query).get("encoding", []):
                        body = gzip.compress(body)
                        headers.append(("Content-Encoding", "gzip"))
                    with stub.lock:
                        stub.sent.append(body)
                    self._send(200, headers, body)
                elif parts.path.startswith("/services/"):  # a Slack webhook, by proxy
                    self._send(200, [("Content-Type", "text/plain")], b"ok")
                elif parts.path == "/upload":
                    self._send(200, as_json, json.dumps({"n": n, "size": len(raw)}).encode())
                elif parts.path == "/gzip":
                    body = gzip.compress(json.dumps({"gz": n, "pad": "x" * 200}).encode())
                    headers = [
                        ("X-Zeta", "last-first"),
                        ("Set-Cookie", f"a=apple-{n}; Path=/"),
                        ("Content-Type", "application/json"),
                        ("X-Alpha", "first-last"),
                        ("Set-Cookie", f"b=banana-{n}; Path=/"),
                        ("Content-Encoding", "gzip"),
                    ]
                    self._send(200, headers, body)
                elif parts.path == "/empty":
                    self._send(204, [("X-N", str(n))], b"")
                elif parts.path == "/redirect":
                    self._send(303, [("Location", "/final")], b"")
                elif parts.path == "/presign":  # a redirect to a presigned URL
                    where = "/final?X-Amz-Signature=5ig0presigned0f00&X-Amz-Expires=60"
                    self._send(302, [("Location", where)], b"")
                elif parts.path == "/final":
                    self._send(200, as_json, json.dumps({"final": n}).encode())
                elif parts.path == "/slow":
                    q = parse_qs(parts.query)
                    time.sleep(int(q.get("ms", ["0"])[0]) / 1000)
                    reply = {"id": q.get("id", [""])[0], "n": n}
                    self._send(200, as_json, json.dumps(reply).encode())
                else:
                    self._send(404, [], b"")

            do_GET = do_POST = do_HEAD = _answer

        self.serve(Handler)

    def count(self, name: str) -> int:
        with self.lock:
            return self.counts.get(name, 0)
