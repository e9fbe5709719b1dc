"""Closures sharing a cell, nonlocal updates after restore, a recursive closure."""

from snapstate import snapshot


def make_counter():
    count = 0

    def inc(by=1):
        nonlocal count
        count += by
        return count

    def get():
        return count

    return inc, get


def main():
    inc, get = make_counter()
    inc()
    inc(2)
    snapshot("shared-cell")
    inc(10)
    print("shared", get(), inc.__closure__[0] is get.__closure__[0], flush=True)

    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    snapshot("recursive-closure")
    print("fact", fact(6), flush=True)

    def outer():
        items = []

        def add(x):
            items.append(x)
            snapshot(f"inside-closure-{x}")
            return len(items)

        add("a")
        add("b")
        return items

    print("items", outer(), flush=True)
    return get()
