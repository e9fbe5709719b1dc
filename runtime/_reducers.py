"""What the runtime teaches the pickler: its reducers and its restore stubs, put into
the serializers' registration table (serializers/_dispatch.py) when the runtime is
imported (runtime/__init__.py imports this module). The serializers below import
nothing of the runtime.

  - generators held as values: captured paused (runtime/_capture.py) and rebuilt at
    the same yield (runtime/_morph.py); coroutines created or suspended at an await
    (their awaited object is on their value stack, pickled with them), async
    generators paused at a yield (runtime/_async.py adds asyncio's tasks and futures);
  - restore stubs (runtime/_morph.py's morph code objects): a function running one
    is never pickled, and a traceback entry of one is saved as its original code.
"""

from __future__ import annotations

import pickle
import types
from collections.abc import AsyncGenerator
from typing import Any

from .._errors import SnapshotError
from ..serializers import _dispatch
from ..serializers._pickler import _exhausted_generator, _finished_coroutine
from ._capture import capture_generator
from ._morph import is_morph, rebuild_async_step, rebuild_generator, unmorph

__all__ = ["ASEND_TYPE"]


def _reduce_generator(gen: types.GeneratorType[Any, Any, Any]) -> tuple[Any, ...]:
    if gen.gi_running:
        raise pickle.PicklingError(f"generator {gen.__qualname__}() is running")
    if gen.gi_frame is None:
        return (_exhausted_generator, ())
    return (rebuild_generator, (capture_generator(gen),))


def _reduce_coroutine(
    obj: types.CoroutineType[Any, Any, Any] | types.AsyncGeneratorType[Any, Any],
) -> tuple[Any, ...]:
    """A coroutine created or suspended at an await (what it awaits is on its value
    stack, pickled with it: another coroutine, a snapstate await point, a job's task
    or future), or an async generator suspended at a yield: rebuilt paused there."""
    frame = obj.cr_frame if isinstance(obj, types.CoroutineType) else obj.ag_frame
    if frame is None:
        return (_finished_coroutine, ())
    if isinstance(obj, types.CoroutineType) and obj.cr_running:
        raise pickle.PicklingError(
            f"{type(obj).__name__} {obj.__qualname__}() is running; it can be frozen only "
            "while it is suspended"
        )
    try:
        return (rebuild_generator, (capture_generator(obj),))
    except SnapshotError as exc:
        raise pickle.PicklingError(str(exc)) from None


def _inside_await(gen: types.AsyncGeneratorType[Any, Any]) -> str:
    frame = gen.ag_frame
    where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
    return (
        f"async generator {gen.__qualname__}(){where} is paused inside an await of its body "
        "(a snapshot or wait inside the async generator, reached through `async for` or "
        f"anext()): move the snapshot out of {gen.__qualname__}() into the code that "
        "iterates it (an async generator paused at a yield is frozen fine)"
    )


def _reduce_async_step(step: object) -> tuple[Any, ...]:
    """An `async for` step (anext(), asend()) in progress: its generator is paused
    inside an await of its body; rebuilt as the same step of the rebuilt generator.
    An athrow() (aclose()) in progress is refused."""
    import gc

    for ref in gc.get_referents(step):
        if isinstance(ref, types.AsyncGeneratorType):
            if type(step) is _ATHROW or not ref.ag_running:
                raise pickle.PicklingError(_inside_await(ref))
            return (rebuild_async_step, (ref,))
    raise pickle.PicklingError("an async generator's step (anext()) is in progress")


def _original_position(code: types.CodeType, unit: int) -> tuple[types.CodeType, int]:
    """A restored frame's (code, unit) as the original's; still in its prologue's call,
    the instruction it is paused at."""
    original, unit, pending = unmorph(code, unit)
    return original, unit if pending is None else pending.pending


_dispatch.register_reducer(types.GeneratorType, _reduce_generator)
_dispatch.register_reducer(types.CoroutineType, _reduce_coroutine)
_dispatch.register_reducer(types.AsyncGeneratorType, _reduce_coroutine)


async def _probe() -> AsyncGenerator[None, None]:
    yield None


def _step_type(step: Any) -> type:
    step.close()  # never started: closed, so it is not reported as never awaited
    return type(step)


_agen = _probe()
ASEND_TYPE = _step_type(_agen.asend(None))
_ATHROW = _step_type(_agen.athrow(GeneratorExit))
for _type in (ASEND_TYPE, _ATHROW):
    _dispatch.register_reducer(_type, _reduce_async_step)
del _agen, _type
_dispatch.register_code_stubs(is_morph, _original_position)
