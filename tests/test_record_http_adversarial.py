"""record_http under the requests a demanding user's agent sends: transport errors an
agent (or its SDK) retries, a messaging API at a model call's path, multipart and
streamed uploads, gzip bodies with duplicate headers, HEAD and 204, redirects,
credentials in a failing URL, concurrent async tasks. Real snaprun processes SIGKILLed
at the effect fault points and resumed, against a counting stub on 127.0.0.1
(tests/http_adversarial_stub.py) and tests/agents/record_http_adversarial_agent.py,
which prints one line per request as it gets the answer."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest
from helpers import AGENTS, snaprun
from http_adversarial_stub import AdversarialStub
from http_record_stub import RecordStub
from store_bytes import chunk_contents, zstd_frames

from snapstate.resources._http_record import Exchange, body_digest, redacted_url, url_secrets
from snapstate.runtime._http_record import Recording

AGENT = AGENTS / "record_http_adversarial_agent.py"
RECORDING_AGENT = AGENTS / "record_http_agent.py"


@pytest.fixture
def stub():
    server = AdversarialStub().start()
    yield server
    server.stop()


def _run(tmp: Path, scenario: str, url: str, *, fault=None, env=None):
    store = tmp / "store"
    args = ("run", "--store", store, "--record-http", "--job", "j", AGENT, scenario, url)
    return snaprun(*args, cwd=tmp, fault=fault, env=env)


def _resume(tmp: Path, env=None):
    return snaprun("resume", "--store", tmp / "store", "j", cwd=tmp, env=env)


def _effects(tmp: Path) -> list[dict]:
    run = snaprun("effects", "--store", tmp / "store", "--json", "j", cwd=tmp)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _killed_then_resumed(tmp: Path, scenario: str, url: str, fault: str):
    killed = _run(tmp, scenario, url, fault=fault)
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp)
    assert resumed.returncode == 0, resumed.stderr
    said = killed.stdout.splitlines()
    assert said and resumed.stdout.splitlines()[: len(said)] == said  # the same bytes again
    return said, resumed.stdout.splitlines()


@pytest.mark.parametrize("scenario", ["flaky", "flaky-requests", "flaky-async"])
def test_a_transport_error_is_the_answer_re_executed_code_gets_again(tmp_path, stub, scenario):
    """Crash window: after the agent's own retry of GET /flaky was answered (the first
    attempt's connection was closed: a transport error), before the next snapshot.
    The failed attempt is served again as the same error (not sent again as a failed
    read would be): the re-executed code retries as it did, gets the recorded answer,
    and its next request meets its own row. Sent again, the first attempt would now
    succeed, the agent would skip its retry, and GET /final would meet /flaky's row."""
    said, again = _killed_then_resumed(tmp_path, scenario, stub.url, "effect-after-confirm:3")
    assert said == ["attempt 1: " + said[0].split(": ")[1], 'attempt 2: 200 {"flaky": 2}']
    assert said[0].endswith(("RemoteProtocolError", "ConnectionError"))
    assert again[2] == 'final: {"final": 1}'
    assert stub.count("GET /flaky") == 2 and stub.count("GET /final") == 1
    rows = _effects(tmp_path)
    assert [r["state"] for r in rows] == ["failed", "confirmed", "confirmed"]
    assert rows[0]["attempts"] == 1


def test_a_send_at_a_model_path_that_is_no_model_call_is_a_write(tmp_path, stub):
    """Crash window: after POST /v1/messages of a messaging API (an SMS: no model in its
    body, no SDK header, not a model host) was sent, before its response was recorded.
    It is a write, not Anthropic's Messages API: the resumed job parks (exit 4) and the
    message is not sent a second time."""
    killed = _run(tmp_path, "sms", stub.url, fault="effect-after-send:1")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 4, resumed.stderr
    assert "snaprun reconcile j 1" in resumed.stderr and "Traceback" not in resumed.stderr
    assert stub.count("POST /v1/messages") == 1
    [row] = _effects(tmp_path)
    assert (row["kind"], row["state"]) == ("write", "ambiguous")


def _exchange(url: str, body: bytes | None, **headers: str) -> Exchange:
    return Exchange("POST", url, body, list(headers.items()))


def test_model_calls_are_told_from_other_requests_at_their_paths():
    """The model-call paths are reads only with a sign of a model call: the provider's
    host, Azure's deployment path, an official SDK's header, or a "model" in the body."""
    recording = Recording()
    chat = b'{"model": "gpt-4o", "messages": []}'
    sms = b'{"to": "+15550100", "text": "a model answer"}'
    reads = [
        _exchange("http://127.0.0.1:8000/v1/chat/completions", chat),
        _exchange("https://api.anthropic.com/v1/messages", sms),
        _exchange("https://x.openai.azure.com/openai/deployments/d/chat/completions", b"{}"),
        _exchange("http://proxy/v1/messages", b"{}", **{"anthropic-version": "2023-06-01"}),
        _exchange("http://proxy/v1/embeddings", b"{}", **{"X-Stainless-Lang": "python"}),
    ]
    writes = [
        _exchange("https://api.vonage.example/v1/messages", sms),
        _exchange("https://api.vonage.example/v1/messages", b'{"kind": "model"}'),
        _exchange("https://api.vonage.example/v1/messages", None),
    ]
    assert [recording.is_read(e) for e in reads] == [True] * len(reads)
    assert [recording.is_read(e) for e in writes] == [False] * len(writes)


@pytest.mark.parametrize("scenario", ["upload", "upload-requests"])
def test_a_multipart_upload_is_served_after_a_restore(tmp_path, stub, scenario):
    """Crash window: after two multipart uploads of the same file were answered, before
    the next snapshot. httpx and requests draw a new random boundary for every
    request: the re-executed uploads still match their rows (the boundary is not part
    of what is matched), are served, and each is sent once."""
    said, again = _killed_then_resumed(tmp_path, scenario, stub.url, "effect-after-confirm:3")
    assert said == ['upload: {"n": 1, "size": 802}', 'upload: {"n": 2, "size": 802}']
    assert stub.count("POST /upload") == 2 and stub.count("GET /final") == 1
    assert len({r["args"] for r in _effects(tmp_path)[:2]}) == 1


def test_the_boundary_is_all_that_multipart_matching_leaves_out():
    def upload(boundary: str, content: bytes) -> str:
        body = b"--%s\r\ncontent\r\n\r\n%s\r\n--%s--\r\n" % (
            boundary.encode(),
            content,
            boundary.encode(),
        )
        kind = f"multipart/form-data; boundary={boundary}"
        return body_digest(
            _exchange("http://h/upload", body, **{"Content-Type": kind}).matched_body
        )

    assert upload("a1b2", b"one") == upload("ffee99", b"one")
    assert upload("a1b2", b"one") != upload("a1b2", b"two")


def test_a_file_or_generator_body_is_matched_by_its_content(tmp_path, stub):
    """Crash window: after a file object was uploaded with requests (data=open(...)),
    before the next snapshot. Its content is matched like any body: re-executed with
    another content at that position, the run stops (exit 1, a DivergenceError)
    instead of handing the other file the recorded answer; with the same content, the
    file and the generator uploads are served and each sent once."""
    killed = _run(tmp_path, "file-requests", stub.url, fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    other = _resume(tmp_path, env={"RHA_CONTENT": "id,qty\n1,3\n"})
    assert other.returncode == 1, other.stderr
    assert "DivergenceError" in other.stderr and "Traceback" not in other.stderr
    assert stub.count("POST /upload") == 2
    same = _resume(tmp_path)
    assert same.returncode == 0, same.stderr
    assert killed.stdout.splitlines() == ['file: {"n": 1, "size": 11}']
    assert same.stdout.splitlines()[1:] == [
        'generator: {"n": 2, "size": 11}',
        'final: {"final": 1}',
    ]
    assert stub.count("POST /upload") == 2 and stub.count("GET /final") == 1
    rows = _effects(tmp_path)
    assert all("streamed body" not in r["args"] for r in rows)


@pytest.mark.parametrize("scenario", ["gzip", "gzip-requests"])
def test_gzip_bodies_duplicate_headers_head_and_204_are_served_byte_for_byte(
    tmp_path, stub, scenario
):
    """Crash window: after GET /gzip (a gzip body; two Set-Cookie headers among others
    in an unusual order), HEAD /gzip, GET /empty (204) and GET /gzip read raw were
    answered, before the next snapshot. The re-executed code gets the same decoded
    content, the same header list in order with both cookies (Date included: served,
    not sent), the same cookie jar, HEAD's and 204's empty bodies, and the raw read's
    gzip bytes; nothing is sent again."""
    said, again = _killed_then_resumed(tmp_path, scenario, stub.url, "effect-after-confirm:4")
    assert said[0].startswith("gzip: 200 ") and said[0].endswith(" 1")
    headers = json.loads(said[1].split(": ", 1)[1])
    cookies = [v for k, v in headers if k.lower() == "set-cookie"]
    assert cookies == ["a=apple-1; Path=/", "b=banana-1; Path=/"]
    assert said[2] == "cookies: [('a', 'apple-1'), ('b', 'banana-1')]"
    assert said[3] == "head: 200 42 b''" and said[4] == "empty: 204 1 b''"
    # read raw, the body is the gzip stream sent (as without record_http), served too
    second = json.dumps({"gz": 2, "pad": "x" * 200}).encode()  # the stub's second answer
    assert again[5] == f"raw: True {hashlib.sha256(second).hexdigest()[:16]}"
    assert stub.count("GET /gzip") == 2 and stub.count("HEAD /gzip") == 1
    assert stub.count("GET /empty") == 1


def test_a_redirect_is_one_row_per_exchange(tmp_path, stub):
    """Crash window: after POST /redirect (303, followed by httpx to GET /final) and a
    second GET /final were answered, before the next snapshot. Each HTTP exchange of
    the redirect is its own row: the resumed run serves all three, sends none."""
    said, again = _killed_then_resumed(tmp_path, "redirect", stub.url, "effect-after-confirm:3")
    assert said == ['redirect: [303] {"final": 1}'] and again[1] == 'final: {"final": 2}'
    assert stub.count("POST /redirect") == 1 and stub.count("GET /final") == 2
    assert [r["name"] for r in _effects(tmp_path)] == ["http.POST", "http.GET", "http.GET"]


def _store_bytes(store: Path) -> list[bytes]:
    files = [p.read_bytes() for p in store.rglob("*") if p.is_file()]
    return files + chunk_contents(store) + [f for d in files for f in zstd_frames(d)]


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_failing_request_stores_no_credential_of_its_url(tmp_path, encrypted):
    """requests names the URL, query included, in its connection errors: the recorded
    error (the row's result and its note) has the api_key= value replaced by ***, and no
    byte of the store holds it (the secret is no environment variable's value, so
    nothing else would catch it)."""
    if encrypted:
        init = snaprun("init", "--store", tmp_path / "store", "--encrypt", cwd=tmp_path)
        assert init.returncode == 0, init.stderr
    (tmp_path / "secret.txt").write_text("sk-from-a-config-file-5ecret42\n")
    run = _run(tmp_path, "refused", "http://127.0.0.1:9")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "refused: ConnectionError\n"
    [row] = _effects(tmp_path)
    assert row["state"] == "failed" and "api_key=***" in row["args"]
    assert "5ecret42" not in json.dumps(row)
    assert not any(b"5ecret42" in data for data in _store_bytes(tmp_path / "store"))


def test_a_token_endpoint_s_answer_is_sealed(tmp_path, stub):
    """An OAuth token endpoint's answer (access_token in a JSON body; plain from httpx,
    gzip-encoded to requests) is a credential: its body is sealed in the ledger, in no
    byte of the store (neither the token nor the gzip stream sent), and still served.
    Crash window: after both were answered, before the next snapshot."""
    said, again = _killed_then_resumed(tmp_path, "token", stub.url, "effect-after-confirm:3")
    token = hashlib.sha256(b"ya29.t0ken-1-zQx").hexdigest()[:16]
    assert said[0] == f"httpx: {token}" and said[1].startswith("requests: ")
    assert stub.count("POST /oauth/token") == 2 and stub.count("GET /final") == 1
    store = _store_bytes(tmp_path / "store")
    for needle in (b"t0ken-1-zQx", b"t0ken-2-zQx", stub.sent[1]):
        assert not any(needle in data for data in store), needle
    assert b'{"final": 1}' in b"".join(store)  # positive control: other bodies in clear
    assert [r["status"] for r in _effects(tmp_path)] == [200, 200, 200]  # read inertly


def test_a_redirect_to_a_presigned_url_stores_no_signature(tmp_path, stub):
    """A 302 whose Location is a presigned URL (X-Amz-Signature=): the signature is in
    no byte of the store (the Location header sealed, the followed request's URL
    redacted), and the redirect is served again. Crash window: after the followed
    request was answered, before the next snapshot."""
    killed = _run(tmp_path, "presigned", stub.url, fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == 'presigned: [302] {"final": 1}\n'
    assert stub.count("GET /presign") == 1 and stub.count("GET /final") == 1
    assert not any(b"5ig0presigned0f00" in data for data in _store_bytes(tmp_path / "store"))


def test_url_secrets_are_what_redaction_hides():
    url = "https://user:pa%24s@h/p?api_key=sk%2Fabc&q=pumps&sig=xyz"
    assert set(url_secrets(url)) == {"sk%2Fabc", "pa%24s", "sk/abc", "pa$s", "xyz"}
    assert redacted_url(url) == "https://user:***@h/p?api_key=***&q=pumps&sig=***"


def test_concurrent_async_tasks_each_get_their_own_answers(tmp_path, stub):
    """Crash window: after task a's first request (sent first, answered last: task b's
    two requests were answered meanwhile) was recorded, before task a's second. Rows
    are per task and position, not per arrival: the resumed run serves a its own
    answer and b both of its own, then sends a's second request (the only one new)."""
    killed = _run(tmp_path, "gather", stub.url, fault="effect-after-confirm:1#1")
    assert killed.returncode == -9, killed.stderr
    assert killed.stdout.splitlines() == ['b: {"id": "b", "n": 2}', 'b: {"id": "b", "n": 3}']
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    gathered = ast.literal_eval(resumed.stdout.splitlines()[-1].split(": ", 1)[1])
    answers = [[json.loads(t) for t in task] for task in gathered]
    assert [[a["id"] for a in task] for task in answers] == [["a", "a"], ["b", "b"]]
    assert [a["n"] for a in answers[0]][0] == 1 and [a["n"] for a in answers[1]] == [2, 3]
    assert stub.count("GET /slow") == 4


def test_requests_from_a_thread_pool_are_named_as_not_recorded(tmp_path, stub):
    """A thread pool's requests (the agent's own ThreadPoolExecutor, as a framework's
    batch() uses) are none of the job's tasks: not recorded, which the run says once on
    stderr, naming the thread and the consequence; the job's own request is recorded."""
    run = _run(tmp_path, "threads", stub.url)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "record_http: a request" in line]
    assert len(warnings) == 1 and "ThreadPoolExecutor" in warnings[0]
    assert "sends it again" in warnings[0] and "snapstate.spawn()" in warnings[0]
    assert stub.count("POST /v1/messages") == 3
    assert [r["args"].split("/")[-1] for r in _effects(tmp_path)] == ["final, no body"]
    log = snaprun("log", "--store", tmp_path / "store", "--json", "j", cwd=tmp_path)
    assert log.returncode == 0, log.stderr
    noted = [e for e in json.loads(log.stdout) if e["kind"] == "http-not-recorded"]
    assert len(noted) == 1 and "ThreadPoolExecutor" in noted[0]["detail"]


def test_an_event_loop_the_job_does_not_own_sends_as_before_and_says_so(tmp_path, stub):
    """A sync main() awaiting httpx.AsyncClient requests in asyncio.run() (the job owns
    no such loop: its awaits can be neither frozen nor recorded): the requests go out as
    without record_http, and the run says once that they are not recorded (they used
    to stop the job with an EffectOutsideJob traceback)."""
    run = _run(tmp_path, "asyncio-run", stub.url)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        'asyncio.run: {"final": 1}',
        'asyncio.run: {"final": 2}',
    ]
    warnings = [line for line in run.stderr.splitlines() if "record_http: a request" in line]
    assert len(warnings) == 1 and "an event loop the job does not own" in warnings[0]
    assert "Traceback" not in run.stderr and _effects(tmp_path) == []


def test_a_job_s_own_requests_raise_no_thread_warning(tmp_path, stub):
    """Requests sent by async tasks, by spawned tasks (sent on the effect pool) and by
    an @effect's code there are the job's own: no warning."""
    run = _run(tmp_path, "gather", stub.url)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr and len(_effects(tmp_path)) == 4
    other = RecordStub().start()
    try:
        steps = ("tasks", "effect")
        args = ("run", "--store", tmp_path / "s2", "--record-http", "--job", "t", RECORDING_AGENT)
        run = snaprun(*args, "httpx", other.url, *steps, cwd=tmp_path)
    finally:
        other.stop()
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr and other.count("GET /search") == 2


def test_a_webhook_url_is_a_credential(tmp_path, stub):
    """A Slack webhook's URL is its credential: shown as /services/***, in no byte of the
    store, and still matched. Crash window: after the webhook's post was answered,
    before the next snapshot; resumed with another webhook configured, the re-executed
    post is a mismatch (exit 1), not handed the other webhook's answer; with the same
    one, it is served and sent once."""
    token = "XyZ0webhook0token0Qw3rTy"
    (tmp_path / "secret.txt").write_text(token)
    killed = _run(tmp_path, "webhook", stub.url, fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    assert stub.count("POST /services/T0001/B0001/" + token) == 1
    [hook, final] = _effects(tmp_path)
    assert hook["args"].startswith("http://hooks.slack.com/services/***, ")
    assert not any(token.encode() in data for data in _store_bytes(tmp_path / "store"))
    (tmp_path / "secret.txt").write_text("AnotherWebhookToken12345")
    other = _resume(tmp_path)
    assert other.returncode == 1, other.stderr
    assert "DivergenceError" in other.stderr and "Traceback" not in other.stderr
    (tmp_path / "secret.txt").write_text(token)
    same = _resume(tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[0] == "webhook: ok"
    assert stub.count("POST /services/T0001/B0001/" + token) == 1
    assert len(stub.requests) == 2  # the webhook's post and GET /final, once each


def test_webhook_and_bot_urls_are_redacted():
    assert redacted_url("https://discord.com/api/webhooks/123/abcDEF-tok?wait=true") == (
        "https://discord.com/api/webhooks/123/***?wait=true"
    )
    assert redacted_url("https://api.telegram.org/bot123:AAH-tok/sendMessage") == (
        "https://api.telegram.org/bot***/sendMessage"
    )
    assert (
        redacted_url("https://example.com/services/T/B/x") == "https://example.com/services/T/B/x"
    )


def test_the_sdk_s_own_retries_are_rows_served_in_order(tmp_path, stub):
    """The openai SDK retries a 500 and a 429 itself: each attempt is a row (the error
    answers recorded as they are). Crash window: after the second chat completion was
    answered, before the next snapshot. Re-executed, the SDK meets the same 500 and
    429, retries the same way, and gets the same answers; nothing is sent again."""
    said, again = _killed_then_resumed(
        tmp_path, "openai-retries", stub.url, "effect-after-confirm:4"
    )
    assert said == ["chat: answer #3"] and again == ["chat: answer #3", "chat: answer #4"]
    assert stub.count("POST /v1/chat/completions") == 4
    rows = _effects(tmp_path)
    assert [(r["kind"], r["status"]) for r in rows] == [
        ("read", 500),
        ("read", 429),
        ("read", 200),
        ("read", 200),
    ]
