"""Adapters for requests: Session (and subclasses), its mounted HTTPAdapters, auths,
responses and prepared requests (the shared rules, credentials and checks: resources/_http.py).

A Session is rebuilt from its pickle state (headers, cookies, auth, proxies, hooks,
params, verify, cert, mounted adapters with their Retry and pool settings, stream,
trust_env, max_redirects) plus a subclass's own attributes; credentials are sealed or
saved as environment references as for httpx.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from .._abi import pinned
from ._adapters import Reduced, register_adapter, register_optional

if TYPE_CHECKING:
    import requests

from ._http import (
    SESSION_ATTRS,
    Part,
    rebuild_state,
    reduce_with_secrets,
    seal_form,
    seal_items,
    seal_param,
    seal_url,
    sealed,
    shell,
)
from ._http_checks import check, describe


# ------------------------------------------------------------------------ requests
def _reduce_session(base: type[requests.Session], session: requests.Session) -> Reduced:
    """requests.Session (or a subclass): its pickle state with credentials sealed, every
    mounted adapter and hook checked, plus a subclass's own attributes."""
    import requests

    what = describe(session, base)
    state: dict[str, Any] = base.__getstate__(session)  # type: ignore[assignment]  # types-requests omits the pickle methods
    state["headers"] = Part(_rebuild_headers, (seal_items(state["headers"].items()),))
    auth = state["auth"]
    if isinstance(auth, tuple):
        state["auth"] = tuple(sealed(v) if isinstance(v, (str, bytes)) else v for v in auth)
    elif auth is not None and not isinstance(auth, (requests.auth.HTTPBasicAuth,)):
        check(what, "auth", auth)
    state["proxies"] = {
        k: sealed(v) if isinstance(v, str) and "@" in v else v for k, v in state["proxies"].items()
    }
    if isinstance(state["params"], dict):
        state["params"] = {k: seal_param(k, v) for k, v in state["params"].items()}
    for prefix, adapter in state["adapters"].items():
        check(what, f"adapter mounted at {prefix!r}", adapter)
    for event, functions in state["hooks"].items():
        for i, hook in enumerate(functions):
            check(what, f"hooks[{event!r}][{i}]", hook)
    extras = {k: v for k, v in session.__dict__.items() if k not in SESSION_ATTRS}
    for name, value in extras.items():
        check(what, f"attribute {name!r}", value)
    return shell(session, {"state": state, "extras": extras}, _configure_session)


@pinned("requests_rebuild_headers")
def _rebuild_headers(
    items: Iterable[tuple[str, object]],
) -> requests.structures.CaseInsensitiveDict[object]:
    from requests.structures import CaseInsensitiveDict

    return CaseInsensitiveDict(list(items))


@pinned("requests_configure_session")
def _configure_session(session: requests.Session, state: dict[str, Any]) -> None:
    import requests

    requests.Session.__setstate__(session, state["state"])  # type: ignore[attr-defined]  # types-requests omits the pickle methods
    session.__dict__.update(state["extras"])


def _reduce_requests_response(response: requests.Response) -> Reduced:
    if not response._content_consumed:  # type: ignore[attr-defined]  # private
        raise pickle.PicklingError(
            "a streaming requests response is a live handle that cannot be saved in a snapshot"
        )
    state: dict[str, Any] = response.__getstate__()  # type: ignore[assignment]  # types-requests omits the pickle methods
    state["headers"] = Part(_rebuild_headers, (seal_items(state["headers"].items()),))
    state["url"] = seal_url(state.get("url"))
    return (_rebuilt_requests_response, (state,))


@pinned("requests_rebuilt_response")
def _rebuilt_requests_response(state: dict[str, Any]) -> requests.Response:
    import requests

    response = requests.Response()
    response.__setstate__(state)  # type: ignore[attr-defined]  # types-requests omits the pickle methods
    return response


def _reduce_prepared_request(request: requests.PreparedRequest) -> Reduced:
    """A requests.PreparedRequest (a response's .request): its Authorization and other
    sensitive headers sealed."""
    state = dict(request.__dict__)
    state["url"] = seal_url(state.get("url"))
    if state.get("headers") is not None:
        state["body"] = seal_form(state.get("body"), state["headers"])
        state["headers"] = Part(_rebuild_headers, (seal_items(state["headers"].items()),))
    return (rebuild_state, (type(request), state))


def _reduce_requests_digest(auth: requests.auth.HTTPDigestAuth) -> Reduced:
    # Its per-thread challenge state is a threading.local: a new auth answers the next
    # challenge afresh, as after any restart.
    return (_rebuilt_requests_digest, (sealed(auth.username), sealed(auth.password)))


@pinned("requests_rebuilt_digest")
def _rebuilt_requests_digest(username: str, password: str) -> requests.auth.HTTPDigestAuth:
    import requests

    return requests.auth.HTTPDigestAuth(username, password)


_ADAPTER_ATTRS = frozenset(
    {
        "max_retries",
        "config",
        "_pool_connections",
        "_pool_maxsize",
        "_pool_block",
        "poolmanager",
        "proxy_manager",
    }
)


def _reduce_http_adapter(adapter: requests.adapters.HTTPAdapter) -> Reduced:
    """An HTTPAdapter (or subclass): its pickle state (max_retries, pool settings) plus
    a subclass's own attributes, which HTTPAdapter.__getstate__ would drop."""
    import requests

    state = requests.adapters.HTTPAdapter.__getstate__(adapter)
    extras = {k: v for k, v in adapter.__dict__.items() if k not in _ADAPTER_ATTRS}
    return shell(adapter, {"state": state, "extras": extras}, _configure_http_adapter)


@pinned("requests_configure_adapter")
def _configure_http_adapter(adapter: requests.adapters.HTTPAdapter, state: dict[str, Any]) -> None:
    import requests

    # The subclass's own attributes first: HTTPAdapter.__setstate__ builds the pool
    # (init_poolmanager), which a subclass may configure from them.
    adapter.__dict__.update(state["extras"])
    requests.adapters.HTTPAdapter.__setstate__(adapter, state["state"])  # type: ignore[attr-defined]  # types-requests omits the pickle methods


def _load_requests() -> None:
    import requests

    register_adapter(requests.adapters.HTTPAdapter, _reduce_http_adapter, subclasses=True)
    register_adapter(requests.Session, partial(_reduce_session, requests.Session), subclasses=True)
    register_adapter(requests.Response, _reduce_requests_response)
    register_adapter(requests.PreparedRequest, _reduce_prepared_request)
    for cls in (requests.auth.HTTPBasicAuth, requests.auth.HTTPProxyAuth):
        register_adapter(
            cls, partial(reduce_with_secrets, secrets=("username", "password")), subclasses=True
        )
    register_adapter(requests.auth.HTTPDigestAuth, _reduce_requests_digest)


register_optional("requests", _load_requests)
