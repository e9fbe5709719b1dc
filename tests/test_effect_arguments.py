"""Effect arguments and results go through snapstate's pickler (runtime._effects): an SDK
client passed to an @effect is digested by its configuration (credentials as a fixed
marker), so a call re-executed after a crash matches its ledger row in the resumed
process; a recorded result keeps its credentials sealed and comes back whole; an
argument that cannot be saved is refused naming it and the fix."""

from __future__ import annotations

import textwrap
import threading

import pytest
from helpers import snaprun

from snapstate.runtime import _effect_args

openai = pytest.importorskip("openai", reason="the integrations extra is not installed")
httpx = pytest.importorskip("httpx")

AGENT = textwrap.dedent("""
    import dataclasses
    import os
    import httpx
    import openai
    from snapstate import effect, snapshot


    @dataclasses.dataclass
    class Settings:
        region: str
        tags: tuple


    SETTINGS = Settings("eu", ("a", "b"))   # an object of the agent module
    CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.txt")


    @effect(kind="write")
    def ask(client, prompt, settings):
        with open(CALLS, "a") as f:          # the call's real side effect
            f.write(prompt + "\\n")
        request = httpx.Request("GET", "http://127.0.0.1:9/x",
                                headers={"Authorization": "Bearer ARG-SECRET-11"})
        return httpx.Response(200, content=prompt.upper().encode(), request=request)


    def main():
        client = openai.OpenAI(api_key="sk-arg-SECRET-12345678",
                               base_url="http://127.0.0.1:9/v1", max_retries=4)
        snapshot("before")
        response = ask(client, "hi", SETTINGS)
        print(response.status_code, response.text, flush=True)
        client.close()
        return 1
""")


def test_sdk_client_argument_matches_its_ledger_row_after_a_crash(tmp_path):
    """Killed right after ask(client, "hi", SETTINGS) is recorded (before any later
    snapshot) and resumed under another hash seed: the re-executed call, given an SDK
    client and an object of the agent's module, has the same digest (no
    divergence) and is served from the ledger (the side effect happened once) as the
    recorded httpx.Response; no file of the store holds its request's Authorization
    header or the client's API key in clear."""
    (tmp_path / "agent.py").write_text(AGENT)
    killed = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        tmp_path / "agent.py",
        cwd=tmp_path,
        fault="effect-after-confirm:1",
        env={"PYTHONHASHSEED": "1"},
    )
    assert killed.returncode == -9, killed.stderr
    resumed = snaprun(
        "resume", "--store", tmp_path / "s", "job", cwd=tmp_path, env={"PYTHONHASHSEED": "2"}
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "200 HI\n"
    assert (tmp_path / "calls.txt").read_text() == "hi\n"
    leaked = [
        p.name
        for p in (tmp_path / "s").rglob("*")
        if p.is_file()
        and (b"ARG-SECRET-11" in p.read_bytes() or b"sk-arg-SECRET" in p.read_bytes())
    ]
    assert leaked == []


@pytest.mark.smoke
def test_argument_digest_ignores_credentials_and_keeps_configuration():
    """Two clients differing only in their API key digest alike (a key is never part of
    the digest, as Secret counts by name); a different configuration digests apart."""
    a = openai.OpenAI(api_key="sk-one-12345678", base_url="http://127.0.0.1:9/v1")
    b = openai.OpenAI(api_key="sk-two-87654321", base_url="http://127.0.0.1:9/v1")
    c = openai.OpenAI(api_key="sk-one-12345678", base_url="http://127.0.0.1:8/v1")
    try:
        digests = [_effect_args.args_digest("ask", (x, "hi"), {}) for x in (a, b, c)]
    finally:
        for x in (a, b, c):
            x.close()
    assert digests[0] == digests[1] != digests[2]


def test_unsaveable_argument_is_refused_naming_it_and_the_fix():
    """A held lock passed as an effect's keyword argument cannot be saved, so it cannot
    identify the call: refused (before the call runs) naming the argument and saying to
    use it from a global or closure instead."""
    lock = threading.Lock()
    with lock:
        with pytest.raises(TypeError) as caught:
            _effect_args.args_digest("ask", ("hi",), {"guard": lock})
    message = str(caught.value)
    assert "effect ask: its argument 'guard'" in message and "global or a closure" in message
