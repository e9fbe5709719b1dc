"""Chunked snapshot bodies in a store: writing, reading, verifying, sweeping.

A snapshot's body (the pickle) is cut into content-defined chunks (serializers/_chunks.py);
the store keeps each chunk once. Taking a snapshot encodes and stores only the chunks
the catalog does not hold yet, then commits, in one catalog transaction, the snapshot
row, its signed manifest (serializers/_manifest.py) and those new chunks:

    new chunks <= INLINE_LIMIT bytes (encoded)   inside the catalog transaction: the
                                                 snapshot costs one durable commit
    more                                         one pack file first, written and
                                                 fsync'd once (temp, fsync, rename,
                                                 directory fsync), then the commit,
                                                 whose chunk rows say where each lies

    <store>/chunks/<job>.<seq>-e<epoch>.<pid>-<start>.<random>.pack

The pickler leaves out FRAME opcodes (serializers/_deframe.py), so state that did not
change keeps its bytes wherever the state before it changed size.

A crash before the commit leaves at most a pack no chunk row names; `sweep_packs`
deletes such a pack once its writer (named in its file name) is gone, asking the
catalog which packs are in use only after judging the writers (a writer that commits
and exits between a sweep and the deletion keeps its pack). A chunk the
writer found held but a concurrent prune swept before the commit makes the commit
fail with nothing changed (ChunksMissing): the writer stores it again and retries.

Reading verifies the manifest's signature and the row's binding first, then decodes
each chunk, checking its id (a keyed hash of its content) before any byte is used;
only then is the body assembled and handed out for unpickling.
"""

from __future__ import annotations

import errno
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .._errors import ChunksMissing, CorruptSnapshot, SnapshotWriteError, StoreDamaged
from . import _chunks, _fs, _manifest
from ._catalog import Catalog
from ._keys import KeyRing
from ._store import CHUNKED, SnapshotBody, SnapshotRow, StoredChunk

__all__ = ["ChunkStore", "Prepared", "INLINE_LIMIT", "PACKS"]

INLINE_LIMIT = 64 << 10
KEEP_LIMIT = 64 << 20  # a writer keeps its job's last body up to this size to compare with
_KEEP_JOBS = 4  # and for this many jobs at most (a process running jobs one after another)
PACKS = "chunks"
_PACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.pack")
_PACK_OWNER = re.compile(r"\.(\d+)-(\d+)\.[0-9a-f]+\.pack$")
_COMMIT_ATTEMPTS = 3
# How deep a chain of deltas a reader follows. Writers make them at most MAX_DEPTH deep,
# but a chunk another writer stored first (with its own chain) may sit under one of
# theirs; a chain longer than this, or one that loops, is damage. (A base pointer is a
# catalog value, but a wrong one only fails the id check of what it decodes.)
_READ_DEPTH = 1024


@dataclass
class Prepared:
    """A written, not yet committed chunked snapshot: its row and body."""

    row: SnapshotRow
    body: SnapshotBody
    contents: dict[bytes, memoryview]  # every chunk's content, to store one again
    codec: _chunks.Codec
    keep: _Last | None  # what the job's next snapshot compares itself with


@dataclass
class _Last:
    """The job's last committed snapshot as its writer keeps it: its body, where its
    chunks lie and how deep each chunk it stored as a delta is."""

    codec: _chunks.Codec
    epoch: int
    payload: bytes
    refs: list[tuple[bytes, int]]
    offsets: list[int]
    depth: dict[bytes, int]  # the chunks whose delta depth is known (0: whole)

    def base_for(self, index: int, chunk_id: bytes) -> tuple[bytes, memoryview] | None:
        """The base for a new chunk at `index`: the chunk at the same index of the last
        snapshot, if its depth is known and under MAX_DEPTH."""
        if index >= len(self.refs):
            index = len(self.refs) - 1  # the body grew: its new end against the old end
        if index < 0:
            return None
        base_id, size = self.refs[index]
        depth = self.depth.get(base_id)
        if base_id == chunk_id or depth is None or depth >= _chunks.MAX_DEPTH:
            return None
        offset = self.offsets[index]
        return base_id, memoryview(self.payload)[offset : offset + size]


def _cut(
    codec: _chunks.Codec, payload: bytes, last: _Last | None
) -> tuple[list[tuple[bytes, int]], list[int], set[bytes]]:
    """(refs, their offsets, the ids computed afresh) of `payload`'s chunks.

    With the job's last body at hand, unchanged stretches are not cut or hashed again:
    where a chunk of the last body starts at the current position (the start, or right
    after a chunk equal to one of the last body's), each following chunk of the last
    body is compared byte for byte with what follows and taken as it was while equal.
    Where one differs, FastCDC cuts from there, hashing as it goes, until a chunk it cuts
    is one of the last body's (the same content, wherever the change moved it): from
    there on, the comparing goes on. Every chunk taken is equal, byte for byte, to the
    content its id names, so the result is exact whatever the cuts."""
    refs: list[tuple[bytes, int]] = []
    offsets: list[int] = []
    fresh: set[bytes] = set()
    view, end = memoryview(payload), len(payload)
    old_refs = last.refs if last is not None else []
    old_at = last.offsets if last is not None else []
    old = memoryview(last.payload) if last is not None else view
    index_of = {chunk_id: i for i, (chunk_id, _) in enumerate(old_refs)}
    pos, j = 0, 0 if old_refs else None  # j: the last body's chunk expected at pos
    while pos < end:
        while j is not None and j < len(old_refs):  # aligned: compare, take as it was
            chunk_id, size = old_refs[j]
            last_chunk = j == len(old_refs) - 1
            if (last_chunk and pos + size != end) or not payload.startswith(
                old[old_at[j] : old_at[j] + size], pos
            ):
                break
            refs.append((chunk_id, size))
            offsets.append(pos)
            pos, j = pos + size, j + 1
        if pos >= end:
            break
        j = None
        origin = pos
        for cut in codec.cuts(view[origin:]):  # a changed stretch: cut and hash
            cut += origin
            chunk_id = codec.chunk_id(view[pos:cut])
            refs.append((chunk_id, cut - pos))
            offsets.append(pos)
            pos = cut
            found = index_of.get(chunk_id)
            if found is not None and found + 1 < len(old_refs):
                j = found + 1  # back in step with the last body
                break
            fresh.add(chunk_id)
    return refs, offsets, fresh


class ChunkStore:
    def __init__(
        self,
        directory: str,
        catalog: Callable[[], Catalog],
        keys: Callable[[], KeyRing],
        encrypt: Callable[[], bool],
        fs: _fs.FileSystem,
        *,
        packs: str | None = "",
    ):
        # `packs`: the folder of pack files (default <directory>/chunks); None: none, every
        # chunk goes into the catalog (a PostgreSQL store without a shared folder).
        self.directory = directory
        self.packs: str | None = os.path.join(directory, PACKS) if packs == "" else packs
        self._catalog, self._keys, self._encrypt, self.fs = catalog, keys, encrypt, fs
        self._last: dict[str, _Last] = {}

    # ------------------------------------------------------------------ writing
    def prepare(
        self,
        job_id: str,
        seq: int,
        epoch: int,
        label: str | None,
        header: dict[str, Any],
        payload: bytes,
    ) -> Prepared:
        """Cut and name the body, store the chunks the catalog lacks (encoded; a pack
        file when they are many), sign the manifest. SnapshotWriteError on an I/O
        failure (never retried)."""
        sealed = self._encrypt()
        codec = _chunks.codec(self._keys().current, sealed)
        last = self._last.pop(job_id, None)
        if last is not None and (last.codec is not codec or last.epoch != epoch):
            last = None
        refs, offsets, fresh = _cut(codec, payload, last)
        view = memoryview(payload)
        contents = {
            chunk_id: view[offset : offset + size]
            for (chunk_id, size), offset in zip(refs, offsets)
        }
        missing = self._catalog().missing_chunks(fresh) if fresh else set()
        todo = []  # (id, content, base id, base content)
        for index, (chunk_id, _) in enumerate(refs):
            if chunk_id not in missing:
                continue
            missing.discard(chunk_id)  # once, however often it is listed
            base = last.base_for(index, chunk_id) if last is not None else None
            todo.append((chunk_id, contents[chunk_id], *(base or (None, None))))
        new = self._store(job_id, seq, epoch, codec, todo, last.depth if last else None)
        manifest, digest = _manifest.build(header, refs, codec.key, sealed)
        size = len(manifest) + sum(c.length or len(c.data or b"") for c in new)
        row = SnapshotRow(job_id, seq, label, CHUNKED, size, header["created_at"], epoch, digest)
        depth = {c.chunk_id: c.depth for c in new}
        if last is not None:
            depth.update((c, d) for c, d in last.depth.items() if c in contents and c not in depth)
        keep = (
            _Last(codec, epoch, payload, refs, offsets, depth)
            if len(payload) <= KEEP_LIMIT
            else None
        )
        return Prepared(
            row, SnapshotBody(manifest, frozenset(contents), tuple(new)), contents, codec, keep
        )

    def _store(
        self,
        job_id: str,
        seq: int,
        epoch: int,
        codec: _chunks.Codec,
        chunks: list[tuple[bytes, memoryview, bytes | None, memoryview | None]],
        base_depth: dict[bytes, int] | None = None,
    ) -> list[StoredChunk]:
        """Encode chunks (each (id, content, base id or None, base content)) and store
        them: in the catalog transaction when small, else in one new pack file.
        `base_depth`: the delta depth of the bases."""
        encoded: list[tuple[bytes, int, bytes, bytes | None, int]] = []
        whole: list[tuple[bytes, memoryview]] = []
        for chunk_id, content, base_id, base in chunks:
            if base_id is not None and base is not None:
                data = codec.encode(chunk_id, content, base)
                depth = (base_depth or {}).get(base_id, _chunks.MAX_DEPTH) + 1
                if len(data) * 4 <= len(content):  # else a poor delta: whole instead
                    encoded.append((chunk_id, len(content), data, base_id, depth))
                    continue
            whole.append((chunk_id, content))
        for (chunk_id, content), data in zip(whole, codec.encode_many(whole), strict=True):
            encoded.append((chunk_id, len(content), data, None, 0))
        if self.packs is None or sum(len(e[2]) for e in encoded) <= INLINE_LIMIT:
            return [StoredChunk(c, size, data, base=b, depth=d) for c, size, data, b, d in encoded]
        me = f"{os.getpid()}-{_fs.process_start(os.getpid())}"
        name = f"{job_id}.{seq}-e{epoch}.{me}.{os.urandom(4).hex()}.pack"
        path = os.path.join(self.packs, name)
        try:
            _fs.make_private_dir(self.packs)
            _fs.write_atomic(path, (e[2] for e in encoded), self.fs)
        except OSError as exc:
            raise SnapshotWriteError(
                f"snapshot {seq} of job {job_id} could not be written to {path} "
                f"({exc.strerror or exc}); it is not retried. The job stopped; its previous "
                f"snapshot is intact: fix the cause, then `snaprun resume {job_id}`."
            ) from exc
        out, offset = [], 0
        for chunk_id, size, data, base_id, depth in encoded:
            out.append(StoredChunk(chunk_id, size, None, name, offset, len(data), base_id, depth))
            offset += len(data)
        return out

    def forget(self, job_id: str) -> None:
        """Drop what is kept of the job's last snapshot (its run ended: Job._finish)."""
        self._last.pop(job_id, None)

    def commit(
        self, prepared: Prepared, commit: Callable[[SnapshotRow, SnapshotBody], None]
    ) -> None:
        """Commit through `commit` (the catalog's compare-and-swap); chunks a concurrent
        prune swept meanwhile are stored again and the commit retried."""
        body, row = prepared.body, prepared.row
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                commit(row, body)
            except ChunksMissing as exc:
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise
                # Swept meanwhile (a listed chunk, or a new delta's base): every chunk
                # that is missing or new is stored again whole.
                again = {c.chunk_id for c in body.new} | set(exc.ids)
                new = self._store(
                    row.job_id,
                    row.seq,
                    row.epoch,
                    prepared.codec,
                    [
                        (c, prepared.contents[c], None, None)
                        for c in again
                        if c in prepared.contents
                    ],
                )
                body = SnapshotBody(body.manifest, body.refs, tuple(new))
                if prepared.keep is not None:
                    prepared.keep.depth.update((c.chunk_id, 0) for c in new)
                continue
            if prepared.keep is not None:
                self._last[row.job_id] = prepared.keep
                while len(self._last) > _KEEP_JOBS:  # the oldest kept job's is dropped
                    del self._last[next(iter(self._last))]
            return

    # ------------------------------------------------------------------ reading
    def manifest(
        self, row: SnapshotRow, keys: KeyRing, require_encryption: bool, where: str
    ) -> _manifest.Manifest:
        data = self._catalog().manifest(row.job_id, row.seq)
        if data is None:
            raise StoreDamaged(
                f"{where}: the catalog lists it as chunked but holds no manifest for it; the "
                "store is damaged or was tampered with. Resume from another snapshot "
                "(`snaprun log JOB`)"
            )
        return _manifest.parse(data, keys, require_encryption=require_encryption, where=where)

    def chunks(self, manifest: _manifest.Manifest, where: str) -> Iterator[bytes]:
        """The decoded, verified content of each chunk the manifest lists, in order."""
        codec = _chunks.codec(manifest.key, manifest.sealed)
        ids = {chunk_id for chunk_id, _ in manifest.refs}
        stored = self._catalog().get_chunks(ids)
        lost = ids - set(stored)
        for _ in range(_READ_DEPTH + 1):  # the bases of deltas, and theirs
            bases = {c.base for c in stored.values() if c.base is not None} - set(stored)
            if not bases:
                break
            found = self._catalog().get_chunks(bases)
            lost |= bases - set(found)
            stored.update(found)
        if lost:
            raise CorruptSnapshot(
                f"{where}: {len(lost)} of its chunks are missing from the store (deleted "
                "or the catalog was damaged); resume from another snapshot (`snaprun log JOB`)"
            )
        # Contents listed more than once, and bases, are decoded once.
        counts = Counter(chunk_id for chunk_id, _ in manifest.refs)
        counts.update(c.base for c in stored.values() if c.base is not None)
        cache: dict[bytes, bytes] = {}
        with _Packs(self.packs, where) as packs:

            def content(chunk_id: bytes) -> bytes:
                found = cache.get(chunk_id)
                if found is not None:
                    return found
                chain = [chunk_id]  # the chunk, its base, that one's base...
                while (base_id := stored[chain[-1]].base) is not None and base_id not in cache:
                    if base_id in chain or len(chain) > _READ_DEPTH or base_id not in stored:
                        raise CorruptSnapshot(f"{where}: a chunk's chain of deltas is damaged")
                    chain.append(base_id)
                decoded = b""
                for link in reversed(chain):  # the deepest first
                    chunk = stored[link]
                    base = None if chunk.base is None else cache.get(chunk.base, decoded)
                    encoded = chunk.data if chunk.pack is None else packs.read(chunk)
                    if encoded is None:
                        raise CorruptSnapshot(f"{where}: a chunk has no data in the catalog")
                    decoded = codec.decode(link, encoded, chunk.size, where, base)
                    if counts[link] > 1:
                        cache[link] = decoded
                return decoded

            for chunk_id, size in manifest.refs:
                if stored[chunk_id].size != size:
                    raise CorruptSnapshot(f"{where}: a chunk's size in the catalog was changed")
                yield content(chunk_id)

    def read(self, manifest: _manifest.Manifest, where: str) -> bytearray:
        payload = bytearray()
        for content in self.chunks(manifest, where):
            payload += content
        return payload

    def check(self, manifest: _manifest.Manifest, where: str) -> None:
        """Decode and check every chunk (one at a time), assembling nothing."""
        for _ in self.chunks(manifest, where):
            pass

    # ------------------------------------------------------------------ sweeping
    def sweep_packs(self) -> int:
        """Delete pack files no chunk lives in whose writer is gone (a crash before its
        commit, or every chunk swept); returns how many. The writers are judged first,
        then the catalog is asked which packs are in use: a writer dead by then has
        committed its pack already (and it is in use) or never will."""
        if self.packs is None or not os.path.isdir(self.packs) or os.path.islink(self.packs):
            return 0
        gone = []
        for name in os.listdir(self.packs):
            if not _PACK_NAME.fullmatch(name):
                continue
            owner = _PACK_OWNER.search(name)
            if (
                owner is not None
                and _fs.pid_alive(int(owner[1]))
                and _fs.process_start(int(owner[1])) == int(owner[2])
            ):
                continue  # its writer may still commit it
            gone.append(name)
        in_use = self._catalog().packs() if gone else set()
        removed = 0
        for name in gone:
            if name in in_use:
                continue
            try:
                self.fs.unlink(os.path.join(self.packs, name))
                removed += 1
            except FileNotFoundError:
                pass
        return removed


class _Packs:
    """Open pack files while a snapshot is read (each confined to <store>/chunks)."""

    def __init__(self, folder: str | None, where: str):
        self.folder, self.where = folder, where
        self.open: dict[str, int] = {}
        if folder is not None and os.path.islink(folder):
            raise StoreDamaged(
                f"{where}: {folder} is a symbolic link: the store was tampered with; refusing it"
            )

    def __enter__(self) -> _Packs:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.open.values():
            os.close(fd)

    def read(self, chunk: StoredChunk) -> bytes:
        name = chunk.pack
        if not isinstance(name, str) or not _PACK_NAME.fullmatch(name) or ".." in name:
            raise StoreDamaged(
                f"{self.where}: the catalog names the pack file {name!r}, not a pack of the "
                "store; the store is damaged or was tampered with. Refusing it."
            )
        if self.folder is None:
            raise StoreDamaged(
                f"{self.where}: the catalog says a chunk lives in the pack file {name!r}, but "
                "this store keeps its chunks in the catalog (no bodies folder is set: "
                "SNAPSTATE_BODIES); set it to the store's shared folder, or the catalog "
                "was tampered with"
            )
        if not 0 <= chunk.length <= _chunks.MAX_ENCODED or chunk.offset < 0:
            raise CorruptSnapshot(f"{self.where}: a chunk's place in its pack is damaged")
        fd = self.open.get(name)
        if fd is None:
            try:
                fd = os.open(os.path.join(self.folder, name), os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                raise CorruptSnapshot(
                    f"{self.where}: its pack file {name} is missing from the store; resume "
                    "from another snapshot (`snaprun log JOB`)"
                ) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise StoreDamaged(
                        f"{self.where}: its pack file {name} is a symbolic link: the store "
                        "was tampered with; refusing it. Restore the store from a backup "
                        "or resume from another snapshot (`snaprun log JOB`)"
                    ) from None
                raise StoreDamaged(
                    f"{self.where}: its pack file {name} cannot be read ({exc.strerror or exc})"
                ) from None
            self.open[name] = fd
        data = os.pread(fd, chunk.length, chunk.offset)
        if len(data) != chunk.length:
            raise CorruptSnapshot(f"{self.where}: its pack file {name} is truncated")
        return data
