"""Two spawned tasks that each change a local between the job's snapshots
(tests/test_diff.py): snapshot 1 in task 1's first step, snapshot 2 in its second
(task 2 has taken the same steps by then)."""

from snapstate import gather, snapshot, spawn


def worker(n):
    total = n * 10
    snapshot(f"w{n}")
    total += 1
    snapshot(f"w{n}-again")
    return total


def main():
    tasks = [spawn(worker, 1), spawn(worker, 2)]
    print(gather(*tasks), flush=True)
