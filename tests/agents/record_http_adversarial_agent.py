"""An agent for tests/test_record_http_adversarial.py (run with --record-http), against
tests/http_adversarial_stub.py. argv: SCENARIO URL. Snapshot "start" first, "end" last;
one line printed (and flushed) per request, so a killed run's output can be compared
with what its resumed run prints for the same requests.

    flaky     httpx GET /flaky until it answers (the first attempt's connection is
              closed: the agent retries, as an SDK does), then GET /final
    flaky-requests   the same with requests
    flaky-async      the same with httpx.AsyncClient (async def main)
    sms       POST /v1/messages: a messaging API's "send", not a model call
    upload    httpx multipart upload (files=), twice the same file, then GET /final
    upload-requests  the same with requests
    file-requests    requests POST /upload of a file object, then of a generator (the
                     file's content from RHA_CONTENT), then GET /final
    gzip      httpx GET /gzip (gzip body, two Set-Cookie), HEAD /gzip, GET /empty (204),
              GET /gzip read raw (the encoded bytes)
    gzip-requests    the same with requests
    redirect  httpx POST /redirect, follow_redirects: 303, then GET /final
    presigned httpx GET /presign, redirected to a presigned URL (X-Amz-Signature=)
    refused   requests GET to a closed port with ?api_key=<the key in ./secret.txt>
    webhook   httpx POST to a Slack webhook URL (its token read from ./secret.txt), the
              stub as the proxy, then GET /final
    openai-retries   the openai SDK (max_retries=3) asks twice: 500, 429, then answers
    asyncio-run      a sync main() running httpx.AsyncClient requests in asyncio.run()
    token     an OAuth token fetched with httpx (JSON) and requests (gzip JSON)
    threads   three POST /v1/messages from a thread pool (not recorded), then GET /final
    gather    async: two tasks (asyncio.gather), each GET /slow twice; the answers
              arrive in another order than the requests were sent
"""

import asyncio
import gzip
import hashlib
import json
import os
import sys

from snapstate import snapshot

SCENARIO = sys.argv[1]
URL = sys.argv[2]


def say(*parts: object) -> None:
    print(*parts, flush=True)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _flaky_httpx() -> None:
    import httpx

    with httpx.Client(timeout=10) as client:
        for attempt in range(1, 4):
            try:
                response = client.get(URL + "/flaky")
            except httpx.TransportError as exc:
                say(f"attempt {attempt}: {type(exc).__name__}")
                continue
            say(f"attempt {attempt}: {response.status_code} {response.text}")
            break
        say("final:", client.get(URL + "/final").text)


async def _flaky_async() -> None:
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:
        for attempt in range(1, 4):
            try:
                response = await client.get(URL + "/flaky")
            except httpx.TransportError as exc:
                say(f"attempt {attempt}: {type(exc).__name__}")
                continue
            say(f"attempt {attempt}: {response.status_code} {response.text}")
            break
        say("final:", (await client.get(URL + "/final")).text)


def _flaky_requests() -> None:
    import requests

    with requests.Session() as session:
        for attempt in range(1, 4):
            try:
                response = session.get(URL + "/flaky", timeout=10)
            except requests.RequestException as exc:
                say(f"attempt {attempt}: {type(exc).__name__}")
                continue
            say(f"attempt {attempt}: {response.status_code} {response.text}")
            break
        say("final:", session.get(URL + "/final", timeout=10).text)


def _sms() -> None:
    import httpx

    with httpx.Client(timeout=10) as client:
        message = {"to": "+15550100", "from": "shop", "channel": "sms", "text": "shipped"}
        say("sms:", client.post(URL + "/v1/messages", json=message).text)


def _upload(library: str) -> None:
    data = b"id,qty\n1,2\n" * 50
    if library == "httpx":
        import httpx

        with httpx.Client(timeout=10) as client:
            for _ in range(2):
                files = {"file": ("order.csv", data, "text/csv")}
                say("upload:", client.post(URL + "/upload", files=files, data={"x": "1"}).text)
            say("final:", client.get(URL + "/final").text)
    else:
        import requests

        with requests.Session() as session:
            for _ in range(2):
                files = {"file": ("order.csv", data, "text/csv")}
                response = session.post(URL + "/upload", files=files, data={"x": "1"}, timeout=10)
                say("upload:", response.text)
            say("final:", session.get(URL + "/final", timeout=10).text)


def _file_requests() -> None:
    import requests

    path = "order.csv"
    with open(path, "w") as f:
        f.write(os.environ.get("RHA_CONTENT", "id,qty\n1,2\n"))
    with requests.Session() as session:
        with open(path, "rb") as f:
            say("file:", session.post(URL + "/upload", data=f, timeout=10).text)

        def lines():
            with open(path, "rb") as f:
                yield from f

        say("generator:", session.post(URL + "/upload", data=lines(), timeout=10).text)
        say("final:", session.get(URL + "/final", timeout=10).text)


def _gzip_httpx() -> None:
    import httpx

    with httpx.Client(timeout=10) as client:
        response = client.get(URL + "/gzip")
        say("gzip:", response.status_code, digest(response.content), response.json()["gz"])
        say("headers:", json.dumps([(k.decode(), v.decode()) for k, v in response.headers.raw]))
        say("cookies:", sorted(client.cookies.items()))
        head = client.head(URL + "/gzip")
        say("head:", head.status_code, head.headers.get("content-length"), head.content)
        empty = client.get(URL + "/empty")
        say("empty:", empty.status_code, empty.headers["x-n"], empty.content)
        with client.stream("GET", URL + "/gzip") as response:  # the bytes as sent
            raw = b"".join(response.iter_raw())
        say("raw:", raw[:2] == b"\x1f\x8b", digest(gzip.decompress(raw)))


def _gzip_requests() -> None:
    import requests

    with requests.Session() as session:
        response = session.get(URL + "/gzip", timeout=10)
        say("gzip:", response.status_code, digest(response.content), response.json()["gz"])
        say("headers:", json.dumps(list(response.raw.headers.items())))
        say("cookies:", sorted(session.cookies.items()))
        head = session.head(URL + "/gzip", timeout=10)
        say("head:", head.status_code, head.headers.get("content-length"), head.content)
        empty = session.get(URL + "/empty", timeout=10)
        say("empty:", empty.status_code, empty.headers["x-n"], empty.content)
        with session.get(URL + "/gzip", stream=True, timeout=10) as response:
            raw = response.raw.read()  # the bytes as sent (shutil.copyfileobj(r.raw, f))
        say("raw:", raw[:2] == b"\x1f\x8b", digest(gzip.decompress(raw)))


def _redirect() -> None:
    import httpx

    with httpx.Client(timeout=10, follow_redirects=True) as client:
        response = client.post(URL + "/redirect", json={"go": 1})
        say("redirect:", [r.status_code for r in response.history], response.text)
        say("final:", client.get(URL + "/final").text)


def _presigned() -> None:
    import httpx

    with httpx.Client(timeout=10, follow_redirects=True) as client:
        response = client.get(URL + "/presign")
        say("presigned:", [r.status_code for r in response.history], response.text)


def _refused() -> None:
    import requests

    with open("secret.txt") as f:  # a config file's key: no environment variable's value
        secret = f.read().strip()
    try:
        requests.get("http://127.0.0.1:9/x", params={"api_key": secret}, timeout=5)
    except requests.RequestException as exc:
        say("refused:", type(exc).__name__)


def _webhook() -> None:
    import httpx

    with open("secret.txt") as f:  # the webhook's URL is its credential
        token = f.read().strip()
    with httpx.Client(timeout=10, proxy=URL) as client:  # the stub stands for Slack
        hook = f"http://hooks.slack.com/services/T0001/B0001/{token}"
        say("webhook:", client.post(hook, json={"text": "order placed"}).text)
        say("final:", client.get(URL + "/final").text)


def _openai_retries() -> None:
    import openai

    client = openai.OpenAI(base_url=URL + "/v1", api_key="sk-stub", max_retries=3)
    for _ in range(2):
        answer = client.chat.completions.create(
            model="stub-model", messages=[{"role": "user", "content": "hello"}]
        )
        say("chat:", answer.choices[0].message.content)


def _asyncio_run() -> None:
    import httpx

    async def fetch() -> str:
        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(URL + "/final")).text

    say("asyncio.run:", asyncio.run(fetch()))
    say("asyncio.run:", asyncio.run(fetch()))


def _token() -> None:
    import httpx
    import requests

    grant = {"grant_type": "client_credentials", "client_id": "agent"}
    with httpx.Client(timeout=10) as client:
        token = client.post(URL + "/oauth/token", data=grant).json()["access_token"]
        say("httpx:", digest(token.encode()))
    with requests.Session() as session:
        answer = session.post(URL + "/oauth/token?encoding=gzip", data=grant, timeout=10)
        say("requests:", digest(answer.json()["access_token"].encode()))
        say("final:", session.get(URL + "/final", timeout=10).text)


def _threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def send(to: str) -> str:
        with httpx.Client(timeout=10) as client:
            return client.post(URL + "/v1/messages", json={"to": to, "text": "hi"}).text

    with ThreadPoolExecutor(2) as pool:
        say("threads:", sorted(pool.map(send, ["+1", "+2", "+3"])))
    with httpx.Client(timeout=10) as client:
        say("final:", client.get(URL + "/final").text)


async def _gather() -> None:
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:

        async def two(name: str, first_ms: int, second_ms: int) -> list[str]:
            got = []
            for ms in (first_ms, second_ms):
                r = await client.get(URL + "/slow", params={"id": name, "ms": ms})
                got.append(r.text)
                say(f"{name}: {r.text}")
            return got

        results = await asyncio.gather(two("a", 150, 10), two("b", 10, 10))
        say("gathered:", results)


SYNC = {
    "flaky": _flaky_httpx,
    "flaky-requests": _flaky_requests,
    "sms": _sms,
    "upload": lambda: _upload("httpx"),
    "upload-requests": lambda: _upload("requests"),
    "file-requests": _file_requests,
    "gzip": _gzip_httpx,
    "gzip-requests": _gzip_requests,
    "redirect": _redirect,
    "refused": _refused,
    "presigned": _presigned,
    "threads": _threads,
    "token": _token,
    "asyncio-run": _asyncio_run,
    "openai-retries": _openai_retries,
    "webhook": _webhook,
}

ASYNC = {"gather": _gather, "flaky-async": _flaky_async}

if SCENARIO in ASYNC:

    async def main():
        await snapshot("start")
        await ASYNC[SCENARIO]()
        await snapshot("end")

else:

    def main():
        snapshot("start")
        SYNC[SCENARIO]()
        snapshot("end")
