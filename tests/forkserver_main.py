"""The fork server's program (tests/forkserver.py starts it; never imported by pytest).

    python tests/forkserver_main.py SNAPRUN [LIBRARY ...]

Started fresh (exec'd, never a fork of pytest) with the environment an exec'd
`snaprun` gets, it imports what the `snaprun` console script imports (and, for a
library flavour, the LIBRARY modules an agent imports), then serves requests on its
stdin, a SOCK_SEQPACKET socket. A request is one message: JSON {argv, cwd, env, pgid,
session} with four descriptors (a connection socket for this request, and the
child's stdin, stdout and stderr). For each, the server forks a child, reports its pid
on the connection ("pid N"), and, once the child has exited and been reaped, its
returncode ("exit N", negative for a signal, as subprocess gives it). A message
"signal N" on the connection signals the child (through its pidfd: never a reused
pid). The server is single-threaded and never runs snapstate code itself.

The child returns from serve() to this module's top level, which makes the process
what an exec'd `snaprun ARGV` would be at that point (see _become_snaprun) and runs
the console script's own code as __main__: `sys.exit(main())`. So the interpreter
ends normally (atexit handlers, threading shutdown, logging.shutdown, flushes), and
the child is a real process with its own pid that a fault point can SIGKILL.

What a forked child cannot make equal to an exec, tests/forkserver.py routes to exec:
variables read while the server imported (reported in the "ready" message, plus the
interpreter's own: PYTHON*, locale, TZ, ...), another interpreter, fresh=True. The
hash seed is the server's (forkserver.py alternates between two servers, so a run and
the next one, e.g. its resume, never share one, as two exec'd processes would not).
"""

import os
import sys

# The console script's directory is sys.path[0] of an exec'd `snaprun`: set it before
# any import searches sys.path.
_MAIN_AT_START = frozenset(globals())
_STARTUP_ENVIRON = dict(os.environ)  # with what the interpreter set (LC_CTYPE coercion)
SNAPRUN = os.path.abspath(sys.argv[1])
PRELOAD = sys.argv[2:]
sys.path[0] = os.path.dirname(SNAPRUN)


class _ReadLog(dict):
    """os.environ's data while the server imports: records the variables read."""

    def __init__(self, data, log):
        super().__init__(data)
        self.log = log

    def __getitem__(self, key):
        self.log.add(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self.log.add(key)
        self.log.add(b"\0written")
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.log.add(key)
        self.log.add(b"\0written")
        super().__delitem__(key)


_READ = set()
_PLAIN = os.environ._data
os.environ._data = _ReadLog(_PLAIN, _READ)
if hasattr(os, "environb"):
    os.environb._data = os.environ._data

# What the console script imports (bin/snaprun: `import re; import sys; from
# snapstate.runtime._cli import main`), then the flavour's libraries.
import re  # noqa: E402, F401

from snapstate.runtime._cli import main  # noqa: E402, F401

for _name in PRELOAD:
    __import__(_name)

_PLAIN.clear()
_PLAIN.update(os.environ._data)
os.environ._data = _PLAIN
if hasattr(os, "environb"):
    os.environb._data = _PLAIN
_IMPORT_READS = sorted({k.decode("utf-8", "surrogateescape") for k in _READ if k != b"\0written"})
_IMPORT_WROTE = b"\0written" in _READ
del _READ

# The state an exec'd snaprun has here: these modules and descriptors.
_BASE_MODULES = frozenset(sys.modules)
_BASE_FDS = frozenset(int(fd) for fd in os.listdir("/proc/self/fd"))

import io  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import types  # noqa: E402

# The server shares pytest's process group, as its children do (they join the caller's
# group): a child's exit then never orphans that group (which would send SIGHUP to a
# stopped run's group, pytest included, where an exec'd run's exit would not). So a
# Ctrl-C at the terminal reaches the server too: it ignores SIGINT, and each child
# gets back the disposition the server started with (as an exec'd snaprun would have).
_SIGINT_AT_START = signal.getsignal(signal.SIGINT)
signal.signal(signal.SIGINT, signal.SIG_IGN)


def _listening() -> socket.socket:
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the control socket lives on as `control` only
    os.close(null)
    return control


def serve(control: socket.socket):
    """Serve until the control socket closes; returns (request, fds) in a child."""
    poller = select.poll()
    poller.register(control, select.POLLIN)
    conns: dict[int, tuple[socket.socket, int | None]] = {}  # conn fd -> (conn, pidfd)
    children: dict[int, tuple[int, socket.socket | None]] = {}  # pidfd -> (pid, conn)
    problems = _check_server()
    control.send(
        json.dumps(
            {
                "ready": os.getpid(),
                "environ": _STARTUP_ENVIRON,
                "import_reads": _IMPORT_READS,
                "problems": problems,
            }
        ).encode()
    )
    while True:
        for fd, _events in poller.poll():
            if fd == control.fileno():
                try:
                    data, fds, flags, _ = socket.recv_fds(control, 1 << 20, 4)
                except ConnectionError:
                    data, fds = b"", []
                if not data:  # pytest is gone (or done): children run on
                    for fd_ in fds:
                        os.close(fd_)
                    return None
                conn = socket.socket(fileno=fds[0])
                stdio = fds[1:]
                request = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    control.close()
                    for other, _ in conns.values():
                        other.close()
                    for pidfd in children:  # every pidfd of conns' too
                        os.close(pidfd)
                    conn.close()
                    return request, stdio
                for fd_ in stdio:
                    os.close(fd_)
                pidfd = os.pidfd_open(pid)
                conns[conn.fileno()] = (conn, pidfd)
                children[pidfd] = (pid, conn)
                poller.register(pidfd, select.POLLIN)
                poller.register(conn, select.POLLIN)
                _send(conn, f"pid {pid}")
            elif fd in children:  # a child exited: reap it, then report
                pid, conn = children.pop(fd)
                poller.unregister(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                if conn is not None:
                    _send(conn, f"exit {os.waitstatus_to_exitcode(status)}")
                    poller.unregister(conn)
                    del conns[conn.fileno()]
                    conn.close()
            elif fd in conns:
                conn, pidfd = conns[fd]
                try:
                    message = conn.recv(64)
                except OSError:
                    message = b""
                if message.startswith(b"signal "):
                    try:
                        signal.pidfd_send_signal(pidfd, int(message.split()[1]))
                    except ProcessLookupError:
                        pass  # exited; its status is on its way
                elif not message:  # the caller gave up on it: reap it unreported
                    poller.unregister(conn)
                    del conns[fd]
                    children[pidfd] = (children[pidfd][0], None)
                    conn.close()


def _send(conn: socket.socket, text: str) -> None:
    try:
        conn.send(text.encode())
    except OSError:
        pass  # the caller is gone


def _check_server() -> list[str]:
    """What would make a forked child differ from an exec'd snaprun."""
    import logging
    import threading

    problems = []
    extra = set(sys.modules) - _BASE_MODULES
    if extra:  # removed again in each child, but better never there
        problems.append(f"the harness imported {sorted(extra)}")
    if _IMPORT_WROTE:
        problems.append("an import wrote to os.environ")
    if logging.getLogger().handlers or logging.getLogger().level != logging.WARNING:
        problems.append("an import configured the root logger")
    if threading.active_count() != 1:
        problems.append(f"{threading.active_count()} threads")
    return problems


def _stdio(fd: int, name: str, like: io.TextIOWrapper) -> io.TextIOWrapper:
    """sys.stdin/stdout/stderr as an exec'd interpreter makes them with
    PYTHONUNBUFFERED=1 (Python/pylifecycle.c create_stdio): unbuffered binary layer
    for output, write_through; encoding and errors as the server's (same locale)."""
    reading = fd == 0
    buf = open(fd, "rb" if reading else "wb", buffering=-1 if reading else 0, closefd=False)
    raw = buf.raw if reading else buf
    raw.name = name
    stream = io.TextIOWrapper(
        buf,
        like.encoding,
        like.errors,
        "\n",
        False,  # line_buffering: off when unbuffered
        True,  # write_through: nothing sits in a buffer (stdin's too, as create_stdio)
    )
    stream.mode = "r" if reading else "w"
    return stream


def _become_snaprun(request: dict, stdio: list[int]) -> types.ModuleType:
    """Make this forked child what an exec'd `snaprun ARGV` is after its imports; the
    new __main__ (the console script's module) to run."""
    signal.signal(signal.SIGINT, _SIGINT_AT_START)
    if request.get("session"):
        os.setsid()
    elif request.get("pgid") is not None:
        os.setpgid(0, request["pgid"])
    for target, fd in enumerate(stdio):
        if fd != target:
            os.dup2(fd, target)  # inheritable, as an exec'd process's 0, 1, 2
    for fd in stdio:
        if fd > 2 and fd not in _BASE_FDS:
            os.close(fd)
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in _BASE_FDS:
            try:
                os.close(fd)
            except OSError:
                pass  # listdir's own descriptor
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = [SNAPRUN, *request["argv"]]
    sys.argv = list(argv)
    sys.orig_argv = [sys.executable, *argv]
    sys.stdin = sys.__stdin__ = _stdio(0, "<stdin>", sys.__stdin__)
    sys.stdout = sys.__stdout__ = _stdio(1, "<stdout>", sys.__stdout__)
    sys.stderr = sys.__stderr__ = _stdio(2, "<stderr>", sys.__stderr__)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:  # its legacy global state is not reseeded at a fork
        numpy_random.seed()
    for name in set(sys.modules) - _BASE_MODULES:  # the harness's own (none so far)
        del sys.modules[name]
    main_module = types.ModuleType("__main__")
    if "__annotations__" in _MAIN_AT_START:  # as the interpreter makes __main__
        main_module.__annotations__ = {}
    main_module.__dict__.update(
        __file__=SNAPRUN,
        __cached__=None,
        __builtins__=sys.modules["builtins"],
        __loader__=sys.modules["__main__"].__loader__.__class__("__main__", SNAPRUN),
        __spec__=None,
        __package__=None,
    )
    sys.modules["__main__"] = main_module
    return main_module


_request = serve(_listening())
if _request is None:
    sys.exit(0)
try:
    _main = _become_snaprun(*_request)
except BaseException:  # a harness failure: said on the run's own stderr
    import traceback

    os.write(2, f"fork server: {traceback.format_exc()}".encode(errors="replace"))
    os._exit(70)
with open(SNAPRUN, "rb") as _f:
    _code = compile(_f.read(), SNAPRUN, "exec")
del _request, _f
exec(_code, _main.__dict__)
