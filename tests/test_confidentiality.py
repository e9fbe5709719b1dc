"""Confidentiality of an encrypted store (`snaprun init --encrypt`), and file modes.

One agent run per store (shared by the module): random tokens, made by the test and
passed through argv and the environment, end up in a local, a snapshot label, an
effect argument and result (a real HTTP provider on 127.0.0.1), an in-process
effect's result, a failed effect's error text, a Secret, and the error the agent
raises (it is then resumed from its first snapshot to completion, re-executing its
effects against the ledger). Then:

* no file of the encrypted store (catalog.db, its -wal and -shm, with the snapshots'
  manifests and small chunks; a pack file of a large snapshot's chunks, written by a
  second job holding a token in ~200 KiB of state; keys, config) holds any token,
  raw, hex or UTF-16, nor the plain digest of the effect's arguments, and none of its
  chunks decodes without the key; the same runs in a plaintext store do hold them in
  its catalog and chunks (positive control: the grep can find them);
* `snaprun effects/log/ls/stats --json` and `verify` show the opened values exactly
  as in the plaintext store; headers of encrypted files carry no argv or label;
* a sealed value moved to another row or column, edited, or replaced by plaintext is
  refused (StoreDamaged), never shown as a wrong value; rotation keeps old rows
  readable;
* under umask 022 the store directories are 0700 and catalog.db, -wal, -shm,
  config.json, keys.json and pack files 0600, in both stores.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from chunked import export_file, manifest_header, snapshot_seqs
from helpers import AGENTS, snaprun
from providers import Provider
from store_bytes import chunk_contents, zstd_frames

from snapstate import Secret
from snapstate._errors import StoreDamaged
from snapstate.runtime._effect_args import args_digest
from snapstate.serializers import _snapfile
from snapstate.serializers._home import Home
from snapstate.serializers._store import EffectRow, SnapshotRow

AGENT = AGENTS / "conf_agent.py"
NAMES = ("ARGV", "LOCAL", "LABEL", "ARG", "RESULT", "NOTE", "SECRET", "ERROR", "BIG")
# What the catalog of a plaintext store holds in clear (locals live in the compressed
# snapshot body, secrets nowhere).
IN_PLAIN_CATALOG = ("ARGV", "LABEL", "ARG", "RESULT", "NOTE", "ERROR")


def _tokens() -> dict[str, str]:
    return {name: f"cf{name.lower()}{secrets.token_hex(8)}" for name in NAMES}


def _forms(token: str) -> list[bytes]:
    raw = token.encode()
    return [raw, raw.hex().encode(), token.encode("utf-16-le")]


def _run_agent(store: Path, cwd: Path, tokens: dict, provider: Provider, encrypt: bool):
    """init, a run that fails after its effects, a resume to completion. A connection
    is held open meanwhile so the WAL and SHM files stay for the grep."""
    init = snaprun("init", "--store", store, *(["--encrypt"] if encrypt else []), cwd=cwd)
    assert init.returncode == 0, init.stderr
    keep = sqlite3.connect(store / "catalog.db")
    keep.execute("SELECT COUNT(*) FROM jobs").fetchone()
    env = {"PROVIDER_URL": provider.url, **{f"CONF_{k}": v for k, v in tokens.items()}}
    failed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENT,
        tokens["ARGV"],
        cwd=cwd,
        env={**env, "CONF_FAIL": "1"},
    )
    assert failed.returncode == 1 and tokens["ERROR"] in failed.stderr, failed.stderr
    done = snaprun("resume", "--store", store, "job", cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    assert provider.deliveries[tokens["ARG"]] == 1  # served from the ledger on resume
    (cwd / "big_agent.py").write_text(BIG_AGENT)
    big = snaprun("run", "--store", store, "--job", "big", cwd / "big_agent.py", cwd=cwd, env=env)
    assert big.returncode == 0 and big.result == "100", big.stderr
    return keep


# A job whose one snapshot adds more than 64 KiB of chunks: they go to a pack file.
BIG_AGENT = """\
import os
from snapstate import snapshot

def main():
    token = os.environ["CONF_BIG"]
    blob = [os.urandom(1024).hex() + token for _ in range(100)]
    snapshot("big")
    return len(blob)
"""


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """{"plain"|"sealed": (store, tokens)}, made under umask 022; each store's files
    (bytes and modes) are recorded right after the runs in FILES, while the WAL and SHM
    are there (a later command that closes the catalog last may checkpoint them away)."""
    root = tmp_path_factory.mktemp("conf")
    old = os.umask(0o022)
    kept = []
    try:
        with Provider() as provider:
            made = {}
            for name, encrypt in (("plain", False), ("sealed", True)):
                tokens = _tokens()
                kept.append(_run_agent(root / name, root, tokens, provider, encrypt))
                made[name] = (root / name, tokens)
                FILES[name] = _store_files(root / name)
        yield made
    finally:
        os.umask(old)
        for connection in kept:
            connection.close()


FILES: dict[str, dict[str, tuple[bytes, int]]] = {}


def _store_files(store: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and directory of a store: relative path -> (bytes, st_mode)."""
    return {
        str(p.relative_to(store)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mode)
        for p in [store, *store.rglob("*")]
    }


def _store_bytes(name: str) -> dict[str, bytes]:
    files = {path: data for path, (data, _) in FILES[name].items() if data}
    for file in ("catalog.db", "catalog.db-wal", "catalog.db-shm", "keys.json"):
        assert file in files, f"{file} missing from {sorted(files)}"
    assert any(path.startswith("chunks/") and path.endswith(".pack") for path in files)
    return files


def _json(store: Path, cwd: Path, *args) -> object:
    run = snaprun(*args, "--store", store, "--json", *(["job"] if args[0] != "ls" else []), cwd=cwd)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


# ------------------------------------------------------------------------ no token in clear
def test_encrypted_store_holds_no_token_in_any_file(stores):
    """No byte of any file of the encrypted store (catalog.db, -wal, -shm, the pack
    file, keys.json, config.json) holds a token the agent produced, raw, hex or UTF-16;
    nor the plain SHA-256 digest of the effect's arguments (a plain digest of
    low-entropy arguments could be confirmed by guessing); no chunk decodes without
    the key (sealed), and no zstd frame in any file holds a token."""
    store, tokens = stores["sealed"]
    files = _store_bytes("sealed")
    assert chunk_contents(store) == []
    assert snapshot_seqs(store, "job") and snapshot_seqs(store, "big") == [1]
    assert "config.json" in files and len(files["catalog.db-wal"]) > 0
    plain_digest = args_digest(
        "conf_agent.place", (tokens["ARG"], Secret(tokens["SECRET"], name="api")), {}
    )
    for path, data in files.items():
        for name, token in tokens.items():
            for form in _forms(token):
                assert form not in data, f"{name} token ({form[:12]!r}...) in {path}"
                assert not any(form in frame for frame in zstd_frames(data)), (name, path)
        assert plain_digest.encode() not in data, f"plain args digest in {path}"


def test_plaintext_store_holds_the_tokens_in_its_catalog(stores):
    """Positive control: the same run in a plaintext store leaves argv, label, effect
    argument and results, error texts in clear in catalog.db or its WAL, and the
    local and the big job's token in its chunks (decoded without a key; the big one in
    a zstd frame of its pack file), so the greps above can find what they look for.
    Secrets are nowhere even there."""
    store, tokens = stores["plain"]
    files = _store_bytes("plain")
    catalog = files["catalog.db"] + files["catalog.db-wal"]
    for name in IN_PLAIN_CATALOG:
        assert tokens[name].encode() in catalog, f"{name} not found in the plain catalog"
    contents = chunk_contents(store)
    for name in ("LOCAL", "BIG"):
        assert any(tokens[name].encode() in c for c in contents), f"{name} not in the chunks"
    packs = [data for path, data in files.items() if path.endswith(".pack")]
    assert any(tokens["BIG"].encode() in f for data in packs for f in zstd_frames(data))
    assert not any(tokens["SECRET"].encode() in data for data in files.values())
    assert not any(tokens["SECRET"].encode() in c for c in contents)


@pytest.mark.smoke
def test_encrypted_headers_carry_no_argv_or_label(stores):
    """The header of an encrypted snapshot (its manifest's, readable without the key;
    and an exported file's) has argv and label null; the verified header opened with the
    store's key has them back, and `snaprun verify` shows the label. A plaintext
    store's header keeps them."""
    sealed, tokens = stores["sealed"]
    exported = export_file(sealed, "job", 1, sealed.parent / "sealed-job-1.snap")
    for raw in (manifest_header(sealed, "job", 1), _snapfile.peek_header(str(exported))):
        assert raw["argv"] is None and raw["label"] is None and "sealed" in raw
        assert raw["frames"] and raw["frames"][0]["qualname"] == "main"  # code identity stays
    home = Home(str(sealed))
    try:
        header, _ = home.verify_row(home.catalog.snapshot("job", 1))
        from_file = home.verify(str(exported))
    finally:
        home.close()
    for opened in (header, from_file):
        assert opened["argv"] == [tokens["ARGV"]]
        assert opened["label"] == f"label {tokens['LABEL']}"
    for target in ("job@1", exported):
        verified = snaprun("verify", "--store", sealed, target, cwd=sealed.parent)
        assert verified.returncode == 0 and tokens["LABEL"] in verified.stderr + verified.stdout
    plain, plain_tokens = stores["plain"]
    assert manifest_header(plain, "job", 1)["argv"] == [plain_tokens["ARGV"]]


# ------------------------------------------------------------------------ display
def _shown(store: Path, tokens: dict, cwd: Path) -> dict:
    """effects/log/ls/stats --json with the store's tokens replaced by their names."""

    def generic(value):
        text = json.dumps(value)
        for name, token in tokens.items():
            text = text.replace(token, f"<{name}>")
        return json.loads(text)

    effects = [
        {k: r[k] for k in ("effect", "state", "kind", "name", "args", "attempts", "note")}
        for r in _json(store, cwd, "effects")
    ]
    log = [
        (e["kind"], e["detail"])
        for e in _json(store, cwd, "log")
        if e["kind"] not in ("lease", "created")
    ]
    ls = [
        {k: r[k] for k in ("job", "status", "snapshots", "latest", "label", "error")}
        for r in _json(store, cwd, "ls")
    ]
    stats = {
        k: v
        for k, v in _json(store, cwd, "stats").items()
        if k not in ("snapshot_age_s", "restart_to_progress_s")
    }
    return generic({"effects": effects, "log": log, "ls": ls, "stats": stats})


def test_cli_shows_opened_values_as_in_a_plaintext_store(stores):
    """`snaprun effects/log/ls/stats --json` of the encrypted store show the opened
    values (its rows are sealed): the same output as the plaintext store's, token for
    token."""
    cwd = stores["plain"][0].parent
    raw = sqlite3.connect(stores["sealed"][0] / "catalog.db")
    try:
        ((args, note),) = raw.execute("SELECT args_repr, note FROM effects WHERE ordinal = 3")
    finally:
        raw.close()
    assert args.startswith(b"SS1") and note.startswith(b"SS1")
    plain = _shown(*stores["plain"], cwd)
    sealed = _shown(*stores["sealed"], cwd)
    assert sealed == plain
    assert sealed["effects"][0]["args"] == "'<ARG>', Secret('api')"
    assert sealed["effects"][2]["note"] == "ValueError: probe failed <NOTE>"
    assert ["failed", "RuntimeError: agent failed <ERROR>"] in sealed["log"]
    assert ["snapshot", "1 (label <LABEL>)"] in sealed["log"]
    assert sealed["ls"][0]["status"] == "done" and sealed["ls"][0]["latest"] == 2


# ------------------------------------------------------------------------ tampering
@pytest.fixture
def sealed_copy(stores, tmp_path):
    store, tokens = stores["sealed"]
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    return copy, tokens


def _edit(store: Path, sql: str) -> None:
    db = sqlite3.connect(store / "catalog.db")
    db.create_function("flip", 1, lambda b: b[:-1] + bytes([b[-1] ^ 1]))  # last bit
    try:
        with db:
            assert db.execute(sql).rowcount >= 1
    finally:
        db.close()


@pytest.mark.parametrize(
    "sql, read, where",
    [
        (
            "UPDATE effects SET args_repr = (SELECT args_repr FROM effects WHERE ordinal = 1) "
            "WHERE ordinal = 2",
            lambda c: c.effects("job"),
            "effects.args_repr",
        ),
        (
            "UPDATE effects SET note = (SELECT args_repr FROM effects WHERE ordinal = 3) "
            "WHERE ordinal = 3",
            lambda c: c.effects("job"),
            "effects.note",
        ),
        (
            "UPDATE effects SET result = (SELECT result FROM effects WHERE ordinal = 1) "
            "WHERE ordinal = 2",
            lambda c: c.effect("job", 2),
            "effects.result",
        ),
        (
            "UPDATE snapshots SET label = (SELECT label FROM snapshots WHERE seq = 2) "
            "WHERE seq = 1",
            lambda c: c.snapshots("job"),
            "snapshots.label",
        ),
        (
            "UPDATE events SET detail = (SELECT detail FROM events WHERE kind = 'failed') "
            "WHERE kind = 'done'",
            lambda c: c.events("job"),
            "events.detail",
        ),
        ("UPDATE jobs SET argv = flip(argv)", lambda c: c.get_job("job"), "jobs.argv"),
        ("UPDATE jobs SET argv = '[\"forged\"]'", lambda c: c.get_job("job"), "jobs.argv"),
        (
            "UPDATE effects SET args_digest = 'abc' WHERE ordinal = 1",
            lambda c: c.effect("job", 1),
            "effects (job job, ordinal 1)",  # the row's signature covers the digest
        ),
    ],
    ids=[
        "moved-row",
        "moved-column",
        "moved-result",
        "swapped-label",
        "moved-event",
        "edited-byte",
        "plaintext",
        "plain-digest",
    ],
)
def test_moved_edited_or_plain_value_is_refused(sealed_copy, sql, read, where):
    """A sealed value copied to another row or column, a flipped byte, or a plaintext
    value in place of a sealed one: reading it raises StoreDamaged naming the value's
    place, never returns a wrong value."""
    store, _ = sealed_copy
    home = Home(str(store))
    try:
        read(home.catalog)  # control: intact before the edit
        _edit(store, sql)
        with pytest.raises(StoreDamaged, match=re.escape(where)):
            read(home.catalog)
        # a listing of the whole store shows a refused jobs row as damaged and goes on
        assert all(j.damaged is None for j in home.catalog.list_jobs()) == (
            not where.startswith("jobs")
        )
    finally:
        home.close()


def test_rotation_keeps_old_rows_readable(sealed_copy):
    """After `keys rotate`, rows and headers sealed with the old key still open, and
    new rows are sealed with the new one; the effects re-execute against the ledger
    without divergence (keyed digests compare under the key they name)."""
    store, tokens = sealed_copy
    home = Home(str(store))
    try:
        old = home.keys.current.key_id
        new = home.keys.rotate().key_id
        home.catalog.log_event("job", "note", f"after rotation {tokens['LABEL']}")
        events = home.catalog.events("job")
        assert events[-1].detail == f"after rotation {tokens['LABEL']}"
        assert any(tokens["ERROR"] in e.detail for e in events)
        first = home.catalog.effect("job", 1)
        assert first.args_digest.startswith(f"hmac-sha256:{old}:")
        assert first.args_digest == args_digest(
            "conf_agent.place", (tokens["ARG"], Secret("x", name="api")), {}
        )
        assert first.args_digest != args_digest("conf_agent.place", ("other",), {})
        header, _ = home.verify_row(home.catalog.snapshots("job")[0])
        assert header["label"] == f"label {tokens['LABEL']}"
        raw = sqlite3.connect(store / "catalog.db")
        try:
            (detail,) = raw.execute("SELECT detail FROM events ORDER BY id DESC LIMIT 1").fetchone()
        finally:
            raw.close()
        assert new.encode() in detail and old.encode() not in detail
    finally:
        home.close()


# ------------------------------------------------------------------------ modes
@pytest.mark.parametrize("name", ["plain", "sealed"])
def test_modes_under_umask_022(stores, name):
    """Made under umask 022 by real snaprun processes: the store directory, snapshots/
    and chunks/ are 0700; catalog.db, its -wal and -shm, keys.json, config.json (the
    encrypted store's) and the pack file 0600: every directory of the store 0700, every
    file 0600."""
    modes = {path: mode for path, (_, mode) in FILES[name].items()}
    expected = {
        ".",
        "snapshots",
        "chunks",
        "catalog.db",
        "catalog.db-wal",
        "catalog.db-shm",
        "keys.json",
    } | ({"config.json"} if name == "sealed" else set())
    assert expected <= set(modes)
    assert any(path.startswith("chunks/") and path.endswith(".pack") for path in modes)
    for path, mode in modes.items():
        wanted = 0o700 if stat.S_ISDIR(mode) else 0o600
        assert stat.S_IMODE(mode) == wanted, f"{path}: {oct(stat.S_IMODE(mode))}"


def test_modes_of_a_store_made_in_process_under_umask_022(tmp_path):
    """The Python API too: a Home opened in a new directory under umask 022 makes it
    0700 and its catalog (with -wal and -shm once written) 0600."""
    old = os.umask(0o022)
    try:
        home = Home(str(tmp_path / "api"))
        home.catalog.log_event("nobody", "probe")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "api").iterdir()}
        home.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "api").stat().st_mode) == 0o700
    assert modes["snapshots"] == 0o700
    assert modes["catalog.db"] == modes["catalog.db-wal"] == modes["catalog.db-shm"] == 0o600


# ------------------------------------------------------------------------ turning it on
def test_init_encrypt_seals_rows_already_in_the_catalog(tmp_path):
    """`init --encrypt` (Home.set_encryption) on a store that already has rows seals
    them: afterwards no token is left in catalog.db or its WAL (compacted, WAL emptied),
    every value reads back the same, and the recorded argument digest still equals the
    ledger's digest of the same arguments. Running it again, or turning it off, keeps
    every value readable."""
    token = f"cfold{secrets.token_hex(8)}"
    digest = args_digest("agent.send", (token,), {})
    store = tmp_path / "store"
    home = Home(str(store))
    try:
        home.catalog.create_job("job", {"path": "agent.py"}, [token])
        home.catalog.add_snapshot_unfenced(
            SnapshotRow("job", 1, f"label {token}", "snapshots/job/000001-e0.snap", 1, 1.0, 0)
        )
        home.catalog.record_effects(
            [
                EffectRow(
                    "job",
                    1,
                    "k",
                    "agent.send",
                    "agent.py:3",
                    digest,
                    repr(token),
                    "write",
                    "confirmed",
                    token.encode(),
                    token,
                    1,
                    1.0,
                    1.0,
                    f"note {token}",
                )
            ],
            epoch=None,
        )
        home.catalog.set_status("job", "failed", error=f"error {token}")
        before = (
            home.catalog.get_job("job"),
            home.catalog.snapshots("job"),
            home.catalog.effects("job"),
            home.catalog.events("job"),
        )
        assert token.encode() in _catalog_bytes(store)  # control
        for required in (True, True, False, True):
            home.set_encryption(required)
            after = (
                home.catalog.get_job("job"),
                home.catalog.snapshots("job"),
                home.catalog.effects("job"),
                home.catalog.events("job"),
            )
            assert after == before
            assert after[2][0].args_digest == digest
            assert (token.encode() in _catalog_bytes(store)) is not required
    finally:
        home.close()


def _catalog_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store.glob("catalog.db*"))
