"""Settings the agent makes on its running event loop before a snapshot hold after the
resume: an exception handler (loop.set_exception_handler) and, on 3.12+, an eager
task factory (asyncio.eager_task_factory: a new task runs up to its first suspension
inside create_task())."""

import asyncio

from snapstate import snapshot


def handler(loop, context):
    print("handler got", context["message"], flush=True)


async def child(n):
    print("child starts", n, flush=True)
    await asyncio.sleep(0)
    return n


async def main():
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(handler)
    eager = getattr(asyncio, "eager_task_factory", None)
    if eager is not None:
        loop.set_task_factory(eager)
    await snapshot("settings-made")
    loop.call_exception_handler({"message": "reported after the snapshot"})
    task = asyncio.create_task(child(1))
    print("after create_task", flush=True)
    result = await task
    await snapshot("end")
    return result
