"""A CLI that fits a terminal (issue 22, part 4).

Tables fit COLUMNS=80 (one line per row, no trailing spaces); whatever an agent or a
user wrote is printed as text, never as markup, with control and bidi characters
escaped visibly, in every listing command; -h and `snaprun help` everywhere; global
options before the command; task effects numbered `TASK#N` and reconciled by that
name; internal ledger rows listed with --all; the approval wait names the commands
that continue the job; listings work on a store on a read-only file system (a
read-only bind mount in a private mount namespace: root cannot write it either); `ls`
of 5,000 jobs lists the newest 50 and says how to see the others.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, clean_refusal, snaprun

from snapstate.runtime._cli import cli

AGENT = AGENTS / "terminal_agent.py"
RAW = ("\x1b", "\u202e", "\u202c", "\r", "\b", "\x07")  # must never reach the terminal
ESCAPED = ("\\x1b", "\\u202e", "\\x07")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A store holding job `w` (waiting for an approval, a now() row, task effects)
    and job `f` (failed with a hostile error), both full of long and hostile text; the
    approval run's stderr."""
    root = tmp_path_factory.mktemp("terminal")
    store = root / "store"
    waiting = snaprun("run", "--store", store, "--job", "w", AGENT, cwd=root)
    assert waiting.returncode == 3, waiting.stderr
    failed = snaprun(
        "run", "--store", store, "--job", "f", AGENT, cwd=root, env={"TERMINAL_FAIL": "1"}
    )
    assert failed.returncode == 1, failed.stderr
    # job `v` waits too; its approval is granted --by a hostile name
    assert snaprun("run", "--store", store, "--job", "v", AGENT, cwd=root).returncode == 3
    granted = snaprun(
        "approve", "--store", store, "v", _approval(store, root, "v"),
        "--by", "[/] [link=x]eve\u202e", cwd=root,
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert "\u202e" not in granted.stderr and "\\u202e" in granted.stderr
    return root, store, waiting


def _approval(store: Path, cwd: Path, job: str) -> str:
    """The id of the job's approval."""
    listed = snaprun("approvals", "--all", "--json", "--store", store, cwd=cwd)
    (record,) = [r for r in json.loads(listed.stdout) if r["job"] == job]
    return str(record["id"])


def _listings(store: Path) -> list[list[str]]:
    return [
        ["ls"],
        ["ls", "--all"],
        ["log", "w"],
        ["log", "f"],
        ["effects", "w"],
        ["effects", "w", "--all"],
        ["approvals", "--all"],
        ["stats"],
        ["inspect", "w"],
        ["verify", "w"],
        ["keys", "list"],
        ["worker", "--status"],
    ]


def test_tables_fit_80_columns(hostile):
    """At COLUMNS=80 no line of ls, log, effects or approvals is over 80 columns or
    ends in a space, whatever the length of labels, arguments and names; --wide prints
    the long cells whole."""
    root, store, _ = hostile
    for args in (
        ["ls"],
        ["log", "w"],
        ["effects", "w"],
        ["effects", "w", "--all"],
        ["approvals"],
        ["approvals", "--all"],
        ["stats"],
    ):
        run = snaprun(*args, "--store", store, cwd=root, env={"COLUMNS": "80"})
        assert run.returncode == 0, (args, run.stderr)
        lines = run.stdout.splitlines()
        assert len(lines) >= 2, (args, run.stdout)
        for line in lines:
            assert len(line) <= 80 and line == line.rstrip(), (args, line)
        assert "\u2026" in run.stdout or args[0] == "stats", (args, run.stdout)  # cut
    wide = snaprun("ls", "--wide", "--store", store, cwd=root, env={"COLUMNS": "80"})
    assert "need more than eighty columns of any terminal by itself a label" in wide.stdout
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    log = snaprun("log", "w", "--store", store, cwd=root, env={"COLUMNS": "80"}).stdout
    assert "" not in log.splitlines()  # no blank line after an event


def test_hostile_text_is_printed_escaped_in_every_listing(hostile):
    """Markup (`[/]`, `[link=...]`), escape sequences, \\r, \\b and bidi overrides in
    labels, pins, meta, effect arguments, an approval's name and scope, an error message
    and --by: every listing exits 0, no raw control or bidi character reaches stdout or
    stderr, and the escaped form and the literal markup do (nothing was rendered)."""
    root, store, _ = hostile
    seen = ""
    for args in _listings(store):
        for extra in (
            ([], ["--wide"]) if args[0] in ("ls", "log", "effects", "approvals") else ([],)
        ):
            run = snaprun(*args, *extra, "--store", store, cwd=root)
            assert run.returncode == 0, (args, run.stderr)
            assert "Traceback" not in run.stderr, run.stderr
            for char in RAW:
                assert char not in run.stdout and char not in run.stderr, (args, repr(char))
            seen += run.stdout
    for form in ESCAPED:
        assert form in seen, form
    assert "[link=http://evil.example]click[/link]" in seen  # shown, not rendered
    assert "failed on [/]" in seen  # the failed job's error, as written
    assert "[/] [link=x]eve\\u202e" in seen  # --by
    for args in (["ls", "--json"], ["effects", "w", "--json"], ["approvals", "--all", "--json"]):
        run = snaprun(*args, "--store", store, cwd=root)  # JSON escapes by itself
        assert run.returncode == 0 and "\x1b" not in run.stdout, run.stderr
        assert json.loads(run.stdout)
        assert "\\u001b" in run.stdout or args[0] == "effects"  # (its args are a repr)


def test_the_approval_wait_says_how_to_decide_it(hostile):
    """The approval wait's message names the commands that decide it and what then
    continues the job."""
    root, store, waiting = hostile
    approval = _approval(store, root, "w")
    assert f"snaprun approve w {approval}`" in waiting.stderr, waiting.stderr
    assert f"snaprun reject w {approval}`" in waiting.stderr and "snaprun worker" in waiting.stderr


def test_internal_rows_are_listed_with_all(hostile):
    """`effects` leaves out the rows of now() (and says so on stderr); --all lists them;
    --json lists every row, each marked internal or not."""
    root, store, _ = hostile
    plain = snaprun("effects", "w", "--store", store, "--wide", cwd=root)
    every = snaprun("effects", "w", "--store", store, "--wide", "--all", cwd=root)
    assert "now()" not in plain.stdout and "now()" in every.stdout
    assert "--all` lists them" in plain.stderr
    rows = json.loads(snaprun("effects", "w", "--json", "--store", store, cwd=root).stdout)
    internal = [r for r in rows if r["internal"]]
    assert internal and all(r["name"] == "snapstate.now" for r in internal)
    ids = [r["id"] for r in rows if not r["internal"]]
    assert ids[0].isdigit() and {"1#1", "2#1"} <= set(ids), ids
    assert [line.split()[0] for line in plain.stdout.splitlines()[1:]] == ids


def test_task_effects_are_numbered_and_reconciled_as_shown(tmp_path):
    """A spawned task's ambiguous effect is `1#1` in the park message, in `effects`, for
    `reconcile` and in the timeline (the raw catalog ordinal still works); reconciled,
    the job ends with the order sent once."""
    orders = tmp_path / "orders.txt"
    env = {"ORDERS_FILE": str(orders)}
    store = tmp_path / "s"
    agent = AGENTS / "terminal_park.py"
    killed = snaprun(
        "run", "--store", store, "--job", "p", agent, cwd=tmp_path, env=env,
        fault="effect-after-send:1#1",
    )  # fmt: skip
    assert killed.returncode == -9
    parked = snaprun("resume", "--store", store, "p", cwd=tmp_path, env=env)
    assert parked.returncode == 4, parked.stderr
    assert "effect 1#1 " in parked.stderr and "snaprun reconcile p 1#1 --committed" in parked.stderr
    listed = snaprun("effects", "p", "--store", store, cwd=tmp_path).stdout
    (row,) = [line for line in listed.splitlines()[1:] if "ambiguous" in line]
    assert row.split()[0] == "1#1"
    assert "1099511627776" not in listed
    missing = snaprun("reconcile", "--store", store, "p", "1#2", "--committed", cwd=tmp_path)
    clean_refusal(missing, "no effect 1#2")
    done = snaprun("reconcile", "--store", store, "p", "1#1", "--committed", cwd=tmp_path)
    assert done.returncode == 0 and "effect 1#1 of job p reconciled" in done.stderr, done.stderr
    log = snaprun("log", "p", "--wide", "--store", store, cwd=tmp_path).stdout
    assert "effect 1#1: reconciled" in log, log
    finished = snaprun("resume", "--store", store, "p", cwd=tmp_path, env=env)
    assert finished.returncode == 0, finished.stderr
    assert orders.read_text() == "paper\n"


def _commands() -> list[list[str]]:
    out = []
    for name, command in cli.commands.items():
        out.append([name])
        for sub in getattr(command, "commands", {}):
            out.append([name, sub])
    return out


def test_help_everywhere(tmp_path):
    """-h works on snaprun and every command; `snaprun help`, `help ls`, `help keys
    list` and `help exit-codes` print to stdout (exit 0); a command's help lists only
    its own exit codes; an unknown topic is one error line."""
    for path in [[], *_commands()]:
        run = snaprun(*path, "-h", cwd=tmp_path)
        assert run.returncode == 0, (path, run.stderr)
        assert run.stdout.startswith("Usage: snaprun" + "".join(" " + p for p in path)), path
        assert "130  stopped by Ctrl-C" not in run.stdout  # the table is in one place
    top = snaprun("help", cwd=tmp_path)
    assert top.returncode == 0 and "Reading a store:" in top.stdout and "Deciding:" in top.stdout
    ls = snaprun("help", "ls", cwd=tmp_path)
    assert ls.returncode == 0 and ls.stdout.startswith("Usage: snaprun ls")
    assert "0 ok, 1 failed, 2 usage or invalid input" in ls.stdout and "3 waiting" not in ls.stdout
    sub = snaprun("help", "keys", "list", cwd=tmp_path)
    assert sub.returncode == 0 and sub.stdout.startswith("Usage: snaprun keys list")
    codes = snaprun("help", "exit-codes", cwd=tmp_path)
    assert codes.returncode == 0 and "130  stopped by Ctrl-C" in codes.stdout
    clean_refusal(snaprun("help", "bogus", cwd=tmp_path), "no command 'bogus'", "`snaprun help`")


def test_global_options_before_the_command(hostile, tmp_path):
    """--store, --json and --wide before the command act as after it; a global flag
    the command has no use for is refused, not ignored."""
    root, store, _ = hostile
    before = snaprun("--store", store, "--json", "ls", cwd=root)
    after = snaprun("ls", "--store", store, "--json", cwd=root)
    assert before.returncode == 0 and json.loads(before.stdout) == json.loads(after.stdout)
    keys = snaprun("--store", store, "--json", "keys", "list", cwd=root)
    assert keys.returncode == 0 and json.loads(keys.stdout)[0]["current"] is True
    wide = snaprun("--store", store, "--wide", "log", "w", cwd=root, env={"COLUMNS": "80"})
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    refused = snaprun("--json", "run", AGENT, cwd=tmp_path)
    clean_refusal(refused, "--json does not apply to `snaprun run`")
    elsewhere = snaprun("--store", store, "migrate-store", store, tmp_path / "b", cwd=tmp_path)
    clean_refusal(elsewhere, "--store does not apply to `snaprun migrate-store`")
    clean_refusal(snaprun("--wide", "keys", "rotate", cwd=tmp_path), "`snaprun keys rotate`")
    assert not (tmp_path / ".snapstate").exists()


# ------------------------------------------------------------------ read-only store
def _can_mount_read_only(tmp_path: Path) -> str | None:
    """None when a read-only bind mount in a private mount namespace works here, else
    why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    (tmp_path / "probe").mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && ! touch "$0/x"',
         str(tmp_path / "probe")],
        capture_output=True, text=True,
    )  # fmt: skip
    return None if probe.returncode == 0 else f"no read-only bind mount: {probe.stderr.strip()}"


def _read_only(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`snaprun ARGS --store STORE` with STORE bind-mounted read-only over itself in a
    private mount namespace (root cannot write it: EROFS)."""
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(store), SNAPRUN, *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _store_files(store: Path) -> dict[str, int]:
    return {str(p.relative_to(store)): p.stat().st_mtime_ns for p in store.rglob("*")}


def test_listings_work_on_a_read_only_file_system(tmp_path):
    """ls, log, effects, approvals, inspect, stats and verify list a store on a
    read-only mount: as the runs left it (with -shm), with no -wal/-shm (a cleanly
    closed or copied store), and with a WAL holding a commit but no -shm (the decision
    in the WAL is shown, never silently missed); nothing is created in it."""
    why = _can_mount_read_only(tmp_path)
    if why is not None:
        pytest.skip(f"the read-only file system cannot be made here: {why}")
    store = tmp_path / "store"
    waiting = snaprun("run", "--store", store, "--job", "w", AGENT, cwd=tmp_path)
    assert waiting.returncode == 3, waiting.stderr
    clean = tmp_path / "clean"
    shutil.copytree(store, clean, ignore=shutil.ignore_patterns("*-shm", "*-wal"))
    # A WAL holding the approval's decision: a connection kept open meanwhile keeps
    # the decision's process from folding it into the main file as it closes.
    holder = sqlite3.connect(store / "catalog.db")
    try:
        holder.execute("SELECT COUNT(*) FROM jobs").fetchone()
        approval = _approval(store, tmp_path, "w")
        granted = snaprun("approve", "--store", store, "w", approval, "--by", "ann", cwd=tmp_path)
        assert granted.returncode == 0, granted.stderr
        in_wal = tmp_path / "in-wal"
        shutil.copytree(store, in_wal, ignore=shutil.ignore_patterns("*-shm"))
        assert (in_wal / "catalog.db-wal").stat().st_size > 0
    finally:
        holder.close()
    for folder, state in ((store, "granted"), (clean, "pending"), (in_wal, "granted")):
        before = _store_files(folder)
        for args in (
            ["ls"],
            ["log", "w"],
            ["effects", "w"],
            ["approvals", "--all"],
            ["inspect", "w"],
            ["stats"],
            ["verify", "w"],
        ):
            run = _read_only(folder, *args)
            assert run.returncode == 0, (folder.name, args, run.stderr)
            assert len(run.stdout.splitlines()) >= 2, (folder.name, args, run.stdout)
        listed = json.loads(_read_only(folder, "approvals", "--all", "--json").stdout)
        assert [a["state"] for a in listed] == [state], folder.name
        assert _store_files(folder) == before, folder.name


# ------------------------------------------------------------------ many jobs
def test_ls_of_5000_jobs_lists_the_newest_and_says_how_many_more(tmp_path):
    """5,000 jobs (inserted through the catalog in one transaction) and one real job,
    the newest: `ls` lists the newest 50, oldest first, and says on stderr how many
    jobs there are and how to list more; --limit N and --all list N and all; --json is
    limited the same way; the real job's snapshot, wait and pins are its own."""
    from snapstate.serializers._home import open_store
    from snapstate.serializers._sql._jobs import insert_job

    store = tmp_path / "store"
    home = open_store(str(store), create=True)
    try:
        start = time.time() - 100_000
        with home.catalog._unsynced(), home.catalog._tx() as db:
            for i in range(5000):
                insert_job(
                    db, home.catalog.sealer, home.directory, f"job-{i:04d}",
                    {"path": "/agents/a.py"}, [], None, None, start + i,
                )  # fmt: skip
    finally:
        home.close()
    real = snaprun("run", "--store", store, "--job", "zz", AGENT, cwd=tmp_path)
    assert real.returncode == 3, real.stderr
    listed = snaprun("ls", "--store", store, cwd=tmp_path, env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    jobs = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert jobs == [f"job-{i:04d}" for i in range(4951, 5000)] + ["zz"]
    assert "showing the newest 50 of 5001 jobs" in listed.stderr
    assert "--limit N" in listed.stderr and "--all" in listed.stderr
    few = snaprun("ls", "--store", store, "--limit", "2", cwd=tmp_path)
    assert [line.split()[0] for line in few.stdout.splitlines()[1:]] == ["job-4999", "zz"]
    every = snaprun("ls", "--store", store, "--all", cwd=tmp_path)
    assert len(every.stdout.splitlines()) == 5002 and "showing" not in every.stderr
    records = json.loads(snaprun("ls", "--store", store, "--json", cwd=tmp_path).stdout)
    assert len(records) == 50 and records[-1]["job"] == "zz"
    mine = records[-1]
    assert mine["snapshots"] == 2 and mine["status"] == "waiting"
    assert mine["wait"]["kind"] == "approval" and mine["wait"]["approval"] == _approval(
        store, tmp_path, "zz"
    )
    assert mine["pins"]["model"].startswith("gpt ") and mine["snapshot"]["seq"] == 2
    other = records[0]
    assert other["snapshots"] == 0 and other["wait"] is None and other["pins"] == {}
    assert other["status"] == "running" or other["status"] == "interrupted"
    assert not os.path.exists(store / "catalog.db-journal")


def test_an_empty_optional_column_gives_its_room_away(monkeypatch):
    """`effects`' NOTE column (optional) is left out when no row has a note, so the
    CALL column keeps that room at 80 columns; a NOTE anywhere brings it back, and
    --wide always shows it."""
    from snapstate.runtime._cli._table import Column, render

    monkeypatch.setenv("COLUMNS", "80")
    columns = [
        Column("#", lambda r: r[0], keep=True),
        Column("CALL", lambda r: r[1], flex=True, min_width=16),
        Column("NOTE", lambda r: r[2], flex=True, optional=True),
    ]
    rows = [("1", "place_order(vendor='acme', amount=4200)", ""), ("2", "send_email()", "")]
    lines = render(columns, rows, wide=False)
    assert lines[0].split() == ["#", "CALL"]
    assert "place_order(vendor='acme', amount=4200)" in lines[1]
    noted = render(columns, [*rows, ("3", "x()", "retried")], wide=False)
    assert noted[0].split() == ["#", "CALL", "NOTE"] and noted[3].endswith("retried")
    assert render(columns, rows, wide=True)[0].split() == ["#", "CALL", "NOTE"]


def test_a_recorded_request_is_named_by_method_path_and_host():
    """record_http's rows read `POST /v1/chat/completions HOST` in `effects` (what a cut
    cell keeps first), an @effect as its call; the full arguments stay in --json."""
    from snapstate.runtime._cli._reading import _call_cell

    http = {
        "name": "http.POST",
        "args": "https://api.openai.com/v1/chat/completions?x=1, 439 bytes, sha256 b7daf600d45a",
        "status": 200,
    }
    assert _call_cell(http) == "POST /v1/chat/completions?… api.openai.com"
    plain = {"name": "agent.place_order", "args": "vendor='acme'", "status": None}
    assert _call_cell(plain) == "place_order(vendor='acme')"
