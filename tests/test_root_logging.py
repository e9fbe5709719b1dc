"""The root logger's configuration the job made is saved with the job (runtime._rootlog):
logging configured at import time is not doubled after a resume, and logging
configured in main() is not lost (tests/test_review_adapters.py covers basicConfig in
main() killed after its first snapshot)."""

from __future__ import annotations

import textwrap

from helpers import snaprun

AGENT = textwrap.dedent("""
    import logging
    import sys
    from snapstate import snapshot

    logging.basicConfig(level=logging.DEBUG, filename="import.log", format="%(message)s")
    log = logging.getLogger("agent")


    def main():
        console = logging.StreamHandler(sys.stdout)       # added in main(), on the root
        console.setFormatter(logging.Formatter("> %(message)s"))
        logging.getLogger().addHandler(console)
        for step in range(2):
            log.debug("step %d", step)
            snapshot(f"s{step}")
        log.debug("done")
        print(len(logging.getLogger().handlers), logging.getLogger().level)
        return 1
""")


def test_import_time_and_main_root_handlers_each_log_once_after_a_resume(tmp_path):
    """basicConfig at import time (the fresh import at a resume configures it again)
    plus a handler added in main(): killed after each snapshot and resumed, the log
    file and stdout equal an uninterrupted run's: every line once, the root logger
    with exactly its two handlers and level DEBUG."""
    (tmp_path / "agent.py").write_text(AGENT)
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    base = snaprun(
        "run", "--store", tmp_path / "s", "--job", "base", tmp_path / "agent.py", cwd=base_dir
    )
    assert base.returncode == 0, base.stderr
    assert base.stdout == "> step 0\n> step 1\n> done\n2 10\n"
    expected = (base_dir / "import.log").read_text()
    assert expected == "step 0\nstep 1\ndone\n"
    for k in (1, 2):
        out = tmp_path / f"k{k}"
        out.mkdir()
        killed = snaprun(
            "run",
            "--store",
            tmp_path / "s",
            "--job",
            f"k{k}",
            tmp_path / "agent.py",
            cwd=out,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9, killed.stderr
        resumed = snaprun("resume", "--store", tmp_path / "s", f"k{k}", cwd=out)
        assert resumed.returncode == 0, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"stdout diverged after {k}"
        assert (out / "import.log").read_text() == expected, f"log diverged after {k}"
