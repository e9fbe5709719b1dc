"""HTTP clients across snapshots (resources/_http.py): httpx and httpx2 Client and
AsyncClient and their subclasses rebuilt from their whole configuration, requests.Session
with its mounted adapters and hooks, credentials never in a snapshot in clear, and a
refusal naming the client and the part for whatever cannot be rebuilt exactly."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import httpx2
import pytest
import requests
from helpers import AGENTS, snaprun
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from snapstate.resources import _http, _secrets
from snapstate.serializers import _pickler
from snapstate.serializers._home import Home
from snapstate.serializers._keys import KeyRing

PASSWORD, TOKEN, KEY = "pa55-w0rd-alice", "tok-9f8e7d", "key-5c4b3a"
LIBS = [httpx, httpx2]


class Recorder:
    """A server on 127.0.0.1 that records each request's method, path and headers;
    /basic/0 sets a cookie for /basic only; each /flaky/ path answers 503 once."""

    def __init__(self):
        self.log: list = []
        self.flaky: set = set()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                headers = sorted((k.lower(), v) for k, v in self.headers.items())
                recorder.log.append((self.command, self.path, headers))
                status = 200
                if self.path.startswith("/flaky/") and self.path not in recorder.flaky:
                    recorder.flaky.add(self.path)
                    status = 503
                data = json.dumps({"path": self.path}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if self.path.startswith("/basic/0"):
                    self.send_header("Set-Cookie", "sid=c00kie-v4lue; Path=/basic")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self):
        self.log.clear()
        self.flaky.clear()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server():
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture
def keys(tmp_path):
    """Credentials are sealed with a store's keys, as the runtime binds them."""
    _secrets.bind(KeyRing(str(tmp_path / "keys")))
    yield
    _secrets.bind(None)


def round_trip(obj):
    data = _pickler.dumps(obj)
    return _pickler.loads(data), data


def refusal(obj, name="client") -> str:
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"x": obj}, roots=lambda: [(f"local {name!r}", obj)])
    message = str(info.value)
    # The user-level object first, then the internal path (serializers._describe).
    assert message.startswith(f"local {name!r} is "), message
    assert f"local {name!r} -> " in message, message
    return message


def hook(request):
    hook.calls = getattr(hook, "calls", 0) + 1


def mock_handler(request):
    return httpx.Response(200, json={"auth": request.headers.get("authorization")})


def stamp(request):
    request.headers["X-Stamp"] = "stamped"
    return request


# ------------------------------------------------------------------------ a real agent
def test_clients_survive_kill_after_each_snapshot(tmp_path, server):
    """Crash window: SIGKILL right after each of 3 snapshots, resumed each time. An
    httpx.Client (BasicAuth, counting event hook, transport retries=3 and limits,
    default params and headers, a path-scoped cookie), two httpx.Client subclasses, an
    httpx2.Client with a bearer token and a requests.Session (mounted HTTPAdapter with a
    Retry that answers a 503, a response hook, basic auth) give the same stdout and the
    server sees the same requests, Authorization headers included, as an uninterrupted
    run; the transport settings printed after each restore are the configured ones. No
    snapshot body holds the password, the token, the API key or the cookie."""
    env = {
        "SERVER_URL": server.url,
        "HTTP_PASSWORD": PASSWORD,
        "HTTP_TOKEN": TOKEN,
        "HTTP_KEY": KEY,
    }
    server.reset()
    plain = snaprun(
        "run",
        "--store",
        tmp_path / "plain",
        "--job",
        "job",
        AGENTS / "http_clients.py",
        cwd=tmp_path,
        env=env,
    )
    assert plain.returncode == 0, plain.stderr
    expected_log = list(server.log)
    lines = plain.stdout.splitlines()
    assert len(lines) == 3 and lines[2].startswith(
        "2 6 {'sid': 'c00kie-v4lue'} 3 acme TenantClient SignedClient eu 200 "
    )
    assert "3 7 3 9.0 Timeout(connect=2.0, read=5.0, write=5.0, pool=3.0) 4 5" in lines[2]
    auths = {path.split("/")[1]: dict(h).get("authorization") for _, path, h in expected_log}
    assert auths["basic"].startswith("Basic ") and auths["bearer"] == f"Bearer {TOKEN}"
    assert auths["flaky"].startswith("Basic ")

    server.reset()
    store = tmp_path / "chain"
    run = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENTS / "http_clients.py",
        cwd=tmp_path,
        env=env,
        fault="after-snapshot:1",
    )
    out = run.stdout
    assert run.returncode == -9, run.stderr
    for k in (2, 3):
        run = snaprun(
            "resume", "--store", store, "job", cwd=tmp_path, env=env, fault=f"after-snapshot:{k}"
        )
        assert run.returncode == -9, run.stderr
        out += run.stdout
    final = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
    assert final.returncode == 0, final.stderr
    assert out + final.stdout == plain.stdout
    assert server.log == expected_log

    home = Home(str(store))
    try:
        snaps = home.catalog.snapshots("job")
        assert len(snaps) == 3
        for path in snaps:
            header, payload = home.read_row(path)
            assert b"httpx" in payload  # the clients are in there
            for secret in (PASSWORD, TOKEN, KEY, "c00kie-v4lue"):
                assert secret.encode() not in payload, (secret, path)
                assert secret not in json.dumps(header)
            for _, _, headers in expected_log:
                for name, value in headers:
                    if name == "authorization":
                        assert (
                            value.encode() not in payload
                            and value.split()[1].encode() not in payload
                        )
    finally:
        home.close()


# ------------------------------------------------------------------------ httpx, httpx2
@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_every_client_setting_round_trips(lib, keys):
    """A Client with every constructor setting comes back with each of them (auth,
    params, raw headers with a removed default, the cookie jar with domains and paths,
    four timeouts, redirects, hooks, trust_env, default_encoding, transport retries,
    limits, uds, local_address, socket options, mounts incl. a proxy with credentials)."""
    transport = lib.HTTPTransport(
        retries=3,
        limits=lib.Limits(max_connections=9, max_keepalive_connections=4, keepalive_expiry=11.0),
        local_address="127.0.0.1",
        socket_options=[(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)],
    )
    client = lib.Client(
        base_url="http://svc.test/v1",
        auth=lib.BasicAuth("alice", PASSWORD),
        params=[("q", "1"), ("q", "2")],
        headers={"X-Trace": "t1"},
        timeout=lib.Timeout(1.0, read=2.0, write=3.0, pool=4.0),
        follow_redirects=True,
        max_redirects=7,
        event_hooks={"request": [hook], "response": [hook, hook]},
        trust_env=False,
        default_encoding="latin-1",
        transport=transport,
        mounts={
            "http://via-proxy.test": lib.HTTPTransport(proxy=f"http://u:{PASSWORD}@127.0.0.1:9"),
            "http://direct.test": None,
            "http://uds.test": lib.HTTPTransport(uds="/tmp/none.sock"),
        },
    )
    del client.headers["User-Agent"]
    client.cookies.set("sid", "s1", domain="svc.test", path="/v1")
    client.cookies.set("sid", "s2", domain="other.test", path="/")
    restored, data = round_trip(client)
    assert type(restored) is lib.Client
    assert (
        restored.base_url == client.base_url
        and restored.auth._auth_header == client.auth._auth_header
        and type(restored.auth) is lib.BasicAuth
    )
    assert restored.params.multi_items() == [("q", "1"), ("q", "2")]
    assert restored.headers.raw == client.headers.raw and "user-agent" not in restored.headers
    jar = sorted((c.name, c.value, c.domain, c.path) for c in restored.cookies.jar)
    assert jar == [("sid", "s1", "svc.test", "/v1"), ("sid", "s2", "other.test", "/")]
    assert restored.timeout == lib.Timeout(1.0, read=2.0, write=3.0, pool=4.0)
    assert (
        restored.follow_redirects,
        restored.max_redirects,
        restored.trust_env,
        restored._default_encoding,
    ) == (True, 7, False, "latin-1")
    assert restored.event_hooks == {"request": [hook], "response": [hook, hook]}
    pool = restored._transport._pool
    assert (
        pool._retries,
        pool._max_connections,
        pool._max_keepalive_connections,
        pool._keepalive_expiry,
        pool._local_address,
        pool._http1,
        pool._http2,
    ) == (3, 9, 4, 11.0, "127.0.0.1", True, False)
    assert pool._socket_options == [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    mounts = {p.pattern: t for p, t in restored._mounts.items()}
    assert set(mounts) == {"http://via-proxy.test", "http://direct.test", "http://uds.test"}
    assert mounts["http://direct.test"] is None
    assert mounts["http://uds.test"]._pool._uds == "/tmp/none.sock"
    proxy = mounts["http://via-proxy.test"]._pool
    original = {p.pattern: t for p, t in client._mounts.items()}["http://via-proxy.test"]._pool
    assert (proxy._proxy_url, proxy._proxy_headers) == (
        original._proxy_url,
        original._proxy_headers,
    )
    assert proxy._ssl_context.verify_mode == ssl.CERT_REQUIRED
    for secret in (PASSWORD.encode(), b"dTo" + PASSWORD.encode()[:2]):
        assert secret not in data
    assert original._proxy_headers[0][1] not in data  # Proxy-Authorization
    assert client.auth._auth_header.encode() not in data  # Authorization
    client.close()
    restored.close()


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_every_attribute_of_a_fresh_client_is_rebuilt(lib):
    """The adapter rebuilds every attribute the library's constructor sets (a library
    version with a new attribute would fail here, not restore it silently at its
    default), and a closed client comes back closed, an opened one opened."""
    for cls in (lib.Client, lib.AsyncClient):
        fresh = cls()
        assert set(vars(fresh)) == _http._CLIENT_ATTRS
        if cls is lib.Client:
            fresh.close()
    with lib.Client() as opened:
        restored, _ = round_trip(opened)
        assert restored._state == opened._state and restored._state.name == "OPENED"
    restored, _ = round_trip(opened)
    assert restored.is_closed


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_async_client_round_trips_and_sends(lib, keys, server):
    """An AsyncClient (DigestAuth, verify=False, retries, limits) comes back as one
    with the same settings and sends requests with its headers after the restore."""
    client = lib.AsyncClient(
        base_url=server.url,
        auth=lib.DigestAuth("dana", PASSWORD),
        verify=False,
        headers={"X-Api-Key": KEY},
        transport=lib.AsyncHTTPTransport(
            verify=False,
            retries=2,
            limits=lib.Limits(max_connections=5, max_keepalive_connections=2),
        ),
    )
    restored, data = round_trip(client)
    assert PASSWORD.encode() not in data and KEY.encode() not in data
    assert type(restored) is lib.AsyncClient and restored.auth._password == PASSWORD.encode()
    pool = restored._transport._pool
    assert type(pool).__name__ == "AsyncConnectionPool"
    assert (pool._retries, pool._max_connections, pool._max_keepalive_connections) == (2, 5, 2)
    assert pool._ssl_context.verify_mode == ssl.CERT_NONE

    async def send():
        async with restored:
            return await restored.get("/async/1", auth=None)

    server.reset()
    assert asyncio.run(send()).status_code == 200
    assert dict(server.log[0][2])["x-api-key"] == KEY


class Tenant(httpx.Client):
    inits = 0

    def __init__(self, tenant, **kwargs):
        type(self).inits += 1
        super().__init__(**kwargs)
        self.tenant, self.calls = tenant, [1, 2]


class Signed(httpx2.AsyncClient):
    inits = 0

    def __init__(self, region, key):
        type(self).inits += 1
        super().__init__(base_url=f"http://{region}.test", headers={"Authorization": key})
        self.region = region


def test_subclasses_rebuilt_without_their_init(keys):
    """A subclass that adds attributes and one that overrides __init__ with its own
    parameters both come back as their own type, with their attributes and the base
    configuration, without calling their __init__ (unknown arguments, side effects)."""
    tenant = Tenant("acme", base_url="http://t.test", auth=("a", PASSWORD))
    signed = Signed("eu", f"Bearer {TOKEN}")
    Tenant.inits = Signed.inits = 0
    (t, s), data = round_trip((tenant, signed))
    assert (Tenant.inits, Signed.inits) == (0, 0)
    assert type(t) is Tenant and (t.tenant, t.calls) == ("acme", [1, 2])
    assert str(t.base_url) == "http://t.test" and t.auth._auth_header == tenant.auth._auth_header
    assert (
        type(s) is Signed and s.region == "eu" and s.headers["authorization"] == f"Bearer {TOKEN}"
    )
    assert TOKEN.encode() not in data and PASSWORD.encode() not in data
    tenant.close()
    t.close()


def test_picklable_transport_and_function_auth_saved_by_value(keys):
    """A MockTransport (its handler by reference) and a FunctionAuth are saved by value
    and work after the restore: the request goes through the same handler and auth."""
    client = httpx.Client(
        transport=httpx.MockTransport(mock_handler), auth=stamp, base_url="http://mock.test"
    )
    restored, _ = round_trip(client)
    assert type(restored._transport) is httpx.MockTransport
    assert restored._transport.handler is mock_handler and restored.auth._func is stamp
    assert restored.get("/").request.headers["x-stamp"] == "stamped"
    client.close()
    restored.close()


class SocketTransport(httpx.BaseTransport):
    def __init__(self):
        self.sock = socket.socket()


class RefreshingAuth(httpx.Auth):
    def __init__(self):
        self.refresher = threading.Thread(target=print)


def test_refusals_name_the_client_and_the_part(tmp_path, keys):
    """Whatever cannot be rebuilt exactly refuses the snapshot naming the local, the
    client's type and the part: an unpicklable custom transport or mount, an
    unpicklable auth or event hook, an SSL context built by the user, a client
    certificate."""
    cases = []
    t = SocketTransport()
    cases.append(
        (
            httpx.Client(transport=t),
            ["an httpx.Client whose transport is a test_http_clients.SocketTransport", "a socket"],
        )
    )
    cases.append(
        (
            httpx2.Client(mounts={"http://x.test": t}),
            ["an httpx2.Client whose mount 'http://x.test' is a test_http_clients.SocketTransport"],
        )
    )
    cases.append(
        (
            Tenant("t", auth=RefreshingAuth()),
            [
                "an httpx.Client (subclass test_http_clients.Tenant) whose auth is a "
                "test_http_clients.RefreshingAuth that cannot be saved",
                "a thread",
            ],
        )
    )
    cases.append(
        (
            httpx.Client(event_hooks={"response": [hook, t.sock.send]}),
            ["whose event_hooks['response'][1] is a builtin_function_or_method", "a socket"],
        )
    )
    strict = ssl.create_default_context()
    strict.minimum_version = ssl.TLSVersion.TLSv1_3
    cases.append(
        (
            httpx2.Client(verify=strict),
            ["an httpx2.Client whose transport uses an SSL context built by the user"],
        )
    )
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            tmp_path / "k.pem",
            "-out",
            tmp_path / "c.pem",
            "-days",
            "1",
            "-subj",
            "/CN=snap",
        ],
        check=True,
        capture_output=True,
    )
    with_cert = httpx.create_ssl_context()
    with_cert.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    cases.append((httpx.Client(verify=with_cert), ["whose transport has a client certificate"]))
    for client, needles in cases:
        message = refusal(client)
        for needle in needles:
            assert needle in message, (needle, message)
        assert "create the client after the snapshot" in message
    t.sock.close()


# ------------------------------------------------------------------------ requests
class ApiSession(requests.Session):
    def __init__(self, tenant):
        super().__init__()
        self.tenant = tenant


def on_response(response, *args, **kwargs):
    return response


def test_requests_session_keeps_adapters_hooks_and_settings(keys):
    """A requests.Session (and a subclass) keeps mounted adapters with their Retry and
    pool settings, hooks, auth, cert, verify, proxies, stream, trust_env and
    max_redirects; its credentials and cookie values are sealed."""
    session = ApiSession("acme")
    retry = Retry(total=5, backoff_factor=0.5, status_forcelist=[502, 503])
    session.mount(
        "https://api.test",
        HTTPAdapter(max_retries=retry, pool_connections=3, pool_maxsize=6, pool_block=True),
    )
    session.hooks["response"].append(on_response)
    session.auth = requests.auth.HTTPBasicAuth("bob", PASSWORD)
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    session.cert, session.verify, session.stream = ("/c.pem", "/k.pem"), False, True
    session.proxies = {"https": f"http://u:{PASSWORD}@proxy.test:3128"}
    session.trust_env, session.max_redirects = False, 4
    session.cookies.set("sid", "c00kie-v4lue", domain="api.test", path="/x")
    restored, data = round_trip(session)
    for secret in (PASSWORD, TOKEN, "c00kie-v4lue"):
        assert secret.encode() not in data
    assert type(restored) is ApiSession and restored.tenant == "acme"
    adapter = restored.adapters["https://api.test"]
    assert type(adapter) is HTTPAdapter
    assert (
        adapter.max_retries.total,
        adapter.max_retries.backoff_factor,
        adapter.max_retries.status_forcelist,
    ) == (5, 0.5, [502, 503])
    assert (adapter._pool_connections, adapter._pool_maxsize, adapter._pool_block) == (3, 6, True)
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 6
    assert list(restored.adapters) == list(session.adapters)
    assert restored.hooks == {"response": [on_response]}
    assert (restored.auth.username, restored.auth.password) == ("bob", PASSWORD)
    assert restored.headers["Authorization"] == f"Bearer {TOKEN}"
    assert (
        restored.cert,
        restored.verify,
        restored.stream,
        restored.trust_env,
        restored.max_redirects,
    ) == (("/c.pem", "/k.pem"), False, True, False, 4)
    assert restored.proxies == session.proxies
    [cookie] = list(restored.cookies)
    assert (cookie.name, cookie.value, cookie.domain, cookie.path) == (
        "sid",
        "c00kie-v4lue",
        "api.test",
        "/x",
    )
    session.close()
    restored.close()


class Unpicklable(HTTPAdapter):
    def __init__(self):
        super().__init__()
        self.watch = threading.Thread(target=print)


def test_requests_session_refuses_an_adapter_it_cannot_save(keys):
    """A mounted adapter that does not pickle refuses the snapshot naming the session,
    the mount prefix and the adapter."""
    session = requests.Session()
    session.mount("https://", Unpicklable())
    message = refusal(session, "session")
    assert (
        "a requests.Session whose adapter mounted at 'https://' is a "
        "test_http_clients.Unpicklable" in message
    )
    session.close()


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_responses_round_trip_with_headers_sealed(lib, keys):
    """A read response of either library comes back with its status, headers, body and
    URL; a Set-Cookie header in it is sealed."""
    response = lib.Response(
        201,
        headers=[("Set-Cookie", "sid=c00kie-v4lue"), ("X-A", "1")],
        content=b"body",
        request=lib.Request("GET", "http://r.test/a"),
    )
    response.read()
    restored, data = round_trip(response)
    assert b"c00kie-v4lue" not in data
    assert type(restored) is lib.Response and restored.status_code == 201
    assert restored.headers.raw == response.headers.raw and restored.content == b"body"
    assert str(restored.request.url) == "http://r.test/a"


def test_cookie_jars_keep_domains_paths_and_seal_values(keys):
    """A bare CookieJar (e.g. a client's, or one the agent holds) keeps every cookie's
    domain, path, expiry and flags; the values are not in the payload."""
    jar = http.cookiejar.CookieJar()
    client = httpx.Client(cookies=jar)
    client.cookies.set("a", "c00kie-v4lue", domain="x.test", path="/p")
    restored, data = round_trip((jar, client))
    assert b"c00kie-v4lue" not in data
    [cookie] = list(restored[0])
    assert (cookie.value, cookie.domain, cookie.path) == ("c00kie-v4lue", "x.test", "/p")
    assert restored[1].cookies.jar is restored[0]  # the same jar, shared
    client.close()
    restored[1].close()


class Slotted(httpx.Client):
    __slots__ = ("quota", "unset")

    def __init__(self, quota):
        super().__init__()
        self.quota = quota


def test_subclass_slots_round_trip():
    """A subclass's __slots__ values come back (an unset slot stays unset)."""
    client = Slotted(42)
    restored, _ = round_trip(client)
    assert type(restored) is Slotted and restored.quota == 42
    assert not hasattr(restored, "unset")
    client.close()
    restored.close()


class Audited(httpx2.Client):
    """Registers its own bound method as an event hook (the hook refers to the client)."""

    def __init__(self):
        super().__init__(event_hooks={"request": [self.audit]})
        self.audited = []

    def audit(self, request):
        self.audited.append(request.url.path)


def test_hook_bound_to_the_client_itself_keeps_identity():
    """An event hook that is a bound method of the client comes back bound to the
    rebuilt client itself (one object, not a copy)."""
    client = Audited()
    restored, _ = round_trip(client)
    [hook_method] = restored.event_hooks["request"]
    assert hook_method.__self__ is restored and hook_method.__func__ is Audited.audit
    client.close()
    restored.close()


def test_netrc_and_digest_credentials_sealed(tmp_path, keys):
    """httpx NetRCAuth (the parsed .netrc) and requests HTTPDigestAuth come back with
    their credentials; neither password is in the payload."""
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text(f"machine svc.test login nora password {PASSWORD}\n")
    netrc_file.chmod(0o600)
    client = httpx.Client(auth=httpx.NetRCAuth(str(netrc_file)))
    session = requests.Session()
    session.auth = requests.auth.HTTPDigestAuth("dan", TOKEN)
    (c, s), data = round_trip((client, session))
    assert PASSWORD.encode() not in data and TOKEN.encode() not in data
    assert c.auth._netrc_info.authenticators("svc.test") == ("nora", "", PASSWORD)
    assert type(s.auth) is requests.auth.HTTPDigestAuth
    assert (s.auth.username, s.auth.password) == ("dan", TOKEN)
    client.close()
    c.close()
    session.close()
    s.close()


def test_key_from_the_environment_saved_as_a_reference(keys, monkeypatch):
    """A header value or password equal to an environment variable is saved as a
    reference to it (the value is not in the payload) and read again on restore: a key
    rotated in the meantime is the one used. Other values are sealed."""
    monkeypatch.setenv("HTTP_TEST_KEY", KEY)
    monkeypatch.setenv("HTTP_TEST_PASSWORD", PASSWORD)
    client = httpx2.Client(
        headers={"X-Api-Key": KEY, "Authorization": f"Bearer {TOKEN}"},
        auth=httpx2.DigestAuth("dana", PASSWORD),
    )
    data = _pickler.dumps(client)
    assert KEY.encode() not in data and PASSWORD.encode() not in data
    assert TOKEN.encode() not in data
    assert b"HTTP_TEST_KEY" in data and b"HTTP_TEST_PASSWORD" in data
    monkeypatch.setenv("HTTP_TEST_KEY", "key-rotated-1234")
    monkeypatch.setenv("HTTP_TEST_PASSWORD", "pw-rotated-1234")
    restored = _pickler.loads(data)
    assert restored.headers["x-api-key"] == "key-rotated-1234"
    assert restored.headers["authorization"] == f"Bearer {TOKEN}"
    assert restored.auth._password == b"pw-rotated-1234"
    client.close()
    restored.close()
