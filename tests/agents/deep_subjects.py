"""Coroutine functions for tests/test_deep.py (pickled by reference to their code, so
they live in a plain module, not in a test module pytest rewrites)."""

import asyncio


async def fetch(x, *, scale=2):
    await asyncio.sleep(0)
    return x * scale


async def numbers():
    yield 1


class Built:
    """Rebuilt by calling it with what it holds; counts how often it is built."""

    COUNT = 0

    def __init__(self, items):
        Built.COUNT += 1
        self.items = items

    def __reduce__(self):
        return (Built, (self.items,))
