"""A tiny JSON-over-HTTP client for the fx_* agents: POST to the test provider at
PROVIDER_URL (read at each call, never frozen). A 503 is a transient failure and raises
ConnectionError, which Retry(...) retries. Inside an effect the request's timeout is the
time left before the runner's lease deadline (snapstate.effect_time_left())."""

import json
import os
import urllib.error
import urllib.request

import snapstate


def post(path, body, key=None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + path,
        method="POST",
        data=json.dumps(body).encode(),
        headers=headers,
    )
    try:
        left = snapstate.effect_time_left()
        with urllib.request.urlopen(
            request, timeout=10 if left is None else min(10, left)
        ) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 503:
            raise ConnectionError(f"{path}: provider unavailable (503)") from None
        raise
