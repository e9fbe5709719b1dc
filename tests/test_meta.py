"""Snapshot metadata (runtime/_pins.py): snapshot(label, meta={...}) and job-level
pin(...), recorded in snapshot headers, shown by `snaprun ls --json` and `inspect`,
given back to the agent after a restore (SnapshotInfo.meta/pins, snapstate.pins()),
sealed in an encrypted store, and refused when not JSON."""

from __future__ import annotations

import json
import pickle
import re
import signal
import struct
import time

import pytest
from chunked import export_file, manifest, snapshot_seqs
from helpers import snaprun
from hypothesis import given
from hypothesis import strategies as st

import snapstate
from snapstate.runtime._switch import SnapshotInfo
from snapstate.serializers import _sealing, _snapfile
from snapstate.serializers._home import Home

AGENT = """\
import json, sys
from snapstate import pin, pins, snapshot

def main():
    marker = sys.argv[1]
    pin(model="model-" + marker, prompt_version="3")
    for bad in ({"when": object()}, ["not", "a", "dict"], {1: "int key"}, {"x": float("nan")}):
        try:
            snapshot("bad", meta=bad)
        except TypeError as exc:
            print("refused:", exc, flush=True)
    try:
        pin(model=["a list"])
    except TypeError as exc:
        print("refused pin:", exc, flush=True)
    meta = {"step": "drafted", "note": "meta-" + marker, "n": [1, 2.5, None, True]}
    info = snapshot("drafted", meta=meta)
    meta["step"] = "changed afterwards"  # recorded as a copy: changes nothing
    print("drafted", json.dumps([info.resumed, info.seq, info.meta, info.pins]), flush=True)
    pin(plan_version=7)
    info = snapshot("planned")
    print("planned", json.dumps([info.resumed, info.seq, info.meta, info.pins]), flush=True)
    pin(prompt_version=None)  # removed
    return pins()
"""

DRAFTED_META = {"step": "drafted", "note": "meta-{m}", "n": [1, 2.5, None, True]}


def _json(run):
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _printed(run, tag: str) -> list:
    for line in run.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line.split(" ", 1)[1])
    raise AssertionError(f"no {tag!r} line in {run.stdout!r}")


@pytest.fixture
def meta_agent(tmp_path):
    script = tmp_path / "meta_agent.py"
    script.write_text(AGENT)
    return script


def test_meta_and_pins_in_headers_ls_inspect_and_after_a_restore(tmp_path, meta_agent):
    """Crash window: SIGKILL right after snapshot 1 ("drafted"). Before the resume,
    `ls --json` and `inspect` show snapshot 1's meta (as given, not as changed after)
    and the pins then in force; the resumed run gets them back (SnapshotInfo.meta/pins,
    resumed=True) and its later snapshot records the pins restored plus the new one.
    Non-JSON meta and pins were refused in the agent (TypeError), the job carried on."""
    store = tmp_path / "store"
    killed = snaprun(
        "run", "--store", store, "--job", "m", meta_agent, "X1",
        cwd=tmp_path, fault="after-snapshot:1",
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    refusals = [line for line in killed.stdout.splitlines() if line.startswith("refused")]
    assert len(refusals) == 5, killed.stdout
    assert "meta['when'] is a builtins.object, which is not JSON" in refusals[0]
    assert "takes a dict of JSON values, not a builtins.list" in refusals[1]
    assert "has the key 1: JSON object keys are strings" in refusals[2]
    assert "meta['x'] is nan" in refusals[3]
    assert "pin(model=...) takes a str, int, float or bool" in refusals[4]
    meta = {k: (v.format(m="X1") if isinstance(v, str) else v) for k, v in DRAFTED_META.items()}
    pins = {"model": "model-X1", "prompt_version": "3"}

    (row,) = _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))
    assert (row["status"], row["latest"], row["label"]) == ("interrupted", 1, "drafted")
    assert (row["meta"], row["pins"], row["wait"]) == (meta, pins, None)
    table = snaprun("ls", "--store", store, "--wide", cwd=tmp_path)
    assert "PINS" in table.stdout.splitlines()[0]
    assert "model=model-X1" in table.stdout and "prompt_version=3" in table.stdout
    report = _json(snaprun("inspect", "--store", store, "--json", "m@1", cwd=tmp_path))
    assert (report["meta"], report["pins"]) == (meta, pins)
    text = snaprun("inspect", "--store", store, "m", cwd=tmp_path).stdout
    assert "pins: model=model-X1 prompt_version=3" in text
    assert 'meta: {"n": [1, 2.5, null, true], "note": "meta-X1", "step": "drafted"}' in text

    resumed = snaprun("resume", "--store", store, "m", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _printed(resumed, "drafted") == [True, 1, meta, pins]  # from the restore
    later = {"model": "model-X1", "prompt_version": "3", "plan_version": 7}
    assert _printed(resumed, "planned") == [False, 2, None, later]
    assert resumed.result == "{'model': 'model-X1', 'plan_version': 7}"
    (row,) = _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))
    assert (row["status"], row["latest"], row["meta"], row["pins"]) == ("done", 2, None, later)


def test_meta_and_pins_are_sealed_in_an_encrypted_store(tmp_path, meta_agent):
    """In an encrypted store the header readable without the key has meta and pins null
    (sealed with argv and label); no file of the store holds them in clear; ls and
    inspect, with the key, show them."""
    store = tmp_path / "sealed"
    assert snaprun("init", "--store", store, "--encrypt", cwd=tmp_path).returncode == 0
    run = snaprun("run", "--store", store, "--job", "s", meta_agent, "Q7Z", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    meta = {k: (v.format(m="Q7Z") if isinstance(v, str) else v) for k, v in DRAFTED_META.items()}
    pins = {"model": "model-Q7Z", "prompt_version": "3"}
    assert _printed(run, "drafted") == [False, 1, meta, pins]  # live: as given, a copy
    assert snapshot_seqs(store, "s") == [1, 2]
    for seq in (1, 2):
        data = manifest(store, "s", seq)  # the header as stored, read without the keys
        (length,) = struct.unpack_from("<I", data, len(_snapfile.MAGIC) + 2)
        raw = json.loads(data[len(_snapfile.MAGIC) + 6 : len(_snapfile.MAGIC) + 6 + length])
        assert raw["meta"] is None and raw["pins"] is None and "sealed" in raw
        exported = export_file(store, "s", seq, tmp_path / f"s{seq}.snap")  # and in a file
        raw = _snapfile.peek_header(str(exported))
        assert raw["meta"] is None and raw["pins"] is None and "sealed" in raw
        data = exported.read_bytes()
        for secret in (b"meta-Q7Z", b"model-Q7Z", b"meta-Q7Z".hex().encode()):
            assert secret not in data, f"{secret!r} in clear in {exported}"
    for path in store.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (b"meta-Q7Z", b"model-Q7Z", b"meta-Q7Z".hex().encode()):
                assert secret not in data, f"{secret!r} in clear in {path}"
    (row,) = _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))
    assert row["pins"] == {"model": "model-Q7Z", "prompt_version": "3", "plan_version": 7}
    report = _json(snaprun("inspect", "--store", store, "--json", "s@1", cwd=tmp_path))
    assert report["meta"]["note"] == "meta-Q7Z"
    assert report["pins"] == {"model": "model-Q7Z", "prompt_version": "3"}


def test_headers_sealed_before_meta_existed_still_open(tmp_path):
    """A sealed header written before meta and pins existed (its sealed fields hold
    only argv and label) opens, with meta and pins None."""
    home = Home(str(tmp_path / "store"), create=True)
    try:
        header = {"job_id": "old", "seq": 1, "argv": ["a"], "label": "l"}
        blob = _sealing.Sealer(home.keys, True)._sealed(
            json.dumps({"argv": ["a"], "label": "l"}), ("header", "private", "old", 1)
        )
        old = dict(header, argv=None, label=None, sealed=blob.hex())
        opened = _sealing.open_header(old, home.keys, "old.snap")
        assert (opened["argv"], opened["label"], opened["meta"], opened["pins"]) == (
            ["a"],
            "l",
            None,
            None,
        )
        new = _sealing.seal_header(dict(header, meta={"k": 1}, pins={"p": "v"}), home.keys)
        assert new["meta"] is None and new["pins"] is None
        opened = _sealing.open_header(new, home.keys, "new.snap")
        assert (opened["meta"], opened["pins"]) == ({"k": 1}, {"p": "v"})
    finally:
        home.close()


def test_snapshot_info_pickled_before_meta_and_pins_existed():
    """A SnapshotInfo pickled by an older snapstate (four fields in its state) loads
    with meta None and pins {}; a new one round-trips with both."""
    old = object.__new__(SnapshotInfo)
    object.__setattr__(
        old, "__dict__", {"resumed": True, "frozen_for": 2.0, "seq": 3, "label": "x"}
    )
    loaded = pickle.loads(pickle.dumps(old))
    assert (loaded.seq, loaded.label, loaded.meta, loaded.pins) == (3, "x", None, {})
    assert loaded == SnapshotInfo(True, 2.0, 3, "x")
    new = SnapshotInfo(False, 0.0, 1, None, {"a": [1]}, {"model": "m"})
    assert pickle.loads(pickle.dumps(new)) == new


def test_outside_a_job_meta_is_checked_and_pins_are_the_process_own(monkeypatch):
    """Under plain Python snapshot(meta=...) checks and copies meta, and pin()/pins()
    keep values for this process, so an agent behaves the same with and without
    snaprun."""
    from snapstate.runtime import _pins

    monkeypatch.setattr(_pins, "_OUTSIDE", {})
    meta = {"a": {"b": [1, "two"]}}
    info = snapstate.snapshot("l", meta=meta)
    assert info.meta == meta and info.meta is not meta and info.seq is None
    with pytest.raises(TypeError, match=r"meta\['a'\]\['b'\]\[1\] is a builtins.set"):
        snapstate.snapshot(meta={"a": {"b": [1, {2}]}})
    with pytest.raises(TypeError, match="more than 65536"):
        snapstate.snapshot(meta={"big": "x" * 70000})
    snapstate.pin(model="m1", temperature=0.2)
    snapstate.pin(model="m2", plan=3)
    assert snapstate.pins() == {"model": "m2", "temperature": 0.2, "plan": 3}
    snapstate.pins()["model"] = "not kept"  # a copy
    assert snapstate.snapshot().pins == {"model": "m2", "temperature": 0.2, "plan": 3}
    snapstate.pin(temperature=None)
    assert snapstate.pins() == {"model": "m2", "plan": 3}
    with pytest.raises(TypeError, match="pin\\(when=...\\)"):
        snapstate.pin(when=object())  # type: ignore[arg-type]
    assert snapstate.pins() == {"model": "m2", "plan": 3}  # a refused pin changes nothing


def test_ls_shows_why_a_job_waits_and_when_it_is_due(short_tmp_path):
    """`snaprun ls` (table and --json) shows a hibernated job's wait: kind, reason and
    due time; once it is resumed and done, no wait."""
    tmp_path = short_tmp_path  # the table's columns stay unwrapped
    script = tmp_path / "ls_sleeper.py"
    script.write_text("import snapstate\ndef main():\n    snapstate.sleep(7200)\n    return 1\n")
    store = tmp_path / "store"
    started = time.time()
    run = snaprun("run", "--store", store, "--job", "w", script, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    (row,) = _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))
    wait = row["wait"]
    assert (row["status"], wait["kind"], wait["approval"]) == ("waiting", "timer", None)
    assert started + 7190 < wait["due"] < time.time() + 7210
    assert "sleep at" in wait["reason"] and f"{script}:3" in wait["reason"]
    table = snaprun("ls", "--store", store, "--wide", cwd=tmp_path).stdout
    due = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wait["due"]))
    assert "WAIT" in table.splitlines()[0]
    assert f"timer, due {due}" in table.splitlines()[1]  # the reason is the label's
    later = snaprun(
        "resume", "--store", store, "w", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7300"}
    )
    assert later.returncode == 0, later.stderr
    (row,) = _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))
    assert (row["status"], row["wait"]) == ("done", None)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=6), _JSON, max_size=5))
def test_any_json_meta_is_recorded_as_given(meta):
    """Every dict of JSON values is accepted and recorded equal to what was given (and
    survives the header's JSON encoding unchanged), as a copy."""
    from snapstate.runtime._pins import check_meta

    recorded = check_meta(meta)
    assert recorded == meta and recorded is not meta
    assert json.loads(json.dumps(recorded)) == meta


@given(
    st.dictionaries(st.text(max_size=6), _JSON, max_size=3),
    st.sampled_from([{1, 2}, b"bytes", object(), 1j, float("inf"), float("nan"), range(2)]),
    st.text(max_size=6),
)
def test_meta_holding_a_non_json_value_is_refused(meta, bad, key):
    """A value JSON cannot hold anywhere in meta is refused with a TypeError that names
    where it is; nothing is recorded."""
    from snapstate.runtime._pins import check_meta

    with pytest.raises(TypeError, match=re.escape(f"meta[{key!r}]")):
        check_meta({**meta, key: [bad]})
