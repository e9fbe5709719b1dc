"""The file-system seam: every file write, rename and delete the store makes (snapshot
files, keys.json, an exported key, config.json and store.json, the sweeps, prune and
repair) goes through a FileSystem, so crash and fault tests can fail any single write,
fsync, rename, link, directory fsync or deletion without monkeypatching. (The catalog
is SQLite's own: its writes do not pass here.)

Atomic, durable file creation: temp file in the same directory, write, fsync, rename
(write_atomic) or link where an existing file must never be replaced (write_new), fsync
the directory. A failure at any step removes the temp file and raises; a failed fsync is
never retried (the kernel may have dropped the dirty pages, so a retry could report
success over lost data).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable

__all__ = [
    "FileSystem",
    "OS",
    "TEMP_SUFFIX",
    "write_atomic",
    "write_new",
    "temp_owner",
    "writer_is_gone",
    "make_private_dir",
    "create_private_file",
    "process_start",
    "pid_alive",
]

TEMP_SUFFIX = ".tmp"


class FileSystem:
    """The operating system's file system."""

    def create(self, path: str) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def fsync_dir(self, directory: str) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def link(self, src: str, dst: str) -> None:
        """A second name for src; FileExistsError if dst exists (never replaced)."""
        os.link(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def remove_dir(self, path: str) -> None:
        """Remove an empty directory."""
        os.rmdir(path)

    def remove_tree(self, path: str) -> None:
        """Delete a directory and everything in it, never following a symbolic link
        (shutil.rmtree's descriptor-based walk). Every entry that can be removed is;
        then the first error, if any, is raised."""
        errors: list[BaseException] = []
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=lambda function, name, exc: errors.append(exc))
        else:
            shutil.rmtree(path, onerror=lambda function, name, info: errors.append(info[1]))
        if errors:
            raise errors[0]


OS = FileSystem()


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state,
    first), or None if the process or its stat file is gone (the one /proc reader)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> int:
    """A process's start time in clock ticks since boot (0 if unknown): with the pid,
    it names a process uniquely even when pids are reused."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields is not None else 0
    except (IndexError, ValueError):
        return 0


def pid_alive(pid: int) -> bool:
    """Whether a process of this host with this pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed, not yet reaped by its parent) is dead for our purposes.
    fields = _stat(pid)
    return not fields or fields[0] not in (b"Z", b"X")


def temp_path(path: str) -> str:
    """The temp name for writing `path`: it names the writing process (pid and start
    time), so a sweep can tell a dead writer's leftovers from a live writer's file."""
    directory, name = os.path.split(os.path.abspath(path))
    me = f"{os.getpid()}-{process_start(os.getpid())}"
    return os.path.join(directory, f".{name}.{me}{TEMP_SUFFIX}")


def temp_owner(name: str) -> tuple[int, int] | None:
    """(pid, start time) of the process that created a temp file, or None."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return None
    try:
        pid, start = name[: -len(TEMP_SUFFIX)].rsplit(".", 1)[1].split("-")
        return int(pid), int(start)
    except (IndexError, ValueError):
        return None


def writer_is_gone(name: str) -> bool:
    """True for a temp file whose writing process no longer exists."""
    owner = temp_owner(name)
    if owner is None:
        return False
    pid, start = owner
    return not os.path.exists(f"/proc/{pid}") or process_start(pid) != start


def write_atomic(path: str, chunks: Iterable[bytes], fs: FileSystem = OS) -> int:
    """Write the byte chunks to `path` atomically and durably, replacing any file there;
    returns the size. `chunks` may be a generator, so a large body is streamed, never
    held twice."""
    tmp = temp_path(path)
    size = _write_temp(tmp, chunks, fs)
    try:
        fs.rename(tmp, path)
    except BaseException:
        _remove_quietly(tmp, fs)
        raise
    fs.fsync_dir(os.path.dirname(os.path.abspath(path)))
    return size


def write_new(path: str, chunks: Iterable[bytes], fs: FileSystem = OS) -> int:
    """write_atomic() for a file that must not exist yet: the complete file is linked
    into place, which fails (FileExistsError) if `path` exists; nothing is replaced and
    no partial file is ever seen under `path`."""
    tmp = temp_path(path)
    size = _write_temp(tmp, chunks, fs)
    try:
        fs.link(tmp, path)
    finally:
        _remove_quietly(tmp, fs)
    fs.fsync_dir(os.path.dirname(os.path.abspath(path)))
    return size


def _write_temp(tmp: str, chunks: Iterable[bytes], fs: FileSystem) -> int:
    """Create `tmp` (mode 0600; FileExistsError if it exists), write the chunks and fsync
    it; returns the size. On a failure after the create, `tmp` is removed."""
    fd = fs.create(tmp)
    size = 0
    try:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    written = fs.write(fd, view)
                    view = view[written:]
                size += len(chunk)
            fs.fsync(fd)
        finally:
            fs.close(fd)
    except BaseException:
        _remove_quietly(tmp, fs)
        raise
    return size


def _remove_quietly(path: str, fs: FileSystem) -> None:
    with contextlib.suppress(OSError):
        fs.unlink(path)


# ------------------------------------------------------------------------ private modes
# A store holds the agent's data: its directories are 0700 and its catalog 0600 whatever
# the umask. The mode given to mkdir/open is masked by the umask, so what this process
# creates is chmod-ed afterwards; existing paths keep the mode their owner chose.
def make_private_dir(path: str) -> None:
    """Create `path` (and missing parents) with the last component mode 0700."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return  # created by another process (or a file: the caller's error)
    os.chmod(path, 0o700)


def create_private_file(path: str) -> None:
    """Create an empty file with mode 0600 unless it exists (SQLite gives its -wal and
    -shm files the mode of the main database file)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
