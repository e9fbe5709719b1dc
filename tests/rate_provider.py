"""A rate-limited provider on 127.0.0.1, run in a thread of the test process, for the
rate-limit tests: POST /orders places an order (honouring an Idempotency-Key: a
repeated key returns the first order), but the first `refuse` requests of each action
are answered 429 with the configured headers (e.g. {"Retry-After": "7200"}). Every
request is recorded (action, key, status), and deliveries (orders actually placed) are
counted per action.

It also speaks the two LLM shapes, as the action "chat": POST .../chat/completions
(an OpenAI ChatCompletion echoing the last message) and POST .../messages (an
Anthropic Message), refused the same way first."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RateLimitedProvider:
    def __init__(self, refuse: int = 1, headers: dict[str, str] | None = None) -> None:
        self.refuse = refuse  # 429s per action before it is accepted
        self.headers = {"Retry-After": "7200"} if headers is None else headers
        self.deliveries: Counter = Counter()
        self.refused: Counter = Counter()
        self.requests: list[tuple[str, str | None, int]] = []  # (action, key, status)
        self.by_key: dict[str, dict] = {}
        self.lock = threading.Lock()
        self._next = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers.get("Idempotency-Key")
                path = self.path.split("?", 1)[0]
                if path.endswith(("/chat/completions", "/messages")):
                    status, body, extra = provider.chat(path, order, key)
                else:
                    status, body, extra = provider.order(order, key)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def order(self, order: dict, key: str | None) -> tuple[int, dict, dict[str, str]]:
        action = order["action"]
        with self.lock:
            if self.refused[action] < self.refuse:
                self.refused[action] += 1
                self.requests.append((action, key, 429))
                return 429, {"error": {"message": "rate limited"}}, dict(self.headers)
            self.requests.append((action, key, 200))
            if key is not None and key in self.by_key:
                return 200, self.by_key[key], {}
            self._next += 1
            placed = {"id": f"po-{self._next}", "action": action, "amount": order["amount"]}
            self.deliveries[action] += 1
            if key is not None:
                self.by_key[key] = placed
            return 200, placed, {}

    def chat(self, path: str, request: dict, key: str | None) -> tuple[int, dict, dict[str, str]]:
        text = str(request["messages"][-1]["content"])
        status, placed, extra = self.order({"action": "chat", "amount": 0}, key)
        if status != 200:
            return status, placed, extra
        if path.endswith("/messages"):
            return (
                200,
                {
                    "id": f"msg-{placed['id']}",
                    "type": "message",
                    "role": "assistant",
                    "model": request["model"],
                    "content": [{"type": "text", "text": f"echo: {text}"}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
                {},
            )
        return (
            200,
            {
                "id": f"chat-{placed['id']}",
                "object": "chat.completion",
                "created": 0,
                "model": request["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"echo: {text}"},
                        "finish_reason": "stop",
                    }
                ],
            },
            {},
        )

    def keys(self, action: str) -> list[str | None]:
        with self.lock:
            return [k for a, k, _ in self.requests if a == action]

    def __enter__(self) -> RateLimitedProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
