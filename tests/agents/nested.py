"""Nested helpers three deep, kwargs, defaults, methods, super(), and a half-built
argument list on the value stack while a snapshot is taken."""

from snapstate import snapshot


def combine(a, b, c, *, scale=1):
    return (a + b + c) * scale


def level3(x, bump=10, *, tag="t"):
    info = snapshot(f"level3-{x}")
    print("level3", x, bump, tag, info.seq, flush=True)
    return x + bump


def level2(x, **options):
    y = level3(x, **options) * 2
    print("level2", x, y, sorted(options), flush=True)
    return y


def level1(x):
    # 100 and level2's partial result sit on the value stack during the inner call
    return combine(100, level2(x, bump=5), level3(x + 1), scale=2)


class Base:
    def __init__(self, name):
        self.name = name

    def describe(self, prefix):
        return f"{prefix}:{self.name}"


class Child(Base):
    def __init__(self, name, n):
        super().__init__(name)
        self.n = n

    def describe(self, prefix="child"):
        snapshot("in-method")
        base = super().describe(prefix)
        return f"{base}/{self.n}"


def main():
    total = level1(1)
    print("total", total, flush=True)
    c = Child("c", 7)
    print("describe", c.describe(), c.describe(prefix="p"), flush=True)
    return total
