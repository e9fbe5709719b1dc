"""CPython 3.13: interpreter-frame layout and bytecode conventions.

Source: Include/internal/pycore_frame.h (3.13 branch): f_code became f_executable and
prev_instr became instr_ptr (the instruction being executed, not the previous one).
Checked at import by snapstate.runtime._layout.
"""

import ctypes

_P = ctypes.c_void_p

VERSION = (3, 13)

IFRAME_FIELDS = [
    ("f_executable", _P),
    ("previous", _P),
    ("f_funcobj", _P),
    ("f_globals", _P),
    ("f_builtins", _P),
    ("f_locals", _P),
    ("frame_obj", _P),
    ("instr_ptr", _P),
    ("stacktop", ctypes.c_int),
    ("return_offset", ctypes.c_uint16),
    ("owner", ctypes.c_char),
]
CODE_FIELD = "f_executable"
FRAME_DATA_OFFSET = 64
GEN_EXC_VALUE_OFFSET = 40

# instr_ptr of a suspended generator already points past its YIELD_VALUE.
# _asyncio's TaskObj (Modules/_asynciomodule.c, 3.13): the int task_num_cancels_requested,
# what Task.cancelling() returns (restored on a rebuilt task: runtime/_async.py)
TASK_NUM_CANCELS_OFFSET = 104

GEN_RESUME_DELTA = 0

# 3.13: the callable sits below self_or_null.
CALL_SEQUENCE = (("LOAD_CONST", "fn"), ("PUSH_NULL", 0), ("CALL", 0))
CALLABLE_FIRST = True
PRECALL_POPS_ARGS = False
CALL_OPS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
ATTR_OPS = frozenset({"LOAD_ATTR"})
METHOD_ATTR_OPS: frozenset[str] = frozenset()
SUBSCR_OPS = frozenset({"BINARY_SUBSCR"})
ATTR_NAME_SHIFT = 1
ATTR_METHOD_BIT = True
# CALL_ALLOC_AND_ENTER_INIT pushes a hidden frame running the static code object
# _Py_InitCleanup (co_name "__init__", co_filename "__init__") between the caller and
# __init__; it checks that __init__ returned None and returns self.
INIT_SHIM_NAME = "__init__"
