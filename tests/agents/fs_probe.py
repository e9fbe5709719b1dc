"""What a snaprun process looks like from inside (tests/test_forkserver.py compares a
forked run with an exec'd one)."""

import faulthandler
import gc
import json
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import uuid
import warnings

from snapstate.runtime import _recorded


def _stream(stream):
    buffer = getattr(stream, "buffer", None)
    raw = getattr(buffer, "raw", buffer)
    return {
        "type": type(stream).__name__,
        "buffer": type(buffer).__name__,
        "raw_name": getattr(raw, "name", None),
        "mode": getattr(stream, "mode", None),
        "encoding": stream.encoding,
        "errors": stream.errors,
        "line_buffering": stream.line_buffering,
        "write_through": stream.write_through,
        "fileno": stream.fileno(),
        "closefd": getattr(raw, "closefd", None),
        "is___stream__": stream is getattr(sys, f"__{raw.name.strip('<>')}__"),
    }


def _fds():
    out = {}
    for fd in sorted(map(int, os.listdir("/proc/self/fd"))):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            inheritable = os.get_inheritable(fd)
        except OSError:
            continue  # listdir's own descriptor
        kind = target.split(":")[0] if ":" in target else "file"
        out[fd] = (kind, inheritable)
    return out


def _handler(sig):
    h = signal.getsignal(sig)
    return getattr(h, "__name__", None) or repr(h)


def main():
    main_module = sys.modules["__main__"]
    report = {
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "path": sys.path,
        "flags": repr(sys.flags),
        "xoptions": sys._xoptions,
        "warnoptions": sys.warnoptions,
        "warning_filters": repr(warnings.filters),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "environ_type": type(os.environ).__name__,
        "modules": sorted(n for n in sys.modules if not n.startswith("fs_probe")),
        "main": {
            k: repr(v) for k, v in vars(main_module).items() if k not in ("__builtins__", "main")
        },
        "main_main": getattr(main_module, "main", None) is not None,
        "stdin": _stream(sys.stdin),
        "stdout": _stream(sys.stdout),
        "stderr": _stream(sys.stderr),
        "fds": _fds(),
        "signals": {
            s.name: _handler(s) for s in signal.valid_signals() if isinstance(s, signal.Signals)
        },
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pgrp": os.getpgrp(),
        "sid": os.getsid(0),
        "umask": os.umask(0o22),
        "threads": [t.name for t in threading.enumerate()],
        "main_thread": threading.current_thread() is threading.main_thread(),
        "tempdir": tempfile.gettempdir(),
        "gc": [gc.isenabled(), gc.get_threshold()],
        "recursionlimit": sys.getrecursionlimit(),
        "switchinterval": sys.getswitchinterval(),
        "root_logger": [logging.getLogger().level, len(logging.getLogger().handlers)],
        "loggers": sorted(logging.Logger.manager.loggerDict),
        "faulthandler": faulthandler.is_enabled(),
        "dont_write_bytecode": sys.dont_write_bytecode,
    }
    drawn = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "random": random.random(),
        "snapstate_random": _recorded._VALUES.random(),
        "uuid4": str(uuid.uuid4()),
        "hash": hash("snapstate"),
    }
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:  # the legacy global RandomState
        drawn["numpy_random"] = float(numpy_random.random())
    print(json.dumps({"report": report, "drawn": drawn}))
    return 0
