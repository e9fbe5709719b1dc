"""Calls that reach a Python __call__ through C code that only passes them through,
with snapshot() inside: an instance called directly, with keywords and with *args,
held on an attribute, inside a comprehension; a staticmethod, a classmethod and a
bound method as __call__; a metaclass __call__. The value each call returns flows
back into its caller after a restore."""

from snapstate import snapshot


class Counter:
    def __init__(self):
        self.n = 0

    def __call__(self, x, *, scale=1):
        self.n += x
        snapshot(f"in-call-{self.n}")
        return self.n * scale


class Helper:
    def __init__(self, tag):
        self.tag = tag

    def run(self, x):
        snapshot("bound-" + self.tag)
        return self.tag * x


class Static:
    @staticmethod
    def __call__(x):
        snapshot("static")
        return x + 100


class Klass:
    @classmethod
    def __call__(cls, x):
        return (cls.__name__, x)


class BoundCall:
    __call__ = Helper("b").run


class Meta(type):
    def __call__(cls, *args):
        snapshot("meta")
        return ("meta", cls.__name__, args)


class Single(metaclass=Meta):
    pass


class Holder:
    def __init__(self):
        self.cb = Counter()


def main():
    c = Counter()
    total = c(5) + c(2, scale=3)
    print("direct", total, c.n, flush=True)
    h = Holder()
    print("attribute", h.cb(4) + 1, h.cb.n, flush=True)
    args, kwargs = (7,), {"scale": 2}
    print("star", c(*args, **kwargs), c.n, flush=True)
    print("static", Static()(1), "classmethod", Klass()(2), flush=True)
    print("bound", BoundCall()(3), "meta", Single(1, 2), flush=True)
    print("comprehension", [c(i) for i in range(1, 3)], flush=True)
    return c.n
