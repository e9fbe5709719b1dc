"""The parts of record_http that need no job: which requests are reads, how a URL is
shown, how model usage is read from OpenAI- and Anthropic-shaped answers (JSON and
server-sent events, compressed or not), and that the patched clients send exactly as
before outside a job (tests/test_record_http.py runs the jobs)."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
import requests
from http_record_stub import RecordStub

import snapstate
from snapstate.resources._http_record import Exchange, install, redacted_url, usage_of
from snapstate.runtime._http_record import Recording, check_reads

JSON = [(b"content-type", b"application/json")]
SSE = [("Content-Type", "text/event-stream; charset=utf-8")]


def _exchange(method: str, url: str, headers=()) -> Exchange:
    return Exchange(method, url, b"{}", headers)


@pytest.mark.parametrize(
    "method, url, read",
    [
        ("GET", "https://api.example.com/orders", True),
        ("HEAD", "https://api.example.com/orders", True),
        ("POST", "https://api.openai.com/v1/chat/completions", True),
        ("POST", "https://api.openai.com/v1/responses", True),
        ("POST", "https://api.openai.com/v1/embeddings", True),
        ("POST", "https://api.anthropic.com/v1/messages", True),
        ("POST", "https://api.anthropic.com/v1/messages/count_tokens", True),
        ("POST", "https://x.openai.azure.com/openai/deployments/gpt/chat/completions", True),
        # at a model path, with no sign of a model call (no model host, SDK header or
        # "model" in the body): a write (test_record_http_adversarial.py)
        ("POST", "http://127.0.0.1:8000/v1/chat/completions", False),
        ("POST", "https://api.anthropic.com/v1/messages/batches", False),  # creates a batch
        ("POST", "https://api.openai.com/v1/files", False),
        ("POST", "https://shop.example.com/orders/messages", False),  # not under /v1/
        ("DELETE", "https://api.example.com/orders/1", False),
        ("POST", "https://api.example.com/search", True),  # declared below
        ("POST", "https://api.example.com:8443/search/deep", True),
        ("POST", "https://other.example.com/search", False),
        ("PUT", "https://docs.example.com/anything", True),  # a whole host declared
    ],
)
def test_reads_and_writes(method, url, read):
    """GET/HEAD/OPTIONS, the model calls that change nothing (by path, on the provider's
    host) and the declared patterns are reads; everything else is a write."""
    recording = Recording(check_reads(["api.example.com/search*", "docs.example.com"]))
    assert recording.is_read(_exchange(method, url)) is read


def test_read_patterns_are_checked():
    """A pattern with spaces, an empty one or a bare string is refused, naming where."""
    with pytest.raises(ValueError, match="--http-read"):
        check_reads(["api.example.com/ search"], "--http-read")
    with pytest.raises(ValueError, match="record_http"):
        check_reads([""])
    with pytest.raises(TypeError, match="list of patterns"):
        check_reads("api.example.com/search")  # type: ignore[arg-type]
    assert check_reads(["API.example.com"]) == ("api.example.com/*",)


def test_urls_are_shown_without_credentials():
    """A URL's password and credential query values are replaced by ***; the rest kept."""
    assert (
        redacted_url("https://bob:pw@h.example/p?q=1&api_key=sk-1&sig=abc&x=")
        == "https://bob:***@h.example/p?q=1&api_key=***&sig=***&x="
    )
    assert redacted_url("http://h/p") == "http://h/p"


def test_the_idempotency_key_is_read_from_its_header():
    exchange = _exchange("POST", "https://h/p", [("Idempotency-Key", "k-1")])
    assert exchange.idempotency_key == "k-1"
    assert _exchange("POST", "https://h/p").idempotency_key is None


def test_usage_of_openai_and_anthropic_answers():
    """Chat completions, Responses and Anthropic messages, as JSON (gzip too) and as
    event streams (the final usage event; Anthropic's message_start and message_delta
    merged); any other body has no usage."""
    chat = {"model": "gpt-x", "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    assert usage_of(JSON, [json.dumps(chat).encode()]) == {
        "model": "gpt-x",
        "input_tokens": 5,
        "output_tokens": 3,
    }
    zipped = gzip.compress(json.dumps(chat).encode())
    headers = [*JSON, (b"content-encoding", b"gzip")]
    assert usage_of(headers, [zipped[:7], zipped[7:]])["input_tokens"] == 5
    message = {"model": "claude-x", "usage": {"input_tokens": 9, "output_tokens": 4}}
    assert usage_of(JSON, [json.dumps(message).encode()])["model"] == "claude-x"
    events = [
        {
            "type": "message_start",
            "message": {"model": "claude-x", "usage": {"input_tokens": 9, "output_tokens": 1}},
        },
        {"type": "content_block_delta", "delta": {"text": "hi"}},
        {"type": "message_delta", "usage": {"output_tokens": 12}},
    ]
    stream = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    assert usage_of(SSE, [stream[:50], stream[50:]]) == {
        "model": "claude-x",
        "input_tokens": 9,
        "output_tokens": 12,
    }
    done = {
        "type": "response.completed",
        "response": {"model": "gpt-r", "usage": {"input_tokens": 2, "output_tokens": 8}},
    }
    assert usage_of(SSE, [f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()]) == {
        "model": "gpt-r",
        "input_tokens": 2,
        "output_tokens": 8,
    }
    assert usage_of(JSON, [b'{"order": 1}']) is None
    assert usage_of([(b"content-type", b"text/html")], [b"<p>usage</p>"]) is None
    assert usage_of(JSON, [b"{not json"]) is None


def test_outside_a_job_the_patched_clients_send_as_before():
    """Once installed (a job turned recording on in this process), the patches step
    aside outside a job: every request reaches the server, and record_http() does
    nothing there."""
    install()
    assert getattr(httpx.Client._transport_for_url, "__snapstate_records__", False)
    snapstate.record_http(reads=["x.example.com"])  # plain Python: nothing happens
    stub = RecordStub().start()
    try:
        for _ in range(2):
            assert httpx.post(stub.url + "/order", json={}).json()["order"] in (1, 2)
            assert requests.get(stub.url + "/search", params={"q": "a"}).status_code == 200
        assert stub.count("POST /order") == 2 and stub.count("GET /search") == 2
    finally:
        stub.stop()
