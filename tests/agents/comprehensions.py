"""snapshot() inside list, dict and set comprehensions."""

from snapstate import snapshot


def step(x):
    snapshot(f"step-{x}")
    return x * x


def main():
    squares = [step(x) for x in range(3)]
    print("list", squares, flush=True)
    table = {k: snapshot(f"dict-{k}").seq is not None for k in "ab"}
    print("dict", table, flush=True)
    unique = {step(x) % 3 for x in (4, 5)}
    print("set", sorted(unique), flush=True)
    nested = [[y for y in range(x) if snapshot(f"nested-{x}-{y}") or True] for x in (1, 2)]
    print("nested", nested, flush=True)
    return sum(squares)
