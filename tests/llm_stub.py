"""A stub LLM provider on 127.0.0.1, run in a thread of the test process, speaking the
two shapes agents use:

    POST /v1/chat/completions   OpenAI chat completions (a ChatCompletion body; with
                                "stream": true, chunks as server-sent events)
    POST /v1/messages           Anthropic messages (a Message body)

Replies are deterministic: the text echoes the last user message, so a resumed agent
that sends the same request gets the same answer. A message "flaky-N ..." is answered
503 (with retry-after-ms: 1, so the SDK retries at once) N times before it succeeds:
how many attempts the stub sees shows the client's max_retries. Every request is recorded (method,
path with its query, headers, parsed JSON body) for the tests to compare a plain run
with a killed-and-resumed one.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from stub_server import ThreadedStub


class LLMStub(ThreadedStub):
    def __init__(self):
        self.requests: list[dict] = []
        self.failures: dict[str, int] = {}  # "flaky-N" message -> 503s sent so far
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                with stub.lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    stub.requests.append(
                        {"method": "POST", "path": self.path, "headers": headers, "body": body}
                    )
                path = self.path.split("?", 1)[0]
                text = _text(body)
                if text.startswith("flaky-") and stub._fail(text):
                    status, reply = 503, {"error": {"message": "overloaded, retry"}}
                elif path.endswith("/chat/completions"):
                    status, reply = 200, _chat_completion(body)
                elif path.endswith("/messages"):
                    status, reply = 200, _message(body)
                else:
                    status, reply = 404, {"error": {"message": f"no route {path}"}}
                kind = "application/json"
                data = json.dumps(reply).encode()
                if status == 200 and path.endswith("/chat/completions") and body.get("stream"):
                    kind, data = "text/event-stream", _chunks(reply)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", f"req-{text[:16]}")
                self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)

    def _fail(self, text: str) -> bool:
        """Whether this attempt of a "flaky-N" message fails (the first N do)."""
        times = int(text.split()[0].removeprefix("flaky-"))
        with self.lock:
            done = self.failures.get(text, 0)
            if done < times:
                self.failures[text] = done + 1
                return True
        return False

    def reset(self) -> None:
        """Forget the requests and the flaky messages' failures (a new run starts)."""
        with self.lock:
            self.requests, self.failures = [], {}

    def take(self) -> list[dict]:
        """The requests seen so far (then forgotten)."""
        with self.lock:
            seen, self.requests = self.requests, []
        return seen


def _text(body) -> str:
    messages = (body or {}).get("messages") or [{}]
    content = messages[-1].get("content", "")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content)
    return str(content)


def _chat_completion(body: dict) -> dict:
    text = _text(body)
    return {
        "id": f"chatcmpl-{len(text)}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model", "stub"),
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"echo: {text}"},
            }
        ],
        "usage": {
            "prompt_tokens": len(text),
            "completion_tokens": len(text) + 6,
            "total_tokens": 2 * len(text) + 6,
        },
    }


def _chunks(completion: dict) -> bytes:
    """A chat completion as server-sent events (stream=True): one chunk per word."""
    words = completion["choices"][0]["message"]["content"].split(" ")
    events = [
        {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
        }
        for word in words
    ]
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def _message(body: dict) -> dict:
    text = _text(body)
    return {
        "id": f"msg_{len(text)}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "stub"),
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "content": [{"type": "text", "text": f"echo: {text}"}],
        "usage": {"input_tokens": len(text), "output_tokens": len(text) + 6},
    }
