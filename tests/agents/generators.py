"""A generator iterated by a for loop, and suspended generators held as values that
are resumed with next(), send(), throw() and close() after a restore."""

from snapstate import snapshot


def numbers(n):
    try:
        for i in range(n):
            got = yield i
            if got is not None:
                print("gen got", got, flush=True)
    finally:
        print("numbers finally", flush=True)


def guarded_worker():
    total = 0
    while True:
        try:
            item = yield total
            total += item
        except ValueError as exc:
            print("worker handled", exc, flush=True)
            total = -1
        except GeneratorExit:
            print("worker closing at", total, flush=True)
            raise


def main():
    seen = []
    for x in numbers(4):
        if x == 2:
            snapshot("loop-over-generator")
        seen.append(x)
    print("seen", seen, flush=True)

    held = numbers(5)
    print("first", next(held), flush=True)
    fresh = numbers(2)  # created, never started
    worker = guarded_worker()
    next(worker)
    worker.send(5)
    snapshot("held-generators")
    print("send", held.send("hello"), flush=True)
    print("next", next(held), flush=True)
    print("fresh", list(fresh), flush=True)
    print("worker", worker.send(7), flush=True)
    print("throw", worker.throw(ValueError("bad item")), flush=True)
    snapshot("again")
    print("worker", worker.send(3), flush=True)
    worker.close()
    held.close()
    return seen
