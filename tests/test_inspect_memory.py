"""`inspect` and `diff` within bounds: the verified body is decoded as a stream
(serializers/_snapfile.py's open_verified, serializers/_home.py's open_row), never
held whole, and the stream still refuses a file changed or cut after its
verification pass. The memory bound is measured on real subprocesses: the peak RSS of
`snaprun inspect` and `snaprun diff` (ru_maxrss of the child, less that of inspecting a
tiny snapshot) against the snapshots' pickle sizes."""

from __future__ import annotations

import os
import pickle
import subprocess
import tracemalloc

import pytest
from chunked import manifest_header, tamper_chunk
from helpers import AGENTS, SNAPRUN, clean_refusal, snaprun

from snapstate._errors import TamperedSnapshot, TruncatedSnapshot
from snapstate.serializers import _inert, _keys, _snapfile

BIG = AGENTS / "big_state.py"
HEADER = {"job_id": "j", "seq": 1}


def _written(tmp_path, payload, encrypt=False):
    ring = _keys.KeyRing(str(tmp_path / "keys"))
    path = str(tmp_path / "body.snap")
    _snapfile.write(path, HEADER, payload, ring, encrypt=encrypt)
    return path, ring


def _read_all(body):
    """Read a stream through every method the C unpickler uses."""
    out = bytearray(body.peek(10))
    out += body.read(3)
    out = out[:3]
    buffer = bytearray(1 << 20)
    n = body.readinto(buffer)
    out += buffer[:n]
    out += body.readline()
    while piece := body.read(777_777):
        out += piece
    body.rest()
    return bytes(out)


@pytest.mark.parametrize("encrypt", [False, True], ids=["signed", "encrypted"])
def test_the_stream_is_the_verified_body(tmp_path, encrypt):
    """Read piece by piece (read, peek, readinto, readline), the body is exactly what
    was written, across many chunks; the inert decoder reads the same value from the
    stream as from the whole buffer."""
    value = {"blobs": [os.urandom(300_000) for _ in range(12)], "text": "x\n" * 500_000}
    payload = pickle.dumps(value, protocol=5)
    path, ring = _written(tmp_path, payload, encrypt)
    with _snapfile.open_verified(path, ring) as (header, body, digest):
        assert header["job_id"] == "j" and len(digest) == 64
        assert _read_all(body) == payload
    with _snapfile.open_verified(path, ring) as (_, body, _):
        decoded = _inert.load(body)
        body.rest()
    assert decoded == value


def _flip_after_verification(path, at):
    with open(path, "r+b") as f:  # the same file, as a writer racing the reader would
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))


@pytest.mark.parametrize("encrypt", [False, True], ids=["signed", "encrypted"])
def test_a_body_changed_after_verification_is_refused(tmp_path, encrypt):
    """A byte of the body flipped between the verification pass and the decoding
    pass: the recomputed MAC (or the chunk's AEAD tag) refuses it, TamperedSnapshot,
    before any result is handed out. Random bytes are stored uncompressed, so the
    flip decompresses fine and only the MAC can catch it."""
    path, ring = _written(tmp_path, pickle.dumps(os.urandom(3 << 20)), encrypt)
    with _snapfile.open_verified(path, ring) as (_, body, _):
        _flip_after_verification(path, os.path.getsize(path) // 2)
        with pytest.raises(TamperedSnapshot, match="changed while it was being read|fails auth"):
            _inert.load(body)
            body.rest()


def test_a_body_cut_after_verification_is_refused(tmp_path):
    """The file truncated between the two passes: TruncatedSnapshot, not a short
    value."""
    path, ring = _written(tmp_path, pickle.dumps(os.urandom(3 << 20)))
    with _snapfile.open_verified(path, ring) as (_, body, _):
        os.truncate(path, os.path.getsize(path) // 2)
        with pytest.raises(TruncatedSnapshot):
            _inert.load(body)
            body.rest()


def test_a_damaged_chunk_is_refused_by_inspect_and_diff(tmp_path):
    """A chunked snapshot with one chunk changed in the catalog: inspect and diff,
    reading it as a stream, refuse it (exit 2) naming the snapshot."""
    env = {"DIFF_OUT": str(tmp_path / "out"), "DIFF_HOSTILE": "x"}
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "j",
        AGENTS / "diff_agent.py",
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    tamper_chunk(tmp_path / "s", "j", 2)
    for args in (["inspect", "j@2"], ["diff", "j@1", "j@2"]):
        clean_refusal(snaprun(*args[:1], "--store", tmp_path / "s", *args[1:], cwd=tmp_path), "j")


# ------------------------------------------------------------------------ memory
@pytest.mark.parametrize("kind", [bytes, bytearray, str])
def test_rendering_a_large_value_allocates_little(kind):
    """inspect's abbreviated rendering of a 64 MB value allocates a few KB, not a
    repr of the whole value (reprlib has no bytes method: it used to repr all of it)."""
    value = kind(b"x" * (64 << 20)) if kind is not str else "x" * (64 << 20)
    tracemalloc.start()
    try:
        text = _inert.render([value])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(text) < 200 and peak < 1 << 20, (len(text), peak)


def _peak_mb(argv, cwd):
    """The peak RSS (MB) of a `snaprun` run as a child of its own, its stdout dropped."""
    with open(os.devnull, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.PIPE)
        with proc.stderr:
            err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, for ru_maxrss
    assert proc.returncode == 0, err
    return usage.ru_maxrss / 1024


def _big_store(root, mb):
    """A store with job `big` (two snapshots of ~`mb` MB) and job `tiny` (loops.py's
    small state); the two big snapshots' pickle sizes."""
    store = root / "store"
    for job, agent in (("big", BIG), ("tiny", AGENTS / "loops.py")):
        run = snaprun(
            "run",
            "--store",
            store,
            "--job",
            job,
            agent,
            cwd=root,
            env={"BIG_MB": str(mb)},
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
    sizes = [manifest_header(store, "big", seq)["size"] for seq in (1, 2)]
    return store, sizes


def _check_bounds(tmp_path, mb):
    store, (size_1, size_2) = _big_store(tmp_path, mb)
    base = _peak_mb([SNAPRUN, "--store", store, "inspect", "--json", "tiny@1"], tmp_path)
    inspect = _peak_mb([SNAPRUN, "--store", store, "inspect", "--json", "big@1"], tmp_path)
    diff = _peak_mb([SNAPRUN, "--store", store, "diff", "--json", "big@1", "big@2"], tmp_path)
    payload = size_1 / 2**20
    both = (size_1 + size_2) / 2**20
    print(f"payload {payload:.0f} MB: inspect +{inspect - base:.0f} MB, diff +{diff - base:.0f} MB")
    # Before streaming, inspect held the whole body beside the decoded state: about 2x.
    assert inspect - base <= 1.5 * payload, (inspect, base, payload)
    assert diff - base <= 1.5 * both, (diff, base, both)


def test_inspect_and_diff_of_200_mb_snapshots_stay_within_bounds(tmp_path):
    """Two ~200 MB snapshots (a list of 1 MB strings): inspect's peak RSS grows by at
    most 1.5x the pickle (it held ~2x before it streamed), diff's by at most 1.5x the
    two pickles together."""
    _check_bounds(tmp_path, 200)


@pytest.mark.slow
def test_inspect_and_diff_of_500_mb_snapshots_stay_within_bounds(tmp_path):
    """The same bounds at ~500 MB (the issue's size)."""
    _check_bounds(tmp_path, 500)
