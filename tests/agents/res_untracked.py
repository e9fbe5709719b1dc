"""Each untracked handle held at a snapshot is refused with its named error."""

import socket
import subprocess
import sys
import threading

import httpx

from snapstate import SnapshotError, snapshot


def attempt(case):
    try:
        snapshot(case)
    except SnapshotError as exc:
        print(f"REFUSED {case}: {exc}", flush=True)


def main():
    sock = socket.socket()
    attempt("socket")
    sock.close()
    del sock
    lock = threading.Lock()
    lock.acquire()  # a lock is saved unless it is held
    attempt("lock")
    lock.release()
    del lock
    worker = threading.Thread(target=lambda: None)
    attempt("thread")
    del worker
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    attempt("subprocess")
    proc.wait()
    del proc
    import os

    with httpx.Client(base_url=os.environ["SERVER_URL"]) as client:
        with client.stream("GET", "/echo") as response:
            attempt("streaming-response")
    return "done"
