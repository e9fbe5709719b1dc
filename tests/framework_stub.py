"""A stub LLM provider on 127.0.0.1 for the framework matrix (tests/test_frameworks.py):
the shapes agent frameworks speak, with tool calls, deterministic replies and a log of
every request.

    POST /v1/chat/completions   OpenAI chat completions, with tools; "stream": true
                                answers as server-sent events (text and tool calls)
    POST /v1/responses          the OpenAI Responses API (function calls and messages)

The reply depends only on the request, so a resumed agent that sends the same request
gets the same answer:
  - a forced tool (`tool_choice` naming a function: instructor's structured output) is
    called with arguments made from its JSON schema;
  - with tools offered and the last message the user's (not a tool's observation), the
    first tool other than `final_answer` is called with arguments from its schema;
  - after a tool's result, `final_answer` is called when it is offered (smolagents),
    otherwise the reply is text naming the tool's result;
  - without tools, the text echoes the last message.

Run on its own (`python framework_stub.py PORT_FILE`) it writes its URL to PORT_FILE and
serves until killed, appending each request to PORT_FILE + ".log" as a JSON line.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1700000000


class FrameworkStub:
    def __init__(self, log_path: str | None = None):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(404, "application/json", b'{"error": {"message": "no route"}}')

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"raw": raw.decode("latin-1")}
                record = {
                    "method": "POST",
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": body,
                }
                with stub.lock:
                    stub.requests.append(record)
                    if log_path:
                        with open(log_path, "a") as f:
                            f.write(json.dumps(record, sort_keys=True) + "\n")
                path = self.path.split("?", 1)[0]
                if path.endswith("/chat/completions"):
                    reply = chat_completion(body)
                    if body.get("stream"):
                        self._send(200, "text/event-stream", chat_chunks(reply))
                    else:
                        self._send(200, "application/json", json.dumps(reply).encode())
                elif path.endswith("/responses"):
                    self._send(200, "application/json", json.dumps(response(body)).encode())
                else:
                    self._send(404, "application/json", b'{"error": {"message": "no route"}}')

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FrameworkStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def take(self) -> list[dict]:
        """The requests seen so far (then forgotten)."""
        with self.lock:
            seen, self.requests = self.requests, []
        return seen


# ------------------------------------------------------------------------ replies
def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


def _example(schema: dict, name: str, defs: dict) -> Any:
    """A deterministic value that fits a JSON schema."""
    if "$ref" in schema:
        return _example(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), name, defs)
    for combo in ("anyOf", "oneOf", "allOf"):
        if combo in schema:
            options = [s for s in schema[combo] if s.get("type") != "null"] or schema[combo]
            return _example(options[0], name, defs)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {key: _example(sub, key, defs) for key, sub in props.items()}
    if kind == "array":
        return [_example(schema.get("items", {"type": "string"}), name, defs)]
    if kind == "integer":
        return 3
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    return f"{name}-value"


def _arguments(parameters: dict | None) -> str:
    parameters = parameters or {}
    defs = {**parameters.get("$defs", {}), **parameters.get("definitions", {})}
    value = _example(parameters, "arg", defs)
    return json.dumps(value if isinstance(value, dict) else {}, sort_keys=True)


def _call_id(*parts: str) -> str:
    return "call_" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _observation(message: dict) -> bool:
    """A tool's result: a "tool" message, or smolagents' user message holding one."""
    if message.get("role") == "tool":
        return True
    text = _content_text(message.get("content")).lstrip()
    return message.get("role") == "user" and text.startswith(("Observation", "Call id"))


def _plan(tools: list[tuple[str, dict | None]], forced: str | None, last: dict, text: str):
    """("tool", name, arguments) or ("text", reply)."""
    by_name = dict(tools)
    if forced and forced in by_name:
        return ("tool", forced, _arguments(by_name[forced]))
    if tools and not _observation(last):
        for name, params in tools:
            if name != "final_answer":
                return ("tool", name, _arguments(params))
    if _observation(last) and "final_answer" in by_name:
        return ("tool", "final_answer", json.dumps({"answer": f"done: {text[:60]}"}))
    if _observation(last):
        return ("text", f"tool said: {text[:80]}")
    return ("text", f"echo: {text}")


def chat_completion(body: dict) -> dict:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    text = _content_text(last.get("content"))
    tools = [
        (t["function"]["name"], t["function"].get("parameters"))
        for t in body.get("tools") or []
        if t.get("type") == "function"
    ]
    choice = body.get("tool_choice")
    forced = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    plan = _plan(tools, forced, last, text)
    if plan[0] == "tool":
        message: dict = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": _call_id(plan[1], plan[2], str(len(messages))),
                    "type": "function",
                    "function": {"name": plan[1], "arguments": plan[2]},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": plan[1]}, "stop"
    return {
        "id": f"chatcmpl-{len(messages)}-{len(text)}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", "stub"),
        "choices": [{"index": 0, "finish_reason": finish, "message": message, "logprobs": None}],
        "usage": {
            "prompt_tokens": len(text),
            "completion_tokens": 7,
            "total_tokens": len(text) + 7,
        },
    }


def chat_chunks(completion: dict) -> bytes:
    """A chat completion as server-sent events: text one word a chunk, a tool call whole."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    deltas: list[dict] = [{"role": "assistant", "content": ""}]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        deltas.append({"tool_calls": [{"index": 0, **call}]})
    else:
        words = message["content"].split(" ")
        deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
    events = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    events.append(
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    )
    events.append({**head, "choices": [], "usage": completion["usage"]})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def response(body: dict) -> dict:
    """A Responses API reply."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = items or [{}]
    last = items[-1]
    if last.get("type") == "function_call_output":
        last_message = {"role": "tool", "content": last.get("output")}
    else:
        last_message = {"role": last.get("role", "user"), "content": last.get("content")}
    text = _content_text(last_message["content"])
    tools = [
        (t["name"], t.get("parameters"))
        for t in body.get("tools") or []
        if t.get("type") == "function"
    ]
    plan = _plan(tools, None, last_message, text)
    n = len(items)
    if plan[0] == "tool":
        call_id = _call_id(plan[1], plan[2], str(n))
        output = [
            {
                "type": "function_call",
                "id": f"fc_{call_id[5:]}",
                "call_id": call_id,
                "name": plan[1],
                "arguments": plan[2],
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": f"msg_{n}_{len(text)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": plan[1], "annotations": []}],
            }
        ]
    return {
        "id": f"resp_{n}_{len(text)}",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": body.get("model", "stub"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "usage": {
            "input_tokens": len(text),
            "output_tokens": 7,
            "total_tokens": len(text) + 7,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


if __name__ == "__main__":
    port_file = sys.argv[1]
    stub = FrameworkStub(log_path=port_file + ".log").start()
    with open(port_file, "w") as f:
        f.write(stub.url)
    stub.thread.join()
