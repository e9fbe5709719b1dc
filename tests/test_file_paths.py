"""A file object is reopened on the very file it had open (same device and inode),
whatever the cwd or the file's name became; when no path reaches that file any more the
snapshot is refused naming it, never reopened on another file."""

from __future__ import annotations

import os

import pytest

from snapstate.serializers import _pickler


def test_file_deleted_while_open_is_refused_naming_it(tmp_path, monkeypatch):
    """A file deleted while open and a new file of the same name in its place: the
    snapshot is refused naming the file, and the new file is left untouched."""
    monkeypatch.chdir(tmp_path)
    f = open("log.txt", "a")
    try:
        f.write("old\n")
        os.unlink("log.txt")
        (tmp_path / "log.txt").write_text("someone else's\n")
        with pytest.raises(_pickler.UnpicklableError, match=r"'log\.txt'.*no longer reachable"):
            _pickler.dumps({"f": f})
    finally:
        f.close()
    assert (tmp_path / "log.txt").read_text() == "someone else's\n"


def test_file_renamed_while_open_reopens_under_its_new_name(tmp_path):
    """A file renamed while open (the path it was opened by is now another file) is
    reopened under its new name, found from the open descriptor: the writes after the
    restore land in the file the job was writing."""
    old, new = tmp_path / "a.txt", tmp_path / "b.txt"
    f = open(old, "a")
    try:
        f.write("one\n")
        os.rename(old, new)
        old.write_text("other\n")
        blob = _pickler.dumps({"f": f})
    finally:
        f.close()
    g = _pickler.loads(blob)["f"]
    try:
        g.write("two\n")
    finally:
        g.close()
    assert new.read_text() == "one\ntwo\n"
    assert old.read_text() == "other\n"
