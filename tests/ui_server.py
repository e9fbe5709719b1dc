"""`snaprun ui` for the dashboard's tests (tests/test_ui.py, tests/test_ui_browser.py):
a store of real jobs made by real `snaprun run` processes, and a real `snaprun ui`
subprocess on a free port of 127.0.0.1 whose printed URL (with its token) the tests
read from its stderr."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import AGENTS, SNAPRUN, snaprun

__all__ = ["UiServer", "XSS_LABEL", "make_store", "start_ui"]

UI_AGENT = AGENTS / "ui_agent.py"
# A label that would run script if the dashboard put it in a page as markup.
XSS_LABEL = '<script>window.__xss = 1; alert("xss")</script><img src=x onerror=alert(2)>'


def make_store(root: Path) -> Path:
    """A store with three jobs of tests/agents/ui_agent.py: `publisher` and `xss` (its
    label is XSS_LABEL) waiting for approval "publish", and `parked`, killed right after
    sending its effect 1 and resumed once, so it waits parked on that ambiguous effect."""
    store = root / "store"
    for job, label in (("publisher", "first steps"), ("xss", XSS_LABEL)):
        run = snaprun("run", "--store", store, "--job", job, UI_AGENT, label, cwd=root)
        assert run.returncode == 3, run.stderr  # waiting for the approval
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "parked",
        UI_AGENT,
        "parked",
        cwd=root,
        fault="effect-after-send:1",
    )
    assert killed.returncode == -9, killed.stderr
    parked = snaprun("resume", "--store", store, "parked", cwd=root)
    assert parked.returncode == 4, parked.stderr
    return store


@dataclass
class UiServer:
    proc: subprocess.Popen[bytes]
    url: str  # as printed: http://127.0.0.1:PORT/?token=...
    log: Path

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("?token=", 1)[1]

    def stderr(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        """Ctrl-C, as a person stops it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_ui(store: Path, *args: str, cwd: Path) -> UiServer:
    """`snaprun --store STORE ui --port 0 ARGS...` in a new process, once it printed its
    URL (it listens before it prints)."""
    log = cwd / f"ui-{time.monotonic_ns()}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [SNAPRUN, "--store", str(store), "ui", "--port", "0", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"open (http://\S+/\?token=\S+)", log.read_text())
        if found:
            return UiServer(proc, found.group(1), log)
        if proc.poll() is not None:
            raise AssertionError(f"snaprun ui exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"snaprun ui printed no URL: {log.read_text()}")
