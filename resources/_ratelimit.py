"""Which errors are a provider's "not now" (a rate limit), and for how long.

`retry_after(exc, now)` says whether an exception an effect function raised means the
provider refused the call for now, and how many seconds it asked to wait:

- `snapstate.RateLimited(retry_after=...)`, raised by the effect function itself;
- an HTTP 429 raised by a supported client: httpx (`HTTPStatusError`), requests
  (`HTTPError` with a response), urllib (`urllib.error.HTTPError`), openai and
  anthropic (`RateLimitError`). The wait comes from the response's headers:
  `retry-after-ms` (milliseconds, sent by OpenAI and Anthropic), else `Retry-After`
  (seconds, or an HTTP-date, read against `now`).

It returns None for any other exception, and `NOT_GIVEN` for a 429 that names no
wait (the runtime then waits DEFAULT_RETRY_AFTER seconds, doubled at each refusal in
a row of the same action, up to MAX_DEFAULT_RETRY_AFTER).

Each SDK is looked at only if the effect's process has already imported it: nothing
here imports httpx, requests, openai or anthropic.

A 429 *returned* (an effect that returns an httpx or requests Response whose status
is 429) is not mapped: a returned response is the provider's answer, recorded as the
effect's result. Call `response.raise_for_status()` in the effect function to turn it
into an error snapstate maps.
"""

from __future__ import annotations

import email.utils
import math
import sys
from typing import Any, Final

from .._errors import RateLimited

__all__ = [
    "retry_after",
    "parse_retry_after",
    "NOT_GIVEN",
    "DEFAULT_RETRY_AFTER",
    "MAX_DEFAULT_RETRY_AFTER",
    "MAX_RETRY_AFTER",
]

NOT_GIVEN: Final = -1.0  # a 429 without a usable Retry-After: wait the default
DEFAULT_RETRY_AFTER: Final = 30.0  # seconds, doubled at each refusal in a row
MAX_DEFAULT_RETRY_AFTER: Final = 3600.0
# The longest wait a provider can ask for, by default: a longer one (1e300 s, an
# HTTP-date in year 9999) is waited this long, then the action is sent again (and waits
# again if the provider still refuses). Without a cap a provider could end a job (a due
# time past what the platform's clock holds) or park it for millennia. The runtime
# passes its own cap (SNAPSTATE_MAX_RETRY_AFTER: runtime/_effect_spec.py), and says
# when it clamped a wait.
MAX_RETRY_AFTER: Final = 86400.0


def retry_after(exc: BaseException, now: float, cap: float = MAX_RETRY_AFTER) -> float | None:
    """Seconds to wait before sending again when `exc` is a rate limit (NOT_GIVEN when
    the provider named no wait; at most `cap`); None when it is not one."""
    if isinstance(exc, RateLimited):
        given = exc.retry_after
        return NOT_GIVEN if given is None else min(given, cap)
    response = _response_429(exc)
    if response is None:
        return None
    seconds = parse_retry_after(_headers(response), now, cap)
    return NOT_GIVEN if seconds is None else seconds


def _response_429(exc: BaseException) -> Any:  # the client's response object, or None
    """The response of a 429 raised by a supported client (None otherwise)."""
    candidates: list[tuple[str, str, str]] = [
        ("httpx", "HTTPStatusError", "status_code"),
        ("requests", "HTTPError", "status_code"),
        ("openai", "RateLimitError", "status_code"),
        ("anthropic", "RateLimitError", "status_code"),
    ]
    for module_name, class_name, status in candidates:
        module = sys.modules.get(module_name)
        kind = getattr(module, class_name, None) if module is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            response = getattr(exc, "response", None)
            if response is not None and getattr(response, status, None) == 429:
                return response
    error = sys.modules.get("urllib.error")
    http_error = getattr(error, "HTTPError", None) if error is not None else None
    if isinstance(http_error, type) and isinstance(exc, http_error):
        if getattr(exc, "code", None) == 429:
            return exc  # urllib's HTTPError is its own response (.headers)
    return None


def _headers(response: Any) -> dict[str, str]:
    headers = getattr(response, "headers", None)
    out: dict[str, str] = {}
    if headers is None:
        return out
    try:
        items = list(headers.items())
    except Exception:
        return out
    for name, value in items:
        if isinstance(name, bytes):
            name = name.decode("latin-1")
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        out[str(name).lower()] = str(value)
    return out


def parse_retry_after(
    headers: dict[str, str], now: float, cap: float = MAX_RETRY_AFTER
) -> float | None:
    """The wait the headers ask for, in seconds (never negative, at most `cap`), or
    None: retry-after-ms first, then Retry-After as seconds or as
    an HTTP-date (against `now`). A value that is not a finite number or a date counts
    as not given."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        seconds = _number(ms)
        if seconds is not None:
            return min(seconds / 1000.0, cap)
    text = headers.get("retry-after")
    if text is None:
        return None
    seconds = _number(text)
    if seconds is not None:
        return min(seconds, cap)
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return None
    return min(max(0.0, when.timestamp() - now), cap)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value
