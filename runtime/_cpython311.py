"""CPython 3.11: interpreter-frame layout and bytecode conventions.

Source: Include/internal/pycore_frame.h, Include/cpython/frameobject.h (3.11 branch).
Checked at import by snapstate.runtime._layout against a probe frame.
"""

import ctypes

_P = ctypes.c_void_p

VERSION = (3, 11)

# struct _PyInterpreterFrame
IFRAME_FIELDS = [
    ("f_func", _P),
    ("f_globals", _P),
    ("f_builtins", _P),
    ("f_locals", _P),
    ("f_code", _P),
    ("frame_obj", _P),
    ("previous", _P),
    ("prev_instr", _P),
    ("stacktop", ctypes.c_int),
    ("is_entry", ctypes.c_bool),
    ("owner", ctypes.c_char),
]
CODE_FIELD = "f_code"
# greenlet does not rewrite `previous` on 3.11: the pointer is the original one.
FRAME_DATA_OFFSET = None
# PyGenObject.gi_exc_state.exc_value: HEAD(16) gi_code gi_weakreflist gi_name gi_qualname
GEN_EXC_VALUE_OFFSET = 48

# A suspended generator's f_lasti (in code units) + this = the unit after its YIELD_VALUE.
# _asyncio's TaskObj (Modules/_asynciomodule.c, 3.11): the int task_num_cancels_requested,
# what Task.cancelling() returns (restored on a rebuilt task: runtime/_async.py)
TASK_NUM_CANCELS_OFFSET = 168

GEN_RESUME_DELTA = 1

# How a morph prologue calls a zero-argument callable held in co_consts.
CALL_SEQUENCE = (("PUSH_NULL", 0), ("LOAD_CONST", "fn"), ("PRECALL", 0), ("CALL", 0))
# CALL's stack: [NULL | method, callable | self, *args]
CALLABLE_FIRST = False
# Instructions whose callee is a Python frame, by the role of the callee.
# The compiler's stack effect of PRECALL pops the arguments (-oparg), but at run time
# they stay on the stack until CALL: add oparg back to get CALL's real depth.
PRECALL_POPS_ARGS = True
CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX"})
ATTR_OPS = frozenset({"LOAD_ATTR"})
METHOD_ATTR_OPS = frozenset({"LOAD_METHOD"})
SUBSCR_OPS = frozenset({"BINARY_SUBSCR"})
# LOAD_ATTR's oparg indexes co_names directly.
ATTR_NAME_SHIFT = 0
ATTR_METHOD_BIT = False
# Code object of the hidden frame that runs after an inlined __init__ (3.13 only).
INIT_SHIM_NAME = None
