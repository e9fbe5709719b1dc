"""State on the agent's functions survives every restore: a default argument aliasing
a module global stays that very global (`is`), mutable defaults and keyword-only
defaults keep what calls added, function attributes keep their counts, a decorated
function's wrapper and wrapped function keep theirs, and a local aliasing a default
stays the same object."""

import functools

from snapstate import snapshot

SYSTEM = [{"name": "sun", "x": 0.0}, {"name": "earth", "x": 1.0}]


def advance(dt, bodies=SYSTEM):
    for body in bodies:
        body["x"] += dt
    return bodies


def add(x, seen=[]):
    seen.append(x)
    return len(seen)


def tally(item, *, counts={}):
    counts[item] = counts.get(item, 0) + 1
    return counts[item]


def traced(x):
    traced.calls += 1
    traced.log.append(x)
    return x * 2


traced.calls = 0
traced.log = []


def counted(fn):
    """A decorator of the agent's own: the wrapper counts calls on itself."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)

    wrapper.calls = 0
    return wrapper


@counted
def memo(key, cache={}):
    cache.setdefault(key, len(cache))
    return cache[key]


def report(i, bodies, seen):
    print(i, "alias", advance.__defaults__[0] is SYSTEM, bodies is SYSTEM, SYSTEM, flush=True)
    print(
        i,
        "mutable",
        add.__defaults__[0],
        seen is add.__defaults__[0],
        tally.__kwdefaults__["counts"],
        flush=True,
    )
    print(
        i,
        "attrs",
        traced.calls,
        traced.log,
        memo.calls,
        memo.__wrapped__.__defaults__[0],
        flush=True,
    )


def main():
    bodies = SYSTEM  # a local aliasing the global a default aliases
    seen = add.__defaults__[0]  # a local aliasing a mutable default
    for i in range(3):
        advance(0.5)
        add(i)
        tally("odd" if i % 2 else "even")
        traced(i)
        memo(f"k{i}")
        memo("k0")
        snapshot(f"step {i}")
        report(i, bodies, seen)
    advance(1.0)
    SYSTEM.append({"name": "moon", "x": 2.0})
    report("end", bodies, seen)
    return f"{add(99)}-{traced.calls}-{memo.calls}"
