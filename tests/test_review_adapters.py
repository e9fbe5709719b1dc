"""Adversarial review of issue 9's adapters and secrets (reviewer B).

Every test here reproduces a finding against the merged code: a secret written into a
snapshot in clear, a restore that crashes, or a client / response / adapter that comes
back configured differently without an error. Each is marked xfail(strict=True) so the
branch stays green; the fix turns it into a pass (and strict xfail then fails, so the
marker must be removed with the fix).
"""

from __future__ import annotations

import gzip
import os
import textwrap

import pytest

from conftest import snaprun, snapshot_files

httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")
openai = pytest.importorskip("openai", reason="the integrations extra is not installed")

from requests.adapters import HTTPAdapter  # noqa: E402

from snapstate.resources import _secrets  # noqa: E402
from snapstate.serializers import _pickler  # noqa: E402
from snapstate.serializers._home import Home  # noqa: E402
from snapstate.serializers._keys import KeyRing  # noqa: E402


@pytest.fixture
def keys(tmp_path):
    """Store keys bound as the runtime binds them before a snapshot."""
    _secrets.bind(KeyRing(str(tmp_path / "keys")))
    yield
    _secrets.bind(None)


# ------------------------------------------------------------------ secrets in clear
DOTENV_KEY = "sk-dotenv-CLEARTEXT-4242"

DOTENV_AGENT = textwrap.dedent(f'''
    import os
    import openai
    from snapstate import snapshot

    os.environ.pop("OPENAI_API_KEY", None)


    def main():
        os.environ["OPENAI_API_KEY"] = "{DOTENV_KEY}"     # what load_dotenv() does
        client = openai.OpenAI(base_url="http://127.0.0.1:9/v1")
        snapshot("one")
        print(client.api_key == "{DOTENV_KEY}")
        client.close()
        return 1
''')


@pytest.mark.xfail(strict=True, reason="ProcessState.env_set saves variables the agent set "
                   "(load_dotenv() inside main) by value, in clear: the API key the client "
                   "references by name is in the payload anyway")
def test_key_loaded_into_environ_by_the_agent_is_not_in_the_payload(tmp_path):
    """An agent that loads its .env inside main() (python-dotenv's load_dotenv puts the
    key into os.environ) and builds an OpenAI client from OPENAI_API_KEY: the client is
    saved as a reference to the variable, but the decompressed snapshot payload must not
    hold the key's value either (runtime/_process.py capture() records the variables the
    job set, by value)."""
    agent = tmp_path / "dotenv_agent.py"
    agent.write_text(DOTENV_AGENT)
    run = snaprun("run", "--store", tmp_path / "s", "--job", "job", agent, cwd=tmp_path,
                  fault="after-snapshot:1")
    assert run.returncode != 0
    files = snapshot_files(tmp_path / "s", "job")
    assert files
    home = Home(str(tmp_path / "s"), create=False, writable=False)
    try:
        _, payload = home.read(str(files[0]))
        payload = bytes(payload)
    finally:
        home.close()
    assert b"OPENAI_API_KEY" in payload
    assert DOTENV_KEY.encode() not in payload


@pytest.mark.xfail(strict=True, reason="resources/_llm._headers seals only exact header "
                   "names and _custom_query is saved as is")
def test_llm_credential_headers_and_query_are_not_in_clear(keys):
    """An OpenAI client behind a proxy that authenticates with its own header
    (Helicone: default_headers={"Helicone-Auth": "Bearer ..."}) and a key in the
    default query (default_query={"key": ...}): neither secret may be in the payload
    (resources/_http.is_sensitive_header already treats any name with auth/key/token in
    it as a credential; _llm does not)."""
    client = openai.OpenAI(api_key="sk-review-abcdefgh", base_url="http://127.0.0.1:9/v1",
                           default_headers={"Helicone-Auth": "Bearer heli-SECRET-1"},
                           default_query={"key": "query-SECRET-2"})
    try:
        data = _pickler.dumps(client)
    finally:
        client.close()
    assert b"heli-SECRET-1" not in data
    assert b"query-SECRET-2" not in data


@pytest.mark.xfail(strict=True, reason="resources/_http._reduce_client saves params and "
                   "base_url (userinfo) in clear")
def test_httpx_client_query_key_and_url_password_are_not_in_clear(keys):
    """httpx.Client(params={"api_key": ...}) (SerpAPI, Google APIs...) and a base_url
    with a password in it: the secrets must be sealed like a header's, not written in
    clear."""
    client = httpx.Client(params={"api_key": "param-SECRET-3"},
                          base_url="https://user:url-SECRET-4@example.com")
    try:
        data = _pickler.dumps(client)
    finally:
        client.close()
    assert b"param-SECRET-3" not in data
    assert b"url-SECRET-4" not in data


# ------------------------------------------------------------------ silent wrong restores
@pytest.mark.xfail(strict=True, reason="resources/_llm._secret has no minimum length: a "
                   "short key equal to an unrelated variable is saved as a reference to it")
def test_short_key_is_not_taken_for_an_unrelated_environment_variable(keys, monkeypatch):
    """OpenAI(api_key="1") (local servers take any key) while some variable is "1"
    (DEBUG=1, PYTHONUNBUFFERED=1, SHLVL=1): the key is saved as a reference to that
    variable, and when it differs at the resume the client silently sends another key.
    _http.py refuses references for values under 8 characters; _llm.py must too."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("REVIEW_DEBUG", "1")
    client = openai.OpenAI(api_key="1", base_url="http://127.0.0.1:9/v1")
    data = _pickler.dumps(client)
    client.close()
    for name, value in list(os.environ.items()):
        if value == "1":
            monkeypatch.setenv(name, "0")      # the resuming process's environment
    copy = _pickler.loads(data)
    try:
        assert copy.api_key == "1"
    finally:
        copy.close()


@pytest.mark.xfail(strict=True, reason="resources/_http._rebuilt_response passes the decoded "
                   "body as content= with the Content-Encoding header: decoded again")
def test_gzip_httpx_response_restores(keys):
    """A response read from a server that gzips (most do): its decoded body is saved;
    the restore builds httpx.Response(content=<decoded>, headers=[content-encoding:
    gzip]) which decodes it a second time and raises httpx.DecodingError, so the job
    cannot resume. (resources/_llm._rebuild_http_response sets _content directly.)"""
    response = httpx.Response(200, headers={"content-encoding": "gzip"},
                              content=gzip.compress(b"hello"),
                              request=httpx.Request("GET", "http://127.0.0.1:9/x"))
    response.read()
    copy = _pickler.loads(_pickler.dumps(response))
    assert copy.content == b"hello"


@pytest.mark.xfail(strict=True, reason="resources/_http._rebuilt_response rebuilds the "
                   "request as GET with no headers and drops http_version")
def test_httpx_response_keeps_its_request(keys):
    """A response to a POST keeps response.request.method == "POST", its request headers
    and its HTTP version after a restore (code that checks r.request.method, logs the
    request or retries it sees a GET with no headers)."""
    request = httpx.Request("POST", "http://127.0.0.1:9/x", headers={"X-Trace": "t1"},
                            content=b"{}")
    response = httpx.Response(200, content=b"ok", request=request,
                              extensions={"http_version": b"HTTP/2"})
    copy = _pickler.loads(_pickler.dumps(response))
    assert copy.request.method == "POST"
    assert copy.request.headers.get("x-trace") == "t1"
    assert copy.http_version == "HTTP/2"


class SourceAddressAdapter(HTTPAdapter):
    """requests-toolbelt's SourceAddressAdapter pattern: an instance attribute read by
    init_poolmanager (a class-level default shadows it when missing)."""

    source_address = None

    def __init__(self, source_address, **kwargs):
        self.source_address = source_address
        super().__init__(**kwargs)

    def init_poolmanager(self, connections, maxsize, block=False, **kwargs):
        kwargs["source_address"] = self.source_address
        return super().init_poolmanager(connections, maxsize, block, **kwargs)


@pytest.mark.xfail(strict=True, reason="resources/_http._configure_http_adapter calls "
                   "HTTPAdapter.__setstate__ (init_poolmanager) before the subclass's "
                   "attributes are put back")
def test_requests_adapter_subclass_pool_built_with_its_own_attributes(keys):
    """A mounted HTTPAdapter subclass whose init_poolmanager reads its own attribute
    (source address, socket options, SSL settings: requests-toolbelt's adapters): after a
    restore the pool manager is built before the attribute is back, so it silently uses
    the class default (here: no source address); without a class default the restore
    raises AttributeError."""
    session = requests.Session()
    session.mount("http://", SourceAddressAdapter(("127.0.0.1", 0)))
    copy = _pickler.loads(_pickler.dumps(session))
    try:
        pool_kw = copy.adapters["http://"].poolmanager.connection_pool_kw
        assert pool_kw["source_address"] == ("127.0.0.1", 0)
    finally:
        session.close()
        copy.close()
