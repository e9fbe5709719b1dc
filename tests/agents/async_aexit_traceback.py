"""A class async context manager whose __aexit__ awaits snapshot() while the body's
exception is in flight: __aexit__ receives the traceback as its `tb` argument (the
protocol gives it; async code cannot avoid holding it), and the exception is
swallowed or re-raised after the resume as in the uninterrupted run."""

from snapstate import snapshot


class Session:
    def __init__(self, name, swallow):
        self.name, self.swallow = name, swallow

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        await snapshot(f"aexit-{self.name}")
        print("aexit", self.name, exc_type.__name__ if exc_type else None, flush=True)
        return self.swallow


async def main():
    async with Session("swallows", True):
        await snapshot("body")
        raise KeyError("swallowed")
    try:
        async with Session("passes", False):
            raise ValueError("passed on")
    except ValueError as exc:
        print("caught", exc, flush=True)
    return "ok"
