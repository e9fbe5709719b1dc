"""Nested awaits three deep (main -> outer -> middle -> inner awaits snapshot()), with
locals in every frame, loops at each level, and try/except/finally in the middle frame:
an exception raised and caught after a resume, a finally that prints; an await in a
list comprehension."""

import asyncio

from snapstate import snapshot


async def inner(tag, depth_local):
    acc = [tag, depth_local]
    for i in range(2):
        info = await snapshot(f"inner-{tag}-{i}")
        acc.append(i * depth_local)
        print("inner", tag, i, info.label, acc, flush=True)
    return sum(x for x in acc if isinstance(x, int))


async def middle(name, factor):
    seen = {"name": name, "calls": 0}
    total = 0
    for step in range(2):
        try:
            value = await inner(f"{name}{step}", factor + step)
            seen["calls"] += 1
            total += value
            if step == 1:
                raise ValueError(f"too big: {total}")
        except ValueError as exc:
            print("middle caught", name, exc, seen, flush=True)
            total = -total
        finally:
            print("middle finally", name, step, total, flush=True)
    await asyncio.sleep(0)
    return total, seen


async def outer(rounds):
    results = []
    mult = 3
    for r in range(rounds):
        total, seen = await middle(f"m{r}", r * mult + 1)
        results.append((total, seen["calls"]))
        print("outer round", r, results, flush=True)
    return results


async def twice(x):
    info = await snapshot(f"twice-{x}")
    return (info.label, x * 2)


async def main():
    start = "begin"
    print(start, flush=True)
    results = await outer(2)
    # an await in a comprehension: on 3.11 the comprehension is a frame of its own
    doubled = [await twice(x) for x in range(2)]
    print("comprehension", doubled, flush=True)
    final = await snapshot("last")
    print("main done", final.label, results, flush=True)
    return repr((results, doubled))
