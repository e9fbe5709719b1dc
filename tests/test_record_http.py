"""HTTP recorded at the transport (`snaprun run --record-http`, `snapstate.record_http()`):
requests sent through httpx (sync and async), requests and the real openai SDK become
ledger entries without @effect. Real snaprun processes SIGKILLed at the effect fault
points and right after snapshots, resumed in new processes, against a counting stub
server on 127.0.0.1 (tests/http_record_stub.py) and tests/agents/record_http_agent.py,
which prints the digest of every body it got."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from helpers import AGENTS, snaprun
from http_record_stub import RecordStub
from store_bytes import chunk_contents, snapshot_body, zstd_frames

AGENT = AGENTS / "record_http_agent.py"
TOKEN = "sk-test-5ecret-rh-0123456789abcdef"
ENV = {"RH_TOKEN": TOKEN}
NAMES = {
    "chat": "POST /v1/chat/completions",
    "stream": "POST /v1/chat/completions",
    "search": "GET /search",
    "charge": "POST /charge",
    "order": "POST /order",
    "cookie": "POST /cookie",
}


@pytest.fixture
def stub():
    server = RecordStub().start()
    yield server
    server.stop()


def _run(
    tmp: Path,
    url: str,
    client: str,
    steps=(),
    *,
    fault=None,
    job="rh",
    flags=("--record-http",),
    env=None,
):
    return snaprun(
        "run",
        "--store",
        tmp / "store",
        *flags,
        "--job",
        job,
        AGENT,
        client,
        url,
        *steps,
        cwd=tmp,
        fault=fault,
        env={**ENV, **(env or {})},
    )


def _resume(tmp: Path, job="rh", env=None):
    return snaprun("resume", "--store", tmp / "store", job, cwd=tmp, env={**ENV, **(env or {})})


def _effects(tmp: Path, job="rh") -> list[dict]:
    run = snaprun("effects", "--store", tmp / "store", "--json", job, cwd=tmp)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


_FIRST: dict[tuple[str, tuple[str, ...]], str] = {}  # (client, steps) -> its output


def _uninterrupted(tmp: Path, client: str, steps=()) -> str:
    """The agent's output on a fresh stub, run without a kill (once per client and
    steps in a test process: the stub's answers are the same on every fresh stub)."""
    key = (client, tuple(steps))
    if key not in _FIRST:
        server = RecordStub().start()
        try:
            first = tmp / "first"
            first.mkdir()
            run = _run(first, server.url, client, steps)
            assert run.returncode == 0, run.stderr
            _FIRST[key] = run.stdout
        finally:
            server.stop()
    return _FIRST[key]


def _store_files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "client, fault",
    [
        ("httpx", "effect-after-confirm:6"),  # resumed at "mid": search...order served
        ("httpx", "effect-after-confirm:3"),  # resumed at "start": chat, stream, cookie
        ("httpx", "after-snapshot:2"),  # right after "mid": nothing to serve
        ("async", "effect-after-confirm:6"),
        ("async", "effect-after-confirm:3"),
        ("requests", "effect-after-confirm:6"),
        ("requests", "effect-after-confirm:3"),
    ],
)
def test_a_killed_job_gets_every_response_again_and_sends_each_request_once(
    tmp_path, stub, client, fault
):
    """Crash window: right after a recorded request's response was made durable (or
    right after a snapshot), before the next snapshot. The resumed process re-executes
    the requests after the snapshot it resumes from: each is answered from the ledger,
    so the server sees every request exactly once, and the agent gets the same bytes
    as an uninterrupted run (streamed chunks included, as chunks)."""
    expected = _uninterrupted(tmp_path, client)
    killed = _run(tmp_path, stub.url, client, fault=fault)
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == expected  # the cookie jar too (a served Set-Cookie)
    output = json.loads(expected)
    assert output[1].startswith("stream:True:") and output[-1] == "cookies:['session']"
    for step in ("search", "charge", "order", "cookie"):
        assert stub.count(NAMES[step]) == 1, (step, stub.counts)
    assert stub.count("POST /v1/chat/completions") == 2  # chat and stream, once each
    rows = _effects(tmp_path)
    assert [r["name"] for r in rows] == ["http.POST"] * 3 + ["http.GET"] + ["http.POST"] * 2
    assert all(r["state"] == "confirmed" and r["status"] == 200 for r in rows)


def test_the_openai_sdk_is_recorded_and_served(tmp_path, stub):
    """Crash window: after the SDK's streamed chat completion was recorded (effect 2),
    before the next snapshot. The real openai SDK (its own httpx client) re-executes
    both calls from the "start" snapshot: answered from the ledger, the same text and
    usage, streamed pieces included; `snaprun effects` shows the model and tokens of
    each call and `snaprun stats` the calls and tokens the ledger saved."""
    steps = ["chat", "stream"]
    expected = _uninterrupted(tmp_path, "openai", steps)
    killed = _run(tmp_path, stub.url, "openai", steps, fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == expected
    assert "usage=18" in expected
    assert stub.count("POST /v1/chat/completions") == 2
    rows = _effects(tmp_path)
    assert [(r["model"], r["input_tokens"], r["output_tokens"], r["status"]) for r in rows] == [
        ("stub-model", 11, 7, 200),
        ("stub-model", 11, 7, 200),
    ]
    stats = snaprun("stats", "--store", tmp_path / "store", "--json", "rh", cwd=tmp_path)
    saved = json.loads(stats.stdout)
    assert (
        saved["http_saved_calls"],
        saved["http_saved_input_tokens"],
        saved["http_saved_output_tokens"],
    ) == (2, 22, 14)
    table = snaprun("effects", "--store", tmp_path / "store", "rh", cwd=tmp_path)
    assert "200 stub-model 11/7 tokens" in table.stdout


@pytest.mark.parametrize("step", ["chat", "search"])
def test_a_read_killed_in_flight_is_sent_again(tmp_path, stub, step):
    """Crash window: after a read (a model call, a GET) was sent and answered, before its
    response was recorded (effect-after-send). Its outcome is unknown, and a read is
    simply sent again: the server sees it twice, the job finishes."""
    killed = _run(tmp_path, stub.url, "httpx", [step], fault="effect-after-send:1")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert stub.count(NAMES[step]) == 2
    [row] = _effects(tmp_path)
    assert (row["kind"], row["state"], row["attempts"]) == ("read", "confirmed", 2)


def test_a_plain_write_killed_after_sending_parks(tmp_path, stub):
    """Crash window: after POST /order (no idempotency key) was sent, before its response
    was recorded. Its outcome is unknown: the resumed job parks (exit 4) naming
    `snaprun reconcile`, and the order is not sent again."""
    killed = _run(tmp_path, stub.url, "httpx", ["order"], fault="effect-after-send:1")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 4, resumed.stderr
    assert "snaprun reconcile rh 1" in resumed.stderr and "Traceback" not in resumed.stderr
    assert stub.count("POST /order") == 1
    [row] = _effects(tmp_path)
    assert (row["kind"], row["state"]) == ("write", "ambiguous")
    # reconciled as committed with the provider's answer: the agent gets that answer
    answer = '{"status": 201, "body": {"order": 99}}'
    store = tmp_path / "store"
    reconcile = snaprun(
        "reconcile", "--store", store, "rh", "1", "--committed", "--result", answer, cwd=tmp_path
    )
    assert reconcile.returncode == 0, reconcile.stderr
    done = _resume(tmp_path)
    assert done.returncode == 0, done.stderr
    body = hashlib.sha256(json.dumps({"order": 99}).encode()).hexdigest()[:16]
    assert json.loads(done.stdout)[0] == f"order:201:{body}"
    assert stub.count("POST /order") == 1


def test_a_write_reconciled_without_a_response_is_refused(tmp_path, stub):
    """Crash window: as above; reconciled --committed without --result, the ledger holds
    no response to hand back: the resumed run stops (exit 1) saying how to reconcile
    it with the provider's answer, and sends nothing."""
    killed = _run(tmp_path, stub.url, "httpx", ["order"], fault="effect-after-send:1")
    assert killed.returncode == -9, killed.stderr
    assert _resume(tmp_path).returncode == 4
    store = tmp_path / "store"
    assert (
        snaprun("reconcile", "--store", store, "rh", "1", "--committed", cwd=tmp_path).returncode
        == 0
    )
    refused = _resume(tmp_path)
    assert refused.returncode == 1, refused.stderr
    assert '--result \'{"status": 200' in refused.stderr and "Traceback" not in refused.stderr
    assert stub.count("POST /order") == 1


def test_a_write_with_an_idempotency_key_is_sent_again_with_the_same_key(tmp_path, stub):
    """Crash window: after POST /charge (Idempotency-Key drawn by uuid.uuid4(), not
    recorded) was sent, before its response was recorded. The re-executed code draws
    another key; the request is sent again with the first attempt's key, so the
    provider answers the same charge and charges once."""
    killed = _run(tmp_path, stub.url, "httpx", ["charge"], fault="effect-after-send:1")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    keys = [r["headers"]["idempotency-key"] for r in stub.requests]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert list(stub.charges) == keys[:1]
    [row] = _effects(tmp_path)
    assert (row["state"], row["attempts"]) == ("confirmed", 2)


def test_a_re_executed_request_that_does_not_match_is_refused(tmp_path, stub):
    """Crash window: after the chat request was recorded, before the "mid" snapshot; the
    resumed code sends another body at that position. The run stops there (exit 1)
    naming both requests; nothing is sent and no recorded answer is handed back."""
    killed = _run(
        tmp_path, stub.url, "httpx", ["chat", "search", "order"], fault="effect-after-confirm:2"
    )
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path, env={"RH_VARIANT": " but different"})
    assert resumed.returncode == 1, resumed.stderr
    assert "Traceback" not in resumed.stderr and resumed.stdout == ""
    assert "DivergenceError" in resumed.stderr and "/v1/chat/completions" in resumed.stderr
    assert "record_http" in resumed.stderr
    assert stub.count("POST /v1/chat/completions") == 1 and stub.count("GET /search") == 1


def test_record_http_called_by_the_agent_is_kept_in_its_snapshots(tmp_path, stub):
    """Crash window: as the first test's, with recording turned on by the agent's own
    record_http() call (no --record-http) before the "mid" snapshot it resumes from: the
    frozen state keeps it, and the re-executed writes are served, not sent again."""
    expected = _uninterrupted(tmp_path, "httpx")
    killed = _run(tmp_path, stub.url, "call", fault="effect-after-confirm:6", flags=())
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == expected
    assert stub.count("POST /order") == 1 and stub.count("POST /charge") == 1


def test_a_job_without_record_http_sends_as_before(tmp_path, stub):
    """Without --record-http nothing is recorded: the ledger stays empty and each request
    goes out as it always did."""
    run = _run(tmp_path, stub.url, "none", flags=())
    assert run.returncode == 0, run.stderr
    assert _effects(tmp_path) == []
    assert len(stub.requests) == 6


def test_a_request_inside_an_explicit_effect_is_not_recorded_again(tmp_path, stub):
    """Crash window: after the @effect that sends POST /order was confirmed, before the
    next snapshot. The effect is the unit: the ledger holds its row only (no http row
    inside it), and the resumed run serves it without sending."""
    killed = _run(tmp_path, stub.url, "httpx", ["chat", "effect"], fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    assert _resume(tmp_path).returncode == 0
    rows = _effects(tmp_path)
    assert [r["name"] for r in rows] == ["http.POST", "record_http_agent.place_order"]
    assert stub.count("POST /order") == 1 and stub.count("POST /v1/chat/completions") == 1


def test_requests_of_spawned_tasks_are_recorded_by_task(tmp_path, stub):
    """Crash window: after task 2's request was recorded (its first action, 2#1), before
    the next snapshot. Each spawned task's request is its own row (identity T#n): task
    2's is served without sending, the same answer; task 1's, sent at the same time on
    the effect pool, is served too if it was recorded before the kill, else (a read
    whose outcome is unknown) sent again."""
    steps = ["chat", "tasks"]
    expected = json.loads(_uninterrupted(tmp_path, "httpx", steps))
    killed = _run(tmp_path, stub.url, "httpx", steps, fault="effect-after-confirm:2#1")
    assert killed.returncode == -9, killed.stderr
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    assert got[0] == expected[0] and stub.count("POST /v1/chat/completions") == 1
    assert got[1].split(", ")[1] == expected[1].split(", ")[1]  # task 2: served
    assert stub.count("GET /search?q=task-2") == 1
    if stub.count("GET /search?q=task-1") == 1:  # task 1 was recorded before the kill
        assert got == expected
    rows = _effects(tmp_path)
    assert sorted(r["call_site"].rsplit("(task ", 1)[-1] for r in rows[1:]) == ["1#1)", "2#1)"]


def test_secrets_are_never_stored(tmp_path, stub):
    """The Authorization header, the api_key= query value and the cookie the server set
    are in no byte of the plain store (catalog, WAL, snapshot chunks), though the
    responses' bodies are (positive control)."""
    run = _run(tmp_path, stub.url, "httpx")
    assert run.returncode == 0, run.stderr
    files = _store_files(tmp_path / "store")
    contents = chunk_contents(tmp_path / "store")
    everything = list(files.values()) + contents
    everything += [f for data in files.values() for f in zstd_frames(data)]
    everything += [b for b in (snapshot_body(d) for d in files.values()) if b]
    for secret in (TOKEN.encode(), b"cookie-secret-1"):
        assert not any(secret in data for data in everything), secret
    catalog = files["catalog.db"] + files.get("catalog.db-wal", b"")
    assert b"etatspans olleh" in catalog  # the chat answer's text (the body, in clear)
    assert b"api_key=***" in catalog  # the URL shown, its credential redacted


def test_an_encrypted_store_holds_no_body_in_clear(tmp_path, stub):
    """In an encrypted store (`snaprun init --encrypt`) the recorded responses are sealed:
    no file holds a body's text, the URL or the token; the job still resumes from them."""
    init = snaprun("init", "--store", tmp_path / "store", "--encrypt", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    killed = _run(tmp_path, stub.url, "httpx", fault="effect-after-confirm:6")
    assert killed.returncode == -9, killed.stderr
    assert _resume(tmp_path).returncode == 0
    assert stub.count("POST /order") == 1
    files = _store_files(tmp_path / "store")
    for data in files.values():
        for needle in (b"olleh", b"/v1/chat/completions", TOKEN.encode(), b"cookie-secret"):
            assert needle not in data
            assert not any(needle in f for f in zstd_frames(data))


def test_the_python_api_records_and_fork_keeps_the_setting(tmp_path, stub, monkeypatch):
    """Store.start(record_http=True) records the job's requests (here in this process);
    a fork of the job keeps the setting with its entry point."""
    import snapstate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RH_TOKEN", TOKEN)
    monkeypatch.setattr("sys.argv", ["x"])
    store = snapstate.Store(tmp_path / "store")
    result = store.start(AGENT, "httpx", stub.url, "chat", "order", job_id="api", record_http=True)
    assert result.status == "done", result.error
    effects = store.effects("api")
    assert [(e.name, e.kind, e.status) for e in effects] == [
        ("http.POST", "read", 200),
        ("http.POST", "write", 200),
    ]
    sys.modules.pop("record_http_agent", None)
    fork = snaprun("fork", "--store", tmp_path / "store", "api@1", "--as", "api2", cwd=tmp_path)
    assert fork.returncode == 0, fork.stderr
    resumed = _resume(tmp_path, job="api2")  # from "start": both requests again, recorded
    assert resumed.returncode == 0, resumed.stderr
    assert [r["name"] for r in _effects(tmp_path, "api2")] == ["http.POST", "http.POST"]
