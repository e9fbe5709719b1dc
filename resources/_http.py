"""Adapters for HTTP clients: httpx and httpx2 (the same API, used by openai and
anthropic) Client and AsyncClient with every subclass, their auths and responses,
requests.Session (and subclasses), requests auths and responses, and cookies.

A client is rebuilt after a restore from its whole configuration, read from the live
object (not from what its constructor was once given):

    httpx/httpx2 Client, AsyncClient   base_url, auth, params, headers (raw, in order),
                                       cookies (the whole jar: domains, paths, expiry),
                                       timeout (all four), follow_redirects,
                                       max_redirects, event_hooks, trust_env,
                                       default_encoding, open/closed state, the transport
                                       (an HTTPTransport: verify, http1/http2, limits,
                                       retries, uds, local_address, socket_options, an
                                       HTTP proxy) and every mount. A subclass is rebuilt
                                       as its own type WITHOUT calling its __init__ (its
                                       parameters are unknown and it may have side
                                       effects): object.__new__(cls), the library base
                                       class's __init__ with the configuration, then the
                                       subclass's own instance attributes by value.
    requests.Session (+ subclasses)    its pickle state (headers, cookies, auth, proxies,
                                       hooks, params, verify, cert, mounted adapters with
                                       their Retry and pool settings, stream, trust_env,
                                       max_redirects) plus a subclass's own attributes.

Credentials are never written in clear: BasicAuth/DigestAuth/NetRCAuth (httpx) and
HTTPBasicAuth/HTTPDigestAuth/HTTPProxyAuth (requests) secrets, sensitive header values
(Authorization, Proxy-Authorization, Cookie, X-Api-Key, Api-Key, any name with token,
secret, password, auth or key in it), proxy credentials and every cookie's value go
through resources._secrets.credential: a value equal to an environment variable's (at
least 8 characters; never a cookie) is saved as a reference to that variable and read
again on restore, any other is sealed with the store's key.

What cannot be rebuilt exactly refuses the snapshot, naming the client and the part:
a transport, mount, auth, event hook, default_encoding or subclass attribute that does
not pickle; an SSL context the user built (verify=<SSLContext>, a CA bundle path, a
client certificate); a custom network backend; a SOCKS proxy. A user Auth subclass or
FunctionAuth is saved by value (its functions by reference). Nothing is rebuilt
half-configured. Open streaming responses are refused by their own adapter.

Registered with register_optional: snapstate never imports httpx, httpx2 or requests.
"""

from __future__ import annotations

import datetime
import http.cookiejar
import importlib
import os
import pickle
import sys
import types
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from .._abi import pinned
from ._adapters import Reduced, register_adapter, register_optional
from ._secrets import Credential, credential

if TYPE_CHECKING:
    pass
from ._http_checks import FIX, Refused, check, describe, type_name, verify_of

T = TypeVar("T")
# httpx and httpx2 objects (clients, transports, responses) are typed Any: the same API
# in two libraries, reached through whichever module `lib` is at run time.

__all__ = [
    "sealed",
    "is_sensitive_header",
    "is_sensitive_param",
    "seal_param",
    "seal_url",
    "seal_form",
    "SavedResponse",
]

_SENSITIVE = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
# A header or query parameter whose name holds one of these is a credential (sealing a
# value that is not one costs a few bytes; writing a key in clear is a leak).
_SENSITIVE_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "key",
    "signature",
    "credential",
)
# Query parameters that are credentials without such a word (Azure SAS sig=, OAuth code=).
_SENSITIVE_PARAMS = frozenset({"sig", "pwd", "pass", "code"})

# The attributes httpx's and httpx2's BaseClient/Client/AsyncClient __init__ set: all
# rebuilt from the configuration below; any other instance attribute (a subclass's own)
# is carried by value.
_CLIENT_ATTRS = frozenset(
    {
        "_auth",
        "_base_url",
        "_cookies",
        "_default_encoding",
        "_event_hooks",
        "_headers",
        "_mounts",
        "_params",
        "_state",
        "_timeout",
        "_transport",
        "_trust_env",
        "follow_redirects",
        "max_redirects",
    }
)
SESSION_ATTRS = frozenset(
    {
        "adapters",
        "auth",
        "cert",
        "cookies",
        "headers",
        "hooks",
        "max_redirects",
        "params",
        "proxies",
        "stream",
        "trust_env",
        "verify",
    }
)


# ------------------------------------------------------------------------ secrets
def is_sensitive_header(name: str | bytes) -> bool:
    """True for header names whose values are credentials (sealed in a snapshot)."""
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    name = name.lower()
    return name in _SENSITIVE or any(word in name for word in _SENSITIVE_WORDS)


def is_sensitive_param(name: str | bytes) -> bool:
    """True for URL query parameter names whose values are credentials (key=, api_key=,
    access_token=, X-Amz-Signature=, sig=...): sealed in a snapshot."""
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    name = name.lower()
    return name in _SENSITIVE_PARAMS or any(word in name for word in _SENSITIVE_WORDS)


def seal_param(name: object, value: object) -> object:
    """A query parameter's value (str, bytes or a list of them) sealed if its name is a
    credential's (see sealed), else as it is."""
    if not isinstance(name, (str, bytes)) or not is_sensitive_param(name):
        return value
    if isinstance(value, (str, bytes)):
        return sealed(value)
    if isinstance(value, (list, tuple)):
        return type(value)(sealed(v) if isinstance(v, (str, bytes)) else v for v in value)
    return value


def seal_url(url: T) -> T | Part:
    """A URL (str) as it is saved: the password in it and the values of credential query
    parameters sealed, every other character kept; it unpickles as the same str."""
    if not isinstance(url, str) or ("@" not in url and "?" not in url):
        return url
    rest, hash_, fragment = url.partition("#")
    rest, mark, query = rest.partition("?")
    pieces: list[object] = []
    start = rest.find("://")
    host_at = rest.find("/", start + 3) if start >= 0 else -1
    netloc = rest[start + 3 : host_at if host_at >= 0 else len(rest)] if start >= 0 else ""
    userinfo, at, _ = netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if at and colon and password:
        head = start + 3 + len(user) + 1
        pieces += [rest[:head], sealed(password), rest[head + len(password) :]]
    else:
        pieces.append(rest)
    if mark:
        pieces.append(mark)
        pieces += _query_pieces(query)
    pieces += [hash_, fragment]
    if all(isinstance(p, str) for p in pieces):
        return url
    return Part(_join, (pieces,))


def _query_pieces(query: str) -> list[object]:
    """A query string (or form body) in pieces, credential values sealed."""
    pieces: list[object] = []
    for i, item in enumerate(query.split("&")):
        name, eq, value = item.partition("=")
        pieces.append("&" if i else "")
        if eq and value and is_sensitive_param(urllib.parse.unquote_plus(name)):
            pieces += [name + eq, sealed(value)]
        else:
            pieces.append(item)
    return pieces


@pinned("http_join")
def _join(pieces: Iterable[str]) -> str:
    return "".join(pieces)


@pinned("http_join_bytes")
def _join_bytes(pieces: Iterable[str]) -> bytes:
    return "".join(pieces).encode("latin-1")


def seal_form(body: T, headers: Mapping[Any, Any]) -> T | Part:
    """A request body as it is saved: a form (application/x-www-form-urlencoded, as
    OAuth token requests send client_secret=, password=) with its credential values
    sealed; any other body as it is. It unpickles as the same str or bytes."""
    if not isinstance(body, (str, bytes)) or not body:
        return body
    kind = headers.get("content-type") or ""
    if (
        not (kind.decode("latin-1") if isinstance(kind, bytes) else kind)
        .lower()
        .startswith("application/x-www-form-urlencoded")
    ):
        return body
    text = body.decode("latin-1") if isinstance(body, bytes) else body
    pieces = _query_pieces(text)
    if all(isinstance(p, str) for p in pieces):
        return body
    return Part(_join_bytes if isinstance(body, bytes) else _join, (pieces,))


class _SealedBytes:
    """A bytes credential inside a reduce tuple (credential() takes str)."""

    __slots__ = ("value", "from_env")

    def __init__(self, value: bytes, from_env: bool) -> None:
        self.value, self.from_env = value, from_env

    def __reduce__(self) -> tuple[Callable[[str], bytes], tuple[Credential | None]]:
        if self.from_env:
            try:
                text = self.value.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            env = _env_names(text) if text is not None else ()
            if env:
                return (_utf8, (credential(text, env=env),))
        return (_latin1, (credential(self.value.decode("latin-1")),))


@pinned("http_latin1")
def _latin1(text: str) -> bytes:
    return text.encode("latin-1")


@pinned("http_utf8")
def _utf8(text: str) -> bytes:
    return text.encode("utf-8")


_MIN_ENV_SECRET = 8  # shorter values ("1", "true") may equal a variable by chance


def _env_names(value: str) -> tuple[str, ...]:
    """The environment variables whose value is exactly `value` (a key taken from the
    environment is saved as a reference to its variable, and read again on restore)."""
    if len(value) < _MIN_ENV_SECRET:
        return ()
    return tuple(name for name, current in os.environ.items() if current == value)


def sealed(value: str | bytes | None, *, from_env: bool = True) -> Credential | _SealedBytes | None:
    """`value` (str, bytes or None) wrapped to pickle as a reference to the environment
    variable holding it (from_env), otherwise sealed with the store's key."""
    if isinstance(value, bytes):
        return _SealedBytes(value, from_env)
    if value is None or not from_env:
        return credential(value)
    return credential(value, env=_env_names(value))


def seal_items(
    items: Iterable[tuple[str | bytes, str | bytes]],
) -> list[tuple[str | bytes, object]]:
    """Header (name, value) pairs with the sensitive values sealed (Cookie and
    Set-Cookie values are never taken for environment references)."""
    return [
        (
            k,
            sealed(v, from_env=_lower(k) not in ("cookie", "set-cookie"))
            if is_sensitive_header(k)
            else v,
        )
        for k, v in items
    ]


def _lower(name: str | bytes) -> str:
    return (name.decode("latin-1") if isinstance(name, bytes) else name).lower()


@pinned("http_rebuild_state")
def rebuild_state(cls: type[T], state: dict[str, Any]) -> T:
    obj = object.__new__(cls)
    obj.__dict__.update(state)
    return obj


def reduce_with_secrets(obj: object, secrets: tuple[str, ...], from_env: bool = True) -> Reduced:
    """type(obj) rebuilt from its __dict__, the attributes named in `secrets` sealed."""
    state = dict(obj.__dict__)
    for name in secrets:
        if state.get(name) is not None:
            state[name] = sealed(state[name], from_env=from_env)
    return (rebuild_state, (type(obj), state))


def _reduce_whole_sealed(obj: object) -> Reduced:
    """An object full of secrets (a parsed .netrc): pickled, then the bytes sealed."""
    return (_unseal_object, (sealed(pickle.dumps(obj, protocol=5)),))


@pinned("http_unseal_object")
def _unseal_object(data: bytes) -> object:
    return pickle.loads(data)


# Cookies anywhere (an httpx jar, a requests jar, a bare CookieJar): the value sealed,
# every other field (domain, path, expiry, flags, rest) kept as it is.
register_adapter(
    http.cookiejar.Cookie, partial(reduce_with_secrets, secrets=("value",), from_env=False)
)


# ------------------------------------------------------------------------ httpx, httpx2
def _pool_backend_ok(pool: Any) -> bool:
    backend = type(pool._network_backend)
    return backend.__name__ in ("SyncBackend", "AutoBackend") and backend.__module__.startswith(
        "httpcore"
    )


def _reduce_transport(lib: types.ModuleType, what: str, part: str, transport: Any) -> object:
    """A transport as (callable, args) pieces: an HTTPTransport from its pool's
    settings; any other transport by value if it pickles, else a refusal."""
    if transport is None:
        return None
    cls = type(transport)
    if cls is not lib.HTTPTransport and cls is not lib.AsyncHTTPTransport:
        check(what, part, transport)
        return transport
    pool = transport._pool
    kind = type(pool).__name__.removeprefix("Async")
    if kind == "SOCKSProxy":
        raise Refused(
            f"{what} whose {part} goes through a SOCKS proxy, which this adapter "
            f"cannot rebuild; {FIX}"
        )
    if kind not in ("ConnectionPool", "HTTPProxy") or getattr(pool, "_proxy", None) is not None:
        raise Refused(
            f"{what} whose {part} has a connection pool of unknown kind "
            f"({type(pool).__qualname__}); {FIX}"
        )
    if not _pool_backend_ok(pool):
        raise Refused(
            f"{what} whose {part} uses a custom network backend "
            f"({type_name(pool._network_backend)}), which cannot be saved; {FIX}"
        )
    verify, trust_env = verify_of(lib.__name__, pool._ssl_context, what, part)
    unlimited = sys.maxsize
    config = {
        "verify": verify,
        "trust_env": trust_env,
        "http1": pool._http1,
        "http2": pool._http2,
        "limits": (
            None if pool._max_connections == unlimited else pool._max_connections,
            None
            if pool._max_keepalive_connections == unlimited
            else pool._max_keepalive_connections,
            pool._keepalive_expiry,
        ),
        "uds": pool._uds,
        "local_address": pool._local_address,
        "retries": pool._retries,
        "socket_options": pool._socket_options,
    }
    if kind == "HTTPProxy":
        if pool._proxy_ssl_context is not None:
            raise Refused(
                f"{what} whose {part} has a proxy SSL context built by the user, "
                f"which cannot be saved; {FIX}"
            )
        url = pool._proxy_url
        port = f":{url.port}" if url.port is not None else ""
        config["proxy"] = (
            seal_url(f"{url.scheme.decode()}://{url.host.decode()}{port}{url.target.decode()}"),
            seal_items(pool._proxy_headers),
        )
    return Part(_rebuild_transport, (lib.__name__, cls is lib.AsyncHTTPTransport, config))


@pinned("http_rebuild_transport")
def _rebuild_transport(libname: str, is_async: bool, config: dict[str, Any]) -> object:
    lib = importlib.import_module(libname)
    config = dict(config)
    config["limits"] = lib.Limits(
        max_connections=config["limits"][0],
        max_keepalive_connections=config["limits"][1],
        keepalive_expiry=config["limits"][2],
    )
    proxy = config.pop("proxy", None)
    if proxy is not None:
        config["proxy"] = lib.Proxy(url=proxy[0], headers=list(proxy[1]))
        for unused in ("uds", "local_address", "retries"):  # not used through a proxy
            config.pop(unused)
    cls = lib.AsyncHTTPTransport if is_async else lib.HTTPTransport
    return cls(**config)


class Part:
    """A (callable, args) reduction nested inside a client's state."""

    __slots__ = ("reduced",)

    def __init__(self, *reduced: Any) -> None:
        self.reduced = reduced

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduced


def _reduce_client(lib: types.ModuleType, base: type, client: object) -> Reduced:
    """httpx/httpx2 Client or AsyncClient (or a subclass) -> a shell of type(client)
    configured by _configure_client from the state read here."""
    what = describe(client, base)
    attrs = client.__dict__
    auth = attrs["_auth"]
    if auth is not None and not isinstance(auth, (lib.BasicAuth, lib.DigestAuth, lib.NetRCAuth)):
        check(what, "auth", auth)
    hooks = {}
    for event, functions in attrs["_event_hooks"].items():
        for i, hook in enumerate(functions):
            check(what, f"event_hooks[{event!r}][{i}]", hook)
        hooks[event] = list(functions)
    encoding = attrs["_default_encoding"]
    if not isinstance(encoding, str):
        check(what, "default_encoding", encoding)
    timeout = attrs["_timeout"]
    mounts = {
        pattern.pattern: _reduce_transport(lib, what, f"mount {pattern.pattern!r}", t)
        for pattern, t in attrs["_mounts"].items()
    }
    config = {
        "base_url": seal_url(str(attrs["_base_url"])),
        "auth": auth,
        "params": [(k, seal_param(k, v)) for k, v in attrs["_params"].multi_items()],
        "timeout": (timeout.connect, timeout.read, timeout.write, timeout.pool),
        "follow_redirects": attrs["follow_redirects"],
        "max_redirects": attrs["max_redirects"],
        "event_hooks": hooks,
        "trust_env": attrs["_trust_env"],
        "default_encoding": encoding,
        "transport": _reduce_transport(lib, what, "transport", attrs["_transport"]),
        "mounts": mounts,
    }
    extras = {k: v for k, v in attrs.items() if k not in _CLIENT_ATTRS}
    extras.update(_slot_values(client, base))
    for name, value in extras.items():
        check(what, f"attribute {name!r}", value)
    state = {
        "config": config,
        "headers": seal_items(attrs["_headers"].raw),
        "cookies": attrs["_cookies"].jar,
        "state": attrs["_state"].name,
        "extras": extras,
    }
    return shell(client, state, partial(_configure_client, lib.__name__, base.__name__))


_SLOTS: dict[tuple[type, type], tuple[str, ...]] = {}


def _slot_values(obj: object, base: type) -> dict[str, object]:
    """The values of the __slots__ a subclass adds below `base` (set ones only)."""
    key = (type(obj), base)
    names = _SLOTS.get(key)
    if names is None:
        found: list[str] = []
        for cls in type(obj).__mro__:
            if cls is base:
                break
            slots = cls.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name not in ("__dict__", "__weakref__"):
                    found.append(name)
        names = _SLOTS[key] = tuple(found)
    values = {}
    for name in names:
        try:
            values[name] = getattr(obj, name)
        except AttributeError:
            pass
    return values


def _set_extras(obj: object, extras: dict[str, object]) -> None:
    """A subclass's own attributes back on the rebuilt object (slots through setattr)."""
    for name, value in extras.items():
        if isinstance(getattr(type(obj), name, None), types.MemberDescriptorType):
            object.__setattr__(obj, name, value)
        else:
            obj.__dict__[name] = value


def shell(obj: object, state: object, configure: Callable[[Any, Any], object]) -> Reduced:
    """`obj` saved as an empty instance of its class that `configure(obj, state)` (pickle's
    state setter) configures once the state is loaded."""
    return (_new_shell, (type(obj),), state, None, None, configure)


@pinned("http_new_shell")
def _new_shell(cls: type[T]) -> T:
    return object.__new__(cls)


@pinned("http_configure_client")
def _configure_client(libname: str, basename: str, client: Any, state: dict[str, Any]) -> None:
    lib = importlib.import_module(libname)
    base = getattr(lib, basename)
    config = dict(state["config"])
    config["timeout"] = lib.Timeout(tuple(config["timeout"]))  # all four, as they were
    base.__init__(client, **config)
    client._headers = lib.Headers(list(state["headers"]))
    client._cookies = lib.Cookies(state["cookies"])
    client._state = getattr(type(client._state), state["state"])
    _set_extras(client, state["extras"])


def _reduce_response(libname: str, response: Any) -> Reduced:
    if not response.is_stream_consumed and not response.is_closed:
        raise pickle.PicklingError(
            f"a streaming {libname} response is a live handle that cannot be saved in a snapshot"
        )
    return SavedResponse(response).__reduce__()


class SavedResponse:
    """An httpx/httpx2 Response (read, or a finished stream's) as it is saved: status,
    headers, the body as it was read (already decoded), HTTP version and reason, elapsed,
    default encoding, history, next_request and its request (method, URL, headers,
    body); credential headers and URL parts sealed. Shared with resources._llm."""

    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response

    def __reduce__(self) -> tuple[Callable[..., object], tuple[Any, ...]]:
        r = self.response
        extensions = {
            k: r.extensions[k] for k in ("http_version", "reason_phrase") if k in r.extensions
        }
        return (
            _rebuilt_response,
            (
                type(r).__module__.split(".")[0],
                r.status_code,
                seal_items(r.headers.raw),
                getattr(r, "_content", None),
                extensions,
                _saved_request(r._request),
                getattr(r, "_elapsed", None),
                r.default_encoding,
                list(r.history),
                _saved_request(r.next_request),
            ),
        )


# (method, URL, headers, body) of an httpx/httpx2 Request, credentials sealed
_SavedRequest = tuple[str, object, list[tuple[str | bytes, object]], object]


def _saved_request(request: Any) -> _SavedRequest | None:
    if request is None:
        return None
    return (
        request.method,
        seal_url(str(request.url)),
        seal_items(request.headers.raw),
        seal_form(getattr(request, "_content", None), request.headers),
    )


def _rebuilt_request(lib: types.ModuleType, saved: _SavedRequest | None) -> object:
    if saved is None:
        return None
    method, url, headers, content = saved
    return lib.Request(method, url, headers=list(headers), content=content)


@pinned("http_rebuilt_response")
def _rebuilt_response(
    libname: str,
    status: int,
    headers: list[tuple[str | bytes, object]],
    content: bytes | None,
    extensions: dict[str, Any],
    request: _SavedRequest | None,
    elapsed: datetime.timedelta | None,
    default_encoding: str | Callable[[bytes], str],
    history: list[Any],
    next_request: _SavedRequest | None,
) -> object:
    lib = importlib.import_module(libname)
    response = lib.Response(
        status,
        headers=list(headers),
        extensions=extensions,
        request=_rebuilt_request(lib, request),
        history=history,
        default_encoding=default_encoding,
    )
    # The body as it was read (decoded): set directly, so a Content-Encoding header is
    # kept without being applied a second time. A body consumed as a stream was not kept
    # (reading it raises, as it did before the snapshot).
    if content is None:
        del response._content
    else:
        response._content = content
    response.stream = lib.ByteStream(content or b"")
    response.is_stream_consumed = True
    response.is_closed = True
    if elapsed is not None:
        response.elapsed = elapsed
    response.next_request = _rebuilt_request(lib, next_request)
    return response


def _load(libname: str) -> None:
    lib = sys.modules[libname]
    for base in (lib.Client, lib.AsyncClient):
        register_adapter(base, partial(_reduce_client, lib, base), subclasses=True)
    register_adapter(
        lib.BasicAuth, partial(reduce_with_secrets, secrets=("_auth_header",)), subclasses=True
    )
    register_adapter(
        lib.DigestAuth,
        partial(reduce_with_secrets, secrets=("_username", "_password")),
        subclasses=True,
    )
    register_adapter(lib.NetRCAuth, _reduce_whole_sealed, subclasses=True)
    register_adapter(lib.Response, partial(_reduce_response, libname))


register_optional("httpx", partial(_load, "httpx"))
register_optional("httpx2", partial(_load, "httpx2"))
