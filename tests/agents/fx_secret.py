"""Passes secrets to a keyed effect: a plain Secret built from FX_SECRET (its value is
never saved, so it is gone after a restore) and Secret.from_env("FX_TOKEN") (re-read
from the environment after a restore). Calls 1 and 2 happen before the snapshot,
call 3 (from_env) and call 4 (plain) after it. The provider sees the revealed values."""

import os

from fx_http import post

from snapstate import Secret, effect, snapshot


@effect(idempotency="key")
def call_api(token, action, *, idempotency_key):
    return post("/keyed", {"action": action, "amount": 0, "token": token}, idempotency_key)


def main():
    api = Secret(os.environ["FX_SECRET"], name="api")
    env = Secret.from_env("FX_TOKEN")
    first = call_api(api, "first")
    second = call_api(env, "second")
    print("before the snapshot", first["id"], second["id"], api, env, flush=True)
    snapshot("holding")
    third = call_api(env, "third")
    print("from_env after the snapshot", third["id"], flush=True)
    fourth = call_api(api, "fourth")
    print("plain after the snapshot", fourth["id"], flush=True)
    return [first["id"], second["id"], third["id"], fourth["id"]]
