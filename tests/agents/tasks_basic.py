"""Small task shapes for tests/test_tasks.py, chosen by TASK_MODE."""

import os
import threading

import greenlet

import snapstate
from snapstate import SnapstateError, effect, gather, snapshot, spawn


@effect(kind="read")
def double(x):
    return 2 * x


def value(x):
    return double(x) + 1


def boom(message):
    double(0)
    raise ValueError(message)


def nested():
    inner = spawn(value, 5)
    return [inner.id, inner.result()]


def waits_for(task):
    return task.result()


def sneaky(ready):
    # gather() called by C code (map): this task cannot be frozen there
    return list(map(lambda t: gather(t)[0], [ready]))


def in_a_thread():
    out = []
    worker = threading.Thread(target=lambda: out.append(_try_effect()))
    worker.start()
    worker.join()
    return out[0]


def _try_effect():
    try:
        return double(1)
    except SnapstateError as exc:
        return type(exc).__name__


def in_a_greenlet():
    def inner():
        try:
            snapshot("from a raw greenlet")
        except SnapstateError as exc:
            return type(exc).__name__
        return "snapshot taken"

    return greenlet.greenlet(inner).switch()


def main():
    MODE = os.environ.get("TASK_MODE", "results")  # read per run: tests run it in-process
    if MODE == "results":
        tasks = [spawn(value, i) for i in range(3)]
        child = spawn(nested)
        info = snapshot("spawned")
        results = gather(*tasks)
        return {
            "ids": [t.id for t in tasks] + [child.id],
            "results": results,
            "nested": child.result(),
            "done": [t.done() for t in tasks],
            "resumed": info.resumed,
            "now": snapstate.now() is not None,
        }
    if MODE == "errors":
        ok, bad, worse = spawn(value, 1), spawn(boom, "first"), spawn(boom, "second")
        spawn(boom, "never collected")
        try:
            gather(ok, bad, worse)
        except ValueError as exc:
            first = str(exc)
        try:
            worse.result()
        except ValueError as exc:
            second = str(exc)
        return [first, second, ok.result()]
    if MODE == "cycle":
        holder = []
        a = spawn(lambda: waits_for(holder[0]))
        holder.append(spawn(waits_for, a))
        try:
            a.result()
        except RuntimeError as exc:
            return "cycle: " + str(exc).split(":")[0]
    if MODE == "refuse-frame":
        ready = spawn(snapstate.sleep, 0.3)  # still sleeping at the snapshot
        stuck = spawn(sneaky, ready)
        blocker = spawn(value, 2)
        try:
            snapshot("with a task stuck in C code")
        except SnapstateError as exc:
            message = str(exc)
        return [message, gather(stuck, blocker)]
    if MODE == "refuse-outside":
        return gather(spawn(in_a_thread), spawn(in_a_greenlet))
    if MODE == "orphan":  # main returns first; its task snapshots after that
        spawn(late, SEEN)
        return "main returned"
    if MODE == "busy":  # a task keeps starting effects while main's snapshot waits
        busy = spawn(lambda: [double(i) for i in range(150)][-1])
        try:
            snapshot("while a task is busy")
            message = "taken"
        except SnapstateError as exc:
            message = str(exc)
        return [message, busy.result()]
    if MODE == "joins":  # tasks paused in result(), in gather() and in sleep() itself
        s = spawn(sleeper)
        w = spawn(waits_for, s)
        g = spawn(gather, s)  # a task whose function is a switch point itself
        z = spawn(snapstate.sleep, 0.2)
        info = snapshot("mid")
        return [info.resumed, gather(w, g, z)]
    if MODE == "time-left":  # effect_time_left() inside calls run on the pool
        task = spawn(time_left)
        return [task.result(), time_left(), snapstate.effect_time_left()]
    raise SystemExit(f"unknown TASK_MODE {MODE}")


@effect(kind="read")
def time_left():
    return [threading.current_thread().name, snapstate.effect_time_left()]


def sleeper():
    snapstate.sleep(0.3)
    return "slept"


SEEN = []


def late(seen):
    snapstate.sleep(0.1)
    info = snapshot("after main returned")
    seen.append(info.resumed)
    return double(21)


if __name__ == "__main__":
    print(main())
