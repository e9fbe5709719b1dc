"""An agent whose HTTP requests are recorded by record_http, debugged by
tests/test_debug_sandbox.py against tests/http_record_stub.py. argv: URL.

GET /search?q=one, snapshot "a", GET /search?q=two, then (the run is killed before
it is recorded) GET /search?q=three, and a GET /search?q=thread from a thread the job
did not start (never recorded). In a debug session the first two are answered from
the ledger, the last two are refused (EffectRefused, caught): prints what each got."""

import sys
import threading

import httpx

import snapstate
from snapstate import snapshot

URL = sys.argv[1]


def get(client, q):
    try:
        return client.get(URL + "/search", params={"q": q}).text
    except snapstate.EffectRefused as exc:
        return "refused: " + str(exc)


def main():
    client = httpx.Client(timeout=30)
    one = get(client, "one")
    snapshot("a")
    two = get(client, "two")
    three = get(client, "three")
    got = []
    thread = threading.Thread(target=lambda: got.append(get(httpx, "thread")))
    thread.start()
    thread.join()
    for name, value in (("one", one), ("two", two), ("three", three), ("thread", got[0])):
        print(name, value, flush=True)
    return "end"
