"""An agent whose HTTP requests are recorded by record_http (tests/test_record_http.py),
against tests/http_record_stub.py. argv: CLIENT URL [STEPS...]

CLIENT: httpx (sync), async (httpx.AsyncClient, async def main), requests, openai (the
real SDK, base_url at the stub), call (record_http() called by main, httpx), none (no
recording asked: httpx). STEPS (default: all), in order, snapshot "mid" after the
third request:

    chat     an OpenAI-shaped chat completion (a model read)
    stream   the same, streamed: the chunks as the client iterates them
    search   GET /search?q=...&api_key=<secret> (a read, a credential in the query)
    charge   POST /charge with an Idempotency-Key drawn by uuid.uuid4() (not recorded:
             a re-executed request draws another; the first one must be sent again)
    order    POST /order (a plain write)
    cookie   POST /cookie (a Set-Cookie answer: the client's cookie jar, printed last)
    effect   POST /order inside an explicit @effect (not recorded again: the effect is)
    tasks    two spawned tasks (snapstate.spawn), each GET /search?q=task-N (httpx)

Every request carries Authorization: Bearer $RH_TOKEN. RH_VARIANT changes the chat
request's body (a re-executed request that does not match the ledger). Prints one JSON
line: each step's body digest (the bytes the agent got), and returns the list's digest.
"""

import hashlib
import json
import os
import sys
import uuid

import snapstate
from snapstate import snapshot

CLIENT = sys.argv[1]
URL = sys.argv[2]
STEPS = sys.argv[3:] or ["chat", "stream", "cookie", "search", "charge", "order"]
TOKEN = os.environ.get("RH_TOKEN", "sk-test-0000000000")


def _chat_body(stream: bool) -> dict:
    text = "hello snapstate" + os.environ.get("RH_VARIANT", "")
    return {
        "model": "stub-model",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
    }


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _request(step: str) -> tuple[str, str, dict]:
    """method, path, keyword arguments (json, headers, params) of a step."""
    headers = {"Authorization": "Bearer " + TOKEN}  # built per request: never in a snapshot
    if step in ("chat", "stream"):
        return (
            "POST",
            "/v1/chat/completions",
            {"json": _chat_body(step == "stream"), "headers": headers},
        )
    if step == "search":
        return "GET", "/search", {"params": {"q": "pumps", "api_key": TOKEN}, "headers": headers}
    if step == "charge":
        headers["Idempotency-Key"] = f"charge-{uuid.uuid4()}"
        return "POST", "/charge", {"json": {"amount": 42}, "headers": headers}
    if step in ("order", "effect"):
        return "POST", "/order", {"json": {"item": "pump", "qty": 2}, "headers": headers}
    return "POST", "/cookie", {"json": {}, "headers": headers}


@snapstate.effect
def place_order() -> str:
    import httpx

    method, path, kwargs = _request("effect")
    with httpx.Client(timeout=30) as client:
        return client.request(method, URL + path, **kwargs).text


def _search(client, q: str) -> str:
    response = client.get(URL + "/search", params={"q": q})
    return digest(response.content)


def _one_sync(client, step: str) -> str:
    if step == "effect":
        return f"effect:{digest(place_order().encode())}"
    if step == "tasks":  # two spawned tasks, each sending its own request
        tasks = [snapstate.spawn(_search, client, f"task-{i}") for i in (1, 2)]
        return f"tasks:{snapstate.gather(*tasks)}"
    method, path, kwargs = _request(step)
    if step == "stream":
        with client.stream(method, URL + path, **kwargs) as response:
            chunks = [c for c in response.iter_bytes()]
        return f"{step}:{len(chunks) > 1}:{digest(b''.join(chunks))}"
    response = client.request(method, URL + path, **kwargs)
    return f"{step}:{response.status_code}:{digest(response.content)}"


def run_sync(client) -> list[str]:
    out = []
    for i, step in enumerate(STEPS):
        out.append(_one_sync(client, step))
        if i == 2:
            snapshot("mid")
    out.append(f"cookies:{sorted(client.cookies.keys())}")
    return out


def _one_requests(session, step: str) -> str:
    method, path, kwargs = _request(step)
    if step == "stream":
        with session.request(method, URL + path, stream=True, **kwargs) as response:
            chunks = list(response.iter_content(chunk_size=64))
        return f"{step}:{len(chunks) > 1}:{digest(b''.join(chunks))}"
    response = session.request(method, URL + path, **kwargs)
    return f"{step}:{response.status_code}:{digest(response.content)}"


def run_requests() -> list[str]:
    import requests

    session = requests.Session()
    out = []
    for i, step in enumerate(STEPS):
        out.append(_one_requests(session, step))
        if i == 2:
            snapshot("mid")
    out.append(f"cookies:{sorted(session.cookies.keys())}")
    return out


def run_openai() -> list[str]:
    import openai

    client = openai.OpenAI(base_url=URL + "/v1", api_key=TOKEN, max_retries=0)
    out = []
    for i, step in enumerate(STEPS):
        if step == "chat":
            answer = client.chat.completions.create(**_chat_body(False))
            out.append(f"chat:{answer.choices[0].message.content}:{answer.usage.total_tokens}")
        elif step == "stream":
            pieces = [
                (c.choices[0].delta.content if c.choices else f"usage={c.usage.total_tokens}")
                for c in client.chat.completions.create(**_chat_body(True))
            ]
            out.append(f"stream:{pieces}")
        if i == 2 or step == STEPS[-1]:
            snapshot("mid")
    return out


async def _one_async(client, step: str) -> str:
    method, path, kwargs = _request(step)
    if step == "stream":
        async with client.stream(method, URL + path, **kwargs) as response:
            chunks = [c async for c in response.aiter_bytes()]
        return f"{step}:{len(chunks) > 1}:{digest(b''.join(chunks))}"
    response = await client.request(method, URL + path, **kwargs)
    return f"{step}:{response.status_code}:{digest(response.content)}"


async def run_async() -> list[str]:
    import httpx

    out = []
    async with httpx.AsyncClient(timeout=30) as client:
        for i, step in enumerate(STEPS):
            out.append(await _one_async(client, step))
            if i == 2:
                await snapshot("mid")
        out.append(f"cookies:{sorted(client.cookies.keys())}")
    return out


def _finish(out: list[str]) -> str:
    print(json.dumps(out), flush=True)
    return digest("\n".join(out).encode())


if CLIENT == "async":

    async def main():
        snapshot_info = await snapshot("start")
        del snapshot_info
        out = await run_async()
        await snapshot("end")
        return _finish(out)

else:

    def main():
        snapshot("start")
        if CLIENT == "call":
            snapstate.record_http(
                reads=["127.0.0.1/order"] if os.environ.get("RH_ORDER_READ") else []
            )
        if CLIENT == "requests":
            out = run_requests()
        elif CLIENT == "openai":
            out = run_openai()
        else:
            import httpx

            with httpx.Client(timeout=30) as client:
                out = run_sync(client)
        snapshot("end")
        return _finish(out)
