"""`snaprun debug JOB[@SEQ]` (docs/debugging.md): pdb in a restored snapshot, nothing
sent, nothing written.

Each session is a real `snaprun debug` process with pdb's commands on its stdin (an
exec'd interpreter: the fork server gives its children no stdin), against a job of
tests/agents/dbg_orders.py whose effects reach a counting provider on 127.0.0.1:

* pdb opens in the agent's innermost frame right after snapshot(): its locals are the
  real values, `up` reaches main() and stops there ("Oldest frame"), `down` comes back;
* `next` over an effect the ledger recorded gets the recorded result and the provider
  sees no request; an effect the job never recorded raises EffectRefused into the
  agent at the call (not sent) and the session goes on to a breakpoint after it;
* the store (catalog, snapshot files, keys) and the agent's tracked file are
  byte-identical afterwards;
* `--until LABEL|SEQ` runs forward and stops at that later snapshot() call, and says
  so when the run ends first (exit 1);
* a done job is debugged at an earlier snapshot; PYTHONBREAKPOINT=0 runs it without
  stopping; the end of pdb's input in the middle ends the session cleanly (the agent
  stays paused); a divergence from the ledger ends it (exit 1); a bad reference is
  refused (exit 2) before anything runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, clean_refusal, snaprun
from providers import Provider

AGENT = AGENTS / "dbg_orders.py"


def line(text: str) -> int:
    """The line of the agent's source that holds `text`."""
    return next(i for i, src in enumerate(AGENT.read_text().splitlines(), 1) if text in src)


BREAK_LINE = line("# BREAK HERE")
SNAPSHOT_1, SNAPSHOT_2 = line('snapshot("before-orders")'), line('snapshot("after-first")')
AT_1, AT_2 = f"> {AGENT}({SNAPSHOT_1})work()", f"> {AGENT}({SNAPSHOT_2})work()"
IN_MAIN = f"{AGENT}({line('work(notes)')})main()"
ORDER_1 = f"> {AGENT}({line('first = order_keyed')})work()"
JOURNAL_1 = f"> {AGENT}({line('first {first}')})work()"
REFUSED = "refused: the recorded history ends before effect 2 (shop.order_keyed at"


class CountingProvider(Provider):
    """tests/providers.Provider that also counts every request it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def order(self, path, order, key):
        with self.lock:
            self.requests += 1
        return super().order(path, order, key)

    def find(self, path):
        with self.lock:
            self.requests += 1
        return super().find(path)

    def seen(self) -> tuple[int, dict[str, int]]:
        with self.lock:
            return self.requests, dict(self.deliveries)


def files_of(*roots: Path) -> dict[str, str]:
    """Every file under the roots (or the root file itself) -> its sha256; but SQLite's
    shared-memory index (catalog.db-shm), which every reader of a WAL database updates
    (`snaprun ls` too): it holds no data."""
    digests = {}
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            if path.name.endswith("-shm"):
                continue
            digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def debug(tmp_path: Path, *args: str, commands: str = "", env: dict | None = None):
    """`snaprun debug --store STORE ARGS...` with `commands` on its stdin."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name in ("SNAPSTATE_FAULT", "PYTHONBREAKPOINT"):
        full_env.pop(name, None)
    full_env.update(env or {})
    return subprocess.run(
        [SNAPRUN, "debug", "--store", str(tmp_path / "store"), *args],
        input=commands,
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def start_job(tmp_path: Path, provider: Provider, *, crash: bool) -> dict:
    """Job `j`: snapshot 1, effect 1 (action-0) sent, snapshot 2; with `crash` the run
    is SIGKILLed before effect 2 (action-1) is recorded, else it is done."""
    env = {"PROVIDER_URL": provider.url, "PROVIDER_MODE": "keyed"}
    run = snaprun(
        "run",
        "--store",
        tmp_path / "store",
        "--job",
        "j",
        AGENT,
        cwd=tmp_path,
        env=env,
        fault="effect-before-prepare:2" if crash else None,
    )
    assert run.returncode == (-9 if crash else 0), run.stderr
    return env


@pytest.mark.smoke
def test_debug_walks_the_restored_stack_and_sends_nothing(tmp_path):
    """Scripted pdb at snapshot 1 of a job killed before effect 2 was recorded: locals
    of the innermost frame and of its caller, `next` past the recorded effect (its
    recorded id, no request), `continue` to a breakpoint past the unrecorded effect
    (EffectRefused raised and caught by the agent, nothing sent), more commands, the
    end of main(); then the store and the agent's journal file are byte-identical."""
    with CountingProvider() as provider:
        env = start_job(tmp_path, provider, crash=True)
        before = files_of(tmp_path / "store", tmp_path / "journal.txt")
        seen = provider.seen()
        assert seen == (1, {"action-0": 1})
        commands = "\n".join(
            [
                "p count",
                "p notes",
                "up",
                "p budget",
                "up",
                "down",
                "p count + 1",
                "next",
                "next",
                "p first",
                f"break {AGENT}:{BREAK_LINE}",
                "continue",
                "p second",
                "p (count, first)",
                "continue",
            ]
        )
        session = debug(tmp_path, "j@1", commands=commands + "\n", env=env)
        assert session.returncode == 0, session.stderr
        out = session.stdout
        assert "Traceback" not in session.stderr, session.stderr
        # At snapshot 1: the innermost frame, right after its snapshot() call.
        assert out.startswith(f'{AT_1}\n-> snapshot("before-orders")\n'), out
        prompts = out.split("(Pdb) ")
        assert prompts[1] == "1\n" and prompts[2] == "['begun']\n"
        assert prompts[3].startswith(f"> {IN_MAIN}") and prompts[4] == "42\n"
        assert prompts[5] == "*** Oldest frame\n"  # up stops at main(), not snapstate's hub
        assert prompts[6].startswith(AT_1) and prompts[7] == "2\n"
        # next, next: past the recorded effect; its result is the recorded one.
        assert prompts[8].startswith(ORDER_1) and prompts[9].startswith(JOURNAL_1)
        assert prompts[10] == "'po-1'\n"
        assert prompts[11].startswith(f"Breakpoint 1 at {AGENT}:{BREAK_LINE}")
        # continue: the agent prints, takes snapshot 2 (nothing written), is refused
        # effect 2 and catches it; pdb stops at the breakpoint after it.
        assert prompts[12].startswith("first po-1\n" + REFUSED), prompts[12]
        assert "`snaprun debug` sends nothing" in prompts[12]
        assert f"> {AGENT}({BREAK_LINE})work()" in prompts[12]
        assert prompts[13] == "None\n" and prompts[14] == "(1, 'po-1')\n"
        assert prompts[15] == "done po-1 None 42\n"
        assert "main() returned ['po-1', None]; nothing was sent or written" in session.stderr
        assert provider.seen() == seen  # no request reached the provider
    assert files_of(tmp_path / "store", tmp_path / "journal.txt") == before


def test_until_runs_forward_to_a_later_snapshot(tmp_path):
    """--until LABEL and --until SEQ: no stop at snapshot 1, pdb opens right after
    snapshot 2's snapshot() call with the values the run computed on the way, and
    `next` over the unrecorded effect shows EffectRefused and stays in pdb; an
    --until the run never reaches says so (exit 1); one not after the snapshot is a
    usage error (exit 2). Nothing is sent."""
    with CountingProvider() as provider:
        env = start_job(tmp_path, provider, crash=True)
        seen = provider.seen()
        for until in ("after-first", "2"):
            session = debug(
                tmp_path,
                "j@1",
                "--until",
                until,
                commands="p first\nwhere\nnext\nnext\nnext\np 'still here'\nq\n",
                env=env,
            )
            assert session.returncode == 0, session.stderr
            out = session.stdout
            assert out.startswith(f'first po-1\n{AT_2}\n-> snapshot("after-first")\n'), out
            prompts = out.split("(Pdb) ")
            assert prompts[1] == "'po-1'\n"
            assert IN_MAIN in prompts[2] and "runtime" not in prompts[2]
            # next over the unrecorded effect: pdb shows the refusal, the session goes on
            assert prompts[4].startswith(f"> {AGENT}({line('second = order_keyed')})work()")
            assert prompts[5].startswith("snapstate.EffectRefused: " + REFUSED[len("refused: ") :])
            assert prompts[6] == "'still here'\n" and prompts[7] == ""
            assert "the debugger was quit" in session.stderr
        missing = debug(tmp_path, "j@1", "--until", "no-such-label", env=env)
        assert missing.returncode == 1, missing.stderr
        assert "--until no-such-label was not reached (main() returned ['po-1', None] first)" in (
            missing.stderr
        )
        assert "(Pdb)" not in missing.stdout
        assert provider.seen() == seen
    early = snaprun("debug", "--store", tmp_path / "store", "--until", "1", "j@1", cwd=tmp_path)
    clean_refusal(early, "--until 1 is not after snapshot 1")


def test_done_job_at_an_earlier_snapshot_and_breakpoint_off(tmp_path):
    """A done job debugged at snapshot 1: with PYTHONBREAKPOINT=0 it runs to its end
    without a prompt, both effects served from the ledger (their recorded ids, no
    request); PYTHONBREAKPOINT naming a callable that takes `frame=` is called with the
    agent's innermost frame; with pdb, `p` at snapshot 2 shows the recorded first id."""
    with CountingProvider() as provider:
        env = start_job(tmp_path, provider, crash=False)
        seen = provider.seen()
        assert seen == (2, {"action-0": 1, "action-1": 1})
        quiet = debug(tmp_path, "j@1", env={**env, "PYTHONBREAKPOINT": "0"})
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stdout == "first po-1\ndone po-1 po-2 42\n"
        assert "main() returned ['po-1', 'po-2']; nothing was sent or written" in quiet.stderr
        hooked = debug(
            tmp_path,
            "j@1",
            env={**env, "PYTHONBREAKPOINT": "dbg_hook.stop", "PYTHONPATH": str(AGENTS)},
        )
        assert hooked.returncode == 0, hooked.stderr
        assert hooked.stdout == f"hook: work {SNAPSHOT_1} 1\nfirst po-1\ndone po-1 po-2 42\n"
        latest = debug(tmp_path, "j", commands="p first\nc\n", env=env)  # the latest: 2
        assert latest.returncode == 0, latest.stderr
        assert latest.stdout.startswith(AT_2), latest.stdout
        assert "(Pdb) 'po-1'\n(Pdb) done po-1 po-2 42\n" in latest.stdout
        assert provider.seen() == seen


def test_end_of_input_midway_ends_cleanly_and_a_divergence_ends_the_session(tmp_path):
    """pdb's input ends after one `next`: the session ends there (exit 0), the agent
    stays paused (nothing it would print later is printed), no traceback. Run with
    code that calls effect 1 with other arguments (AMOUNT_BIAS): the session ends at
    the divergence (exit 1), nothing sent, no pdb command after it runs."""
    with CountingProvider() as provider:
        env = start_job(tmp_path, provider, crash=True)
        seen = provider.seen()
        cut = debug(tmp_path, "j@1", commands="next\n", env=env)
        assert cut.returncode == 0, cut.stderr
        assert cut.stdout.count("(Pdb) ") == 2 and "first po-1" not in cut.stdout
        assert "Traceback" not in cut.stderr
        assert "ended: the debugger was quit (q, or the end of its input)" in cut.stderr
        diverged = debug(
            tmp_path, "j@1", commands="next\nnext\np 'after'\n", env={**env, "AMOUNT_BIAS": "5"}
        )
        assert diverged.returncode == 1, diverged.stderr
        assert "ended: the run diverged from the ledger: effect 1" in diverged.stderr
        assert "shop.order_keyed('action-0', 105)" in diverged.stderr
        assert "'after'" not in diverged.stdout and "Traceback" not in diverged.stderr
        assert provider.seen() == seen


def test_bad_references_are_refused(tmp_path):
    """An unknown snapshot, an unknown job, a bad job id and a PYTHONBREAKPOINT that
    names nothing importable: `snaprun: error:`, exit 2, nothing run."""
    with CountingProvider() as provider:
        start_job(tmp_path, provider, crash=True)
    store = tmp_path / "store"
    clean_refusal(
        snaprun("debug", "--store", store, "j@9", cwd=tmp_path), "job j has no snapshot 9"
    )
    clean_refusal(snaprun("debug", "--store", store, "nojob", cwd=tmp_path), "no job 'nojob'")
    clean_refusal(snaprun("debug", "--store", store, "../j@1", cwd=tmp_path))
    clean_refusal(
        snaprun(
            "debug",
            "--store",
            store,
            "j@1",
            cwd=tmp_path,
            env={"PYTHONBREAKPOINT": "no_such_module.set_trace"},
        ),
        "PYTHONBREAKPOINT='no_such_module.set_trace'",
    )
