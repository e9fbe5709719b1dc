"""Process state the job owns: the global random state, numpy's legacy global
RandomState, environment variables the agent set or removed, the working directory,
and numpy views sharing memory with their base, printed after every snapshot.

The test runs it with PROC_REMOVE and PROC_OUTER set in its environment."""

import os
import random

import numpy as np

from snapstate import snapshot


def show(step, root, view):
    print(step, "random", random.random(), random.randint(0, 10**9), random.gauss(0, 1), flush=True)
    print(
        step,
        "numpy random",
        np.random.rand(),
        np.random.randint(0, 10**6),
        np.random.standard_normal(),
        flush=True,
    )
    print(
        step,
        "env",
        os.environ.get("PROC_SET"),
        os.environ.get("PROC_REMOVE"),
        os.environ.get("PROC_OUTER"),
        os.environ.get("PROC_LATE"),
        flush=True,
    )
    print(step, "cwd", os.path.relpath(os.getcwd(), os.environ["PROC_TOP"]), flush=True)
    view[0, 0] += 1  # written through the view, seen in the base
    print(
        step, "numpy", root.tolist(), np.shares_memory(view, root), view.flags.writeable, flush=True
    )


def main():
    os.environ["PROC_TOP"] = os.getcwd()
    os.makedirs("proc_work/inner", exist_ok=True)
    random.seed(7)
    random.gauss(0, 1)  # leaves a cached second gaussian behind
    np.random.seed(11)
    np.random.standard_normal()
    os.environ["PROC_SET"] = "one"
    os.environ["SNAPSTATE_PROBE"] = "agent"  # snapstate's namespace: never saved
    del os.environ["PROC_REMOVE"]
    root = np.arange(12.0).reshape(3, 4)
    view = root[1:, ::-2]  # negative strides, not contiguous
    for step in range(4):
        snapshot(f"step {step}")
        show(step, root, view)
        if step == 0:
            os.chdir("proc_work")
            os.environ["PROC_SET"] = "two"
        elif step == 1:
            os.chdir("inner")
            os.environ["PROC_LATE"] = "late"
        elif step == 2:
            del os.environ["PROC_LATE"]
    return int(root.sum())
