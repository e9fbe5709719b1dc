"""The agents of the benchmarks, and the helpers their drivers share.

bench_conversation.py, bench_bigstate.py, bench_worker.py, bench_postgres.py and
bench_effect.py start these agents through the public API (`snapstate.Store`) or
`snaprun worker`; this module is the agent's own
module (its globals are frozen with each snapshot), so it holds nothing large at module
level and imports only the standard library and `snapstate`. The drivers' own
bookkeeping (timings, probes of the store's size on disk) goes to side files outside the
store, never into the job's state.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time

from snapstate import effect, request_approval, sleep, snapshot

# Syllables the messages are made of: text that varies from step to step (seeded, so
# every system sees the same messages) and compresses about as well as prose.
SYLLABLES = (
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "us", "ber", "con",
    "dis", "fra", "gen", "hol", "ist", "jun", "lex", "mor", "nat", "pro", "que", "ret",
    "sto", "tur", "und", "ver", "wil", "yon", "zel", "ing", "tion", "ment", "able", "ous",
)  # fmt: skip
MESSAGE_BYTES = 500


def message(step: int, seed: int = 20) -> dict[str, str]:
    """Message `step` of the conversation: a role and ~500 bytes of varied words, the
    same for a given (step, seed) in every process and every system."""
    rng = random.Random(seed * 1_000_003 + step)
    words: list[str] = []
    size = 0
    while size < MESSAGE_BYTES:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
        words.append(word)
        size += len(word) + 1
    return {"role": "user" if step % 2 else "assistant", "content": " ".join(words)}


def disk_usage(path: str) -> tuple[int, int, int]:
    """(apparent bytes, allocated bytes, files) under `path`, as `du -b` / `du -B1` count."""
    apparent = allocated = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue  # removed meanwhile (a temporary file, a WAL)
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return apparent, allocated, files


def _record(path: str, line: str) -> None:
    with open(path, "a") as side:
        side.write(line + "\n")


# ------------------------------------------------------------------ the conversation
def conversation_main() -> int:
    """argv: STEPS TIMINGS_FILE STORE_DIR PROBE_STEPS(comma-separated) SEED.

    One message appended per step, a durable snapshot() after each; the snapshot() call
    and the whole step are timed here and written to TIMINGS_FILE, with the store's size
    on disk after each probe step."""
    steps, timings, store = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    probes = {int(p) for p in sys.argv[4].split(",") if p}
    seed = int(sys.argv[5])
    messages: list[dict[str, str]] = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        messages.append(message(step, seed))
        t1 = time.perf_counter()
        snapshot()
        t2 = time.perf_counter()
        _record(timings, f"step {step} {t2 - t1:.9f} {t2 - t0:.9f}")
        if step in probes:
            _record(timings, "probe {} {} {} {}".format(step, *disk_usage(store)))
            _record(timings, f"layout {step} {json.dumps(top_level_usage(store))}")
    return len(messages)


# ------------------------------------------------------------------ the big state
def big_state(seed: int, records: int = 10_000) -> dict[str, object]:
    """A ~10 MB state (pickled) at 10,000 records: `records` records of ~0.6 KB, 20 floats
    and 4 short strings per record in two lists."""
    rng = random.Random(seed)
    pool = [message(k, seed)["content"] for k in range(1000)]  # spliced below: fast
    table = {}
    for k in range(records):
        start = rng.randrange(400)
        text = (pool[k % 1000] + " " + pool[(k * 31 + 7) % 1000])[start : start + 500]
        table[f"r{k:06d}"] = {
            "id": k,
            "name": text[:24],
            "tags": [rng.choice(SYLLABLES) for _ in range(4)],
            "score": rng.random(),
            "text": text,
        }
    floats = [rng.random() for _ in range(20 * records)]
    labels = [pool[k % 1000][k % 400 : k % 400 + 40] for k in range(4 * records)]
    return {"records": table, "floats": floats, "labels": labels}


def bigstate_main() -> int:
    """argv: STEPS TIMINGS_FILE STORE_DIR SEED RECORDS.

    Step 1 snapshots the whole state; each later step makes one small change (even
    steps append a record, odd steps change one field of an existing one) and takes a
    durable snapshot. Each snapshot() call is timed and written to TIMINGS_FILE, with the
    store's size on disk after the first and the last step."""
    steps, timings, store = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    seed, records = int(sys.argv[4]), int(sys.argv[5])
    state = big_state(seed, records)
    table = state["records"]
    assert isinstance(table, dict)
    for step in range(1, steps + 1):
        if step > 1 and step % 2 == 0:
            key = f"r{records + step:06d}"
            table[key] = {"id": records + step, "name": key, "tags": [], "score": 0.0,
                          "text": message(records + step, seed)["content"][:400]}  # fmt: skip
        elif step > 1:
            table[f"r{(step * 7919) % records:06d}"]["score"] = float(step)
        t0 = time.perf_counter()
        snapshot()
        t1 = time.perf_counter()
        _record(timings, f"step {step} {t1 - t0:.9f}")
        if step in (1, steps):
            _record(timings, "probe {} {} {} {}".format(step, *disk_usage(store)))
    return len(table)


# ------------------------------------------------------------------ the worker's jobs
def worker_main() -> str:
    """argv: WAIT_SECONDS DONE_FILE. Waits WAIT_SECONDS (the job hibernates when
    SNAPSTATE_HIBERNATE_AFTER is below it, so a worker picks it up once it is due), then
    takes two snapshots and notes its end in DONE_FILE (the driver's cheap signal; the
    store says when the job was done)."""
    wait, done = float(sys.argv[1]), sys.argv[2]
    sleep(wait)
    snapshot("one")
    snapshot("two")
    _record(done, "done")
    return "ok"


@effect
def _bump(n: int) -> int:
    """A recorded effect with nothing outside: its cost is the ledger's alone."""
    return n + 1


def effects_main() -> int:
    """argv: EFFECTS DONE_FILE. Records EFFECTS effects (bench_postgres.py), one
    snapshot every 50, then notes its end in DONE_FILE."""
    count, done = int(sys.argv[1]), sys.argv[2]
    total = 0
    for n in range(count):
        total += _bump(n)
        if n % 50 == 49:
            snapshot(f"after {n + 1}")
    _record(done, "done")
    return total


def effect_timing_main() -> int:
    """argv: CALLS TIMINGS_FILE. Calls the recorded effect `_bump` CALLS times, timing
    each call (bench_effect.py); the timings go to TIMINGS_FILE at the end."""
    calls, timings = int(sys.argv[1]), sys.argv[2]
    samples = []
    total = 0
    for n in range(calls):
        t0 = time.perf_counter()
        total += _bump(n)
        samples.append(time.perf_counter() - t0)
    _record(timings, "\n".join(f"call {n} {s:.9f}" for n, s in enumerate(samples)))
    return total


def approval_main() -> str:
    """argv: DONE_FILE. Asks for an approval (the job hibernates until it is decided),
    then notes the moment it runs again in DONE_FILE: bench_postgres.py's decision-to-
    running latency."""
    done = sys.argv[1]
    request_approval("go", {"bench": True})
    _record(done, repr(time.time()))
    return "ok"


# ------------------------------------------------------------------ reporting helpers
def filesystem_of(path: str) -> tuple[str, str]:
    """(mount point, file system type) of `path`, from /proc/mounts ("?" elsewhere)."""
    real = os.path.realpath(path)
    best = ("?", "?")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and (best[0] == "?" or len(point) > len(best[0])):
                    best = (point, fields[2])
    except OSError:
        pass
    return best


def where(path: str) -> str:
    point, fstype = filesystem_of(path)
    note = " (tmpfs: fsync costs nothing there)" if fstype == "tmpfs" else ""
    return f"{path} on {point} ({fstype}){note}"


def spread(samples: list[float]) -> tuple[float, float, float]:
    """(median, 10th percentile, 90th percentile) of `samples`."""
    if len(samples) < 2:
        value = samples[0] if samples else float("nan")
        return value, value, value
    deciles = statistics.quantiles(samples, n=10, method="inclusive")
    return statistics.median(samples), deciles[0], deciles[-1]


def megabytes(n: float | None) -> str:
    if not isinstance(n, int | float):
        return "?"
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def top_level_usage(path: str) -> list[tuple[str, int, int]]:
    """(entry, apparent bytes, files) for each entry at the top of `path` (a folder's
    files counted inside it): where a store keeps its bytes."""
    rows = []
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        if os.path.isdir(full):
            apparent, _allocated, files = disk_usage(full)
            rows.append((entry + "/", apparent, files))
        else:
            try:
                rows.append((entry, os.lstat(full).st_size, 1))
            except FileNotFoundError:
                continue  # removed meanwhile (a journal, a temporary file)
    return rows
