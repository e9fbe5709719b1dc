"""The framework matrix: small agent programs built on the agent frameworks people use
(agents/frameworks/fw_*.py: pydantic-ai sync and async, openai-agents, smolagents,
langgraph, llama-index, instructor, litellm, mcp, jinja2, tenacity, openai streaming),
each holding the framework's objects (agents, graphs, checkpointers, chat engines,
clients, templates, retry controllers, exhausted streams) across its snapshot() calls.

Crash property, per agent (real subprocesses, the stub provider of
tests/framework_stub.py on 127.0.0.1): a plain `snaprun run` is compared with

  - a chain: killed after snapshot 1, resumed and killed again after snapshot 2,
    resumed again to the end (by default);
  - for each snapshot k, a run SIGKILLed right after snapshot k then `snaprun resume`d
    to the end in a new process (a long sweep: --run-slow; `.ci/run` runs it on one
    interpreter);

stdout (killed + resumed) is the plain run's, and the requests the stub saw (method,
path, JSON body, Authorization header) are the plain run's, in order.

Secrets: the API key (OPENAI_API_KEY, a distinctive value) is in no file of any store
of the matrix: neither in the raw bytes nor in a snapshot's decompressed body.

An agent whose framework is not installed is skipped (its distribution looked up, not
imported: see _missing); the whole module when none is. The runs
are kept offline: no telemetry, no tracing export, no model-cost or tokenizer download
(see _env).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
from chunked import snapshot_seqs
from framework_stub import FrameworkStub
from helpers import AGENTS, snaprun
from store_bytes import snapshot_body, zstd_frames
from stored import outsider_chunks

FRAMEWORKS = AGENTS / "frameworks"
KEY = "sk-fw-matrix-SECRET-6c1e"
# fw_mcp's request-state key (at least 32 characters), from the environment too
MCP_KEY = "mcp-state-SECRET-5b7d0f3a9e214c68b1d2"
JOB = "job"

# agent -> (the modules it needs, the snapshots it takes)
# agent -> (the distributions it needs, the snapshots it takes). Distributions, not
# modules: tests/agents is itself importable as `agents`, the OpenAI Agents SDK's name.
MATRIX: dict[str, tuple[tuple[str, ...], int]] = {
    "fw_pydantic_ai": (("pydantic-ai-slim", "openai"), 3),
    "fw_pydantic_ai_async": (("pydantic-ai-slim", "openai"), 3),
    "fw_openai_agents": (("openai-agents", "openai"), 3),
    "fw_smolagents": (("smolagents", "openai"), 3),
    "fw_langgraph": (("langgraph", "langchain-openai"), 3),
    "fw_llama_index": (("llama-index-core", "llama-index-llms-openai"), 3),
    "fw_instructor": (("instructor", "openai"), 3),
    "fw_litellm": (("litellm",), 3),
    "fw_mcp": (("mcp", "openai"), 2),
    "fw_jinja2": (("jinja2", "openai"), 3),
    "fw_tenacity": (("tenacity", "openai"), 3),
    "fw_openai_stream": (("openai",), 3),
}

# Keeps every framework offline and quiet: no telemetry or tracing export, no download.
OFFLINE = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
    "DO_NOT_TRACK": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "OTEL_SDK_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="module")
def stub():
    server = FrameworkStub().start()
    yield server
    server.stop()


def _nltk_data(tmp: Path) -> Path:
    """An NLTK data folder in which llama-index's import finds what it looks for
    (tokenizers/punkt, corpora/stopwords) instead of downloading punkt_tab."""
    folder = tmp / "nltk_data"
    (folder / "tokenizers" / "punkt").mkdir(parents=True, exist_ok=True)
    (folder / "corpora" / "stopwords").mkdir(parents=True, exist_ok=True)
    try:
        spec = importlib.util.find_spec("llama_index.core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "_static" / "nltk_cache" / "corpora" / "stopwords"
        english = bundled / "english"
        if english.exists():
            (folder / "corpora" / "stopwords" / "english").write_bytes(english.read_bytes())
    return folder


def _env(stub, tmp: Path) -> dict:
    return {
        "LLM_URL": stub.url,
        "OPENAI_API_KEY": KEY,
        "MCP_STATE_KEY": MCP_KEY,
        "NLTK_DATA": str(_nltk_data(tmp)),
        **OFFLINE,
    }


def _seen(requests: list[dict]) -> list[tuple]:
    """What must agree between runs: method, path, JSON body, credentials."""
    return [(r["method"], r["path"], r["body"], r["authorization"]) for r in requests]


def _describe(run) -> str:
    """The first line of snaprun's error (or the stderr's last lines)."""
    for line in run.stderr.splitlines():
        if line.startswith("snaprun: ") and ("failed" in line or "error" in line):
            return line
    return "\n".join(run.stderr.splitlines()[-5:])


def _missing(distributions: tuple[str, ...]) -> str | None:
    """The first of the distributions that is not installed. Looked up, not imported:
    importing llama-index or litellm in the test process would set environment
    variables (TIKTOKEN_CACHE_DIR...) every snaprun child then inherits, and try
    downloads."""
    for name in distributions:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return name
    return None


if all(_missing(distributions) for distributions, _ in MATRIX.values()):
    pytest.skip(
        "no agent framework is installed: the matrix runs in an environment of its own "
        '(pip install -e ".[test,frameworks]"; see docs/testing.md, "The framework matrix")',
        allow_module_level=True,
    )


def _runs(name: str, stub, tmp: Path, *, every_kill: bool) -> dict:
    """The runs of one agent, each with the requests the stub saw while it ran: the
    plain run, then either the chain (kill after 1, resume killed after 2, resume) or,
    every_kill, each kill-after-snapshot-k + resume."""
    snapshots = MATRIX[name][1]
    agent = FRAMEWORKS / f"{name}.py"
    env = _env(stub, tmp)

    def run(*args, fault=None):
        result = snaprun(*args, cwd=tmp, env=env, fault=fault)
        return result, _seen(stub.take())

    stub.take()
    runs: dict = {"stores": []}
    store = tmp / "plain"
    runs["plain"] = run("run", "--store", store, "--job", JOB, agent)
    runs["plain_files"] = len(snapshot_seqs(store, JOB))
    runs["stores"].append(store)
    if every_kill:
        for k in range(1, snapshots + 1):
            store = tmp / f"kill{k}"
            killed = run("run", "--store", store, "--job", JOB, agent, fault=f"after-snapshot:{k}")
            files = len(snapshot_seqs(store, JOB))
            resumed = run("resume", "--store", store, JOB)
            runs[k] = (killed, files, resumed)
            runs["stores"].append(store)
        return runs
    store = tmp / "chain"
    first = run("run", "--store", store, "--job", JOB, agent, fault="after-snapshot:1")
    second = run("resume", "--store", store, JOB, fault="after-snapshot:2")
    files = len(snapshot_seqs(store, JOB))
    third = run("resume", "--store", store, JOB)
    runs["chain"] = (first, second, files, third)
    runs["stores"].append(store)
    return runs


def _check_plain(runs: dict, snapshots: int) -> list[str]:
    plain, seen = runs["plain"]
    if plain.returncode != 0:
        return [f"plain run: exit {plain.returncode}: {_describe(plain)}"]
    problems = []
    if not seen:
        problems.append("plain run: the agent sent no request to the stub")
    if any(s[3] != f"Bearer {KEY}" for s in seen):
        problems.append("plain run: a request without the key from OPENAI_API_KEY")
    heads = [line.split(" ", 1)[0] for line in plain.stdout.splitlines()]
    if heads != [*(str(turn) for turn in range(1, snapshots + 1)), "done"]:
        problems.append(f"plain run: unexpected stdout {plain.stdout!r}")
    if runs["plain_files"] != snapshots:
        problems.append(f"plain run: {runs['plain_files']} snapshot files, not {snapshots}")
    return problems


def _check_kill(runs: dict, k: int) -> list[str]:
    plain, plain_seen = runs["plain"]
    (killed, seen_killed), files, (resumed, seen_resumed) = runs[k]
    where = f"kill after snapshot {k}"
    if killed.returncode != -9:
        return [f"{where}: killed run exit {killed.returncode}, not -9: {_describe(killed)}"]
    if resumed.returncode != 0:
        return [f"{where}: resume exit {resumed.returncode}: {_describe(resumed)}"]
    problems = []
    if files != k:
        problems.append(f"{where}: {files} snapshot files, not {k}")
    if f"resumed from snapshot {k}" not in resumed.stderr:
        problems.append(f"{where}: the resume does not say 'resumed from snapshot {k}'")
    if killed.stdout + resumed.stdout != plain.stdout:
        problems.append(
            f"{where}: stdout diverged:\n  plain:   {plain.stdout!r}\n"
            f"  killed:  {killed.stdout!r}\n  resumed: {resumed.stdout!r}"
        )
    split = len(seen_killed)
    if seen_killed != plain_seen[:split]:
        problems.append(f"{where}: requests before the kill differ from the plain run's")
    if seen_resumed != plain_seen[split:]:
        problems.append(
            f"{where}: requests after the resume differ: "
            f"{len(seen_resumed)} sent, {len(plain_seen) - split} expected"
            + _first_difference(seen_resumed, plain_seen[split:])
        )
    return problems


def _check_chain(runs: dict) -> list[str]:
    plain, plain_seen = runs["plain"]
    (first, seen1), (second, seen2), files, (third, seen3) = runs["chain"]
    for what, run, code in (
        ("first run", first, -9),
        ("second run (resumed, killed after 2)", second, -9),
        ("third run (resumed)", third, 0),
    ):
        if run.returncode != code:
            return [f"chain: {what}: exit {run.returncode}, not {code}: {_describe(run)}"]
    problems = []
    if files != 2:
        problems.append(f"chain: {files} snapshot files after the second kill, not 2")
    if "resumed from snapshot 1" not in second.stderr:
        problems.append("chain: the second run does not say 'resumed from snapshot 1'")
    if "resumed from snapshot 2" not in third.stderr:
        problems.append("chain: the third run does not say 'resumed from snapshot 2'")
    if first.stdout + second.stdout + third.stdout != plain.stdout:
        problems.append(
            f"chain: stdout diverged: {first.stdout!r} + {second.stdout!r} + {third.stdout!r}"
        )
    if seen1 + seen2 + seen3 != plain_seen:
        problems.append(
            "chain: requests differ from the plain run's"
            + _first_difference(seen1 + seen2 + seen3, plain_seen)
        )
    return problems


def _first_difference(got: list[tuple], expected: list[tuple]) -> str:
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return f" (first at request {i}: {a!r:.300} != {b!r:.300})"
    return ""


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_framework_agent_survives_a_chain_of_kills(name, stub, tmp_path):
    """One agent: the plain run, and a chain (SIGKILL right after snapshot 1, `snaprun
    resume` killed right after snapshot 2, resumed to the end). Killed + resumed stdout
    and the requests the stub saw (method, path, body, Authorization) are the plain
    run's; the API keys are in no file of either store. Every problem found is reported
    at once (one test per agent: under pytest-xdist the runs of an agent stay in one
    worker)."""
    modules, snapshots = MATRIX[name]
    missing = _missing(modules)
    if missing:
        pytest.skip(f"{missing} is not installed")
    runs = _runs(name, stub, tmp_path, every_kill=False)
    problems = _check_plain(runs, snapshots)
    problems += _check_chain(runs)
    problems += _check_secrets(runs["stores"], snapshots, plain_ok=runs["plain"][0].returncode == 0)
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MATRIX))
def test_framework_agent_survives_a_kill_after_each_snapshot(name, stub, tmp_path):
    """One agent, every crash window after a snapshot: SIGKILL right after snapshot k,
    then `snaprun resume` to the end, for each k; stdout, requests and secrets as in the
    chain test. A long sweep (--run-slow); `.ci/run` runs it on one interpreter."""
    modules, snapshots = MATRIX[name]
    missing = _missing(modules)
    if missing:
        pytest.skip(f"{missing} is not installed")
    runs = _runs(name, stub, tmp_path, every_kill=True)
    problems = _check_plain(runs, snapshots)
    for k in range(1, snapshots + 1):
        problems += _check_kill(runs, k)
    problems += _check_secrets(runs["stores"], snapshots, plain_ok=runs["plain"][0].returncode == 0)
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_an_mcp_server_with_a_key_of_its_process_is_refused_by_name(stub, tmp_path):
    """MCPServer's default request-state security is a random AES-GCM key of the process
    that cannot be read back: the snapshot is refused naming the global and the fix
    (keys from the environment), and the job carries on."""
    if _missing(("mcp",)):
        pytest.skip("mcp is not installed")
    agent = FRAMEWORKS / "fw_mcp_ephemeral.py"
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        JOB,
        agent,
        cwd=tmp_path,
        env=_env(stub, tmp_path),
    )
    assert run.returncode == 0, run.stderr
    refused = [line for line in run.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1, run.stdout
    assert (
        "global 'server' (a mcp.server.MCPServer) holds an MCP request-state codec "
        "(mcp RequestStateSecurity) at global 'server'._lowlevel_server.middleware[1]"
        "._security.codec" in refused[0]
    )
    assert "request_state_security=RequestStateSecurity(keys=[os.environ" in refused[0]
    assert "0x" not in refused[0]
    assert run.stdout.endswith("carried on\n")


def test_an_mcp_session_held_open_across_a_snapshot_is_refused(stub, tmp_path):
    """An MCP client session open at `await snapshot()`: its tasks are tracked by anyio
    (a weak reference per task), which a restore cannot give the restored tasks, so the
    snapshot is refused naming the tracker and the fix (close the session first); the
    job carries on and uses the session."""
    if _missing(("mcp",)):
        pytest.skip("mcp is not installed")
    agent = FRAMEWORKS / "fw_mcp_open_session.py"
    env = _env(stub, tmp_path)
    run = snaprun("run", "--store", tmp_path / "s", "--job", JOB, agent, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    refused = [line for line in run.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1, run.stdout
    assert "is tracked by anyio._backends._asyncio._task_states" in refused[0]
    assert "close the session" in refused[0]
    assert run.stdout.endswith("after after\n")
    assert "PicklingWarning" not in run.stderr


# ------------------------------------------------------------------------ secrets
def _chunked_payloads(store: Path) -> list[tuple[str, int, bytes]]:
    """(job, seq, payload) of every snapshot the store lists, read back by the store."""
    from snapstate.serializers._home import Home

    home = Home(str(store), create=False, writable=False)
    try:
        return [
            (job.job_id, row.seq, bytes(home.read_row(row)[1]))
            for job in home.catalog.list_jobs()
            for row in home.catalog.snapshots(job.job_id)
        ]
    finally:
        home.close()


def _payload_via_store(store: Path, path: Path) -> bytes | None:
    """The payload as the store itself reads it (decrypted, verified), when it can."""
    try:
        from snapstate.serializers._home import Home

        home = Home(str(store), create=False, writable=False)
    except Exception:
        return None
    try:
        return bytes(home.read(str(path))[1])
    except Exception:
        return None
    finally:
        home.close()


def _check_secrets(stores: list[Path], snapshots: int, plain_ok: bool) -> list[str]:
    """The key, read by the agent from OPENAI_API_KEY, is in no file of any store
    (catalog, keys, packs, logs...): not raw, not in any zstd frame found in a file,
    not in a snapshot file's decompressed body (parsed by layout), not in any chunk as
    an outsider decodes it, not in the payload the store reads back."""
    problems, bodies = [], 0
    for store in stores:
        if not store.exists():
            continue
        for path in sorted(p for p in store.rglob("*") if p.is_file()):
            data = path.read_bytes()
            frames = zstd_frames(data)
            body = payload = None
            if path.suffix == ".snap":
                body = snapshot_body(data)
                payload = _payload_via_store(store, path)
                bodies += body is not None or payload is not None
            for secret in (KEY.encode(), MCP_KEY.encode()):
                if secret in data:
                    problems.append(f"secrets: {secret[:8]!r}... is in {path}")
                if any(secret in frame for frame in frames):
                    problems.append(f"secrets: {secret[:8]!r}... is in a zstd frame of {path}")
                if any(secret in d for d in (body, payload) if d is not None):
                    problems.append(f"secrets: {secret[:8]!r}... is in the body of {path}")
        # The chunked snapshots: each body as the store reads it back, and every
        # chunk as an outsider decodes it (zstd, deltas against their base).
        chunks = outsider_chunks(store)
        for job, seq, payload in _chunked_payloads(store):
            bodies += 1
            for secret in (KEY.encode(), MCP_KEY.encode()):
                if secret in payload:
                    problems.append(f"secrets: {secret[:8]!r}... is in the body of {job}@{seq}")
        for secret in (KEY.encode(), MCP_KEY.encode()):
            if any(secret in chunk for chunk in chunks):
                problems.append(f"secrets: {secret[:8]!r}... is in a chunk of {store}")
    if plain_ok and bodies < snapshots:
        problems.append(f"secrets: only {bodies} snapshot bodies could be read")
    return problems
