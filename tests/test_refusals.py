"""Every refusal of the freeze engine: the agent gets a SnapshotError at the
snapshot() call naming the frame, its file:line, the construct and the fix; it can
catch it and carry on, and earlier snapshots stay valid."""

from __future__ import annotations

import re

import pytest
from chunked import export_file, snapshot_seqs
from helpers import AGENTS, snaprun

AGENT = AGENTS / "refusals.py"
FILE = str(AGENT)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("refusals")
    run = snaprun("run", "--store", workdir / "store", "--job", "job", AGENT, cwd=workdir)
    messages = {}
    for line in run.stdout.splitlines():
        match = re.match(r"REFUSED ([\w-]+): (.*)", line)
        if match:
            messages[match.group(1)] = match.group(2)
    return run, messages, workdir


def _line_of(text: str) -> int:
    for number, line in enumerate(AGENT.read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(text)


@pytest.mark.smoke
def test_agent_catches_every_refusal_and_finishes(refusals):
    """The job survives every refusal and completes; only good snapshots were written."""
    run, messages, workdir = refusals
    assert run.returncode == 0, run.stderr
    assert run.result == "'survived'"
    assert "carried on" in run.stdout
    assert sorted(messages) == sorted(
        [
            "sorted-key",
            "map",
            "partial",
            "next",
            "generator-body",
            "coroutine-body",
            "lock-local",
            "nested-socket",
            "global-lock",
            "fd-file",
            "exec-code",
        ]
    )
    assert snapshot_seqs(workdir / "store", "job") == [1, 2]


def test_earlier_snapshot_still_resumes(refusals):
    """The snapshot taken before the refusals resumes (exported to a file, resumed as a
    copy: the job is done) and replays them identically."""
    run, _, workdir = refusals
    first = export_file(workdir / "store", "job", 1, workdir / "first.snap")
    resumed = snaprun("resume", "--store", workdir / "store", "--as", "again", first, cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == run.stdout


@pytest.mark.parametrize(
    "case, callee, c_code, caller_line",
    [
        ("sorted-key", "main.<locals>.<lambda>()", "sorted(...)", "sorted([1], key="),
        ("map", "main.<locals>.<lambda>()", "list(...)", "list(map("),
        ("partial", "attempt()", "functools.partial(...)", "functools.partial(attempt"),
        ("next", "Counter.__next__()", "the for loop's call to __next__", "for x in Counter()"),
    ],
)
def test_c_function_between_frames(refusals, case, callee, c_code, caller_line):
    """A C function holding state between two frames is named with both frames and the fix."""
    message = refusals[1][case]
    assert f"snapshot {2} ({case}) failed" in message
    assert f"snapshot() (or a wait that hibernates) inside {callee} at {FILE}:" in message
    assert f"called by C code ({c_code}) from main() at {FILE}:{_line_of(caller_line)}" in message
    assert (
        "Move the snapshot() or wait (sleep(), request_approval(), a rate-limited effect)"
        in message
    )
    assert f"out of {callee}" in message


@pytest.mark.parametrize(
    "case, kind, function, line",
    [
        ("generator-body", "generator", "produce()", 'attempt("generator-body")'),
        ("coroutine-body", "coroutine", "coroutine_body()", 'attempt("coroutine-body")'),
    ],
)
def test_snapshot_inside_generator_or_coroutine_body(refusals, case, kind, function, line):
    """snapshot() inside a running generator or coroutine body is refused with the fix."""
    message = refusals[1][case]
    assert f"inside the body of {kind} {function} at {FILE}:{_line_of(line)}" in message
    assert "Move the snapshot() or the wait" in message
    assert f"out of {function.rstrip('()')}() into the code that iterates it" in message


@pytest.mark.parametrize(
    "case, user_words, path, type_name, fix",
    [
        (
            "lock-local",
            "local 'lock' is a lock (threading.Lock)",
            "local 'lock'",
            "_thread.lock",
            "release it before snapshot()",
        ),
        (
            "nested-socket",
            "local 'holder' (a dict) holds a socket at local 'holder'['client'].conn",
            "local 'holder'['client'].conn",
            "socket.socket",
            "snapstate.resource(factory)",
        ),
        (
            "global-lock",
            "global 'LOCK_AT_MODULE_LEVEL' is a lock (threading.RLock)",
            "module refusals, global 'LOCK_AT_MODULE_LEVEL'",
            "_thread.RLock",
            "leave the `with lock:` block (release it) before snapshot()",
        ),
        (
            "fd-file",
            "local 'source' is a file object (io.TextIOWrapper)",
            "local 'source'",
            "_io.TextIOWrapper",
            "Open the file by its path with open(path)",
        ),
    ],
)
def test_unpicklable_value_named_by_path(refusals, case, user_words, path, type_name, fix):
    """An unpicklable local or global is named first as the user knows it (the local or
    global and what it is), then by task, frame, local, attribute chain and type, then
    the fix for that kind of object (resource() only for a connection or file)."""
    message = refusals[1][case]
    assert message.startswith(
        f"snapshot 2 ({case}) failed: {user_words}, which cannot be saved: "
    ), message
    if case != "global-lock":
        line = _line_of(f'attempt("{case}")')
        assert f"task main, frame main() at {FILE}:{line}" in message
    assert f"{path} -> {type_name}" in message
    assert fix in message
    assert ("snapstate.resource(" in message) == (case in ("nested-socket", "fd-file"))


def test_code_from_exec_is_refused(refusals):
    """A frame whose globals are no module (exec'd code) is refused, naming it."""
    message = refusals[1]["exec-code"]
    assert (
        "from_exec() at <string>:2 runs in globals that belong to no importable module" in message
    )
    assert "Move that code into a module of the agent" in message
