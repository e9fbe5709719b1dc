"""A setting the agent makes on its running event loop before a snapshot holds after
the resume: its exception handler (loop.set_exception_handler). (A task factory is
refused when set: the job's loop names its tasks itself.)"""

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
    await snapshot("settings-made")
    loop.call_exception_handler({"message": "reported after the snapshot"})
    task = asyncio.create_task(child(1))
    print("after create_task", flush=True)
    result = await task
    await snapshot("end")
    return result
