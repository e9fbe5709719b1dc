"""HTTP recorded at the transport: `snapstate.record_http()`, `snaprun run --record-http`.

A job that records HTTP makes every request its code sends through httpx, httpx2 or
requests (the library side: resources/_http_record.py) an effect in its ledger, with no
@effect around it: the row is keyed by the job and its position (the ledger's ordinal,
or a spawned task's own count, exactly as an @effect's), named `http.<METHOD>`, its
arguments the redacted URL and the body's digest. The response (status, headers, body
chunks; a stream read to its end, then handed on as the same chunks) is the row's
result, sealed like any effect result. Re-executed code after a restore gets the
recorded response instead of sending; a re-executed request that does not match the
row at its position (method, URL, body digest) stops the run with a DivergenceError
naming both requests: nothing is sent and no answer is handed back.

Which requests are reads (an unknown outcome, killed after sending and before the
response was recorded, is simply sent again): GET, HEAD and OPTIONS; the OpenAI and
Anthropic calls that change nothing (`MODEL_READS`: chat completions, completions,
responses, embeddings, moderations, messages, token counts), by path; and the
host/path patterns given as reads (`record_http(reads=["api.example.com/search*"])`).
Every other request is a write and follows the effect rules: an unknown outcome parks
the job (exit 4, `snaprun reconcile`), unless the request carries an idempotency key
header (Idempotency-Key), in which case it is sent again with the key of the first
attempt (kept in the row's external_id).

Not recorded: requests inside an explicit @effect (its function or lookup: the effect
is the unit), requests from threads the job did not start (said once on stderr), and
everything outside a job or in a job that does not record (the patches ask
`_Recorder.active` and step aside). A 429 is recorded as the answer it is (the SDK's own
retry then sends a new request, which is the next row), and so is a transport error:
a failed row is raised again to re-executed code, never sent again (_serving_errors).
The model-call paths are reads only with a sign of a model call (_model_call).

The setting is kept with the job: `snaprun run --record-http` (and the Python API's
`record_http=`) store it in the job's entry point (EntryPoint.record_http), which
resume, the worker, fork and export keep; `record_http()` called by the agent turns it
on from there and is kept in the frozen state of every later snapshot.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import pickle
import re
import sqlite3
import sys
import threading
import urllib.parse
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, cast

import greenlet

from .._errors import (
    DivergenceError,
    EffectRefused,
    RestoreError,
    SnapstateError,
    StoreDamaged,
    StoreFailure,
)
from ..resources import _http_record as _lib
from ..resources._http_record import (
    Exchange,
    Recorded,
    body_digest,
    path_secret_digest,
    redacted_url,
)
from ..serializers import _inert
from ..serializers._store import EffectKind, EffectRow, EffectState
from . import _agent, _context
from ._effect_spec import _POOL_SENDING, Refused, Spec
from ._effects_async import EffectPoint, async_spec
from ._ledger import Ledger, verify_sealed

if TYPE_CHECKING:
    from ..serializers._keys import KeyRing
    from ._async import AsyncRunner
    from ._job import Job

__all__ = [
    "record_http",
    "check_reads",
    "begin",
    "capture",
    "restore",
    "summary",
    "Recording",
    "MODEL_READS",
]

MODEL_READS: Final = re.compile(
    r"/(?:v1|openai/v1|openai/deployments/[^/]+)/"
    r"(?:chat/completions|completions|embeddings|moderations|responses|responses/input_tokens"
    r"|messages|messages/count_tokens)/?$"
)
"""The paths of the OpenAI and Anthropic calls that change nothing (any host: the SDKs'
base_url may point at a proxy, Azure, or a local server)."""

_MODEL_HOSTS = re.compile(
    r"(?:api\.openai\.com|api\.anthropic\.com|[^/]*\.openai\.azure\.com"
    r"|[^/]*\.cognitiveservices\.azure\.com)"
)
_SDK_HEADERS = ("anthropic-version", "x-stainless-lang", "openai-organization")
_MODEL_FIELD = re.compile(rb'"model"\s*:\s*"')
_SHORT_SHA = re.compile(r"(sha256 [0-9a-f]{12})[0-9a-f]+")  # shown: the digest's start
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Recording:
    """A job's HTTP recording: the host/path patterns it treats as reads."""

    reads: tuple[str, ...] = ()

    def is_read(self, exchange: Exchange) -> bool:
        if exchange.method in _READ_METHODS:
            return True
        parts = urllib.parse.urlsplit(exchange.url)
        host = (parts.hostname or "").lower()
        if MODEL_READS.search(parts.path) and _model_call(exchange, host, parts.path):
            return True
        targets = [f"{host}{parts.path or '/'}"]
        if parts.port is not None:
            targets.append(f"{host}:{parts.port}{parts.path or '/'}")
        return any(fnmatch.fnmatchcase(t, p) for p in self.reads for t in targets)


def _model_call(exchange: Exchange, host: str, path: str) -> bool:
    """A request at a model call's path is one (a read) only when something else says
    so: the OpenAI or Anthropic host, Azure's deployment path, a header the official
    SDKs send (anthropic-version, X-Stainless-Lang), or a JSON body naming a "model".
    Other APIs use the same paths for writes (a messaging API's POST /v1/messages sends
    a message): sent again after a crash, it would be sent twice."""
    if _MODEL_HOSTS.fullmatch(host) or "/openai/deployments/" in path:
        return True
    if any(name in _SDK_HEADERS for name, _ in exchange.headers):
        return True
    body = exchange.body
    return body is not None and _MODEL_FIELD.search(body) is not None


def check_reads(reads: Iterable[str], where: str = "record_http(reads=...)") -> tuple[str, ...]:
    """The read patterns as kept: "host/path*" (a pattern without "/" means a whole
    host); TypeError or ValueError naming `where` for anything else."""
    if isinstance(reads, (str, bytes)):
        raise TypeError(f'{where} takes a list of patterns, e.g. ["api.example.com/search*"]')
    patterns = []
    for pattern in reads:
        if not isinstance(pattern, str) or not pattern.strip() or any(c.isspace() for c in pattern):
            raise ValueError(
                f"{where}: {pattern!r} is not a host/path pattern such as "
                '"api.example.com/search*" (no spaces)'
            )
        pattern = pattern.lower()
        patterns.append(pattern if "/" in pattern else f"{pattern}/*")
    return tuple(patterns)


def record_http(*, reads: Iterable[str] = ()) -> None:
    """Record every HTTP request the job sends from here on (httpx, httpx2 and requests,
    so the OpenAI and Anthropic SDKs and frameworks on them) in its effect ledger:
    code re-executed after a restore gets the recorded response, byte for byte, instead
    of sending again. `reads`: host/path patterns ("api.example.com/search*") of
    requests that change nothing, sent again when their outcome is unknown (GET, HEAD,
    OPTIONS and the OpenAI/Anthropic model calls always are). Outside a job it does
    nothing: requests go out as they are."""
    patterns = check_reads(reads)
    job = _context.active_job()
    if job is None:
        return
    _turn_on(job, patterns)


def _turn_on(job: Job, reads: tuple[str, ...]) -> None:
    old = job._recording
    merged = tuple(dict.fromkeys((*(old.reads if old else ()), *reads)))
    job._recording = Recording(merged)
    _JOB_THREADS[job] = threading.get_ident()  # turned on by the job's own code
    _lib.install()


def begin(job: Job) -> None:
    """Before the job's code runs: recording on if the job was started with it."""
    reads = job.entry.record_http
    if reads is not None:
        _turn_on(job, reads)


def capture(job: Job) -> list[str] | None:
    """What the frozen state keeps (None: the job does not record)."""
    recording = job._recording
    return None if recording is None else list(recording.reads)


def restore(job: Job, saved: object) -> None:
    if isinstance(saved, list):
        _turn_on(job, tuple(str(p) for p in saved))


# ------------------------------------------------------------------------ reading
def summary(keys: KeyRing, row: EffectRow) -> tuple[int | None, str | None, int | None, int | None]:
    """(status, model, input tokens, output tokens) of a recorded request's response,
    read without running anything (the signed result decoded by the inert unpickler:
    `snaprun effects` is read-only); Nones for any other row."""
    nothing = (None, None, None, None)
    if not row.name.startswith("http.") or row.result is None:
        return nothing
    if row.state != EffectState.CONFIRMED:
        return nothing
    try:
        value = _inert.loads(verify_sealed(keys, row.result, f"effect {row.ordinal}"))
    except Exception:  # a damaged row is named by the commands that use it
        return nothing
    args: tuple[Any, ...] = tuple(getattr(value, "_args", ()))
    if len(args) != 6 or not isinstance(args[0], int):
        return nothing
    usage = args[5] if isinstance(args[5], dict) else {}
    model, tokens_in, tokens_out = (
        usage.get("model"),
        usage.get("input_tokens"),
        usage.get("output_tokens"),
    )
    return (
        args[0],
        model if isinstance(model, str) else None,
        tokens_in if isinstance(tokens_in, int) else None,
        tokens_out if isinstance(tokens_out, int) else None,
    )


# ------------------------------------------------------------------------ recording
_LEDGER_CALL = Ledger.call.__code__
_LIBRARY: dict[str, bool] = {}


def _is_library(filename: str) -> bool:
    known = _LIBRARY.get(filename)
    if known is None:
        real = os.path.realpath(filename)
        known = _LIBRARY[filename] = filename.startswith("<") or any(
            real.startswith(d + os.sep) for d in _agent._LIBRARY_DIRS
        )
    return known


def _call_site() -> str:
    """The agent's line that sent the request: the innermost frame neither snapstate's
    nor a library's (an SDK, httpx)."""
    frame: FrameType | None = sys._getframe(2)
    fallback: FrameType | None = None
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith("snapstate."):
            fallback = fallback or frame
            if not _is_library(frame.f_code.co_filename):
                break
        frame = frame.f_back
    found = frame or fallback
    if found is None:
        return "?"
    return f"{found.f_code.co_filename}:{found.f_lineno}"


def _describe(
    job: Job, exchange: Exchange
) -> tuple[Spec[Recorded], tuple[str, ...], str, str | None]:
    """The ledger's view of a request: its spec (name, kind, idempotency), the arguments
    it is matched by, how `snaprun effects` shows it, the provider's key."""
    recording = job._recording
    assert recording is not None, "only a recording job's requests are described"
    url, body = redacted_url(exchange.url), body_digest(exchange.matched_body)
    in_path = path_secret_digest(exchange.url)  # matched, not shown
    args = (url, body) if in_path is None else (url, body, in_path)
    read = recording.is_read(exchange)
    key = None if read else exchange.idempotency_key
    spec: Spec[Recorded] = Spec(
        exchange.send,
        f"http.{exchange.method}",
        "key" if key is not None else None,
        None,
        EffectKind.READ if read else EffectKind.WRITE,
        None,
    )
    shown = url + ", " + _SHORT_SHA.sub(r"\1", body)
    return spec, args, shown, key


def _serving_errors(
    job: Job, spec: Spec[Recorded], args: tuple[str, ...], shown: str, key: str | None
) -> tuple[Spec[Recorded], tuple[str, ...], str, str | None]:
    """A transport error (connection reset, timeout) recorded at this position is the
    answer the agent's code got, as a response is: re-executed code gets it raised
    again, whatever the request's kind. Sent again instead (as a failed read or keyed
    write otherwise is), the re-executed code would take another path than the first
    run (no SDK retry), and every later request would meet the row of another. Only
    when the error could not be stored does the row's own recovery apply."""
    row = job.ledger.next_row(None)
    if row is None or row.state != EffectState.FAILED or row.result is None:
        return spec, args, shown, key
    served: Spec[Recorded] = Spec(spec.fn, spec.name, None, None, EffectKind.WRITE, None)
    return served, args, shown, None


def _refused(job: Job, exc: SnapstateError) -> None:
    """The ledger refused a recorded request (a mismatch, a result that cannot be served,
    a row that fails its signature): the run stops here. Raised into the agent's code,
    an SDK that retries any error would send it again as a new request."""
    if isinstance(exc, DivergenceError):
        exc = DivergenceError(
            f"{exc} The request was recorded by record_http: the job stopped here (the "
            "agent's code never sees this error, so an SDK cannot retry it as a new "
            "request); restore the code that sent the recorded request, or fork the job "
            "from an earlier snapshot."
        )
    job.refuse(exc)


def _saved(job: Job, recorded: Recorded) -> None:
    """A response served from the ledger after a restore: what it saved (`snaprun stats`)."""
    ledger = job.ledger
    if not ledger.restored or ledger.replay:
        return
    catalog = job.home.catalog
    catalog.bump_metric(job.job_id, "http_saved_calls")
    usage = recorded.usage or {}
    for field in ("input_tokens", "output_tokens"):
        value = usage.get(field)
        if isinstance(value, int) and value > 0:
            catalog.bump_metric(job.job_id, f"http_saved_{field}", value)


def _answer(job: Job, value: object, shown: str) -> Recorded:
    """The response a confirmed row holds: the one recorded, or the one given by
    `snaprun reconcile --committed --result '{"status": 200, "body": ...}'` for a write
    whose outcome was unknown. Anything else has no response to hand back: the run
    stops, naming the fix (an invented answer would be a wrong one)."""
    if isinstance(value, Recorded):
        return value
    if isinstance(value, dict) and isinstance(value.get("status"), int):
        body = value.get("body", "")
        headers = value.get("headers") or {}
        if isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values()):
            items = [(str(k), v) for k, v in headers.items()]
            if not isinstance(body, str):  # a JSON answer
                body = json.dumps(body)
                if not any(k.lower() == "content-type" for k, _ in items):
                    items.append(("content-type", "application/json"))
            data = body.encode("utf-8")
            return Recorded(value["status"], "", "HTTP/1.1", items, [data], None)
    job.refuse(
        RestoreError(
            f"the recorded request {shown} was reconciled as committed with the result "
            f"{str(value)[:80]!r}, which is no HTTP response; reconcile it again with "
            "the provider's answer: `snaprun reconcile JOB N --committed --result "
            '\'{"status": 200, "body": ...}\'` (headers as "headers": {...})'
        )
    )
    raise AssertionError("not reached: the job stopped this run")


_WARNED: weakref.WeakSet[Job] = weakref.WeakSet()  # jobs told about a thread's request
_JOB_THREADS: weakref.WeakKeyDictionary[Job, int] = weakref.WeakKeyDictionary()


def _unrecorded_thread(job: Job) -> None:
    """A request sent by a thread the job did not start, while the job records: not
    recorded (the ledger records the job's own tasks), so code re-executed after a
    restore sends it again. Said once per job and run, on the job's stderr."""
    if getattr(_POOL_SENDING, "ends", None) is not None:
        return  # an @effect's call on the effect pool: the effect is recorded
    if threading.get_ident() == _JOB_THREADS.get(job):
        return  # the job's own thread (its hub)
    _unrecorded(
        job,
        f"thread {threading.current_thread().name!r}, which is none of the job's tasks",
        "not from a thread pool (a framework's batch() may use one)",
    )


def _unrecorded(job: Job, where: str, fix: str) -> None:
    if job.ledger.replay:  # `snaprun debug` or `replay`: a sandbox sends nothing
        raise EffectRefused(
            f"record_http: a request was not sent: it came from {where}; the ledger "
            f"records only the job's own requests, and `snaprun debug` and `snaprun replay` of job "
            f"{job.job_id} send nothing else. Send requests from the job's own code or "
            f"tasks started with snapstate.spawn(), {fix}"
        )
    if job in _WARNED:
        return  # said already
    _WARNED.add(job)
    message = (
        f"record_http: a request was sent from {where}: it is not recorded, and code "
        "re-executed after a restore sends it again (a write twice). Send requests from "
        f"the job's own code or tasks started with snapstate.spawn(), {fix}"
    )
    job.say(f"warning: job {job.job_id}: {message}")
    try:  # in the timeline too (`snaprun log`; the Python API prints nothing)
        job.home.catalog.log_event(job.job_id, "http-not-recorded", message)
    except (SnapstateError, OSError, sqlite3.Error):
        pass  # a note only; a failing store is found by the job's next write


def _foreign_loop(job: Job) -> bool:
    """An async client's request awaited in an event loop the job does not own
    (asyncio.run() inside a sync job, a library's own loop): its await could be neither
    frozen nor recorded. Sent as without record_http, and said once."""
    runner = job._async
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if runner is not None and loop is runner.loop:
        return False
    _unrecorded(
        job,
        "an event loop the job does not own (asyncio.run() called inside the job?)",
        "or make main() an async def and await the requests in the job's own coroutines",
    )
    return True


class _Recorder:
    """The runtime's side of the patches (resources/_http_record.py)."""

    def active(self, is_async: bool) -> bool:
        job = _context.active_job()
        if job is None or job._recording is None:
            return False
        glet = greenlet.getcurrent()
        if not job._is_task(glet):  # a thread, an effect's pool thread, the hub
            _unrecorded_thread(job)
            return False
        if is_async and _foreign_loop(job):
            return False
        runner = job._async
        if runner is not None and runner.effect_depth:  # an async effect's coroutine
            return False
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:  # inside an @effect (its function, its lookup)
            if frame.f_code is _LEDGER_CALL:
                return False
            frame = frame.f_back
        return True

    def record(self, exchange: Exchange) -> Recorded:
        job = _context.active_job()
        assert job is not None, "active() said so"
        spec, args, shown, key = _serving_errors(job, *_describe(job, exchange))
        sent: list[bool] = []

        def send(*described: object, idempotency_key: str | None = None) -> Recorded:
            sent.append(True)
            return exchange.send(idempotency_key=idempotency_key)

        spec = Spec(send, spec.name, spec.idempotency, None, spec.kind, None)
        try:
            recorded = job.ledger.call(
                spec, args, {}, None, _call_site(), shown=shown, provider_key=key
            )
        except (StoreFailure, StoreDamaged) as exc:
            job.store_failed(exc)
            raise
        except EffectRefused:  # `snaprun debug`: not recorded, not sent; the session goes on
            raise
        except SnapstateError as exc:
            _refused(job, exc)
            raise
        if not sent:
            recorded = _answer(job, recorded, shown)
            _saved(job, recorded)
        return recorded

    async def arecord(self, exchange: Exchange) -> Recorded:
        job = _context.active_job()
        assert job is not None, "active() said so"
        spec, args, shown, key = _serving_errors(job, *_describe(job, exchange))
        sent: list[bool] = []

        async def send(*described: object, idempotency_key: str | None = None) -> Recorded:
            sent.append(True)
            return await exchange.asend(idempotency_key=idempotency_key)

        # the ledger runs it through async_spec (the coroutine sent by the awaiting task)
        spec = Spec(cast(Any, send), spec.name, spec.idempotency, None, spec.kind, None)
        point = _HttpPoint(spec, args, _call_site(), shown, key)
        recorded: Recorded = await point
        if not sent:
            recorded = _answer(job, recorded, shown)
            _saved(job, recorded)
        return recorded


class _HttpPoint(EffectPoint):
    """The await point of a recorded request in an async job: an async effect's point
    whose ledger call carries the request's display and key, and stops the run on a
    mismatch. It is never saved in a snapshot (a request is sent, or waited for, before
    any snapshot completes)."""

    def __init__(
        self, spec: Spec[Recorded], args: tuple[str, ...], site: str, shown: str, key: str | None
    ) -> None:
        super().__init__(spec, args, {}, None, site, None, None)
        self.shown, self.provider_key = shown, key

    def __reduce__(self) -> Any:
        raise pickle.PicklingError(
            f"the recorded HTTP request {self.shown} at {self.site} was about to be sent "
            "when the snapshot was taken by another task; take snapshots between requests "
            "(after the tasks that send them are awaited)"
        )

    def _start(self, runner: AsyncRunner) -> Any:
        job = runner.job
        glet = greenlet.greenlet(_ledger_call)
        runner.effect_glets.add(glet)
        self.glet = glet
        try:
            message = glet.switch(job, self)
        except BaseException:
            runner.effect_glets.discard(glet)
            self.glet, self.state = None, "done"
            raise
        return self._handle(message)


def _ledger_call(job: Job, point: _HttpPoint) -> tuple[str, Any]:
    """In the point's greenlet: the ledger's call of a recorded async request."""
    before = job.ledger.actions()
    try:
        recorded = job.ledger.call(
            async_spec(point.spec),
            point.args,
            {},
            None,
            point.site,
            shown=point.shown,
            provider_key=point.provider_key,
        )
        return ("done", recorded)
    except (StoreFailure, StoreDamaged) as exc:
        job.store_failed(exc)
        raise
    except SnapstateError as exc:
        _refused(job, exc)
        raise
    except Refused as refused:  # (a transport raises no rate limit; kept as effects do)
        job.ledger.set_actions(before)
        return ("refused", refused.seconds)


_lib.set_recorder(_Recorder())
