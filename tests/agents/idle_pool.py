"""An idle ThreadPoolExecutor held across snapshots, used between them with map():
accepted at every snapshot (its workers wait for work: nothing runs in it), before
and after a restore."""

import concurrent.futures

from snapstate import snapshot


def square(x):
    return x * x


def main():
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=3)
    total = sum(pool.map(square, range(5)))
    snapshot("after the first map")
    total += sum(pool.map(square, range(10)))
    snapshot("after the second map")
    total += sum(pool.map(square, range(3)))
    print("total", total, flush=True)
    pool.shutdown()
    return total
