"""Adapters for the LLM SDK clients agents hold without wrapping them: openai.OpenAI /
AsyncOpenAI and anthropic.Anthropic / AsyncAnthropic (and subclasses), and the SDKs'
raw responses (`with_raw_response`).

A client is saved as its constructor configuration, read off the live client as the
SDK's own copy() reads it: base URL, timeout, max_retries, the user's default headers
and query (never the SDK's generated ones), organization / project, websocket URL,
_strict_response_validation, OpenTelemetry options. After a restore the SDK's own
__init__ builds it again on an instance of the same class, then the saved attributes are
put back exactly (so environment variables read by the constructor, e.g.
OPENAI_CUSTOM_HEADERS or OPENAI_ORG_ID, cannot change a restored client), then the
attributes a subclass added.

  - the SDK's default HTTP client is dropped (the rebuilt client makes its own); one
    the user passed (http_client=) is saved with the client (through the HTTP adapters);
  - the API key, admin key, auth token, webhook secrets and credential headers
    (Authorization, x-api-key...) go through resources._secrets.credential: a value
    equal to an environment variable (the SDK's own variable first, then any other) is
    saved as a reference to that variable and read again at the restore; any other
    value is sealed with the store's key. Never in clear;
  - what cannot be rebuilt exactly (an api_key provider that does not pickle, workload
    identity, anthropic credential providers / profiles, middleware that does not pickle,
    Azure / Bedrock / Vertex / Foundry clients, provider= integrations) refuses the
    snapshot, naming the client and that part: a client is never rebuilt half-configured.

Every version the integrations extra allows is supported: recent SDKs on httpx2 and
older ones (openai 1.x, anthropic 0.x) on httpx. Attributes a version lacks are not
read, __init__ gets only the parameters it takes (inspect.signature), and the HTTP
library is the client's own (older SDKs' deprecated transport= / proxies= are refused).

A stream (create(stream=True)) read to its end is saved as an ended stream; one still
open is refused (the rest of an HTTP stream cannot be read in another process).

A raw response keeps everything parse() reads (the cast type, the client, the request
options, the parsed cache) and its HTTP response rebuilt from status, headers, body,
HTTP version and request (credential headers sealed or referenced as above); parse()
after a restore gives an equal object. A response whose body was not read (streaming)
is refused.
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
import sys
import types
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .._abi import pinned
from ._adapters import Reduced, reducer_for, register_adapter, register_optional
from ._http import _MIN_ENV_SECRET, SavedResponse, is_sensitive_header, is_sensitive_param, seal_url
from ._secrets import Credential, credential

if TYPE_CHECKING:
    import anthropic
    import openai

__all__: list[str] = []

T = TypeVar("T")
# SDK objects read through attributes that differ between SDKs and versions (an openai
# or anthropic client in a shared helper, its HTTP client, a stream, a raw response) are
# typed Any; the clients' own adapters use the SDK's types.

_RESOURCE_FIX = (
    "create the client in a module-level function passed to snapstate.resource() "
    "so it is created again after a restore"
)


# ------------------------------------------------------------------------ shared parts
def _secret(value: T, default_env: str | None) -> T | Credential:
    """`value` as a credential: an env reference (default_env first, then a variable
    holding exactly that value: names that look like a key's first; only for values of
    at least _MIN_ENV_SECRET characters, shorter ones such as "1" equal DEBUG=1 by
    chance) or sealed; None and '' stay as they are."""
    if not isinstance(value, str) or not value:
        return value
    names = [default_env] if default_env else []
    if len(value) >= _MIN_ENV_SECRET:
        names += sorted(
            (k for k, v in os.environ.items() if v == value and k != default_env),
            key=lambda k: (not is_sensitive_header(k), k),
        )
    return credential(value, env=tuple(names))


def _headers(headers: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of a header mapping with credential values wrapped (see _secret)."""
    return {
        k: _secret(v, None) if isinstance(k, str) and is_sensitive_header(k) else v
        for k, v in dict(headers).items()
    }


def _query(query: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of a query mapping with credential values (key=, api_key=...) wrapped."""
    return {
        k: _secret(v, None) if isinstance(k, str) and is_sensitive_param(k) else v
        for k, v in dict(query).items()
    }


def _public_name(t: type) -> str:
    """The name users write: openai.AzureOpenAI, not openai.lib.azure.AzureOpenAI."""
    top = t.__module__.split(".")[0]
    if getattr(sys.modules.get(top), t.__name__, None) is t:
        return f"{top}.{t.__name__}"
    return f"{t.__module__}.{t.__qualname__}"


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _describe(client: object, sdk_base: type) -> str:
    """'an openai.OpenAI client', or for a subclass 'an app.MyClient client (an
    openai.OpenAI subclass)'."""
    t = type(client)
    if t is sdk_base:
        return _a(f"{_public_name(t)} client")
    return _a(f"{_public_name(t)} client ({_a(_public_name(sdk_base))} subclass)")


def _refuse(client: object, sdk_base: type, part: str, fix: str) -> NoReturn:
    raise pickle.PicklingError(
        f"{_describe(client, sdk_base)} whose {part} cannot be saved in a snapshot (it "
        f"could not be rebuilt exactly after a restore); {fix}"
    )


@functools.cache
def _cached_properties(t: type) -> frozenset[str]:
    """Names of t's cached properties (client.chat, client.messages...): SDK resource
    objects the rebuilt client creates again on first use."""
    return frozenset(
        name
        for klass in t.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, functools.cached_property)
    )


def _extras(client: object, known: frozenset[str]) -> dict[str, Any]:
    """Attributes the SDK's constructor does not set (a subclass's own state)."""
    skip = known | _cached_properties(type(client))  # type: ignore[arg-type]  # a class hashes
    return {k: v for k, v in vars(client).items() if k not in skip}


def _sdk_base(client: object, bases: tuple[type[T], ...]) -> type[T]:
    for klass in type(client).__mro__:
        if klass in bases:
            return klass
    raise TypeError(type(client))  # pragma: no cover - the adapter is registered on bases


def _check_callable(client: object, sdk_base: type, part: str, fn: object, fix: str) -> None:
    """A callable the client holds (an api_key provider, a middleware) is saved with it
    if it pickles (a module-level function, an object of plain values); else the
    snapshot is refused, naming it: the client is never rebuilt without it."""
    from ..serializers import _pickler

    try:
        _pickler._dump(fn)
    except Exception as exc:  # noqa: BLE001 - any failure means it cannot be saved
        _refuse(client, sdk_base, f"{part} ({exc})", fix)


def _finish(client: Any, attrs: dict[str, Any], extras: dict[str, Any], closed: bool) -> object:
    for name, value in attrs.items():
        setattr(client, name, value)
    for name, value in extras.items():
        setattr(client, name, value)
    if closed:  # closed at the snapshot: closed after the restore too
        # ClientState of the client's own HTTP library (httpx2 now, httpx in older SDKs)
        client._client._state = type(client._client._state).CLOSED
    return client


@functools.cache
def _parameters(init: Callable[..., object]) -> frozenset[str]:
    """The keyword parameters an SDK's __init__ takes (they differ between versions)."""
    return frozenset(inspect.signature(init).parameters)


def _accepted(init: Callable[..., object], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` without the unset (None) ones this SDK version's __init__ does not take
    (websocket_base_url, _enforce_credentials are not in openai 1.x); a value it cannot
    take is left in, and __init__ fails loudly rather than dropping it."""
    names = _parameters(init)
    return {k: v for k, v in kwargs.items() if k in names or v is not None}


def _present(client: object, values: dict[str, Any]) -> dict[str, Any]:
    """The attributes of `values` this SDK version's client has (older versions lack
    admin_api_key, webhook_secret...): only those are put back."""
    found = vars(client)
    return {k: v for k, v in values.items() if k in found}


# Attributes older SDK versions (openai 1.x, anthropic 0.x, on httpx) set in __init__:
# resources (client.chat...) made again by the rebuilt client's __init__, and the
# deprecated transport= / proxies= / connection_pool_limits= options.
_OLD_SDK_ATTRS = frozenset(
    {
        "_limits",
        "_proxies",
        "_transport",
        "with_raw_response",
        "with_streaming_response",
        "audio",
        "batches",
        "beta",
        "chat",
        "completions",
        "embeddings",
        "files",
        "fine_tuning",
        "images",
        "messages",
        "models",
        "moderations",
        "uploads",
    }
)


def _is_old_sdk(default_http: type) -> bool:
    """An older SDK (openai 1.x, anthropic 0.x): its default HTTP client an httpx one,
    not httpx2. Only there are _OLD_SDK_ATTRS the SDK's own (a recent SDK's subclass
    keeps its own attribute named like one of them)."""
    return any(c.__module__.split(".")[0] == "httpx" for c in default_http.__mro__)


def _check_old_options(client: object, sdk_base: type) -> None:
    """Older SDKs' transport= / proxies= options configure the default HTTP client, which
    is not saved: refused (connection_pool_limits= is given again)."""
    for name, option in (("_transport", "transport="), ("_proxies", "proxies=")):
        if vars(client).get(name) is not None:
            _refuse(
                client,
                sdk_base,
                f"{option} option",
                "pass http_client=httpx.Client("
                "...) instead (it is saved with the client), or " + _RESOURCE_FIX,
            )


def _http_client(client: Any, sdk_base: type, default_types: tuple[type, ...]) -> object:
    """The user's own http_client=, or None for the SDK's default one (dropped). A user's
    client is saved through its own adapter (the HTTP adapters); without one, refused."""
    http = client._client
    if type(http) in default_types:
        return None
    if reducer_for(type(http)) is None:
        _refuse(
            client,
            sdk_base,
            f"http_client ({_public_name(type(http))})",
            "pass no http_client= (the SDK's default one is made again after a restore), "
            "or " + _RESOURCE_FIX,
        )
    return http


def _is_closed(http: object) -> bool:
    return bool(getattr(http, "is_closed", False))


# ------------------------------------------------------------------------ openai
_OPENAI_KNOWN = frozenset(
    {
        "_ambient_authorizations",
        "_api_key_provider",
        "_base_url",
        "_base_url_was_default",
        "_client",
        "_custom_headers",
        "_custom_query",
        "_data_residency",
        "_default_stream_cls",
        "_idempotency_header",
        "_platform",
        "_provider",
        "_provider_runtime",
        "_strict_response_validation",
        "_version",
        "_workload_identity_auth",
        "admin_api_key",
        "api_key",
        "max_retries",
        "organization",
        "project",
        "timeout",
        "webhook_secret",
        "websocket_base_url",
        "workload_identity",
    }
)


def _load_openai() -> None:
    import openai
    from openai import _base_client

    bases: tuple[type[openai.OpenAI | openai.AsyncOpenAI], ...] = (
        openai.OpenAI,
        openai.AsyncOpenAI,
    )
    defaults = (_base_client.SyncHttpxClientWrapper, _base_client.AsyncHttpxClientWrapper)
    old = _is_old_sdk(defaults[0])
    known = _OPENAI_KNOWN | _OLD_SDK_ATTRS if old else _OPENAI_KNOWN
    # Azure clients subclass OpenAI / AsyncOpenAI but hold an api_version, a deployment
    # and Azure AD token providers this adapter does not rebuild: refused by name.
    azure = tuple(
        c
        for c in (getattr(openai, "AzureOpenAI", None), getattr(openai, "AsyncAzureOpenAI", None))
        if isinstance(c, type)
    )

    module_clients = tuple(
        c
        for c in (
            getattr(openai, n, None)
            for n in ("_ModuleClient", "_AzureModuleClient", "_BedrockModuleClient")
        )
        if isinstance(c, type)
    )

    def reduce(client: openai.OpenAI | openai.AsyncOpenAI) -> Reduced:
        base = _sdk_base(client, bases)
        if isinstance(client, module_clients):
            _refuse(
                client,
                base,
                "settings live in the openai module's globals (the "
                "module-level client behind openai.chat...)",
                "create an openai.OpenAI client and hold that, or " + _RESOURCE_FIX,
            )
        if isinstance(client, azure):
            _refuse(
                client,
                base,
                "Azure configuration (api_version, deployment, Azure AD token provider)",
                _RESOURCE_FIX,
            )
        # getattr: attributes of recent versions only (openai 1.x has none of them)
        provider = getattr(client, "_provider", None)
        if provider is not None or getattr(client, "_provider_runtime", None) is not None:
            _refuse(
                client, base, f"provider= integration ({type(provider).__name__})", _RESOURCE_FIX
            )
        if (
            getattr(client, "workload_identity", None) is not None
            or getattr(client, "_workload_identity_auth", None) is not None
        ):
            _refuse(
                client,
                base,
                "workload identity (a token exchanged at run time)",
                "pass api_key (or set OPENAI_API_KEY), or " + _RESOURCE_FIX,
            )
        if old:
            _check_old_options(client, base)
        provider = getattr(client, "_api_key_provider", None)
        if provider is not None:
            _check_callable(
                client,
                base,
                f"api_key provider {provider!r}",
                provider,
                "pass api_key as a string or set OPENAI_API_KEY, or use a "
                "module-level function as the provider, or " + _RESOURCE_FIX,
            )
        http = _http_client(client, base, defaults)
        # The key itself is put back with the other attributes below (`attrs`).
        kwargs = {
            "api_key": provider if provider is not None else "",
            "base_url": seal_url(str(client._base_url)),
            "timeout": client.timeout,
            "max_retries": client.max_retries,
            "websocket_base_url": seal_url(getattr(client, "websocket_base_url", None)),
            "_strict_response_validation": client._strict_response_validation,
        }
        if http is not None:
            kwargs["http_client"] = http
        got = vars(client)
        attrs = _present(
            client,
            {
                "api_key": _secret(client.api_key, "OPENAI_API_KEY"),
                "admin_api_key": _secret(got.get("admin_api_key"), "OPENAI_ADMIN_KEY"),
                "webhook_secret": _secret(got.get("webhook_secret"), "OPENAI_WEBHOOK_SECRET"),
                "organization": client.organization,
                "project": client.project,
                "_custom_headers": _headers(client._custom_headers),
                "_custom_query": _query(client._custom_query),
                "_base_url_was_default": got.get("_base_url_was_default"),
                "_data_residency": got.get("_data_residency"),
                "_ambient_authorizations": frozenset(
                    _secret(v, None) for v in got.get("_ambient_authorizations", ())
                ),
            },
        )
        return (
            _rebuild_openai,
            (
                type(client),
                base,
                kwargs,
                attrs,
                _extras(client, known),
                http is None and _is_closed(client._client),
            ),
        )

    for base in bases:
        register_adapter(base, reduce, subclasses=True)
    _load_responses(openai)


@pinned("openai_rebuild_client")
def _rebuild_openai(
    cls: type[Any],
    base: type[Any],
    kwargs: dict[str, Any],
    attrs: dict[str, Any],
    extras: dict[str, Any],
    closed: bool,
) -> object:
    client = object.__new__(cls)
    # The SDK's own constructor on the saved class (a subclass's __init__ may take other
    # arguments; its own attributes come back from `extras`).
    if "_enforce_credentials" in _parameters(base.__init__):
        kwargs = {"_enforce_credentials": False, **kwargs}
    base.__init__(client, **_accepted(base.__init__, kwargs))
    if "_ambient_authorizations" in attrs:
        attrs["_ambient_authorizations"] = frozenset(attrs["_ambient_authorizations"])
    return _finish(client, attrs, extras, closed)


# ------------------------------------------------------------------------ anthropic
_ANTHROPIC_KNOWN = frozenset(
    {
        "_base_url",
        "_client",
        "_credential_headers",
        "_custom_auth",
        "_custom_headers",
        "_custom_query",
        "_default_stream_cls",
        "_idempotency_header",
        "_lazy_tracer",
        "_middleware",
        "_middleware_chain",
        "_open_telemetry",
        "_otel",
        "_platform",
        "_strict_response_validation",
        "_timeout",
        "_timeout_overridden",
        "_token_cache",
        "_unchosen_base_url",
        "_version",
        "api_key",
        "auth_token",
        "credentials",
        "max_retries",
        "webhook_key",
    }
)

# Clients of the SDK that are not (plain) Anthropic clients: their cloud credentials
# (AWS, Google, Azure) are resolved at run time and cannot be rebuilt here.
_ANTHROPIC_PLATFORMS = (
    "AnthropicBedrock",
    "AsyncAnthropicBedrock",
    "AnthropicBedrockMantle",
    "AsyncAnthropicBedrockMantle",
    "AnthropicVertex",
    "AsyncAnthropicVertex",
    "AnthropicFoundry",
    "AsyncAnthropicFoundry",
)


def _load_anthropic() -> None:
    import anthropic
    from anthropic import _base_client

    bases: tuple[type[anthropic.Anthropic | anthropic.AsyncAnthropic], ...] = (
        anthropic.Anthropic,
        anthropic.AsyncAnthropic,
    )
    defaults = (_base_client.SyncHttpxClientWrapper, _base_client.AsyncHttpxClientWrapper)
    old = _is_old_sdk(defaults[0])
    known = _ANTHROPIC_KNOWN | _OLD_SDK_ATTRS if old else _ANTHROPIC_KNOWN

    def reduce(client: anthropic.Anthropic | anthropic.AsyncAnthropic) -> Reduced:
        base = _sdk_base(client, bases)
        got = vars(client)  # .get: attributes of recent versions only (not in 0.x)
        if (
            got.get("credentials") is not None
            or got.get("_token_cache") is not None
            or got.get("_custom_auth") is not None
            or got.get("_credential_headers")
        ):
            _refuse(
                client,
                base,
                "credentials provider "
                f"({type(got.get('credentials')).__name__}, from credentials=, config=, "
                "profile= or a profile on disk)",
                "pass api_key or auth_token (or set ANTHROPIC_API_KEY), or " + _RESOURCE_FIX,
            )
        if old:
            _check_old_options(client, base)
        middlewares = got.get("_middleware", ())
        for middleware in middlewares:
            _check_callable(
                client,
                base,
                f"middleware {middleware!r}",
                middleware,
                "use module-level middleware functions or Middleware objects "
                "holding plain values, or " + _RESOURCE_FIX,
            )
        http = _http_client(client, base, defaults)
        kwargs = {
            "base_url": seal_url(str(client._base_url)),
            "timeout": got["_timeout"] if "_timeout" in got else client.timeout,
            "max_retries": client.max_retries,
            "_strict_response_validation": client._strict_response_validation,
        }
        if "_open_telemetry" in got:
            kwargs["open_telemetry"] = got["_open_telemetry"]
        if "_middleware" in got:
            kwargs["middleware"] = middlewares
        if http is not None:
            kwargs["http_client"] = http
        elif (
            got.get("_limits") is not None
            and "connection_pool_limits" in _parameters(base.__init__)
            and got["_limits"] != _default_limits(client)
        ):
            kwargs["connection_pool_limits"] = got["_limits"]  # anthropic 0.x
        unchosen = got.get("_unchosen_base_url")
        attrs = _present(
            client,
            {
                "api_key": _secret(client.api_key, "ANTHROPIC_API_KEY"),
                "auth_token": _secret(client.auth_token, "ANTHROPIC_AUTH_TOKEN"),
                "webhook_key": _secret(got.get("webhook_key"), "ANTHROPIC_WEBHOOK_SIGNING_KEY"),
                "_custom_headers": _headers(client._custom_headers),
                "_custom_query": _query(client._custom_query),
                "_timeout_overridden": got.get("_timeout_overridden"),
                "_unchosen_base_url": None if unchosen is None else str(unchosen),
            },
        )
        return (
            _rebuild_anthropic,
            (
                type(client),
                base,
                kwargs,
                attrs,
                _extras(client, known),
                http is None and _is_closed(client._client),
            ),
        )

    for base in bases:
        register_adapter(base, reduce, subclasses=True)

    def refuse_platform(client: object) -> NoReturn:
        _refuse(
            client,
            type(client),
            "cloud platform credentials (AWS / Google / Azure, resolved at run time)",
            _RESOURCE_FIX,
        )

    for name in _ANTHROPIC_PLATFORMS:
        cls = getattr(anthropic, name, None)
        if isinstance(cls, type):
            register_adapter(cls, refuse_platform, subclasses=True)
    _load_responses(anthropic)


def _default_limits(client: object) -> object:
    """The connection limits an anthropic 0.x client has when none were given."""
    from anthropic import _constants

    return getattr(_constants, "DEFAULT_CONNECTION_LIMITS", None)


@pinned("anthropic_rebuild_client")
def _rebuild_anthropic(
    cls: type[Any],
    base: type[Any],
    kwargs: dict[str, Any],
    attrs: dict[str, Any],
    extras: dict[str, Any],
    closed: bool,
) -> object:
    client = object.__new__(cls)
    # An explicit (empty) credential: the constructor then reads no environment variable
    # and no profile from disk; the saved credentials are put back below.
    base.__init__(client, api_key="", **kwargs)
    if attrs.get("_unchosen_base_url") is not None:
        # a URL of the client's own HTTP library (httpx2 now, httpx in anthropic 0.x)
        attrs["_unchosen_base_url"] = type(client._base_url)(attrs["_unchosen_base_url"])
    return _finish(client, attrs, extras, closed)


# ------------------------------------------------------------------------ raw responses
def _load_responses(sdk: types.ModuleType) -> None:
    """Adapters for the SDK's raw response classes (with_raw_response /
    with_streaming_response results)."""
    import importlib

    for module, name in (
        ("_response", "BaseAPIResponse"),
        ("_legacy_response", "LegacyAPIResponse"),
    ):
        try:
            cls = getattr(importlib.import_module(f"{sdk.__name__}.{module}"), name)
        except (ImportError, AttributeError):
            continue
        register_adapter(cls, _reduce_raw_response, subclasses=True)
    _load_streams(sdk)


def _load_streams(sdk: types.ModuleType) -> None:
    """Adapters for the SDK's server-sent-event streams (create(stream=True))."""
    import importlib

    try:
        module = importlib.import_module(f"{sdk.__name__}._streaming")
    except ImportError:
        return
    for name in ("Stream", "AsyncStream"):
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            register_adapter(cls, _reduce_stream, subclasses=True)


def _reduce_stream(stream: Any) -> Reduced:
    """A stream read to its end (its response closed, its iterator finished) is saved
    as such; one still open is refused: the rest of an HTTP stream cannot be read in
    another process, and a restored stream that just ended early would be wrong."""
    iterator = getattr(stream, "_iterator", None)
    frame = getattr(iterator, "gi_frame", getattr(iterator, "ag_frame", False))
    if frame is not None or not stream.response.is_closed:
        raise pickle.PicklingError(
            f"{_a(_public_name(type(stream)))} (a streaming completion) is still open; read "
            "it to its end (or drop it: del) before snapshot(), and keep the text you "
            "collected: the rest of an HTTP stream cannot be read after a restore"
        )
    state = dict(vars(stream))
    state["_iterator"] = None
    state["response"] = SavedResponse(stream.response)
    return (_rebuild_stream, (type(stream), state, hasattr(iterator, "ag_frame")))


@pinned("llm_rebuild_stream")
def _rebuild_stream(cls: type[Any], state: dict[str, Any], asynchronous: bool) -> object:
    stream = object.__new__(cls)
    stream.__dict__.update(state)
    stream._iterator = _finished_async_iterator() if asynchronous else iter(())
    return stream


def _finished_async_iterator() -> AsyncGenerator[None, None]:
    async def finished() -> AsyncGenerator[None, None]:
        return
        yield  # an async generator that ends at once

    iterator = finished()
    try:
        iterator.asend(None).send(None)  # run to its end without an event loop
    except StopAsyncIteration:
        pass
    return iterator


def _reduce_raw_response(raw: Any) -> Reduced:
    http = raw.http_response
    if not hasattr(http, "_content"):  # httpx2 sets it once the body is read
        raise pickle.PicklingError(
            f"{_a(_public_name(type(raw)))} (a raw SDK response) whose body was not read "
            "(a streaming response); read it (.read() or .parse()) or close it before "
            "snapshot(), or keep only the parsed result"
        )
    state = dict(vars(raw))
    state["http_response"] = SavedResponse(http)
    options: Any = state.get("_options")  # the request's options (a pydantic model) or None
    update = {}
    headers = getattr(options, "headers", None)
    if isinstance(headers, dict) and any(is_sensitive_header(str(k)) for k in headers):
        update["headers"] = _headers(headers)
    params = getattr(options, "params", None)
    if isinstance(params, dict) and any(is_sensitive_param(str(k)) for k in params):
        update["params"] = _query(params)
    if update:
        state["_options"] = options.model_copy(update=update)
    return (_rebuild_raw_response, (type(raw), state))


@pinned("llm_rebuild_raw_response")
def _rebuild_raw_response(cls: type[Any], state: dict[str, Any]) -> object:
    raw = object.__new__(cls)
    raw.__dict__.update(state)
    return raw


register_optional("openai", _load_openai)
register_optional("anthropic", _load_anthropic)
