"""The library matrix: the SDK clients agents hold (openai, anthropic; the
`integrations` extra, installed by .ci/run) survive a snapshot without wrapping.

Crash property (real subprocesses, a real stub provider on 127.0.0.1, tests/llm_stub.py):
one agent program (agents/llm_matrix.py) covers an OpenAI client in a local, one on
`self.client` with custom default headers / query / timeout / max_retries, an
AsyncOpenAI client used through asyncio.run, Anthropic (key passed literally),
AsyncAnthropic (key from the environment) and with_raw_response results; a plain run is
compared with a run SIGKILLed right after each of its snapshots and resumed in a new
process: stdout and the requests the stub saw are identical.

Keys: the snapshot payloads (read through the store's own API) hold no API key; a key
from the environment is read again at the restore (a rotated key is used; an unset one
fails clearly and leaves the snapshot intact). Details (every configuration field, sealed
credential headers, subclasses, raw responses, refusals) are in-process pickle round
trips through serializers._pickler.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, clean_refusal, snaprun
from llm_stub import LLMStub
from stored import body, outsider_chunks, raw_files, stored_state

openai = pytest.importorskip("openai", reason="the integrations extra is not installed")
anthropic = pytest.importorskip("anthropic", reason="the integrations extra is not installed")
httpx2 = pytest.importorskip("httpx2")

from snapstate.resources import _secrets  # noqa: E402
from snapstate.serializers import _pickler  # noqa: E402
from snapstate.serializers._keys import KeyRing  # noqa: E402

ENV_KEY = "sk-env-OPENAI-7f3a9c"  # OPENAI_API_KEY in the runs
ENV_AKEY = "ak-env-ANTHROPIC-51d2e8"  # ANTHROPIC_API_KEY in the runs
LITERAL = "ak-literal-NOT-IN-ENV-0b6e"  # passed literally to anthropic.Anthropic
ROTATED = "sk-rotated-after-restore-93c1"  # OPENAI_API_KEY when resumed after snapshot 2
SNAPSHOTS = 2  # snapshots taken by agents/llm_matrix.py
MATRIX = AGENTS / "llm_matrix.py"


@pytest.fixture(scope="module")
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


def _env(stub, tmp, **extra) -> dict:
    key_file = tmp / "key.txt"
    key_file.write_text(LITERAL + "\n")
    return {
        "LLM_URL": stub.url,
        "KEY_FILE": str(key_file),
        "OPENAI_API_KEY": ENV_KEY,
        "ANTHROPIC_API_KEY": ENV_AKEY,
        **extra,
    }


def _seen(requests: list[dict]) -> list[tuple]:
    """What must agree between runs: method, path (with query), body, credentials and
    the headers carrying the client's configuration."""
    return [
        (
            r["method"],
            r["path"],
            r["body"],
            *(
                r["headers"].get(h)
                for h in (
                    "authorization",
                    "x-api-key",
                    "x-team",
                    "x-stainless-retry-count",
                    "x-stainless-read-timeout",
                    "x-stainless-timeout",
                )
            ),
        )
        for r in requests
    ]


@pytest.fixture(scope="module")
def matrix(stub, tmp_path_factory):
    """The plain run, then for each k a run killed right after snapshot k and resumed
    (the requests each process sent kept apart). Before the resume after snapshot 1, one
    attempt with OPENAI_API_KEY unset ("unset": its run, the requests it sent, whether
    the snapshot files were left as they were); the resume after snapshot 2 runs with
    OPENAI_API_KEY rotated to ROTATED."""
    tmp = tmp_path_factory.mktemp("matrix")
    env = _env(stub, tmp)
    stub.reset()
    base = snaprun("run", "--store", tmp / "plain", "--job", "job", MATRIX, cwd=tmp, env=env)
    runs = {"base": (base, _seen(stub.take())), "stores": [tmp / "plain"]}
    for k in range(1, SNAPSHOTS + 1):
        store = tmp / f"kill{k}"
        stub.reset()
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            MATRIX,
            cwd=tmp,
            env=env,
            fault=f"after-snapshot:{k}",
        )
        seen_killed = _seen(stub.take())
        files = snapshot_seqs(store, "job")
        if k == 1:
            before = stored_state(store, "job")
            with pytest.MonkeyPatch.context() as mp:
                mp.delenv("OPENAI_API_KEY", raising=False)
                unset = snaprun(
                    "resume",
                    "--store",
                    store,
                    "job",
                    cwd=tmp,
                    env={n: v for n, v in env.items() if n != "OPENAI_API_KEY"},
                )
            runs["unset"] = (
                unset,
                stub.take(),
                stored_state(store, "job") == before,
            )
        resume_env = {**env, "OPENAI_API_KEY": ROTATED} if k == 2 else env
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp, env=resume_env)
        assert files == list(range(1, k + 1)), files
        runs[k] = (killed, resumed, len(files), seen_killed, _seen(stub.take()))
        runs["stores"].append(store)
    return runs


def _rotated(seen: list[tuple], k: int) -> list[tuple]:
    """The requests of the plain run as the resume after snapshot k must send them:
    after snapshot 2 the OpenAI clients send the rotated key."""
    if k != 2:
        return seen
    return [
        (*s[:3], f"Bearer {ROTATED}" if s[3] == f"Bearer {ENV_KEY}" else s[3], *s[4:]) for s in seen
    ]


def test_kill_after_each_snapshot_matches_the_plain_run(matrix):
    """Crash window, every SDK case at once: SIGKILL right after snapshot k, `snaprun
    resume` in a new process; stdout and the requests the stub saw (method, path, body,
    Authorization / x-api-key, custom header, retry count, timeout headers) are those
    of the uninterrupted run (with the rotated key after snapshot 2, see below)."""
    base, base_seen = matrix["base"]
    assert base.returncode == 0, base.stderr
    assert base.result == "'done'"
    # The comparison means something: the plain run used every part of the configuration.
    assert (
        "POST",
        "/v1/chat/completions?tenant=t1",
        {"model": "gpt-stub", "messages": [{"role": "user", "content": "flaky-3 nine"}]},
        f"Bearer {ENV_KEY}",
        None,
        "blue",
        "3",
        "7.5",
        None,
    ) in base_seen  # 4th attempt
    assert any(s[3] == f"Bearer {LITERAL}" for s in base_seen)
    assert any(s[3] == f"Bearer {ENV_AKEY}" for s in base_seen)
    assert "raw after: echo: raw six" in base.stdout
    for k in range(1, SNAPSHOTS + 1):
        killed, resumed, files, seen_killed, seen_resumed = matrix[k]
        assert killed.returncode == -9, killed.stderr
        assert files == k, files
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed from snapshot {k}" in resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"stdout diverged after snapshot {k}"
        split = len(seen_killed)
        assert seen_killed == base_seen[:split], f"requests before snapshot {k} differ"
        assert seen_resumed == _rotated(base_seen[split:], k), (
            f"requests diverged after snapshot {k}"
        )
        assert resumed.result == base.result


def test_snapshot_payloads_hold_no_api_key(matrix):
    """Secrets: the decompressed (and opened) payload of every snapshot of the matrix
    runs holds neither the key taken from the environment nor the one passed literally;
    the environment key is saved as a reference to its variable."""
    payloads = 0
    for store in matrix["stores"]:
        for seq in snapshot_seqs(store, "job"):
            payload = body(store, "job", seq)
            payloads += 1
            for secret in (ENV_KEY, ENV_AKEY, LITERAL, ROTATED):
                assert secret.encode() not in payload, (store, seq, secret)
            assert b"OPENAI_API_KEY" in payload and b"ANTHROPIC_API_KEY" in payload
        stored = [*raw_files(store).items(), *(("chunk", c) for c in outsider_chunks(store))]
        for secret in (ENV_KEY, ENV_AKEY, LITERAL, ROTATED):
            for name, data in stored:
                assert secret.encode() not in data, (store, name, secret)
    assert payloads >= SNAPSHOTS * 2


def test_resume_with_the_key_variable_unset_fails_clearly(matrix):
    """A key that came from OPENAI_API_KEY is never saved: resuming with the variable
    unset fails clearly (exit 2, one error line naming the variable, no request sent)
    and leaves the snapshot intact (the normal resume that follows succeeds: see the
    matrix test for snapshot 1)."""
    unset, sent, intact = matrix["unset"]
    clean_refusal(unset, "OPENAI_API_KEY is not set", "the snapshot is intact")
    assert sent == []
    assert intact
    assert matrix[1][1].returncode == 0


def test_resume_uses_a_rotated_key(matrix):
    """A key that came from OPENAI_API_KEY is read again at the restore: resumed after
    snapshot 2 with the variable set to a rotated key, every OpenAI client (local, on
    the agent object, async) sends the new key; the literal Anthropic key and the
    ANTHROPIC_API_KEY one are unchanged (the full comparison is the matrix test)."""
    resumed, seen = matrix[2][1], matrix[2][4]
    assert resumed.returncode == 0, resumed.stderr
    auth = {(s[1].split("?")[0], s[3]) for s in seen}
    assert auth == {
        ("/v1/chat/completions", f"Bearer {ROTATED}"),
        ("/v1/messages", f"Bearer {LITERAL}"),
        ("/v1/messages", f"Bearer {ENV_AKEY}"),
    }
    assert ("/v1/chat/completions?tenant=t1", f"Bearer {ROTATED}") in {(s[1], s[3]) for s in seen}


def test_unrebuildable_clients_refused_naming_them_and_the_fix(stub, tmp_path):
    """Refusal: a client holding a part that cannot be rebuilt (an api_key provider
    bound to a socket, a middleware closing over one, an Azure client) is refused at the
    snapshot naming the local, the client, that part and the fix (never an internal
    lock); nothing is written. One agent, each refusal caught and printed."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        AGENTS / "llm_refusals.py",
        cwd=tmp_path,
        env={"LLM_URL": stub.url},
    )
    assert run.returncode == 0, run.stderr
    assert run.result == "3"
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines())
    expected = {
        "provider": [
            "openai.OpenAI client whose api_key provider",
            "Vault.key",
            "pass api_key as a string or set OPENAI_API_KEY",
        ],
        "middleware": [
            "anthropic.Anthropic client whose middleware",
            "audited",
            "module-level middleware functions",
        ],
        "azure": [
            "openai.AzureOpenAI client (an openai.OpenAI subclass) whose Azure configuration"
        ],
    }
    assert set(lines) == set(expected)
    for mode, needles in expected.items():
        for needle in [
            "local 'client'",
            *needles,
            "module-level function passed to snapstate.resource()",
        ]:
            assert needle in lines[mode], (needle, lines[mode])
        assert "_lock" not in lines[mode] and "RLock" not in lines[mode]
    assert snapshot_seqs(tmp_path / "s", "job") == []


# ------------------------------------------------------------------ in-process details
@pytest.fixture
def keys(tmp_path):
    """The store keys credentials are sealed with (the runtime binds them at a snapshot)."""
    _secrets.bind(KeyRing(str(tmp_path / "keys")))
    yield
    _secrets.bind(None)


def _round_trip(obj, *secrets: str):
    data = _pickler.dumps(obj)
    for secret in secrets:
        assert secret.encode() not in data, secret
    return _pickler.loads(data)


@pytest.mark.smoke
def test_openai_configuration_round_trips(keys, stub, monkeypatch):
    """Every constructor option of an OpenAI client comes back exactly, read off the live
    client; the credentials (api key, admin key, webhook secret, an Authorization
    default header) are not in the payload; environment variables the constructor reads
    (OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS) cannot change the restored client; the SDK's
    default HTTP client is not saved but made again."""
    monkeypatch.delenv("OPENAI_ORG_ID", raising=False)
    timeout = httpx2.Timeout(3.0, connect=1.5)
    client = openai.OpenAI(
        api_key="sk-lit-1",
        admin_api_key="admin-lit-2",
        project="proj",
        webhook_secret="whsec-lit-3",
        base_url=stub.url + "/v1",
        websocket_base_url="ws://127.0.0.1:9/ws",
        timeout=timeout,
        max_retries=7,
        default_headers={"X-Team": "red", "Authorization": "Bearer hdr-lit-4"},
        default_query={"tenant": "t9"},
        _strict_response_validation=True,
    )
    _ = client.chat  # a cached SDK resource: made again after the restore
    monkeypatch.setenv("OPENAI_ORG_ID", "org-from-env")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Team: green\nX-Extra: 1")
    copy = _round_trip(client, "sk-lit-1", "admin-lit-2", "whsec-lit-3", "hdr-lit-4")
    try:
        assert type(copy) is openai.OpenAI
        assert (copy.api_key, copy.admin_api_key, copy.webhook_secret) == (
            "sk-lit-1",
            "admin-lit-2",
            "whsec-lit-3",
        )
        assert (copy.organization, copy.project) == (None, "proj")
        assert str(copy.base_url) == stub.url + "/v1/"
        assert str(copy.websocket_base_url) == "ws://127.0.0.1:9/ws"
        assert copy.timeout == timeout and copy.max_retries == 7
        assert copy._custom_headers == {"X-Team": "red", "Authorization": "Bearer hdr-lit-4"}
        assert copy._custom_query == {"tenant": "t9"}
        assert copy._strict_response_validation is True
        assert copy._client is not client._client and not copy._client.is_closed
        assert isinstance(copy._client, openai._base_client.SyncHttpxClientWrapper)
        reply = copy.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "cfg"}]
        )
        assert reply.choices[0].message.content == "echo: cfg"
    finally:
        client.close()
        copy.close()


def test_anthropic_configuration_round_trips(keys, stub, monkeypatch):
    """The same for Anthropic and AsyncAnthropic: auth token, webhook key, an x-api-key
    default header (sealed), timeout, max_retries, OpenTelemetry options, strict
    validation; ANTHROPIC_* variables set at the restore change nothing."""
    client = anthropic.Anthropic(
        auth_token="tok-lit-5",
        webhook_key="wh-lit-6",
        base_url=stub.url,
        timeout=4.0,
        max_retries=0,
        default_headers={"x-api-key": "xkey-lit-7", "X-Team": "b"},
        default_query={"q": "1"},
        open_telemetry=False,
        _strict_response_validation=True,
    )
    aclient = anthropic.AsyncAnthropic(api_key="ak-lit-8", base_url=stub.url, max_retries=5)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-env-should-not-appear")
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Team: other")
    copy, acopy = _round_trip([client, aclient], "tok-lit-5", "wh-lit-6", "xkey-lit-7", "ak-lit-8")
    try:
        assert type(copy) is anthropic.Anthropic and type(acopy) is anthropic.AsyncAnthropic
        assert (copy.api_key, copy.auth_token, copy.webhook_key) == (None, "tok-lit-5", "wh-lit-6")
        assert (acopy.api_key, acopy.auth_token, acopy.max_retries) == ("ak-lit-8", None, 5)
        assert copy.timeout == 4.0 and copy._timeout_overridden and copy.max_retries == 0
        assert not acopy._timeout_overridden
        assert copy._custom_headers == {"x-api-key": "xkey-lit-7", "X-Team": "b"}
        assert copy._custom_query == {"q": "1"}
        assert copy._open_telemetry == client._open_telemetry
        assert copy._strict_response_validation is True
        assert str(copy.base_url) == str(client.base_url)
        assert copy.credentials is None and copy._custom_auth is None
        text = (
            copy.messages.create(
                model="x", max_tokens=4, messages=[{"role": "user", "content": "tok"}]
            )
            .content[0]
            .text
        )
        assert text == "echo: tok"
        seen = stub.take()[-1]["headers"]
        assert seen["authorization"] == "Bearer tok-lit-5" and seen["x-team"] == "b"
    finally:
        client.close()
        copy.close()
        asyncio.run(aclient.close())
        asyncio.run(acopy.close())


def test_key_equal_to_any_environment_variable_is_saved_as_a_reference(keys, monkeypatch):
    """A key equal to the value of some environment variable (not the SDK's own) is
    saved as a reference to it: the payload holds the name, not the value, and the
    restored client reads the variable again."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("TEAM_LLM_KEY", "sk-team-value-1")
    client = openai.OpenAI(api_key=os.environ["TEAM_LLM_KEY"], base_url="http://127.0.0.1:9")
    data = _pickler.dumps(client)
    assert b"TEAM_LLM_KEY" in data and b"sk-team-value-1" not in data
    monkeypatch.setenv("TEAM_LLM_KEY", "sk-team-value-2")
    copy = _pickler.loads(data)
    assert copy.api_key == "sk-team-value-2"
    client.close()
    copy.close()


class TeamClient(openai.OpenAI):
    """A user subclass with its own constructor signature and state."""

    def __init__(self, team: str, **kwargs):
        super().__init__(**kwargs)
        self.team = team
        self.calls = []


def provide_key() -> str:
    return "sk-from-provider"


def test_subclass_shared_closed_and_provider_clients(keys):
    """A subclass comes back as itself (its own attributes kept, its __init__ not
    re-run), one client held twice is one client after the restore, a closed client
    stays closed, and a module-level api_key provider is saved with its client."""
    team = TeamClient("blue", api_key="sk-sub", base_url="http://127.0.0.1:9")
    team.calls.append("first")
    closed = openai.OpenAI(api_key="sk-closed", base_url="http://127.0.0.1:9")
    closed.close()
    with_provider = openai.OpenAI(api_key=provide_key, base_url="http://127.0.0.1:9")
    copy = _round_trip([team, team, closed, with_provider], "sk-sub", "sk-closed")
    try:
        assert type(copy[0]) is TeamClient and copy[0] is copy[1]
        assert (copy[0].team, copy[0].calls, copy[0].api_key) == ("blue", ["first"], "sk-sub")
        assert copy[2].is_closed() and copy[2].api_key == "sk-closed"
        assert copy[3]._api_key_provider is provide_key
        assert copy[3]._refresh_api_key() == "sk-from-provider"
    finally:
        for client in (team, with_provider, copy[0], copy[3]):
            client.close()


def test_raw_responses_parse_the_same_after_a_restore(keys, stub):
    """with_raw_response results (openai LegacyAPIResponse, anthropic APIResponse) keep
    their status, headers, body, request and client: parse() gives an equal object,
    already-parsed results stay cached, and the request's Authorization header is not
    in the payload (it comes back unsealed); the response's client is the restored
    client the agent holds."""
    client = openai.OpenAI(api_key="sk-raw-lit", base_url=stub.url + "/v1")
    claude = anthropic.Anthropic(api_key="ak-raw-lit", base_url=stub.url)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "raw"}]
    )
    parsed = raw.parse()
    mraw = claude.messages.with_raw_response.create(
        model="x", max_tokens=4, messages=[{"role": "user", "content": "mraw"}]
    )
    copy, mcopy, pcopy, ccopy = _round_trip([raw, mraw, parsed, client], "sk-raw-lit", "ak-raw-lit")
    try:
        assert copy._client is ccopy  # the client the agent holds, not a second one
        assert copy.parse() == parsed and copy.parse() is pcopy
        assert mcopy.parse() == mraw.parse()
        assert (copy.status_code, dict(copy.headers)) == (raw.status_code, dict(raw.headers))
        assert copy.http_request.headers["authorization"] == "Bearer sk-raw-lit"
        assert (
            str(mcopy.url) == str(mraw.url)
            and mcopy.http_response.content == mraw.http_response.content
        )
        assert copy._client.api_key == "sk-raw-lit" and mcopy._client.api_key == "ak-raw-lit"
    finally:
        for c in (client, claude, copy._client, mcopy._client):
            c.close()


def test_parts_that_cannot_be_rebuilt_are_refused(keys, stub):
    """Refusals in-process: an anthropic credentials provider, an OpenAI workload
    identity, an api_key provider closing over a socket and a streaming (unread) raw
    response are refused naming what they are and the fix, never saved half-made."""
    from openai.auth import k8s_service_account_token_provider

    identity = openai.OpenAI(
        base_url=stub.url,
        workload_identity={
            "identity_provider_id": "idp",
            "service_account_id": "sa",
            "provider": k8s_service_account_token_provider("/nonexistent/token"),
        },
    )
    with pytest.raises(
        _pickler.UnpicklableError,
        match=r"openai\.OpenAI client whose workload identity .*pass api_key",
    ):
        _pickler.dumps(identity)
    identity.close()
    provider = anthropic.Anthropic(
        credentials=anthropic.lib.credentials.StaticToken("t"), base_url=stub.url
    )
    with pytest.raises(
        _pickler.UnpicklableError,
        match=r"anthropic\.Anthropic client whose credentials provider .*"
        r"pass api_key or auth_token",
    ):
        _pickler.dumps({"client": provider})
    provider.close()
    vault = socket.socket()
    bound = openai.OpenAI(api_key=lambda: vault.fileno() and "k", base_url=stub.url)
    with pytest.raises(_pickler.UnpicklableError, match="api_key provider"):
        _pickler.dumps(bound)
    bound.close()
    vault.close()
    client = openai.OpenAI(api_key="k", base_url=stub.url + "/v1")
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=[{"role": "user", "content": "s"}]
    ) as streaming:
        with pytest.raises(_pickler.UnpicklableError, match=r"body was not read .* read it"):
            _pickler.dumps(streaming)
    client.close()


def test_user_http_client_goes_through_the_http_adapters(keys, stub):
    """A user's own http_client= is never dropped: it is saved through the HTTP
    adapters (resources/_http.py), so its own headers are still sent after the restore."""
    own = httpx2.Client(headers={"X-Own": "yes"}, timeout=3.0)
    client = openai.OpenAI(api_key="sk-own", base_url=stub.url + "/v1", http_client=own)
    try:
        copy = _round_trip(client, "sk-own")
        try:
            assert copy._client is not own and copy.timeout == client.timeout
            copy.chat.completions.create(model="m", messages=[{"role": "user", "content": "o"}])
            assert stub.take()[-1]["headers"]["x-own"] == "yes"
        finally:
            copy.close()
    finally:
        client.close()


def test_streams_saved_only_when_read_to_the_end(keys, stub):
    """A streaming completion (create(stream=True)) still open is refused (its rest
    cannot be read in another process); read to its end it is saved as an ended stream
    (iterating it again yields nothing, as before the snapshot), sync and async."""
    client = openai.OpenAI(api_key="k", base_url=stub.url + "/v1")
    aclient = openai.AsyncOpenAI(api_key="k", base_url=stub.url + "/v1")
    ask = {
        "model": "m",
        "messages": [{"role": "user", "content": "three streamed words"}],
        "stream": True,
    }
    stream = client.chat.completions.create(**ask)
    with pytest.raises(
        _pickler.UnpicklableError,
        match=r"openai\.Stream \(a streaming completion\) is still open; read "
        r"it to its end",
    ):
        _pickler.dumps({"stream": stream})
    words = [chunk.choices[0].delta.content for chunk in stream]
    assert words == ["echo:", "three", "streamed", "words"]
    ended = _round_trip(stream)
    assert type(ended) is openai.Stream and list(ended) == []
    assert ended.response.status_code == 200

    async def read_async():
        astream = await aclient.chat.completions.create(**ask)
        got = [chunk.choices[0].delta.content async for chunk in astream]
        again = _round_trip(astream)
        rest = [chunk async for chunk in again]
        await aclient.close()
        await again._client.close()
        return got, rest

    assert asyncio.run(read_async()) == (words, [])
    client.close()
    ended._client.close()
