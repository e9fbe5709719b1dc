"""A snapshot writer for the SIGKILL crash test (tests/test_writer_crash.py).

    python writer_proc.py write STORE JOB     one writer process
    python writer_proc.py serve               a fork server: for each line
                                              "write STORE JOB" on stdin it forks one
                                              writer, waits for it and prints
                                              "exited PID CODE"

A writer opens the store (Home), takes the job's lease (store.acquire_lease: the lease
of a killed writer is stale, its pid is gone), prints "ready PID EPOCH LATEST", then
writes and commits snapshots LATEST+1, LATEST+2, ... through the real code path
(Home.write_snapshot, then Home.commit_snapshot) and prints "ack SEQ" after each
commit, until it is killed (or 10 s pass: "timeout"). Every line is one write(2) to
fd 1, so a line is either printed whole or not at all.

The fork server pays the interpreter start and the imports once; each writer is still
its own process (own pid, own lease, own temp-file and pack names, its own SQLite connection
opened after the fork) and is killed exactly once. Its payloads are a function of
(seq, epoch) (see content()), so the test can check that each committed snapshot holds
exactly the bytes that were written for it.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback

from snapstate.serializers._home import Home
from snapstate.serializers._store import Owner

# Payload sizes (random bytes, incompressible): mostly small, kept inline in the
# catalog transaction; some over 64 KiB, so their chunks go to a pack file written in
# many writes (one per chunk) and a kill often lands in the middle of one.
SIZES = (0, 200, 4_000, 60_000, 300_000, 1_300_000)
WEIGHTS = (2, 4, 4, 3, 2, 2)


def content(job: str, seq: int, epoch: int) -> tuple[dict, bytes]:
    """The header and payload a writer writes for snapshot `seq` under `epoch`."""
    rng = random.Random(f"{job}/{seq}/{epoch}")
    size = rng.choices(SIZES, WEIGHTS)[0]
    header = {
        "job_id": job,
        "seq": seq,
        "epoch": epoch,
        "label": f"s{seq}",
        "created_at": time.time(),
        "size": size,
        "versions": {},
        "argv": [],
        "entry": {"module": "writer", "function": "main", "path": None, "search_path": None},
        "frames": [],
        "modules": {},
    }
    return header, rng.randbytes(size)


def _out(line: str) -> None:
    os.write(1, (line + "\n").encode())


def write(store: str, job: str) -> None:
    home = Home(store)
    epoch = home.catalog.acquire_lease(job, Owner.me(), 30, resuming=True)
    latest = home.catalog.latest(job)
    seq = latest.seq if latest else 0
    _out(f"ready {os.getpid()} {epoch} {seq}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seq += 1
        header, payload = content(job, seq, epoch)
        row = home.write_snapshot(job, seq, epoch, f"s{seq}", header, payload)
        home.commit_snapshot(row)
        _out(f"ack {seq}")
    _out("timeout")
    home.close()


def serve() -> None:
    _out("serving")
    for line in sys.stdin:
        command, store, job = line.split()
        assert command == "write", line
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                write(store, job)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        _out(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        write(sys.argv[2], sys.argv[3])
