"""Pass-through C boundaries that must work: a decorated *args/**kwargs function,
Class() -> __init__, a property getter and __getitem__."""

import functools

from snapstate import snapshot


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("call", fn.__name__, args, sorted(kwargs), flush=True)
        result = fn(*args, **kwargs)
        print("return", fn.__name__, result, flush=True)
        return result

    return wrapper


@logged
def decorated(a, b=2, *, c=3):
    snapshot("under-decorator")
    return a + b + c


class Built:
    def __init__(self, value):
        self.value = value
        snapshot("in-init")
        self.ready = True


class Lazy:
    def __init__(self):
        self.calls = 0

    @property
    def answer(self):
        self.calls += 1
        snapshot("in-property")
        return 42 + self.calls


class Table:
    def __init__(self, data):
        self.data = data

    def __getitem__(self, key):
        snapshot(f"in-getitem-{key}")
        return self.data[key] * 10


def main():
    print("decorated", decorated(1, c=4), flush=True)
    objs = [Built(i) for i in range(2)]
    print("built", [(o.value, o.ready, type(o).__name__) for o in objs], flush=True)
    lazy = Lazy()
    print("property", lazy.answer, lazy.calls, flush=True)
    table = Table({"a": 1, "b": 2})
    print("getitem", table["a"] + table["b"], flush=True)
    return decorated(10)
