"""Serving the dashboard: the socket bound first (so `--port 0` prints the port the
system chose, and the URL is printed only once it is listening), then uvicorn on it."""

from __future__ import annotations

import signal
import socket
from types import FrameType

import uvicorn

from ._app import UiConfig, build_app

__all__ = ["bind", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv4 or IPv6 by the host's form)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(64)
    return sock


def serve(config: UiConfig, sock: socket.socket) -> None:
    """Serve the dashboard on `sock` (already listening: a client that connects before
    uvicorn runs waits in its backlog) until Ctrl-C or SIGTERM."""
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(config),
            # uvicorn's own warnings (an upgrade it does not support, a malformed
            # request) are any client's to trigger, before the gate: not snaprun's
            # stderr's business. The gate reports a request's errors, one line each.
            log_level="error",
            ws="none",  # no WebSocket: every request is HTTP, through the gate
            access_log=False,
            server_header=False,
            proxy_headers=False,
            lifespan="off",
        )
    )
    # uvicorn stops on SIGINT and SIGTERM, then raises the signal again once it has
    # stopped (its handlers put back): Ctrl-C's KeyboardInterrupt, and SIGTERM through
    # the handler below, end the command with exit 0.
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()


class _Stopped(Exception):
    """SIGTERM, once uvicorn has stopped."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped
