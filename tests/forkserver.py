"""Start `snaprun` by forking it from a pre-imported server instead of exec'ing it.

An exec'd `snaprun` spends most of a short test run starting the interpreter and
importing snapstate, click, rich, cryptography... The fork server
(tests/forkserver_main.py) is one fresh interpreter that has imported all that once;
each run is a child forked from it, made into what an exec'd `snaprun ARGV` would be
(argv, cwd, environment, stdio, process group, __main__, sys.modules, random state)
and run to a normal interpreter exit. The child is a real process with a real pid: a
fault point SIGKILLs it and the caller sees returncode -9, a timeout kills it.

    run(args, cwd=..., env=..., timeout=...)   -> (returncode, stdout, stderr), or
                                                  None when the run must be exec'd

A run is exec'd instead (None; helpers.snaprun then runs the console script as
before) when the fork server is off (SNAPSTATE_TEST_FORK=0), or the request changes
a variable an interpreter or a preloaded module reads while it starts: PYTHON*
(PYTHONHASHSEED, PYTHONDONTWRITEBYTECODE...), locale, TZ, TMPDIR, and every variable
the server saw read during its imports (it reports them). `stats` counts both kinds.

The servers of a flavour (the libraries it preloads) take requests in turn, two of
them: consecutive runs (a run and its resume) never share a hash seed, as two exec'd
processes would not.

Flavours: `snaprun run SCRIPT` whose script imports heavy libraries at its top level
(numpy, openai, anthropic, httpx, httpx2, requests, urllib3: `PRELOADABLE`) is forked
from a server that imported exactly those modules, in the script's order, before the
script does: the agent's own import of them finds them loaded, as it would right
after importing them itself. `resume`/`replay` of that job (by store and job id) use
the same flavour; everything else (ls, inspect, another agent) the plain server, so no
process sees a library its agent never imported (snapstate never imports them itself,
and registers their adapters only once they are in sys.modules). The server checks
that these imports write no environment variable, configure no root logger and leave
no Python thread; numpy's legacy global RandomState (not reseeded at a fork, unlike
`random`) is reseeded in each child.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

__all__ = ["enabled", "run", "shutdown", "stats", "summary"]

SERVER = str(Path(__file__).with_name("forkserver_main.py"))
SNAPRUN = str(Path(sys.executable).with_name("snaprun"))
SERVERS_PER_FLAVOUR = 2

# Read by the interpreter while it starts, or by C libraries when they load: a child
# forked from a server started with other values would not see the request's.
STARTUP_PREFIXES = (
    "PYTHON",
    "_PYTHON",
    "LC_",
    "OPENSSL_",
    "CRYPTOGRAPHY_",
    "NPY_",
    "NUMPY_",
    "OPENBLAS_",
    "GOTO",
    "OMP_",
    "MKL_",
    "MALLOC_",
    "LD_",
)
STARTUP_NAMES = frozenset({"LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "HOME"})

stats: Counter = Counter()  # "forked", "exec: <reason>"


def enabled() -> bool:
    return os.environ.get("SNAPSTATE_TEST_FORK", "1") != "0"


def _server_env() -> dict[str, str]:
    """The environment an exec'd snaprun of helpers.snaprun gets, without a test's
    own variables: the servers start with it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SNAPSTATE_FAULT", None)
    return env


def _text_encoding() -> str:
    return io.TextIOWrapper(io.BytesIO()).encoding  # what subprocess's text mode uses


class ServerGone(RuntimeError):
    pass


class _Server:
    """One fork server process and its control socket."""

    def __init__(self, preload: tuple[str, ...]):
        self.preload = preload
        self.env = _server_env()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile(prefix="forkserver-")
        with theirs:
            self.proc = subprocess.Popen(
                [str(Path(SNAPRUN).with_name("python")), SERVER, SNAPRUN, *preload],
                stdin=theirs,
                stdout=self.log,
                stderr=self.log,
                env=self.env,  # in pytest's process group (see forkserver_main.py)
            )
        ready = self.control.recv(1 << 20)
        if not ready:
            raise ServerGone(f"the fork server did not start: {self._log()}")
        info = json.loads(ready)
        self.pid = info["ready"]
        self.problems: list[str] = info["problems"]
        self.import_reads = frozenset(info["import_reads"])
        # What the interpreter itself changed in its environment while it started
        # (PEP 538's LC_CTYPE coercion): an exec'd snaprun would change the same.
        started = info["environ"]
        self.set_at_start = {k: v for k, v in started.items() if self.env.get(k) != v}
        self.unset_at_start = [k for k in self.env if k not in started]

    def _log(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def refusal(self, env: dict[str, str]) -> str | None:
        """Why a child of this server cannot be `env`'s exec'd snaprun, or None."""
        if self.problems:
            return "server: " + "; ".join(self.problems)
        for name in self.env.keys() | env.keys():
            if self.env.get(name) != env.get(name) and (
                name in self.import_reads
                or name in STARTUP_NAMES
                or name.startswith(STARTUP_PREFIXES)
            ):
                return f"sets {name}"
        return None

    def request(
        self, argv: list[str], cwd, env: dict[str, str], stdio: list[int], session: bool = False
    ) -> _Child:
        if self.set_at_start or self.unset_at_start:
            env = {k: v for k, v in env.items() if k not in self.unset_at_start}
            env.update(self.set_at_start)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        message = {
            "argv": argv,
            "cwd": os.fspath(cwd),
            "env": env,
            "pgid": None if session else os.getpgrp(),
            "session": session,
        }
        try:
            socket.send_fds(self.control, [json.dumps(message).encode()], [theirs.fileno(), *stdio])
        except OSError as exc:
            mine.close()
            raise ServerGone(f"the fork server is gone ({exc}): {self._log()}") from None
        finally:
            theirs.close()
        reply = mine.recv(64)
        if not reply.startswith(b"pid "):
            mine.close()
            raise ServerGone(f"the fork server did not fork: {self._log()}")
        return _Child(int(reply.split()[1]), mine)

    def close(self) -> None:
        self.control.close()  # EOF: the server exits (its children run on)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class _Child:
    """A forked snaprun: its pid, and the connection its exit status comes on."""

    def __init__(self, pid: int, conn: socket.socket):
        self.pid, self.conn = pid, conn
        self.returncode: int | None = None

    def send_signal(self, sig: int) -> None:
        """Signal it unless reaped (the server signals its pidfd: never a reused pid)."""
        if self.returncode is None:
            try:
                self.conn.send(f"signal {int(sig)}".encode())
            except OSError:
                pass

    def poll_message(self) -> int | None:
        """Read the exit message once it is there (the conn is readable)."""
        data = self.conn.recv(64)
        if data.startswith(b"exit "):
            self.returncode = int(data.split()[1])
        elif not data:
            raise ServerGone("the fork server closed a child's connection")
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.conn.settimeout(timeout)
            try:
                self.poll_message()
            finally:
                self.conn.settimeout(None)
        return self.returncode

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Flavour:
    def __init__(self, preload: tuple[str, ...]):
        self.preload = preload
        self.servers: list[_Server | None] = [None] * SERVERS_PER_FLAVOUR
        self.turn = 0
        self.lock = threading.Lock()

    def next(self) -> _Server:
        with self.lock:
            index = self.turn
            self.turn = (self.turn + 1) % len(self.servers)
            if self.servers[index] is None:
                self.servers[index] = _Server(self.preload)
            return self.servers[index]

    def close(self) -> None:
        for server in self.servers:
            if server is not None:
                server.close()
        self.servers = [None] * len(self.servers)


_FLAVOURS: dict[tuple[str, ...], _Flavour] = {}
_LOCK = threading.Lock()


def _server(preload) -> _Server:
    key = tuple(preload)
    with _LOCK:
        flavour = _FLAVOURS.get(key)
        if flavour is None:
            flavour = _FLAVOURS[key] = _Flavour(key)
    return flavour.next()


def shutdown() -> None:
    with _LOCK:
        for flavour in _FLAVOURS.values():
            flavour.close()
        _FLAVOURS.clear()


def _translate(data: bytes, encoding: str) -> str:
    """subprocess's text mode: decoded, universal newlines."""
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def run(
    args: list[str], *, cwd, env: dict[str, str], timeout: float | None, preload=()
) -> tuple[int, str, str] | None:
    """subprocess.run([SNAPRUN, *args], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout) in a forked child: (returncode, stdout, stderr); None
    when this request must be exec'd (counted in `stats`)."""
    if not enabled():
        stats["exec: SNAPSTATE_TEST_FORK=0"] += 1
        return None
    server = _server(preload)
    why = server.refusal(env)
    if why is not None:
        stats[f"exec: {why}"] += 1
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = server.request(list(args), cwd, env, [0, out_w, err_w])
    finally:
        os.close(out_w)
        os.close(err_w)
    stats[f"forked {'+'.join(preload)}" if preload else "forked"] += 1
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    with selectors.DefaultSelector() as selector, child:
        selector.register(out_r, selectors.EVENT_READ)
        selector.register(err_r, selectors.EVENT_READ)
        selector.register(child.conn, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                    raise subprocess.TimeoutExpired(
                        [SNAPRUN, *args],
                        timeout,
                        output=b"".join(chunks[out_r]),
                        stderr=b"".join(chunks[err_r]),
                    )
                for key, _ in selector.select(left):
                    if key.fileobj is child.conn:
                        child.poll_message()
                        selector.unregister(child.conn)
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            os.close(out_r)
            os.close(err_r)
    encoding = _text_encoding()
    return (
        child.returncode,
        _translate(b"".join(chunks[out_r]), encoding),
        _translate(b"".join(chunks[err_r]), encoding),
    )


# ------------------------------------------------------------------------ flavours
PRELOADABLE = frozenset({"numpy", "openai", "anthropic", "httpx", "httpx2", "requests", "urllib3"})
_OPTIONS_WITH_VALUE = frozenset({"--store", "--job", "--grace", "--at", "--as"})
_SCRIPT_IMPORTS: dict[tuple[str, int], tuple[str, ...]] = {}
_JOB_FLAVOURS: dict[tuple[str, str], tuple[str, ...]] = {}  # (store, job) -> preload
_STARTED = re.compile(r"^snaprun: job (\S+) started$", re.MULTILINE)


def _script_imports(path: str) -> tuple[str, ...]:
    """The PRELOADABLE modules a script imports at its top level, in its order."""
    try:
        key = (path, os.stat(path).st_mtime_ns)
        if key not in _SCRIPT_IMPORTS:
            tree = ast.parse(Path(path).read_bytes())
            found: list[str] = []
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found += [n for n in names if n.split(".")[0] in PRELOADABLE and n not in found]
            _SCRIPT_IMPORTS[key] = tuple(found)
        return _SCRIPT_IMPORTS[key]
    except (OSError, SyntaxError, ValueError):
        return ()


def _parse(args: list[str]) -> tuple[str | None, dict[str, str], list[str]]:
    """(command, options with values, positional arguments) of a snaprun command line."""
    if not args or args[0].startswith("-"):
        return None, {}, []
    options: dict[str, str] = {}
    positional: list[str] = []
    rest = iter(args[1:])
    for arg in rest:
        if positional:
            positional.append(arg)  # run's SCRIPT ARGS...: the agent's own
        elif arg in _OPTIONS_WITH_VALUE:
            options[arg] = next(rest, "")
        elif arg.split("=", 1)[0] in _OPTIONS_WITH_VALUE:
            name, value = arg.split("=", 1)
            options[name] = value
        elif arg.startswith("-"):
            options[arg] = ""
        else:
            positional.append(arg)
    return args[0], options, positional


def _store(options: dict[str, str], cwd, env: dict[str, str]) -> str:
    store = options.get("--store") or env.get("SNAPSTATE_HOME") or ".snapstate"
    return os.path.realpath(os.path.join(cwd, store))


def preload_for(args: list[str], cwd, env: dict[str, str]) -> tuple[str, ...]:
    """The flavour of a snaprun command line: the libraries its agent imports at its top
    level (run SCRIPT; resume/replay of a job run that way), else ()."""
    command, options, positional = _parse(args)
    if not positional:
        return ()
    if command == "run":
        script = positional[0]
        if script.endswith(".py") or os.sep in script:
            return _script_imports(os.path.join(cwd, script))
        return ()
    if command in ("resume", "replay"):
        target = positional[0]
        if os.path.isfile(os.path.join(cwd, target)):
            return ()
        return _JOB_FLAVOURS.get((_store(options, cwd, env), target.split("@")[0]), ())
    return ()


def note_run(args: list[str], cwd, env: dict[str, str], preload, stderr: str) -> None:
    """After `run`: remember the job's flavour for its resumes."""
    if preload and args and args[0] == "run":
        _, options, _ = _parse(args)
        job = options.get("--job")
        if job is None:
            started = _STARTED.search(stderr or "")
            job = started.group(1) if started else None
        if job is not None:
            _JOB_FLAVOURS[(_store(options, cwd, env), job)] = tuple(preload)


def summary() -> str:
    forked = sum(n for k, n in stats.items() if k.startswith("forked"))
    execd = sum(n for k, n in stats.items() if k.startswith("exec"))
    flavours = ", ".join(
        f"{k[7:]}: {n}" for k, n in sorted(stats.items()) if k.startswith("forked ")
    )
    reasons = ", ".join(
        f"{k[6:]}: {n}"
        for k, n in sorted(stats.items(), key=lambda kv: -kv[1])
        if k.startswith("exec")
    )
    return (
        f"snaprun starts: {forked} forked"
        + (f" (with {flavours})" if flavours else "")
        + f", {execd} exec'd"
        + (f" ({reasons})" if reasons else "")
    )
