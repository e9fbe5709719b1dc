"""The gate in front of every dashboard request (docs/ui.md, "Security").

- The Host header must name the address the server printed (a DNS-rebinding page
  reaches 127.0.0.1 under its own name: refused, 403).
- Every request carries the token `snaprun ui` printed: once in the URL (`?token=`),
  which is answered with a session cookie (HttpOnly, SameSite=Strict) and a redirect
  to the same page without the token; then the cookie; or, for scripts, the header
  `Authorization: Bearer TOKEN`. Without it: 401. Tokens and cookies are compared in
  constant time.
- Only GET and HEAD read; POST is the only method that changes anything, and a POST
  must come from the dashboard's own origin (Sec-Fetch-Site: same-origin, and Origin
  this page's or `null`; without Sec-Fetch-Site, Origin this page's) and carry the CSRF token bound to its session (checked by the route,
  csrf_ok(), which reads the form): else 403.
- Every response gets the security headers (a CSP with no inline script, no framing,
  no sniffing, no referrer, no caching).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

__all__ = ["Gate", "GateConfig", "SECURITY_HEADERS", "session_of", "csrf_token", "csrf_ok"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SECURITY_HEADERS = {
    # No inline script or style anywhere: the page's script and style sheet are files.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


@dataclass(frozen=True)
class GateConfig:
    """token: the secret `snaprun ui` printed; hosts: the Host header values accepted
    (None: any, for a server bound to every address); cookie: the session cookie's
    name (one per port: cookies are shared between the ports of a host); key: signs
    the session cookies and derives their CSRF tokens (new each run); report: where a
    request's unexpected error is told (snaprun's stderr), in one line."""

    token: str
    hosts: frozenset[str] | None
    cookie: str
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    report: Callable[[str], None] = print  # where an unexpected error is told, one line


def _mac(key: bytes, purpose: str, value: str) -> str:
    return hmac.new(key, f"{purpose}\0{value}".encode(), hashlib.sha256).hexdigest()


def _cookie_value(config: GateConfig, session: str) -> str:
    return f"{session}.{_mac(config.key, 'session', session)}"


def _session_from_cookie(config: GateConfig, value: str | None) -> str | None:
    if not value or "." not in value:
        return None
    session, mac = value.rsplit(".", 1)
    if hmac.compare_digest(mac.encode(), _mac(config.key, "session", session).encode()):
        return session
    return None


def _token_ok(config: GateConfig, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), config.token.encode())


def session_of(request: Request) -> str:
    """The session the gate let this request in with."""
    return str(request.scope["snapstate.session"])


def csrf_token(config: GateConfig, session: str) -> str:
    """The CSRF token of a session: forms carry it (field `csrf`), scripts send it as the
    header X-CSRF-Token (every page has it in <meta name="csrf-token">)."""
    return _mac(config.key, "csrf", session)


def csrf_ok(config: GateConfig, request: Request, form_value: object) -> bool:
    """The POST carries its session's CSRF token (the form's `csrf` or X-CSRF-Token)."""
    given = form_value if isinstance(form_value, str) else request.headers.get("x-csrf-token")
    expected = csrf_token(config, session_of(request))
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def request_line(scope: Scope) -> str:
    """`GET /jobs/j1` of a request, for a message."""
    return f"{scope.get('method', '?')} {scope.get('path', '?')}"


def _refuse(status: int, text: str) -> Response:
    return PlainTextResponse(f"snaprun ui: {text}\n", status_code=status)


class Gate:
    """The ASGI middleware in front of the dashboard (the module's docstring)."""

    def __init__(self, app: ASGIApp, config: GateConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # none is served (uvicorn runs with ws="none")
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan: nothing to guard
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        refusal = self._check(scope)
        if isinstance(refusal, Response):
            await refusal(scope, receive, send_with_headers)
            return
        scope["snapstate.session"] = refusal
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_headers(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:  # a store the code did not expect: one line, no traceback
            self.config.report(f"error: {request_line(scope)}: {type(exc).__name__}: {exc}")
            if not started:
                response = _refuse(500, f"{type(exc).__name__}: {exc} (nothing was changed)")
                await response(scope, receive, send_with_headers)

    def _check(self, scope: Scope) -> Response | str:
        """A refusal (or the redirect that trades the URL's token for a cookie), else the
        request's session."""
        request = Request(scope)
        host = request.headers.get("host", "")
        if self.config.hosts is not None and host not in self.config.hosts:
            return _refuse(403, f"unknown host {host!r}: open the URL snaprun ui printed")
        method = request.method
        if method not in ("GET", "HEAD", "POST"):
            return _refuse(405, f"{method} is not allowed")
        query_token = request.query_params.get("token")
        if query_token is not None:
            if method not in ("GET", "HEAD") or not _token_ok(self.config, query_token):
                return _refuse(401, "wrong token: open the URL snaprun ui printed")
            return self._trade_token(request)
        session = _session_from_cookie(self.config, request.cookies.get(self.config.cookie))
        if session is None:
            scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and _token_ok(self.config, bearer.strip()):
                session = "bearer"
        if session is None:
            return _refuse(
                401,
                "this dashboard needs its token: open the URL snaprun ui printed "
                "(http://HOST:PORT/?token=...)",
            )
        if method == "POST" and not self._same_origin(request, host):
            return _refuse(403, "a cross-site request was refused (its Origin is not this page)")
        return session

    def _same_origin(self, request: Request, host: str) -> bool:
        """Sec-Fetch-Site (set by the browser; no page can forge it) says same-origin,
        and Origin, when it names one, is this page's; without Sec-Fetch-Site (an older
        browser, a script), Origin must be this page's. A form posted under our
        Referrer-Policy no-referrer carries `Origin: null`: only Sec-Fetch-Site can vouch
        for it."""
        origin = request.headers.get("origin")
        fetch_site = request.headers.get("sec-fetch-site")
        ours = f"http://{host}".encode()
        if fetch_site is not None:
            if fetch_site != "same-origin":
                return False
            return origin in (None, "null") or hmac.compare_digest(origin.encode(), ours)
        return origin is not None and hmac.compare_digest(origin.encode(), ours)

    def _trade_token(self, request: Request) -> Response:
        """The URL's token traded for a session cookie; the same page without the token
        (so it stays out of the history and of every later URL). The path keeps one
        leading slash: `//evil.example/?token=...` would otherwise redirect to
        `//evil.example/`, which a browser reads as another site (an open redirect)."""
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        path = "/" + request.url.path.lstrip("/\\")
        url = URL(path=path, query=urllib.parse.urlencode(query))
        response = RedirectResponse(str(url), status_code=303)
        response.set_cookie(
            self.config.cookie,
            _cookie_value(self.config, secrets.token_urlsafe(18)),
            httponly=True,
            samesite="strict",
            path="/",
        )
        return response
