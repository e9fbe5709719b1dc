"""The dashboard's routes (Starlette) and pages (Jinja2, autoescape on: whatever an
agent or a person wrote is text, never markup; no template marks store text safe).

Read pages open the store read-only for each request (in Starlette's thread pool) and
close it again; the decisions (POST, only with --allow-decisions) open it writable,
each through the same runtime function as the CLI command. A page whose part changes
while jobs run (the job list, a job's timeline, the approvals) has that part served
alone too (`?part=1`), which static/ui.js polls."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..._errors import JobNotFound, LeaseHeld, SnapshotNotFound, SnapstateError, StaleWriter
from ...serializers._home import Home, open_store
from . import _views
from ._security import Gate, GateConfig, csrf_ok, csrf_token, session_of

__all__ = ["UiConfig", "build_app", "shown"]

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class UiConfig:
    """store: the store's directory or URL (label: as shown, a URL's password
    redacted); allow_decisions: approve, reject and
    reconcile are offered (else the dashboard only reads); users: the names a decider
    picks from, recorded as `by`; poll: seconds between two live updates."""

    store: str
    label: str
    gate: GateConfig
    allow_decisions: bool = False
    users: tuple[str, ...] = ()
    poll: float = 2.0


# Shown as their escapes (as the CLI's visible() shows them), line breaks and tabs kept:
# C0 and C1 controls, format characters (bidi embeddings, overrides and isolates,
# zero-width characters), line and paragraph separators, lone surrogates.
_ASCII_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shown(value: object) -> object:
    """Every `{{ value }}` of every template (Jinja2's finalize, before autoescape): a
    text as a page shows it as written, each character that could reorder, hide or
    disguise it (a right-to-left override in an approval's name or a label, a
    zero-width space, an escape sequence) shown as its escape; markup the templates
    made (a macro's output) and non-text values as they are."""
    if not isinstance(value, str) or isinstance(value, markupsafe.Markup):
        return value
    if value.isascii():
        return _ASCII_UNSAFE.sub(lambda m: _escape(m.group()), value)
    return "".join(
        _escape(c) if c not in "\n\t" and unicodedata.category(c) in _UNSAFE_CATEGORIES else c
        for c in value
    )


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        finalize=shown,  # and every value's controls and bidi characters escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _views.when
    return env


def _status_of(exc: SnapstateError) -> int:
    if isinstance(exc, (JobNotFound, SnapshotNotFound, _views.ValueNotFound)):
        return 404
    if isinstance(exc, (LeaseHeld, StaleWriter)):
        return 409
    return 400


class _Pages:
    """The routes, over one configuration and one template environment."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self.env = _environment()

    # -------------------------------------------------------------- helpers
    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.update(
            csrf=csrf_token(self.config.gate, session_of(request)),
            allow_decisions=self.config.allow_decisions,
            users=self.config.users,
            poll_ms=int(self.config.poll * 1000),
            store=self.config.label,
            path=request.url.path,
        )
        return HTMLResponse(self.env.get_template(name).render(context), status_code=status)

    def error(self, request: Request, exc: SnapstateError) -> Response:
        return self.render(request, "error.html", _status_of(exc), message=str(exc))

    async def read(self, fn: Callable[[Home], Any]) -> Any:
        """fn(home) on the store opened read-only, in a worker thread."""

        def run() -> Any:
            home = open_store(self.config.store, writable=False)
            try:
                return fn(home)
            finally:
                home.close()

        return await run_in_threadpool(run)

    async def write(self, fn: Callable[[Home], str]) -> str:
        def run() -> str:
            home = open_store(self.config.store)
            try:
                return fn(home)
            finally:
                home.close()

        return await run_in_threadpool(run)

    # -------------------------------------------------------------- reading
    async def jobs(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in _views.STATUSES:
            status = None
        query = request.query_params.get("q", "")[:200]
        try:
            data = await self.read(lambda home: _views.jobs_data(home, status, query))
        except SnapstateError as exc:
            return self.error(request, exc)
        name = "jobs_part.html" if request.query_params.get("part") else "jobs.html"
        return self.render(
            request, name, filter_status=status, query=query, statuses=_views.STATUSES, **data
        )

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job"]
        try:
            data = await self.read(lambda home: _views.job_data(home, job_id))
        except SnapstateError as exc:
            return self.error(request, exc)
        name = "job_part.html" if request.query_params.get("part") else "job.html"
        return self.render(request, name, **data)

    async def snapshot(self, request: Request) -> Response:
        job_id, seq = request.path_params["job"], request.path_params["seq"]
        try:
            report = await self.read(lambda home: _views.snapshot_data(home, job_id, seq))
        except SnapstateError as exc:
            return self.error(request, exc)
        return self.render(request, "snapshot.html", report=report, job_id=job_id)

    async def value(self, request: Request) -> Response:
        job_id, seq = request.path_params["job"], request.path_params["seq"]
        path = request.query_params.get("path", "")[:2000] or "frame[0].locals"
        try:
            value = await self.read(lambda home: _views.value_data(home, job_id, seq, path))
        except SnapstateError as exc:
            return self.error(request, exc)
        return self.render(request, "value.html", value=value, job_id=job_id, seq=seq)

    async def diff(self, request: Request) -> Response:
        a, b = request.query_params.get("a", "")[:300], request.query_params.get("b", "")[:300]
        if not a or not b:
            return self.render(request, "diff_form.html", a=a, b=b)
        try:
            report = await self.read(lambda home: _views.diff_data(home, a, b))
        except SnapstateError as exc:
            return self.error(request, exc)
        return self.render(request, "diff.html", report=report, a=a, b=b)

    async def approvals(self, request: Request) -> Response:
        every = bool(request.query_params.get("all"))
        try:
            rows = await self.read(lambda home: _views.approvals_data(home, every))
        except SnapstateError as exc:
            return self.error(request, exc)
        name = "approvals_part.html" if request.query_params.get("part") else "approvals.html"
        return self.render(request, name, approvals=rows, every=every)

    # -------------------------------------------------------------- deciding
    async def _decision(
        self, request: Request, act: Callable[[Home, dict[str, str]], str], back: str
    ) -> Response:
        """A decision's common part: refused unless decisions are on and the form carries
        its session's CSRF token; then `act` on the store opened writable."""
        form = await request.form(max_files=0, max_fields=20)  # the forms have at most 5
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not csrf_ok(self.config.gate, request, fields.get("csrf")):
            return self.render(
                request,
                "error.html",
                403,
                message="the form's CSRF token is missing or wrong: reload the page and try again",
            )
        if not self.config.allow_decisions:
            return self.render(
                request,
                "error.html",
                403,
                message="this dashboard is read-only: start it with `snaprun ui "
                "--allow-decisions --user NAME` to approve, reject or reconcile",
            )
        try:
            done = await self.write(lambda home: act(home, fields))
        except SnapstateError as exc:
            return self.error(request, exc)
        return self.render(request, "done.html", message=done, back=back)

    async def decide(self, request: Request) -> Response:
        job_id, approval_id = request.path_params["job"], request.path_params["approval"]

        def act(home: Home, form: dict[str, str]) -> str:
            return _views.decide(
                home,
                job_id,
                approval_id,
                decision=form.get("decision", ""),
                by=form.get("by", ""),
                note=form.get("note", ""),
                users=self.config.users,
            )

        return await self._decision(request, act, f"/jobs/{job_id}")

    async def reconcile(self, request: Request) -> Response:
        job_id, ordinal = request.path_params["job"], request.path_params["ordinal"]

        def act(home: Home, form: dict[str, str]) -> str:
            return _views.reconcile(
                home,
                job_id,
                ordinal,
                outcome=form.get("outcome", ""),
                result=form.get("result", ""),
                by=form.get("by", ""),
                users=self.config.users,
            )

        return await self._decision(request, act, f"/jobs/{job_id}")


_JOB = "{job:str}"


def build_app(config: UiConfig) -> Gate:
    """The dashboard as an ASGI app, behind its gate (runtime/_ui/_security.py)."""
    pages = _Pages(config)
    routes = [
        Route("/", pages.jobs),
        Route("/approvals", pages.approvals),
        Route(f"/jobs/{_JOB}", pages.job),
        Route(f"/jobs/{_JOB}/snapshots/{{seq:int}}", pages.snapshot),
        Route(f"/jobs/{_JOB}/snapshots/{{seq:int}}/value", pages.value),
        Route("/diff", pages.diff),
        Route(f"/jobs/{_JOB}/approvals/{{approval:str}}", pages.decide, methods=["POST"]),
        Route(f"/jobs/{_JOB}/effects/{{ordinal:int}}", pages.reconcile, methods=["POST"]),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    return Gate(app, config.gate)
