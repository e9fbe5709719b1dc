"""What the examples' demo.py scripts share: start the example's servers, run `snaprun`
in subprocesses on a store of the demo's own, and narrate every command so that a reader
can type it.

    python examples/<name>/demo.py [--dir DIR] [--report FILE]

--dir      the folder for the demo's store and inputs (default: a new temporary folder,
           kept, so `SNAPSTATE_STORE=DIR/store snaprun ls` shows the jobs afterwards)
--report   write what the demo observed (exit codes, the providers' counts, the ledger)
           as JSON to FILE (the tests read it)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent


def shown(path: Path | str) -> str:
    """A path as the reader would type it: relative to the working directory if inside."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Demo:
    def __init__(self, name: str, doc: str) -> None:
        parser = argparse.ArgumentParser(
            description=" ".join(doc.strip().split("\n\n")[0].split()),
            epilog="examples/README.md walks through it.",
        )
        parser.add_argument(
            "--dir", help="folder for the demo's store (default: a new temp folder)"
        )
        parser.add_argument(
            "--report", metavar="FILE", help="write what the demo observed as JSON to FILE"
        )
        args = parser.parse_args()
        self.name = name
        self.folder = EXAMPLES / name
        self.agent = self.folder / "agent.py"
        self.dir = Path(args.dir or tempfile.mkdtemp(prefix=f"snapstate-{name}-")).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = self.dir / "store"
        if self.store.exists():
            parser.error(f"{self.store} exists already: give --dir a new folder")
        self.report_path = args.report
        self.report: dict[str, Any] = {}
        self.env = dict(os.environ, SNAPSTATE_STORE=str(self.store), PYTHONUNBUFFERED="1")
        for seam in ("SNAPSTATE_FAULT", "SNAPSTATE_CLOCK_OFFSET", "SNAPSTATE_HOME"):
            self.env.pop(seam, None)
        self.servers: subprocess.Popen[str] | None = None
        self.snaprun_cmd = _snaprun_command()
        self.say(f"A fresh store for this demo: {shown(self.store)}")
        self.shell(f"export SNAPSTATE_STORE={shlex.quote(shown(self.store))}")

    # -------------------------------------------------------------- narration
    def say(self, text: str) -> None:
        print()
        print(textwrap.fill(" ".join(text.split()), width=78))
        sys.stdout.flush()

    def shell(self, line: str) -> None:
        print("  $ " + line.replace("\n", "\n    "), flush=True)

    def output(self, text: str) -> None:
        for line in text.rstrip("\n").splitlines():
            print(f"    {line}")
        sys.stdout.flush()

    # -------------------------------------------------------------- servers
    def start_servers(self, *args: str) -> dict[str, str]:
        """Start servers.py, read its `NAME=URL` lines up to `ready`, export them."""
        script = self.folder / "servers.py"
        self.shell(" ".join([f"python {shown(script)}", *args, "&"]))
        self.servers = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        urls: dict[str, str] = {}
        assert self.servers.stdout is not None
        for line in self.servers.stdout:
            line = line.strip()
            self.output(line)
            if line == "ready":
                break
            name, _, value = line.partition("=")
            urls[name] = value
        else:
            raise SystemExit(f"{shown(script)} ended before printing 'ready'")
        self.env.update(urls)
        self.shell("export " + " ".join(f"{k}={v}" for k, v in urls.items()))
        return urls

    def stats(self, variable: str) -> dict[str, Any]:
        """What the provider at $variable counted (its GET /_stats)."""
        with urllib.request.urlopen(self.env[variable] + "/_stats", timeout=10) as reply:
            result: dict[str, Any] = json.load(reply)
            return result

    # -------------------------------------------------------------- snaprun
    def _argv(self, args: tuple[str | Path, ...]) -> tuple[list[str], str]:
        argv = [str(a) for a in args]
        words = [shown(a) if isinstance(a, Path) else a for a in args]
        return argv, " ".join(shlex.quote(str(w)) for w in words)

    def snaprun(
        self,
        *args: str | Path,
        env: dict[str, str] | None = None,
        expect: int = 0,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `snaprun ARGS`, narrated, and show what it printed and its exit code; stop
        the demo if the exit code is not `expect` (-9: killed by SIGKILL). `stdin` is
        the command's input (shown as a here-document)."""
        argv, line = self._argv(args)
        prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
        if stdin is None:
            self.shell(f"{prefix}snaprun {line}")
        else:
            self.shell(f"{prefix}snaprun {line} <<'EOF'\n{stdin}EOF")
        done = subprocess.run(  # one pipe for both: the agent's lines and snaprun's in order
            self.snaprun_cmd + argv,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        self.output(done.stdout)
        print(f"    (exit {done.returncode})", flush=True)
        self._expect(done.returncode, expect)
        return done

    def _expect(self, code: int, expect: int) -> None:
        if code != expect:
            raise SystemExit(f"demo {self.name}: expected exit {expect}, got {code}: stopping")

    def snaprun_json(self, *args: str | Path) -> Any:
        """`snaprun ARGS --json`, for the report: not narrated."""
        done = subprocess.run(
            self.snaprun_cmd + [str(a) for a in args] + ["--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise SystemExit(f"snaprun {' '.join(map(str, args))} --json failed: {done.stderr}")
        return json.loads(done.stdout)

    def start_snaprun(self, *args: str | Path) -> subprocess.Popen[str]:
        """Start `snaprun ARGS` in the background (the demo kills it)."""
        argv, line = self._argv(args)
        self.shell(f"snaprun {line} &")
        return subprocess.Popen(
            self.snaprun_cmd + argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def kill9(self, proc: subprocess.Popen[str]) -> None:
        self.shell(f"kill -9 {proc.pid}")
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        self.output(out)
        print(f"    (killed: exit {proc.returncode})", flush=True)
        self._expect(proc.returncode, -signal.SIGKILL)

    def wait_for(self, what: str, check: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.05)

    # -------------------------------------------------------------- the end
    def finish(self) -> None:
        if self.servers is not None:
            self.servers.send_signal(signal.SIGTERM)
            self.servers.wait(timeout=30)
        self.say(
            f"The store stays in {shown(self.store)}: look around with "
            f"`SNAPSTATE_STORE={shown(self.store)} snaprun ls`, or delete it."
        )

    def __enter__(self) -> Demo:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the servers if the demo stopped early; write the report either way."""
        if self.servers is not None and self.servers.poll() is None:
            self.servers.kill()
            self.servers.wait()
        if self.servers is not None and self.servers.stdout is not None:
            self.servers.stdout.close()
        if self.report_path:
            Path(self.report_path).write_text(json.dumps(self.report, indent=1))


def _snaprun_command() -> list[str]:
    """The `snaprun` of this interpreter's environment (its console script), else the
    module."""
    beside = Path(sys.executable).parent / "snaprun"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("snaprun")
    return [found] if found else [sys.executable, "-m", "snapstate.runtime._cli"]
