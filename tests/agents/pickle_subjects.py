"""Functions and generators the pickler tests freeze by code reference."""

COUNTER = {"n": 0}


def make_pair():
    shared = []

    def push(x):
        shared.append(x)
        COUNTER["n"] += 1
        return len(shared)

    def peek():
        return list(shared)

    return push, peek


def make_recursive():
    def countdown(n):
        return [] if n == 0 else [n] + countdown(n - 1)

    return countdown


def ticker(start):
    n = start
    try:
        while True:
            try:
                got = yield n
                n += got or 1
            except ValueError:
                n = -100
    finally:
        COUNTER["n"] += 1000


def in_except():
    try:
        raise KeyError("held")
    except KeyError:
        yield "inside"
        raise


class WithSuper:
    def parent(self):
        return super()
