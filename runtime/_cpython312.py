"""CPython 3.12: interpreter-frame layout and bytecode conventions.

Source: Include/internal/pycore_frame.h, Include/internal/pycore_frame.h's
PyFrameObject (3.12 branch). Checked at import by snapstate.runtime._layout.
"""

import ctypes

_P = ctypes.c_void_p

VERSION = (3, 12)

IFRAME_FIELDS = [
    ("f_code", _P),
    ("previous", _P),
    ("f_funcobj", _P),
    ("f_globals", _P),
    ("f_builtins", _P),
    ("f_locals", _P),
    ("frame_obj", _P),
    ("prev_instr", _P),
    ("stacktop", ctypes.c_int),
    ("return_offset", ctypes.c_uint16),
    ("owner", ctypes.c_char),
]
CODE_FIELD = "f_code"
# greenlet (>= 3.0) rewrites a suspended greenlet's `previous` pointers to skip frames
# that live on the C stack and keeps the original in PyFrameObject._f_frame_data[0].
FRAME_DATA_OFFSET = 48
# PyGenObject: HEAD(16) gi_weakreflist gi_name gi_qualname, then gi_exc_state
GEN_EXC_VALUE_OFFSET = 40

# _asyncio's TaskObj (Modules/_asynciomodule.c, 3.12): the int task_num_cancels_requested,
# what Task.cancelling() returns (restored on a rebuilt task: runtime/_async.py)
TASK_NUM_CANCELS_OFFSET = 168

GEN_RESUME_DELTA = 1

CALL_SEQUENCE = (("PUSH_NULL", 0), ("LOAD_CONST", "fn"), ("CALL", 0))
CALLABLE_FIRST = False
PRECALL_POPS_ARGS = False
CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX"})
ATTR_OPS = frozenset({"LOAD_ATTR"})
METHOD_ATTR_OPS: frozenset[str] = frozenset()
SUBSCR_OPS = frozenset({"BINARY_SUBSCR"})
# LOAD_ATTR's oparg is (name index << 1) | method flag.
ATTR_NAME_SHIFT = 1
ATTR_METHOD_BIT = True
INIT_SHIM_NAME = None
