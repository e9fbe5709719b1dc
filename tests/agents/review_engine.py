"""Reviewer's agent (tests/test_review_engine.py): state a job keeps on its own
decorators and classes and on a library object, printed after each snapshot."""

import contextlib
import datetime
import decimal
import functools

from snapstate import snapshot


def counted(fn):
    calls = 0

    @functools.wraps(fn)
    def wrapper(*args):
        nonlocal calls
        calls += 1
        return f"{fn(*args)}#{calls}"

    return wrapper


@counted
def step(i):
    return i * 10


@contextlib.contextmanager
def session(name, log=[]):
    log.append(name)
    yield len(log)


def first(xs):
    return xs[0]


def last(xs):
    return xs[-1]


class Policy:
    choose = staticmethod(first)
    tz = datetime.UTC


def main():
    ctx = decimal.DefaultContext
    for i in range(3):
        if i == 0:
            Policy.choose = staticmethod(last)
            Policy.tz = datetime.timezone(datetime.timedelta(hours=2))
            ctx.prec = 5
        with session(f"s{i}") as n:
            print(i, step(i), n, Policy.choose([1, 2, 3]), Policy.tz, ctx.prec, flush=True)
        snapshot()
    return "done"


if __name__ == "__main__":
    main()
