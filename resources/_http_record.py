"""HTTP recorded at the transport (`snapstate.record_http()`): the library side.

When a job records HTTP, every request its code sends through httpx or httpx2 (Client
and AsyncClient, so the OpenAI and Anthropic SDKs and the frameworks built on them) or
requests (Session, through its HTTPAdapter) reaches the transport as an `Exchange`:
the runtime (runtime/_http_record.py, registered here with `set_recorder`) records it
in the job's ledger and answers with a `Recorded` response, either the one it just
received or the one recorded before a restore. The agent's code gets a response built
from that record in both cases, so a re-executed request sees the same bytes the first
run saw: status, headers, and the body as the chunks the transport delivered (httpx:
the raw chunks, decoded again by the client as the first time; requests: the body as
received, behind a urllib3 response that decodes it where requests asks).

What is patched: httpx's and httpx2's `Client._transport_for_url` and
`AsyncClient._transport_for_url` (the transport a client picks for a request is
wrapped), and `requests.adapters.HTTPAdapter.send`. The patches are installed when a
job turns recording on (`install`), and each asks the registered recorder first
(`active()`): outside a job, in a job that does not record, in a thread the job did not
start, or inside an explicit @effect (the effect already is the unit), the request
goes out exactly as before.

What is stored: never the request (its digest and its method and URL, credentials
redacted, are the ledger row's arguments; a multipart body is matched without its
random boundary; a transport error without the request and the URL's credentials); the response's status, reason, HTTP version,
headers (credential values such as Set-Cookie sealed with the store's key, as in every
adapter: resources/_http.py) and body chunks, plus a usage summary (model, input and
output tokens) when the body is an OpenAI or Anthropic answer (`usage_of`).

Registered with register_optional? No: nothing here imports httpx, httpx2 or requests
until a job turns recording on.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import re
import sys
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, cast

from .._abi import pinned
from ._http import is_sensitive_param, seal_items, sealed

__all__ = [
    "Exchange",
    "Recorded",
    "Recorder",
    "set_recorder",
    "install",
    "redacted_url",
    "path_secret_digest",
    "url_secrets",
    "body_digest",
    "usage_of",
    "holds_credential",
    "IDEMPOTENCY_HEADERS",
]

_BOUNDARY = re.compile(r"""boundary=("[^"]*"|[^;\s]+)""", re.IGNORECASE)

# Request headers whose value is an idempotency key the provider honours (Stripe's and
# most APIs' Idempotency-Key; the OpenAI and Anthropic SDKs send it when asked to).
IDEMPOTENCY_HEADERS = ("idempotency-key", "x-idempotency-key")


# ------------------------------------------------------------------------ the record
class Recorded:
    """A response as the ledger keeps it: status, reason, HTTP version, headers (name,
    value) as the library gave them (bytes for httpx, str for requests), the body's
    chunks, and the usage summary of a model call (or None)."""

    __slots__ = ("status", "reason", "version", "headers", "chunks", "usage")

    def __init__(
        self,
        status: int,
        reason: str,
        version: str,
        headers: list[tuple[Any, Any]],
        chunks: list[bytes],
        usage: dict[str, Any] | None,
    ) -> None:
        self.status, self.reason, self.version = status, reason, version
        self.headers, self.chunks, self.usage = headers, chunks, usage

    def __reduce__(self) -> tuple[Callable[..., Recorded], tuple[Any, ...]]:
        # Credential headers (Set-Cookie...) sealed, or saved as environment references;
        # the chunks of a body holding a credential (an OAuth token) sealed
        chunks: list[Any] = self.chunks
        if holds_credential(self.headers, self.chunks):
            chunks = [sealed(chunk, from_env=False) for chunk in self.chunks]
        return (
            _recorded,
            (
                self.status,
                self.reason,
                self.version,
                _sealed_headers(self.headers),
                chunks,
                self.usage,
            ),
        )


_URL_HEADERS = frozenset({"location", "content-location", "refresh", "link"})


def _sealed_headers(headers: list[tuple[Any, Any]]) -> list[tuple[Any, object]]:
    """The headers as stored: credential headers sealed (seal_items), and a URL header
    (Location...) sealed when the URL carries a credential (a presigned URL's
    X-Amz-Signature=, a token in the query, a webhook's path)."""
    items = seal_items(headers)
    for i, (name, value) in enumerate(items):
        if not isinstance(value, (str, bytes)):
            continue  # sealed already
        lowered = (name.decode("latin-1") if isinstance(name, bytes) else str(name)).lower()
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if lowered in _URL_HEADERS and url_secrets(text.strip().strip("<>")):
            items[i] = (name, sealed(value, from_env=False))
    return items


@pinned("http_recorded")
def _recorded(
    status: int,
    reason: str,
    version: str,
    headers: list[tuple[Any, Any]],
    chunks: list[bytes],
    usage: dict[str, Any] | None,
) -> Recorded:
    return Recorded(status, reason, version, list(headers), list(chunks), usage)


class Exchange:
    """One request on its way out: what the runtime matches and classifies it by, and
    how to send it (`send`, or `asend` for an async client). `send` returns the
    response as a Recorded; `idempotency_key` replaces the value of the request's
    idempotency header (the key of the first attempt, sent again)."""

    def __init__(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Iterable[tuple[str, str]],
        send: Callable[[str | None], Recorded] | None = None,
        asend: Callable[[str | None], Awaitable[Recorded]] | None = None,
    ) -> None:
        self.method, self.url, self.body = method.upper(), url, body
        self.headers = [(k.lower(), v) for k, v in headers]
        self._send, self._asend = send, asend

    @property
    def matched_body(self) -> bytes | None:
        """The body as it is matched: a multipart body's boundary (drawn at random by
        httpx and requests for every request) replaced by a fixed one, so the same
        upload re-executed matches its row."""
        body = self.body
        if not body:
            return body
        for name, value in self.headers:
            if name == "content-type" and value.lower().startswith("multipart/"):
                found = _BOUNDARY.search(value)
                if found is not None:
                    boundary = found.group(1).strip('"').encode("latin-1")
                    if boundary:
                        return body.replace(b"--" + boundary, b"--snapstate-boundary")
        return body

    @property
    def idempotency_key(self) -> str | None:
        for name, value in self.headers:
            if name in IDEMPOTENCY_HEADERS:
                return value
        return None

    def send(self, *_described: object, idempotency_key: str | None = None) -> Recorded:
        assert self._send is not None, "a sync client's exchange"
        return self._send(idempotency_key)

    async def asend(self, *_described: object, idempotency_key: str | None = None) -> Recorded:
        assert self._asend is not None, "an async client's exchange"
        return await self._asend(idempotency_key)


class Recorder(Protocol):
    """What the runtime registers: whether a request sent here now is recorded, and the
    recording itself (sync, and async as an awaitable)."""

    def active(self, is_async: bool) -> bool: ...
    def record(self, exchange: Exchange) -> Recorded: ...
    def arecord(self, exchange: Exchange) -> Awaitable[Recorded]: ...


_RECORDER: list[Recorder] = []


def set_recorder(recorder: Recorder) -> None:
    _RECORDER[:] = [recorder]


def _active(is_async: bool) -> Recorder | None:
    if not _RECORDER:
        return None
    recorder = _RECORDER[0]
    return recorder if recorder.active(is_async) else None


# ------------------------------------------------------------------------ matching
# URLs whose path is the credential (webhooks, bot tokens): host, and the path whose
# group "secret" is replaced by *** (and matched by its digest: path_secret_digest).
_PATH_SECRETS = (
    (r"hooks\.slack\.com", r"/(?:services|workflows|triggers)/(?P<secret>.+)"),
    (
        r"(?:ptb\.|canary\.)?discord(?:app)?\.com",
        r"/api/(?:v\d+/)?webhooks/\d+/(?P<secret>[^/]+).*",
    ),
    (r"api\.telegram\.org", r"(?:/file)?/bot(?P<secret>[^/]+)(?:/.*)?"),
    (r"hooks\.zapier\.com", r"/hooks/catch/(?P<secret>.+)"),
    (r"[^/]*\.webhook\.office\.com", r"/webhookb2/(?P<secret>.+)"),
)
_PATH_SECRET_RULES = [(re.compile(h), re.compile(p)) for h, p in _PATH_SECRETS]


def _path_secret(parts: urllib.parse.SplitResult) -> tuple[str, str] | None:
    """(the path with its credential replaced by ***, the credential) of a webhook or
    bot URL (Slack, Discord, Telegram, Zapier, Teams), None for any other URL."""
    host = (parts.hostname or "").lower()
    for host_rule, path_rule in _PATH_SECRET_RULES:
        if host_rule.fullmatch(host):
            found = path_rule.fullmatch(parts.path)
            if found is not None and found.group("secret"):
                start, end = found.span("secret")
                return parts.path[:start] + "***" + parts.path[end:], found.group("secret")
    return None


def path_secret_digest(url: str) -> str | None:
    """How a webhook's credential in its path is matched (it is not shown): its SHA-256,
    so re-executed code posting to another webhook at a recorded position is a
    mismatch. None for a URL without one."""
    found = _path_secret(urllib.parse.urlsplit(url))
    if found is None:
        return None
    return "path credential sha256 " + hashlib.sha256(found[1].encode()).hexdigest()


def redacted_url(url: str) -> str:
    """The URL as the ledger shows and matches it: a password in it, the values of
    credential query parameters (key=, api_key=, sig=...) and a webhook's or bot's
    credential path (hooks.slack.com/services/***) replaced by `***`."""
    parts = urllib.parse.urlsplit(url)
    found = _path_secret(parts)
    path = parts.path if found is None else found[0]
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "&".join(
        f"{name}={'***' if value and is_sensitive_param(urllib.parse.unquote_plus(name)) else value}"
        if eq
        else name
        for name, eq, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, ""))


def body_digest(body: bytes | None) -> str:
    """How a request body is matched and shown: its length and SHA-256."""
    if body is None:
        return "streamed body (not matched)"
    if not body:
        return "no body"
    return f"{len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()}"


# ------------------------------------------------------------------------ usage
_NUMBER = (int, float)


def _decoded(headers: Iterable[tuple[Any, Any]], chunks: list[bytes]) -> tuple[str, bytes | None]:
    """(the content type, the body decoded): None for a body whose content encoding is
    not one zlib reads (br, zstd) or that fails to decode."""
    kind, encoding = "", ""
    for name, value in headers:
        name = (name.decode("latin-1") if isinstance(name, bytes) else str(name)).lower()
        value = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if name == "content-type":
            kind = value.lower()
        elif name == "content-encoding":
            encoding = value.lower().strip()
    body = b"".join(chunks)
    try:
        if encoding in ("gzip", "x-gzip", "deflate"):
            body = zlib.decompress(body, 47 if encoding != "deflate" else 15)
        elif encoding not in ("", "identity"):
            return kind, None
    except zlib.error:
        return kind, None
    return kind, body


_STRING_FIELD = re.compile(rb'"([A-Za-z0-9_.\-]{1,64})"\s*:\s*"')


def holds_credential(headers: Iterable[tuple[Any, Any]], chunks: list[bytes]) -> bool:
    """A JSON body with a string field named as a credential (access_token,
    refresh_token, client_secret, api_key, password...: an OAuth token endpoint's
    answer), or a JSON body encoded in a way not read here: its chunks are sealed with
    the store's key, never stored in clear."""
    kind, body = _decoded(headers, chunks)
    if "json" not in kind or not chunks:
        return False
    if body is None:
        return True
    return any(
        is_sensitive_param(found.group(1).decode("latin-1"))
        for found in _STRING_FIELD.finditer(body)
    )


def usage_of(headers: Iterable[tuple[Any, Any]], chunks: list[bytes]) -> dict[str, Any] | None:
    """model, input_tokens and output_tokens of an OpenAI- or Anthropic-shaped answer
    (a JSON body, or a server-sent event stream: the last usage seen, Anthropic's
    message_start and message_delta merged), or None for any other body."""
    kind, body = _decoded(headers, chunks)
    if body is None:
        return None
    objects: list[object] = []
    try:
        if "text/event-stream" in kind:
            for line in body.decode("utf-8").splitlines():
                if line.startswith("data:"):
                    data = line[5:].strip()
                    if data.startswith("{"):
                        objects.append(json.loads(data))
        elif "json" in kind:
            objects.append(json.loads(body))
    except (UnicodeDecodeError, ValueError):
        return None
    found: dict[str, Any] = {}
    for obj in objects:
        for part in _parts(obj):
            model = part.get("model")
            if isinstance(model, str) and model:
                found["model"] = model
            usage = part.get("usage")
            if isinstance(usage, dict):
                for key, field in (
                    ("prompt_tokens", "input_tokens"),
                    ("input_tokens", "input_tokens"),
                    ("completion_tokens", "output_tokens"),
                    ("output_tokens", "output_tokens"),
                ):
                    value = usage.get(key)
                    if isinstance(value, _NUMBER) and not isinstance(value, bool):
                        found[field] = int(value)
    if "input_tokens" not in found and "output_tokens" not in found:
        return None
    return {
        "model": found.get("model"),
        "input_tokens": found.get("input_tokens"),
        "output_tokens": found.get("output_tokens"),
    }


def _parts(obj: object) -> Iterator[dict[str, Any]]:
    """The object and the nested answers that carry model and usage (a Responses
    stream's "response", Anthropic's message_start "message")."""
    if not isinstance(obj, dict):
        return
    yield obj
    for key in ("response", "message"):
        inner = obj.get(key)
        if isinstance(inner, dict):
            yield inner


# ------------------------------------------------------------------------ httpx, httpx2
def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries (its password, the values of its credential query
    parameters, a webhook's path credential), as written and decoded, longest first:
    what `redacted_url` replaces."""
    parts = urllib.parse.urlsplit(url)
    found: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    if ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    for name, _, value in (item.partition("=") for item in parts.query.split("&") if item):
        if value and is_sensitive_param(urllib.parse.unquote_plus(name)):
            found.append(value)
    in_path = _path_secret(parts)
    if in_path is not None:
        found.append(in_path[1])
    found += [urllib.parse.unquote_plus(v) for v in found]
    return sorted({v for v in found if v}, key=len, reverse=True)


def _scrubbed(exc: Exception, url: str) -> Exception:
    """The transport's error as it is recorded (and raised to the agent's code): the
    same type and message, without the request it holds (its headers carry the
    credentials), the URL's credentials in the message replaced by `***` (requests
    names the URL, query included, in its connection errors)."""
    message = str(exc)
    for secret in url_secrets(url):
        message = message.replace(secret, "***")
    try:
        clean = type(exc)(message)
    except Exception:
        clean = exc
    if type(clean) is not type(exc):
        clean = exc
    if clean is exc and message != str(exc):
        exc.args = (message,)
    # recorded with the error: nothing chained to it (the original holds the request)
    clean.__cause__ = clean.__context__ = None
    clean.__suppress_context__ = True
    return clean


def _httpx_stream(lib: Any) -> type:
    """A byte stream of the recorded chunks, sync and async (the client checks the
    stream's type against its own library's)."""

    class RecordedStream(lib.SyncByteStream, lib.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def __iter__(self) -> Iterator[bytes]:
            yield from self.chunks

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in self.chunks:
                yield chunk

    RecordedStream.__qualname__ = f"RecordedStream[{lib.__name__}]"
    return RecordedStream


def _httpx_record(response: Any, chunks: list[bytes]) -> Recorded:
    headers = list(response.headers.raw)
    reason = response.extensions.get("reason_phrase", b"")
    version = response.extensions.get("http_version", b"HTTP/1.1")
    return Recorded(
        response.status_code,
        reason.decode("latin-1") if isinstance(reason, bytes) else str(reason),
        version.decode("latin-1") if isinstance(version, bytes) else str(version),
        headers,
        chunks,
        usage_of(headers, chunks),
    )


class _HttpxTransport:
    """The transport a recording job's client uses for one request: the client's own
    transport behind the ledger."""

    def __init__(self, lib: Any, stream: type, inner: Any) -> None:
        self.lib, self.stream, self.inner = lib, stream, inner

    def _exchange(self, request: Any, **senders: Any) -> Exchange:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        content = getattr(request, "_content", None)
        return Exchange(request.method, str(request.url), content, headers, **senders)

    def _rekey(self, request: Any, key: str | None) -> None:
        if key is None:
            return
        for name in IDEMPOTENCY_HEADERS:
            if name in request.headers:
                request.headers[name] = key

    def _response(self, recorded: Recorded, request: Any) -> Any:
        return self.lib.Response(
            recorded.status,
            headers=list(recorded.headers),
            stream=self.stream(list(recorded.chunks)),
            extensions={
                "http_version": recorded.version.encode("latin-1"),
                "reason_phrase": recorded.reason.encode("latin-1"),
            },
            request=request,
        )

    def handle_request(self, request: Any) -> Any:
        request.read()
        recorder = _active(False)
        if recorder is None:  # turned off since the transport was picked
            return self.inner.handle_request(request)

        def send(key: str | None) -> Recorded:
            self._rekey(request, key)
            try:
                response = self.inner.handle_request(request)
                try:
                    chunks = [bytes(chunk) for chunk in response.stream]
                finally:
                    response.stream.close()
            except Exception as exc:
                failure = _scrubbed(exc, str(request.url))
            else:
                return _httpx_record(response, chunks)
            raise failure  # outside the handler: not chained to the original error

        recorded = recorder.record(self._exchange(request, send=send))
        return self._response(recorded, request)

    async def handle_async_request(self, request: Any) -> Any:
        await request.aread()
        recorder = _active(True)
        if recorder is None:
            return await self.inner.handle_async_request(request)

        async def asend(key: str | None) -> Recorded:
            self._rekey(request, key)
            try:
                response = await self.inner.handle_async_request(request)
                try:
                    chunks = [bytes(chunk) async for chunk in response.stream]
                finally:
                    await response.stream.aclose()
            except Exception as exc:
                failure = _scrubbed(exc, str(request.url))
            else:
                return _httpx_record(response, chunks)
            raise failure

        recorded = await recorder.arecord(self._exchange(request, asend=asend))
        return self._response(recorded, request)

    def close(self) -> None:  # the client closes its own transports, never this view
        return None

    async def aclose(self) -> None:
        return None


def _patch_httpx(lib: Any) -> None:
    stream = _httpx_stream(lib)
    for cls, is_async in ((lib.Client, False), (lib.AsyncClient, True)):
        original = cls._transport_for_url
        if getattr(original, "__snapstate_records__", False):
            continue

        def transport_for_url(
            self: Any, url: Any, _original: Any = original, _async: bool = is_async
        ) -> Any:
            transport = _original(self, url)
            if _active(_async) is None:
                return transport
            return _HttpxTransport(lib, stream, transport)

        transport_for_url.__snapstate_records__ = True  # type: ignore[attr-defined]
        transport_for_url.__wrapped__ = original  # type: ignore[attr-defined]
        cls._transport_for_url = transport_for_url


# ------------------------------------------------------------------------ requests
class _Original:
    """Stands for http.client's response behind urllib3's: its headers message (what
    requests' cookie jar reads); nothing to close."""

    __slots__ = ("msg",)

    def __init__(self, msg: object) -> None:
        self.msg = msg

    def isclosed(self) -> bool:
        return False

    def close(self) -> None:
        return None


def _recorded_raw(recorded: Recorded, headers: list[tuple[str, str]], method: str) -> Any:
    """The recorded body as urllib3's response gives it to requests: the body as it came
    over the wire (still gzip-encoded if it was), decoded by urllib3 where requests
    asks (iter_content, .content) and raw where the caller reads `raw` itself
    (shutil.copyfileobj(r.raw, f)), as without record_http; the headers, duplicates
    kept, and the message the cookie jar reads."""
    import http.client
    import io

    from urllib3 import HTTPResponse
    from urllib3._collections import HTTPHeaderDict

    message = http.client.HTTPMessage()
    for name, value in headers:
        message[name] = value
    return HTTPResponse(
        body=io.BytesIO(b"".join(recorded.chunks)),
        headers=HTTPHeaderDict(headers),
        status=recorded.status,
        version=10 if recorded.version == "HTTP/1.0" else 11,
        reason=recorded.reason,
        preload_content=False,
        decode_content=False,  # as requests' adapter asks urllib3
        original_response=cast(Any, _Original(message)),
        enforce_content_length=False,  # the body recorded is the one received
        request_method=method,
    )


def _requests_response(adapter: Any, request: Any, recorded: Recorded) -> Any:
    import requests
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers
    from urllib3._collections import HTTPHeaderDict

    headers = [(str(k), str(v)) for k, v in recorded.headers]
    response = requests.Response()
    response.status_code = recorded.status
    response.headers = CaseInsensitiveDict(HTTPHeaderDict(headers))
    response.encoding = get_encoding_from_headers(response.headers)
    response.raw = _recorded_raw(recorded, headers, request.method or "GET")
    response.reason = recorded.reason
    response.url = request.url.decode("utf-8") if isinstance(request.url, bytes) else request.url
    requests.cookies.extract_cookies_to_jar(  # type: ignore[no-untyped-call]
        response.cookies, request, response.raw
    )
    response.request = request
    response.connection = adapter
    return response


def _requests_body(request: Any) -> bytes | None:
    """The body of a prepared request as it is matched: bytes (a str encoded, none as
    b""). A file is read and put back where it was; a generator or other iterable is
    read and replaced by its bytes (sent as they are, still chunked): re-executed code
    that uploads other content at a recorded position is a mismatch, never handed the
    recorded answer. None (not matched) only for what can be read neither way."""
    body = request.body
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if hasattr(body, "read") and hasattr(body, "seek") and hasattr(body, "tell"):
        try:
            at = body.tell()
            data = body.read()
            body.seek(at)
        except (OSError, ValueError):
            return None
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if hasattr(body, "read"):
        return None  # a file that cannot be put back: sent as it is, not matched
    parts = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in body]
    request.body = data = b"".join(parts)
    return data


def _requests_record(response: Any, chunks: list[bytes]) -> Recorded:
    raw = response.raw.headers
    headers = [(str(k), str(v)) for k, v in getattr(raw, "iteritems", raw.items)()]
    version = getattr(response.raw, "version", 11)
    return Recorded(
        response.status_code,
        response.reason or "",
        "HTTP/1.0" if version == 10 else "HTTP/1.1",
        headers,
        chunks,
        usage_of(headers, chunks),
    )


def _patch_requests() -> None:
    adapters = importlib.import_module("requests.adapters")
    cls = adapters.HTTPAdapter
    original = cls.send
    if getattr(original, "__snapstate_records__", False):
        return

    def send(self: Any, request: Any, stream: bool = False, *args: Any, **kwargs: Any) -> Any:
        recorder = _active(False)
        if recorder is None:
            return original(self, request, stream, *args, **kwargs)
        body = _requests_body(request)
        url = request.url.decode("utf-8") if isinstance(request.url, bytes) else request.url

        def live(key: str | None) -> Recorded:
            if key is not None:
                for name in IDEMPOTENCY_HEADERS:
                    if name in request.headers:
                        request.headers[name] = key
            try:
                response = original(self, request, True, *args, **kwargs)
                try:
                    # as received (a gzip body still encoded): urllib3 decodes it again
                    chunks = [
                        bytes(c) for c in response.raw.stream(65536, decode_content=False) if c
                    ]
                finally:
                    response.close()
            except Exception as exc:
                failure = _scrubbed(exc, url)
            else:
                return _requests_record(response, chunks)
            raise failure

        exchange = Exchange(
            request.method or "GET",
            url,
            body,
            [(str(k), str(v)) for k, v in request.headers.items()],
            send=live,
        )
        return _requests_response(self, request, recorder.record(exchange))

    send.__snapstate_records__ = True  # type: ignore[attr-defined]
    send.__wrapped__ = original  # type: ignore[attr-defined]
    cls.send = send


# ------------------------------------------------------------------------ install
_LIBRARIES = ("httpx", "httpx2", "requests")
_INSTALLED: set[str] = set()


def install() -> None:
    """Patch the installed HTTP libraries (importing them: a job that records HTTP
    uses them). Once per library per process; the patches ask the recorder on every
    request, so jobs that do not record pay one call."""
    for name in _LIBRARIES:
        if name in _INSTALLED:
            continue
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            continue
        _INSTALLED.add(name)
        if name == "requests":
            _patch_requests()
        else:
            _patch_httpx(importlib.import_module(name))
