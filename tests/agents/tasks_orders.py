"""Three tasks place orders with a provider at once (tests/test_tasks.py).

Each task places its orders one by one through a keyed effect (the provider holds each
request for the delay the order names, so calls overlap), snapshotting after each;
task a also spawns a helper task (id 1.1) that reads the time twice. main snapshots
right after spawning (while the tasks' first calls are in flight), gathers them,
prints their results in task order and snapshots again. TASK_DELAYS (JSON) gives each
task's delays; TASK_SLEEP makes task b sleep that many seconds first (a timer)."""

import json
import os
import urllib.request

import snapstate
from snapstate import effect, gather, snapshot, spawn

URL = os.environ.get("PROVIDER_URL", "")
DELAYS = json.loads(
    os.environ.get("TASK_DELAYS", '{"a": [0.3, 0.1], "b": [0.1, 0.3], "c": [0.2, 0.2]}')
)


@effect(idempotency="key", timeout_param="timeout")
def order(action, amount, delay, *, idempotency_key, timeout=10):
    request = urllib.request.Request(
        URL + "/keyed",
        data=json.dumps({"action": action, "amount": amount, "delay": delay}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def helper():
    first = snapstate.now()
    second = snapstate.now()
    return second >= first


def worker(name, delays):
    extra = spawn(helper) if name == "a" else None
    if name == "b" and os.environ.get("TASK_SLEEP"):
        snapstate.sleep(float(os.environ["TASK_SLEEP"]))
    placed = []
    for i, delay in enumerate(delays):
        po = order(f"{name}-{i}", 10 * i + len(name), delay)
        placed.append(f"{po['action']}:{po['amount']}")
        snapshot(f"{name}-{i}")
    if extra is not None:
        placed.append(f"helper:{extra.result()}")
    return placed


def main():
    tasks = [spawn(worker, name, DELAYS[name]) for name in sorted(DELAYS)]
    print("spawned", [t.id for t in tasks], flush=True)
    snapshot("spawned")
    results = gather(*tasks)
    for task, placed in zip(tasks, results):
        print("task", task.id, placed, flush=True)
    snapshot("gathered")
    print("all done", sum(len(p) for p in results), flush=True)
    return results


if __name__ == "__main__":
    main()
