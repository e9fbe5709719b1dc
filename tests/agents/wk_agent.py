"""The worker tests' agent (tests/test_worker.py): `snaprun run wk_agent.py KIND JOB`.

Places order JOB-a with the keyed provider (shop.py, PROVIDER_URL; the keyless one
with PROVIDER_MODE=plain), snapshots, then
by KIND:
    plain  nothing more
    timer  sleep(3600): hibernates (exit 3) until a worker whose clock is past it
    nap    sleep($WK_NAP seconds, default 30): slept in the process (under
           hibernate_after) unless a SIGTERM --grace makes the job hibernate there
    gate   writes $WK_DIR/JOB.ready, then waits (agent code, not a snapstate wait) for
           $WK_DIR/JOB.open to exist
    approval  request_approval("go", {"job": JOB}, expires_in=$WK_EXPIRES or never);
           prints "granted JOB", "rejected JOB" or "expired JOB" and goes on
then places order JOB-b, snapshots, and writes its marker: the line "done" appended to
$WK_DIR/JOB.mark by an effect whose lookup finds it, so the marker is written at most
once even across crashes (a run killed after the write reconciles instead of
re-writing). Prints "a JOB" and "b JOB"; returns the two order ids."""

import os
import sys
import time

from shop import order_keyed, order_plain

from snapstate import ApprovalExpired, ApprovalRejected, effect, request_approval, sleep, snapshot


def _path(suffix):
    return os.path.join(os.environ["WK_DIR"], sys.argv[2] + suffix)


def find_mark(idempotency_key):
    try:
        with open(_path(".mark")) as f:
            return "marked" if idempotency_key in f.read().split() else None
    except FileNotFoundError:
        return None


@effect(lookup=find_mark)
def write_mark(*, idempotency_key):
    with open(_path(".mark"), "a") as f:
        f.write(f"done {idempotency_key}\n")
    return "marked"


def main():
    kind, job = sys.argv[1], sys.argv[2]
    order = order_plain if os.environ.get("PROVIDER_MODE") == "plain" else order_keyed
    a = order(f"{job}-a", 1)
    print("a", job, flush=True)
    snapshot("a")
    if kind == "timer":
        sleep(3600)
    elif kind == "nap":
        sleep(float(os.environ.get("WK_NAP", "30")))
    elif kind == "approval":
        expires = os.environ.get("WK_EXPIRES")
        try:
            request_approval("go", {"job": job}, expires_in=float(expires) if expires else None)
            print("granted", job, flush=True)
        except ApprovalRejected:
            print("rejected", job, flush=True)
        except ApprovalExpired:
            print("expired", job, flush=True)
    elif kind == "gate":
        with open(_path(".ready"), "w"):
            pass
        while not os.path.exists(_path(".open")):
            time.sleep(0.02)
    b = order(f"{job}-b", 2)
    print("b", job, flush=True)
    snapshot("b")
    write_mark()
    return [a["id"], b["id"]]
