"""Agent for the compatibility tests: at each snapshot the stack is main() ->
Worker.step() -> compat_helper.checkpoint(). The tests copy this file and
compat_helper.py, take snapshots, then edit the copies before resuming.
Under plain Python (`python compat_agent.py`) snapshot() is a no-op."""

import compat_helper


class Worker:
    def __init__(self, scale):
        self.scale = scale

    def step(self, i):
        info = compat_helper.checkpoint(f"step-{i}")
        print(
            "step",
            i,
            "seq",
            info.seq,
            "resumed",
            info.resumed,
            "label",
            info.label,
            "frozen",
            type(info.frozen_for).__name__,
            info.frozen_for >= 0,
            flush=True,
        )
        return i * self.scale


def main():
    worker = Worker(10)
    results = []
    for i in range(3):
        results.append(worker.step(i))
    print("results", results, flush=True)
    return sum(results)


if __name__ == "__main__":
    print("returned", main(), flush=True)
