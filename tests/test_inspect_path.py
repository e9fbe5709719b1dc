"""`snaprun inspect JOB@SEQ --path PATH` (runtime/_inspect_path.py): one value of a
snapshot and its children, by a path of tasks, frames, locals, globals, attributes,
items and keys; each child's path drills further; a path that does not resolve is
refused (exit 2) naming the part that did not and what exists there."""

from __future__ import annotations

import json

import pytest
from helpers import AGENTS, clean_refusal, snaprun

AGENT = AGENTS / "diff_agent.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """diff_agent.py run to its end as job `j`: snapshot 2 is taken in step(), called
    by main()."""
    root = tmp_path_factory.mktemp("path")
    env = {"DIFF_OUT": str(root / "sent.txt"), "DIFF_HOSTILE": "\x1b[31mred"}
    run = snaprun("run", "--store", root / "store", "--job", "j", AGENT, cwd=root, env=env)
    assert run.returncode == 0, run.stderr
    return root / "store", root


def _show(store, path, ref="j@2"):
    run = snaprun("inspect", "--store", store[0], "--json", ref, "--path", path, cwd=store[1])
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize(
    ("path", "named", "kind", "value"),
    [
        ("frame[0].locals.label", "frame[0].locals.label", "str", "'two'"),
        ("frame[1].locals.notes[0].title", "frame[1].locals.notes[0].title", "str", "'renamed'"),
        ("frame[main].locals.notes[-1].tags[0]", "frame[1].locals.notes[-1].tags[0]", "str", "'a'"),
        ("frame[-1].locals.count", "frame[1].locals.count", "int", "2"),
        ("task[main].frame[step].locals.depth", "task[main].frame[0].locals.depth", "int", "2"),
        ("task[0].frame[0].locals.depth", "task[main].frame[0].locals.depth", "int", "2"),
        ("globals.diff_agent.SETTINGS['mode']", "globals.diff_agent.SETTINGS['mode']", "str", "'final'"),
        ('globals.diff_agent.SETTINGS["owner"]', "globals.diff_agent.SETTINGS['owner']", "str", "'ann'"),
        ("globals.diff_agent.SETTINGS.mode", "globals.diff_agent.SETTINGS.mode", "str", "'final'"),
        ("globals.diff_agent.UNCHANGED[1]", "globals.diff_agent.UNCHANGED[1]", "int", "1"),
    ],
)  # fmt: skip
def test_a_path_names_one_value(store, path, named, kind, value):
    """Frames by number (0 the innermost, -1 the outermost) or function, tasks by place
    or id, locals, globals by module, attributes, list items and dict keys."""
    shown = _show(store, path)
    assert (shown["path"], shown["type"], shown["value"]) == (named, kind, value)


def test_children_drill_further(store):
    """A list's children are listed with paths, and each of them shows its own value."""
    shown = _show(store, "frame[1].locals.notes")
    assert (shown["type"], shown["length"], shown["more_children"]) == ("list", 2, 0)
    paths = [c["path"] for c in shown["children"]]
    assert paths == ["frame[1].locals.notes[0]", "frame[1].locals.notes[1]"]
    note = _show(store, paths[1])
    assert note["type"] == "diff_agent.Note"
    assert [(c["path"], c["value"]) for c in note["children"]] == [
        ("frame[1].locals.notes[1].title", "'second'"),
        ("frame[1].locals.notes[1].tags", "['a']"),
    ]


def test_a_frame_shows_its_locals(store):
    """A frame alone: its place, and its locals as children."""
    shown = _show(store, "frame[0]")
    assert shown["type"] == "frame" and shown["value"].startswith("step()  ")
    assert [c["path"] for c in shown["children"]] == [
        "frame[0].locals.notes",
        "frame[0].locals.label",
        "frame[0].locals.depth",
    ]


def test_a_long_value_shows_a_page_and_the_text_form_is_escaped(store):
    """A string longer than the default rendering shows whole up to a page (the
    default inspect cuts it at 80 characters); text is escaped."""
    store_dir, cwd = store
    shown = _show(store, "frame[1].locals.text")
    assert shown["length"] == 250 and shown["value"].count("line") == 49
    run = snaprun(
        "inspect", "--store", store_dir, "j@2", "--path", "frame[1].locals.extra", cwd=cwd
    )
    assert run.returncode == 0 and "\x1b" not in run.stdout and "\\x1b[31mred" in run.stdout
    assert run.stdout.splitlines()[0] == "frame[1].locals.extra  (str, 8 long)"


def test_many_children_are_counted(store):
    """The module's globals as a whole: every saved name is a child (none cut here)."""
    shown = _show(store, "globals.diff_agent")
    names = {c["path"] for c in shown["children"]}
    assert {"globals.diff_agent.COUNTER", "globals.diff_agent.SETTINGS"} <= names


@pytest.mark.parametrize(
    ("path", "needles"),
    [
        ("frame[5].locals.x", ["no frame[5]", "frame[0] (step)", "frame[1] (main)"]),
        ("frame[1].locals.nope", ["frame[1].locals has no .nope", "count, extra, fixed, notes, text"]),
        ("frame[1].locals.notes[7]", ["frame[1].locals.notes has no [7]", "2 items"]),
        ("frame[1].locals.notes[True]", ["frame[1].locals.notes has no [True]", "2 items"]),
        ("frame[1].locals.notes[0].colour", ["notes[0] has no .colour", ".title, .tags"]),
        ("frame[1].locals.count.real", ["count has no .real", "nothing to step into (a int)"]),
        ("globals.nomodule.X", ["no module nomodule", "diff_agent"]),
        ("task[9].frame[0]", ["no task[9]", "task[0] (main)"]),
        ("frame[0", ["not closed"]),
        ("locals.x", ["starts with frame[N], task[ID] or globals"]),
        ("frame[0].globals", ["frame[0] has no .globals", ".locals"]),
        ("", ["empty path"]),
    ],
)  # fmt: skip
def test_a_path_that_does_not_resolve_is_refused(store, path, needles):
    """Exit 2 and one error line naming the part that did not resolve and what is
    there (docs/diff.md's path language)."""
    store_dir, cwd = store
    run = snaprun("inspect", "--store", store_dir, "j@2", "--path", path, cwd=cwd)
    clean_refusal(run, "--path", *needles)
