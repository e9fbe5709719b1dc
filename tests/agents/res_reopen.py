"""Resources whose reopen fails after a restore: a file that was deleted, and a
resource() connection to a server that is down. SERVER_PORT from the environment."""

import os
import socket

from snapstate import resource, snapshot


def connect():
    return socket.create_connection(("127.0.0.1", int(os.environ["SERVER_PORT"])), timeout=5)


def main():
    notes = open("notes.txt", "w")
    notes.write("before\n")
    conn = resource(connect, name="upstream")
    conn.sendall(b"ping\n")
    snapshot("holding")
    notes.write("after\n")
    conn.sendall(b"again\n")
    notes.close()
    print("finished", flush=True)
    return "ok"
