"""A 150-deep recursion frozen at the bottom and on the way back up."""

import sys

from snapstate import snapshot


def descend(n, path):
    if n == 0:
        snapshot("bottom")
        return len(path)
    path.append(n)
    below = descend(n - 1, path)
    if n == 75:
        snapshot("halfway-up")
    return below + n


def main():
    sys.setrecursionlimit(2000)
    result = descend(150, [])
    print("recursion", result, flush=True)
    return result
