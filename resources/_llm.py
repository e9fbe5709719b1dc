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
import importlib
import inspect
import os
import pickle
import sys
import types
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from .._abi import pinned
from ._adapters import Reduced, reducer_for, register_adapter, register_optional
from ._http import _MIN_ENV_SECRET, SavedResponse, is_sensitive_header, is_sensitive_param, seal_url
from ._secrets import Credential, credential

__all__: list[str] = []

T = TypeVar("T")
# SDK objects read through attributes that differ between SDKs and versions (an openai
# or anthropic client, its HTTP client, a stream, a raw response) are typed Any: one
# loader serves both SDKs, driven by a spec per SDK (_OPENAI, _ANTHROPIC).

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


# ------------------------------------------------------------------------ one loader
# What each SDK's clients need to be saved and rebuilt is data (an _SdkSpec below); one
# loader (_load), one reduce (_reduce_client) and one rebuild (_rebuild) read it.

# A constructor keyword as it is saved, read off the client: reader(client, vars(client));
# _ABSENT leaves the keyword out (an SDK version without that option).
_Read = Callable[[Any, dict[str, Any]], object]
_ABSENT = object()


@dataclass(frozen=True)
class _ClassRefusal:
    """SDK classes (by name; one a version lacks is skipped) whose clients, subclasses
    too, are refused by their own adapter: `part` names what cannot be rebuilt."""

    names: tuple[str, ...]
    part: str
    fix: str


@dataclass(frozen=True)
class _Refusal:
    """A client with any of `attrs` set (not None, not an empty collection) is refused;
    `{type}` in `part` is the type name of the first attribute's value."""

    attrs: tuple[str, ...]
    part: str
    fix: str


@dataclass(frozen=True)
class _Callables:
    """An attribute holding a callable the client calls (`each`: a sequence of them):
    saved with the client if it pickles, else refused, named by `part` and its repr."""

    attr: str
    part: str
    fix: str
    each: bool = False


@dataclass(frozen=True)
class _SdkSpec:
    """One SDK's clients: what is read off a live client, what refuses it, and how the
    rebuild gives the configuration back."""

    module: str  # the SDK's import name
    clients: tuple[str, ...]  # its client classes (sync, async), subclasses too
    known: frozenset[str]  # attributes its __init__ sets (any other: a subclass's own)
    refused_classes: tuple[_ClassRefusal, ...]
    refusals: tuple[_Refusal, ...]
    callables: tuple[_Callables, ...]
    params: tuple[tuple[str, _Read], ...]  # constructor keywords
    # attributes put back after __init__, where this version has them: name, and how
    # the value is saved
    attrs: tuple[tuple[str, Callable[[Any], object]], ...]
    # keywords the rebuild adds (where this version's __init__ takes them) so that the
    # constructor reads no credential from the environment or from disk
    init_defaults: tuple[tuple[str, object], ...]
    # saved attributes given back as what the SDK holds: name, (client, saved) -> value
    restore: tuple[tuple[str, Callable[[Any, Any], object]], ...]
    rebuild: Callable[..., object]  # the pinned rebuild a snapshot names


def _same(value: T) -> T:
    return value


def _env_secret(default_env: str) -> Callable[[Any], object]:
    """A credential attribute saved through _secret, its SDK's variable first."""
    return functools.partial(_secret, default_env=default_env)


def _base_url(client: Any, got: dict[str, Any]) -> object:
    return seal_url(str(client._base_url))


def _timeout(client: Any, got: dict[str, Any]) -> object:
    """The timeout given to the constructor (anthropic's `timeout` is a property over
    `_timeout`)."""
    return got["_timeout"] if "_timeout" in got else client.timeout


def _api_key_param(client: Any, got: dict[str, Any]) -> object:
    """An api_key provider is given again (it pickled); a key string is put back as an
    attribute after __init__ (as every credential)."""
    provider = got.get("_api_key_provider")
    return "" if provider is None else provider


def _attribute(name: str) -> _Read:
    return lambda client, got: getattr(client, name)


def _own(name: str) -> _Read:
    """The client's own attribute; absent in the versions that lack it."""
    return lambda client, got: got.get(name, _ABSENT)


def _is_set(value: object) -> bool:
    return value is not None and not (
        isinstance(value, dict | list | tuple | set | frozenset) and not value
    )


def _refuse_class(refusal: _ClassRefusal, bases: tuple[type, ...], client: object) -> NoReturn:
    t = type(client)
    _refuse(client, next((k for k in t.__mro__ if k in bases), t), refusal.part, refusal.fix)


def _load(spec: _SdkSpec) -> None:
    """Register the adapters of one SDK (its module has been imported by the agent)."""
    sdk = importlib.import_module(spec.module)
    base_client = importlib.import_module(f"{spec.module}._base_client")
    bases: tuple[type, ...] = tuple(getattr(sdk, name) for name in spec.clients)
    defaults = (base_client.SyncHttpxClientWrapper, base_client.AsyncHttpxClientWrapper)
    old = _is_old_sdk(defaults[0])
    known = spec.known | _OLD_SDK_ATTRS if old else spec.known

    def reduce(client: Any) -> Reduced:
        return _reduce_client(spec, client, _sdk_base(client, bases), defaults, known, old)

    for base in bases:
        register_adapter(base, reduce, subclasses=True)
    for refusal in spec.refused_classes:
        for name in refusal.names:
            cls = getattr(sdk, name, None)
            if isinstance(cls, type):
                register_adapter(
                    cls, functools.partial(_refuse_class, refusal, bases), subclasses=True
                )
    _load_responses(sdk)


def _reduce_client(
    spec: _SdkSpec,
    client: Any,
    base: type[Any],
    defaults: tuple[type, ...],
    known: frozenset[str],
    old: bool,
) -> Reduced:
    got = vars(client)  # .get: options of recent versions only
    for refusal in spec.refusals:
        if any(_is_set(got.get(name)) for name in refusal.attrs):
            kind = type(got.get(refusal.attrs[0])).__name__
            _refuse(client, base, refusal.part.format(type=kind), refusal.fix)
    if old:
        _check_old_options(client, base)
    for held in spec.callables:
        value = got.get(held.attr)
        for fn in (value or ()) if held.each else () if value is None else (value,):
            _check_callable(client, base, f"{held.part} {fn!r}", fn, held.fix)
    http = _http_client(client, base, defaults)
    kwargs = {}
    for name, read in spec.params:
        value = read(client, got)
        if value is not _ABSENT:
            kwargs[name] = value
    if http is not None:
        kwargs["http_client"] = http
    elif (
        got.get("_limits") is not None
        and "connection_pool_limits" in _parameters(base.__init__)
        and got["_limits"] != _default_limits(spec.module)
    ):
        kwargs["connection_pool_limits"] = got["_limits"]  # anthropic 0.x
    # The credentials are put back with the other attributes after __init__.
    attrs = {name: save(got[name]) for name, save in spec.attrs if name in got}
    return (
        spec.rebuild,
        (
            type(client),
            base,
            kwargs,
            attrs,
            _extras(client, known),
            http is None and _is_closed(client._client),
        ),
    )


def _default_limits(module: str) -> object:
    """The connection limits an SDK's client has when none were given (anthropic 0.x
    takes connection_pool_limits=)."""
    return getattr(
        importlib.import_module(f"{module}._constants"), "DEFAULT_CONNECTION_LIMITS", None
    )


def _rebuild(
    spec: _SdkSpec,
    cls: type[Any],
    base: type[Any],
    kwargs: dict[str, Any],
    attrs: dict[str, Any],
    extras: dict[str, Any],
    closed: bool,
) -> object:
    """A client from what _reduce_client saved (the arguments after `spec`: snapshot
    files hold them in this order, so it never changes)."""
    client = object.__new__(cls)
    # The SDK's own constructor on the saved class (a subclass's __init__ may take other
    # arguments; its own attributes come back from `extras`).
    taken = _parameters(base.__init__)
    given = {name: value for name, value in spec.init_defaults if name in taken}
    base.__init__(client, **_accepted(base.__init__, {**given, **kwargs}))
    for name, restore in spec.restore:
        if name in attrs:
            attrs[name] = restore(client, attrs[name])
    return _finish(client, attrs, extras, closed)


@pinned("openai_rebuild_client")
def _rebuild_openai(*saved: Any) -> object:
    """The rebuild snapshot files name for an openai client: _rebuild with _OPENAI."""
    return _rebuild(_OPENAI, *saved)


@pinned("anthropic_rebuild_client")
def _rebuild_anthropic(*saved: Any) -> object:
    """The rebuild snapshot files name for an anthropic client: _rebuild with _ANTHROPIC."""
    return _rebuild(_ANTHROPIC, *saved)


# ------------------------------------------------------------------------ openai
_OPENAI = _SdkSpec(
    module="openai",
    clients=("OpenAI", "AsyncOpenAI"),
    known=frozenset(
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
    ),
    refused_classes=(
        _ClassRefusal(
            ("_ModuleClient", "_AzureModuleClient", "_BedrockModuleClient"),
            "settings live in the openai module's globals (the module-level client "
            "behind openai.chat...)",
            "create an openai.OpenAI client and hold that, or " + _RESOURCE_FIX,
        ),
        # Azure clients subclass OpenAI / AsyncOpenAI but hold an api_version, a
        # deployment and Azure AD token providers this adapter does not rebuild.
        _ClassRefusal(
            ("AzureOpenAI", "AsyncAzureOpenAI"),
            "Azure configuration (api_version, deployment, Azure AD token provider)",
            _RESOURCE_FIX,
        ),
    ),
    refusals=(
        _Refusal(
            ("_provider", "_provider_runtime"), "provider= integration ({type})", _RESOURCE_FIX
        ),
        _Refusal(
            ("workload_identity", "_workload_identity_auth"),
            "workload identity (a token exchanged at run time)",
            "pass api_key (or set OPENAI_API_KEY), or " + _RESOURCE_FIX,
        ),
    ),
    callables=(
        _Callables(
            "_api_key_provider",
            "api_key provider",
            "pass api_key as a string or set OPENAI_API_KEY, or use a module-level "
            "function as the provider, or " + _RESOURCE_FIX,
        ),
    ),
    params=(
        ("api_key", _api_key_param),
        ("base_url", _base_url),
        ("timeout", _timeout),
        ("max_retries", _attribute("max_retries")),
        ("websocket_base_url", lambda client, got: seal_url(got.get("websocket_base_url"))),
        ("_strict_response_validation", _attribute("_strict_response_validation")),
    ),
    attrs=(
        ("api_key", _env_secret("OPENAI_API_KEY")),
        ("admin_api_key", _env_secret("OPENAI_ADMIN_KEY")),
        ("webhook_secret", _env_secret("OPENAI_WEBHOOK_SECRET")),
        ("organization", _same),
        ("project", _same),
        ("_custom_headers", _headers),
        ("_custom_query", _query),
        ("_base_url_was_default", _same),
        ("_data_residency", _same),
        ("_ambient_authorizations", lambda values: frozenset(_secret(v, None) for v in values)),
    ),
    init_defaults=(("_enforce_credentials", False),),
    restore=(("_ambient_authorizations", lambda client, values: frozenset(values)),),
    rebuild=_rebuild_openai,
)


# ------------------------------------------------------------------------ anthropic
_ANTHROPIC = _SdkSpec(
    module="anthropic",
    clients=("Anthropic", "AsyncAnthropic"),
    known=frozenset(
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
    ),
    refused_classes=(
        # Clients of the SDK that are not (plain) Anthropic clients: their cloud
        # credentials (AWS, Google, Azure) are resolved at run time.
        _ClassRefusal(
            (
                "AnthropicBedrock",
                "AsyncAnthropicBedrock",
                "AnthropicBedrockMantle",
                "AsyncAnthropicBedrockMantle",
                "AnthropicVertex",
                "AsyncAnthropicVertex",
                "AnthropicFoundry",
                "AsyncAnthropicFoundry",
            ),
            "cloud platform credentials (AWS / Google / Azure, resolved at run time)",
            _RESOURCE_FIX,
        ),
    ),
    refusals=(
        _Refusal(
            ("credentials", "_token_cache", "_custom_auth", "_credential_headers"),
            "credentials provider ({type}, from credentials=, config=, profile= or a "
            "profile on disk)",
            "pass api_key or auth_token (or set ANTHROPIC_API_KEY), or " + _RESOURCE_FIX,
        ),
    ),
    callables=(
        _Callables(
            "_middleware",
            "middleware",
            "use module-level middleware functions or Middleware objects holding plain "
            "values, or " + _RESOURCE_FIX,
            each=True,
        ),
    ),
    params=(
        ("base_url", _base_url),
        ("timeout", _timeout),
        ("max_retries", _attribute("max_retries")),
        ("_strict_response_validation", _attribute("_strict_response_validation")),
        ("open_telemetry", _own("_open_telemetry")),
        ("middleware", _own("_middleware")),
    ),
    attrs=(
        ("api_key", _env_secret("ANTHROPIC_API_KEY")),
        ("auth_token", _env_secret("ANTHROPIC_AUTH_TOKEN")),
        ("webhook_key", _env_secret("ANTHROPIC_WEBHOOK_SIGNING_KEY")),
        ("_custom_headers", _headers),
        ("_custom_query", _query),
        ("_timeout_overridden", _same),
        ("_unchosen_base_url", lambda url: None if url is None else str(url)),
    ),
    # an explicit (empty) key: the constructor reads no variable and no profile on disk
    init_defaults=(("api_key", ""),),
    # a URL of the client's own HTTP library (httpx2 now, httpx in anthropic 0.x)
    restore=(
        (
            "_unchosen_base_url",
            lambda client, url: None if url is None else type(client._base_url)(url),
        ),
    ),
    rebuild=_rebuild_anthropic,
)


# ------------------------------------------------------------------------ raw responses
def _load_responses(sdk: types.ModuleType) -> None:
    """Adapters for the SDK's raw response classes (with_raw_response /
    with_streaming_response results)."""

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


for _spec in (_OPENAI, _ANTHROPIC):
    register_optional(_spec.module, functools.partial(_load, _spec))
