"""numpy views through the snapshot pickler against plain numpy pickling.

    python benchmarks/bench_numpy.py [MEGABYTES] [--json FILE]

A float64 root of MEGABYTES (default 200) MB, in three states:

    root          the array alone (the adapter's fast path: numpy pickles it)
    root+view     the root and one view of it, root[1:]: numpy pickles the view as a
                  copy of its elements (the data written twice, restored detached);
                  snapstate writes the root once and the view as (root, layout)
    view only     root[1:] alone, the root reachable only through it

For each: the pickle's size, dumps and loads time (median of 3), and the peak RSS
growth of one dumps (Linux VmHWM, reset through /proc/self/clear_refs): no extra copy
of the data, snapstate's peak is the pickle itself, as numpy's. Printed, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time

CASES = ("root", "root+view", "view only")


def _state(case: str, megabytes: int):
    import numpy as np

    root = np.random.default_rng(1).random(megabytes * (1 << 20) // 8)
    return {"root": root, "root+view": (root, root[1:]), "view only": root[1:]}[case]


def _dumps(kind: str):
    if kind == "numpy":
        return lambda obj: pickle.dumps(obj, protocol=5)
    from snapstate.serializers import _pickler

    return _pickler.dumps


def _peak_mb() -> int:
    """The process's peak RSS (VmHWM) in MB since the last _reset_peak()."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main(megabytes: int, json_path: str | None = None) -> None:
    from snapstate.serializers import _pickler

    results: dict[str, dict[str, dict[str, float]]] = {}

    print(f"float64 root of {megabytes} MB; times are medians of 3")
    print(
        f"{'case':<10} {'pickler':<9} {'size MB':>8} {'dumps s':>8} {'loads s':>8} {'peak MB':>8}"
    )
    for case in CASES:
        state = _state(case, megabytes)
        for kind in ("numpy", "snapstate"):
            dumps = _dumps(kind)
            loads = pickle.loads if kind == "numpy" else _pickler.loads
            times, load_times = [], []
            for _ in range(3):
                t = time.perf_counter()
                data = dumps(state)
                times.append(time.perf_counter() - t)
                t = time.perf_counter()
                loads(data)
                load_times.append(time.perf_counter() - t)
            del data
            _reset_peak()
            before = _peak_mb()
            data = dumps(state)
            peak = _peak_mb() - before
            print(
                f"{case:<10} {kind:<9} {len(data) / (1 << 20):>8.1f} "
                f"{statistics.median(times):>8.3f} {statistics.median(load_times):>8.3f} "
                f"{peak:>8.0f}"
            )
            results.setdefault(case, {})[kind] = {
                "size_mb": len(data) / (1 << 20),
                "dumps_s": statistics.median(times),
                "loads_s": statistics.median(load_times),
                "peak_mb": peak,
            }
            del data
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"megabytes": megabytes, "cases": results}, f, indent=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("megabytes", nargs="?", type=int, default=200, help="the root's size")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    main(args.megabytes, args.json)
