"""Correct when run as `snaprun run --record-http`: one model call through httpx, no
@effect around it (tests/test_crashtest_adversarial.py). Recorded at the transport, a
call re-executed after a kill gets the recorded answer; not recorded, it is sent again
and the provider (which numbers its answers) answers something else."""

import os

import httpx

from snapstate import snapshot


def main():
    snapshot("start")
    reply = httpx.post(
        os.environ["PROVIDER_URL"] + "/v1/chat/completions", json={"action": "ask"}, timeout=10
    )
    answer = reply.json()["id"]
    print("answer", answer)
    snapshot("answered")
    return answer
