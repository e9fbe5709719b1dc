"""Coroutine functions for tests/test_deep.py (pickled by reference to their code, so
they live in a plain module, not in a test module pytest rewrites)."""
import asyncio


async def fetch(x, *, scale=2):
    await asyncio.sleep(0)
    return x * scale


async def numbers():
    yield 1
