"""`snaprun diff JOB@A JOB@B` (runtime/_diff.py): every change between two snapshots
of a job whose locals, globals, object attributes and stack all change, and nothing
else; across a fork; --json's shape; hostile text escaped; bad refs refused; no code
of the snapshots run. The comparison itself (long strings and lists, cycles, bounds)
on decoded values."""

from __future__ import annotations

import json
import pickle

import pytest
from helpers import AGENTS, clean_refusal, snaprun

from snapstate.runtime import _diff
from snapstate.runtime._inspect import FrameView, SnapshotView, TaskView
from snapstate.serializers import _inert

AGENT = AGENTS / "diff_agent.py"
HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202eevil"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """diff_agent.py run to its end as job `j` (snapshots 1, 2, 3), then forked at 1
    as `twin` and resumed with another local value: snapshots twin@2 and twin@3."""
    root = tmp_path_factory.mktemp("diff")
    env = {
        "DIFF_OUT": str(root / "sent.txt"),
        "DIFF_HOSTILE": HOSTILE,
        "DIFF_MARKER": str(root / "setstate-ran"),
    }
    run = snaprun("run", "--store", root / "store", "--job", "j", AGENT, cwd=root, env=env)
    assert run.returncode == 0, run.stderr
    fork = snaprun("fork", "--store", root / "store", "--as", "twin", "j@1", cwd=root)
    assert fork.returncode == 0, fork.stderr
    resumed = snaprun(
        "resume",
        "--store",
        root / "store",
        "twin",
        cwd=root,
        env=dict(env, DIFF_HOSTILE="x", DIFF_MARKER=""),
    )
    assert resumed.returncode == 0, resumed.stderr
    return root / "store", root


def _diff_json(store, *refs):
    run = snaprun("diff", "--store", store, "--json", *refs, cwd=store.parent)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_every_change_and_nothing_else(store):
    """From snapshot 1 to 2 the changed paths are exactly what the agent changed: main's
    locals (one added), an object's attribute, a list's appended items, a long string, two
    globals (a dict's key changed, one added, one removed); main's frame kept with its
    line moved and step() added; the one effect recorded in between listed."""
    store, _ = store
    report = _diff_json(store, "j@1", "j@2")
    changes = {(c["path"], c["change"]) for c in report["changes"]}
    assert changes == {
        ("frame[1].locals.notes[0].title", "changed"),
        ("frame[1].locals.notes[0].tags[1]", "added"),
        ("frame[1].locals.notes[1]", "added"),
        ("frame[1].locals.text", "changed"),
        ("frame[1].locals.count", "changed"),
        ("frame[1].locals.extra", "added"),
        ("globals.diff_agent.COUNTER", "changed"),
        ("globals.diff_agent.SETTINGS['mode']", "changed"),
        ("globals.diff_agent.SETTINGS['retries']", "removed"),
        ("globals.diff_agent.SETTINGS['owner']", "added"),
    }
    assert report["more_changes"] == 0
    by_path = {c["path"]: c for c in report["changes"]}
    assert (by_path["frame[1].locals.count"]["old"], by_path["frame[1].locals.count"]["new"]) == (
        "1",
        "2",
    )
    assert by_path["frame[1].locals.notes[0].title"]["new"] == "'renamed'"
    assert "-line" in by_path["frame[1].locals.text"]["diff"]
    assert "+LINE" in by_path["frame[1].locals.text"]["diff"]
    (task,) = report["tasks"]
    frames = [(f["change"], f["function"], f["index"]) for f in task["frames"]]
    assert frames == [("kept", "main", [0, 1]), ("added", "step", [None, 0])]
    line_a, line_b = task["frames"][0]["line"]
    assert line_a < line_b  # main moved on from its first snapshot() to the step() call
    assert [(e["name"], e["args"], e["state"]) for e in report["effects"]] == [
        ("diff_agent.send", "'hello'", "confirmed")
    ]
    assert report["relation"]["kind"] == "same job"


def test_a_frame_removed_and_one_local_changed(store):
    """From 2 to 3 step() returned (its frame removed), main's line moved and only
    `count` changed; nothing was recorded in between."""
    store, _ = store
    report = _diff_json(store, "j@2", "j@3")
    assert [(c["path"], c["change"], c["old"], c["new"]) for c in report["changes"]] == [
        ("frame[0].locals.count", "changed", "2", "3")
    ]
    frames = [(f["change"], f["function"], f["index"]) for f in report["tasks"][0]["frames"]]
    assert frames == [("kept", "main", [1, 0]), ("removed", "step", [0, None])]
    assert report["effects"] == [] and report["events"] == []


def test_across_a_fork(store):
    """j@2 against twin@2 (twin forked from j at 1, resumed with another value in
    `extra`): the relation is explained, the only change is that value, and the effects
    are the fork's own send(), recorded after j@2 was taken."""
    store, _ = store
    report = _diff_json(store, "j@2", "twin@2")
    assert report["relation"]["kind"] == "fork"
    assert "twin descends from job j (forked at its snapshot 1)" in report["relation"]["text"]
    assert [(c["path"], c["new"]) for c in report["changes"]] == [("frame[1].locals.extra", "'x'")]
    assert [e["name"] for e in report["effects"]] == ["diff_agent.send"]
    assert (report["a"]["ref"], report["b"]["ref"]) == ("j@2", "twin@2")


def test_json_shape(store):
    """--json prints diff_report()'s keys, documented in docs/cli.md."""
    store, _ = store
    report = _diff_json(store, "j@1", "j")  # JOB alone: its latest snapshot
    assert list(report) == [
        "a",
        "b",
        "relation",
        "tasks",
        "changes",
        "more_changes",
        "undecoded",
        "effects",
        "events",
    ]
    assert report["b"]["seq"] == 3 and report["undecoded"] is None
    assert set(report["a"]) == {"job", "seq", "label", "created", "ref"}
    assert set(report["changes"][0]) >= {"path", "change", "old", "new"}
    assert set(report["tasks"][0]["frames"][0]) == {
        "change",
        "function",
        "file",
        "line",
        "source",
        "index",
        "locals",
    }


def test_text_escapes_hostile_values_and_fits_the_terminal(store):
    """The text form shows an agent's escape sequences and bidi overrides as escapes
    (none reaches the terminal raw), and cuts every line to $COLUMNS."""
    store, cwd = store
    run = snaprun("diff", "--store", store, "j@1", "j@2", cwd=cwd, env={"COLUMNS": "60"})
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout and "\u202e" not in run.stdout and "\x07" not in run.stdout
    assert "\\x1b[2J" in run.stdout and "\\u202e" in run.stdout
    assert all(len(line) <= 60 for line in run.stdout.splitlines())
    assert "@@ frame[1].locals.notes[0].title (changed) @@" in run.stdout
    wide = snaprun("diff", "--store", store, "--wide", "j@1", "j@2", cwd=cwd, env={"COLUMNS": "60"})
    assert any(len(line) > 60 for line in wide.stdout.splitlines())


def test_runs_none_of_the_snapshots_code(store):
    """diff_agent.Note's __setstate__ would write a marker file if it ran: diff and
    inspect decode its objects without running it."""
    store, root = store
    assert snaprun("diff", "--store", store, "j@1", "j@3", cwd=root).returncode == 0
    assert not (root / "setstate-ran").exists()


@pytest.mark.parametrize(
    ("refs", "needle"),
    [
        (["j@1", "j@9"], "has no snapshot 9"),
        (["j@1", "nojob@1"], "nojob"),
        (["j@1", "bad/id@1"], "bad/id"),
    ],
)
def test_bad_refs_are_refused(store, refs, needle):
    """An unknown snapshot or job, or an invalid id: exit 2, one error line naming it."""
    store, cwd = store
    clean_refusal(snaprun("diff", "--store", store, *refs, cwd=cwd), needle)


# ------------------------------------------------------------------------ the comparison
def _view(state):
    """A SnapshotView of one frame whose locals are `state` decoded inertly."""
    decoded = _inert.loads(pickle.dumps(state, protocol=5))
    frame = FrameView("main", "a.py", 1, decoded)
    return SnapshotView({}, [TaskView("main", None, [frame])], {})


def _changes(a, b):
    return _diff.diff_views(_view(a), _view(b))


def test_long_list_insertion_is_one_bounded_unified_diff():
    """An item inserted in the middle of a long list: one change with a unified diff
    of the items around it (not every shifted item reported)."""
    a = {"xs": list(range(1000))}
    b = {"xs": list(range(500)) + ["new"] + list(range(500, 1000))}
    report = _changes(a, b)
    (change,) = report["changes"]
    assert change["path"] == "frame[0].locals.xs" and change["change"] == "changed"
    assert "+'new'" in change["diff"] and len(change["diff"]) <= _diff.MAX_DIFF_LINES + 2


def test_long_string_is_a_bounded_diff_around_the_change():
    """A 2 MB string changed in one line: the diff shows that line, bounded."""
    text = "".join(f"line {i}\n" for i in range(200_000))
    changed = text.replace("line 150000\n", "LINE 150000\n")
    (change,) = _changes({"t": text}, {"t": changed})["changes"]
    assert "-line 150000" in change["diff"] and "+LINE 150000" in change["diff"]
    assert len(change["diff"]) <= _diff.MAX_DIFF_LINES + 2


def test_cycles_depth_and_change_bounds():
    """A structure holding itself compares without recursing forever; a change deeper
    than MAX_DEPTH is reported at that depth; past MAX_CHANGES changes are counted."""
    a, b = [], []
    a.append(a)
    b.append(b)
    assert _changes({"loop": a}, {"loop": b})["changes"] == []
    deep_a: list = [0]
    deep_b: list = [1]
    for _ in range(40):
        deep_a, deep_b = [deep_a], [deep_b]
    (change,) = _changes({"d": deep_a}, {"d": deep_b})["changes"]
    assert change["path"] == "frame[0].locals.d" + "[0]" * (_diff.MAX_DEPTH - 1)
    many = _changes({"n": list(range(1000))}, {"n": [i + 1 for i in range(1000)]})
    assert len(many["changes"]) == _diff.MAX_CHANGES
    assert many["more_changes"] == 1000 - _diff.MAX_CHANGES


def test_same_sees_equal_values_of_two_decodes():
    """Two decodes of equal objects (stand-ins of distinct identities) are the same;
    a NaN equals a NaN; one differing attribute deep inside is seen."""
    value = {"x": [1.0, float("nan")], "obj": pickle.loads(pickle.dumps(Exception("a")))}
    one = _inert.loads(pickle.dumps(value))
    two = _inert.loads(pickle.dumps(value))
    assert _diff.same(one, two)
    other = _inert.loads(pickle.dumps(dict(value, obj=Exception("b"))))
    assert not _diff.same(one, other)


def test_spawned_tasks_frames_and_locals(tmp_path):
    """A job of two spawned tasks: each task's frames are compared on their own (line
    moved) and its locals are named under `task[ID].`; main's frame is unchanged."""
    run = snaprun(
        "run", "--store", tmp_path / "s", "--job", "t", AGENTS / "diff_tasks.py", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    report = _diff_json(tmp_path / "s", "t@1", "t@2")
    assert [(c["path"], c["old"], c["new"]) for c in report["changes"]] == [
        ("task[1].frame[0].locals.total", "10", "11"),
        ("task[2].frame[0].locals.total", "20", "21"),
    ]
    tasks = {
        t["task"]: [(f["change"], f["line"][0] < f["line"][1]) for f in t["frames"]]
        for t in report["tasks"]
    }
    assert tasks == {"main": [("kept", False)], "1": [("kept", True)], "2": [("kept", True)]}
    shown = snaprun(
        "inspect",
        "--store",
        tmp_path / "s",
        "t@2",
        "--path",
        "task[2].frame[worker].locals.total",
        cwd=tmp_path,
    )
    assert shown.returncode == 0 and shown.stdout.splitlines()[1].strip() == "21", shown.stderr


class Odd:
    """An object with an attribute no `.name` can spell."""


def test_an_attribute_that_is_no_identifier_is_named_by_its_key():
    """A change in an attribute named `my-attr` is reported (as `['my-attr']`, the
    step `inspect --path` reads), never lost for want of a name."""
    one, two = Odd(), Odd()
    setattr(one, "my-attr", 1)
    setattr(two, "my-attr", 2)
    (change,) = _changes({"o": one}, {"o": two})["changes"]
    assert (change["path"], change["old"], change["new"]) == (
        "frame[0].locals.o['my-attr']",
        "1",
        "2",
    )


def test_equal_but_other_type_or_sign_is_a_change():
    """Values Python calls equal that are other values: 1 -> True, 0 -> False, 1 ->
    1.0 inside lists, tuples, dicts (as values and as keys) and sets, 0.0 -> -0.0,
    and a set -> a frozenset: each reported at its own path (they were reported as no
    change: `==` compared the containers). Unchanged values of every kind stay
    unreported (a NaN equals a NaN), and so does sharing: a list held twice and two
    equal lists are the same value (docs/diff.md)."""
    inner = [1, "x"]
    a = {
        "flags": [1, 2, [3, 0]],
        "pair": (1, 2),
        "d": {"k": 0, "n": [{"v": 1}]},
        "keys": {1: "one"},
        "s": {1, 2},
        "fs": {1, 2},
        "z": [0.0, 2.5],
        "zz": 0.0,
        "big": [{"role": "user", "n": i, "parts": [i, str(i)]} for i in range(10_000)],
        "same": [1, 1.0, True, float("nan"), b"b", None, (1,), {"k": [1.5]}],
        "shared": [inner, inner],
    }
    b = dict(
        a,
        flags=[True, 2, [3, False]],
        pair=(1.0, 2),
        d={"k": False, "n": [{"v": 1.0}]},
        keys={True: "one"},
        s={True, 2},
        fs=frozenset({1, 2}),
        z=[-0.0, 2.5],
        zz=-0.0,
        big=[dict(m) for m in a["big"]],
        same=[1, 1.0, True, float("nan"), b"b", None, (1,), {"k": [1.5]}],
        shared=[[1, "x"], [1, "x"]],
    )
    b["big"][7777] = {"role": "user", "n": 7777, "parts": [7777.0, "7777"]}
    changes = {(c["path"], c["old"], c["new"]) for c in _changes(a, b)["changes"]}
    assert changes == {
        ("frame[0].locals.flags[0]", "1", "True"),
        ("frame[0].locals.flags[2][1]", "0", "False"),
        ("frame[0].locals.pair[0]", "1", "1.0"),
        ("frame[0].locals.d['k']", "0", "False"),
        ("frame[0].locals.d['n'][0]['v']", "1", "1.0"),
        ("frame[0].locals.keys", "{1: 'one'}", "{True: 'one'}"),
        ("frame[0].locals.s", "{1, 2}", "{True, 2}"),
        ("frame[0].locals.fs", "{1, 2}", "frozenset({1, 2})"),
        ("frame[0].locals.z[0]", "0.0", "-0.0"),
        ("frame[0].locals.zz", "0.0", "-0.0"),
        ("frame[0].locals.big[7777]['parts'][0]", "7777", "7777.0"),
    }
