"""Spec: chunked snapshot bodies (ChunkCatalog, with SnapshotCatalog's commit): new
chunks and the manifest are committed with the row in one transaction; a body that
refers to a chunk the catalog does not hold changes nothing (ChunksMissing); the mark
and sweep keeps exactly the chunks some manifest lists (and the bases of the deltas
kept); a snapshot's manifest goes with its row."""

from __future__ import annotations

import pytest

from snapstate._errors import ChunksMissing, StaleWriter
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import StoredChunk

from ._support import (
    Capability,
    Spec,
    body,
    chunk_id,
    chunked_row,
    live_owner,
    make_job,
    manifest_of,
    requires,
    state,
)

__all__ = ["ChunksSpec"]


def _inline(n: int, base: int | None = None) -> StoredChunk:
    return StoredChunk(
        chunk_id(n), 1000, b"data-%d" % n, base=None if base is None else chunk_id(base)
    )


class ChunksSpec(Spec):
    """The specs of ChunkCatalog."""

    capability = Capability.CHUNKS

    @pytest.mark.smoke
    def test_a_body_is_committed_with_its_row(self, catalog: Catalog, live_pid: int) -> None:
        """commit_snapshot(row, body) stores the new chunks (inline and in a pack, a
        delta's base named) and the manifest; missing_chunks and get_chunks see them;
        a chunk already held is stored once and kept as it was."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        assert catalog.missing_chunks([chunk_id(1), chunk_id(2)]) == {chunk_id(1), chunk_id(2)}
        packed = StoredChunk(chunk_id(2), 1000, None, "job.1-e1.1-2.ab.pack", 10, 20)
        ids = [chunk_id(1), chunk_id(2), chunk_id(1)]
        first = body(ids, [_inline(1), packed])
        catalog.commit_snapshot(chunked_row(1, epoch), first)
        assert catalog.manifest("job", 1) == first.manifest
        assert catalog.manifest("job", 2) is None
        assert catalog.missing_chunks([chunk_id(1), chunk_id(2), chunk_id(3)]) == {chunk_id(3)}
        assert catalog.get_chunks([chunk_id(1), chunk_id(2), chunk_id(9)]) == {
            chunk_id(1): _inline(1),
            chunk_id(2): packed,
        }
        again = StoredChunk(chunk_id(1), 1000, b"other bytes")
        catalog.commit_snapshot(
            chunked_row(2, epoch), body([chunk_id(1), chunk_id(3)], [again, _inline(3, base=1)])
        )
        assert catalog.get_chunks([chunk_id(1)])[chunk_id(1)].data == b"data-1"
        assert catalog.get_chunks([chunk_id(3)])[chunk_id(3)].base == chunk_id(1)
        assert catalog.snapshots("job") == [chunked_row(1, epoch), chunked_row(2, epoch)]
        assert catalog.missing_chunks([chunk_id(n) for n in (1, 2, 3)]) == set()

    def test_a_body_missing_a_chunk_changes_nothing(self, catalog: Catalog, live_pid: int) -> None:
        """A body listing a chunk the catalog does not hold (nor brings), or a delta whose
        base is not held, raises ChunksMissing naming those ids; the row, the manifest
        and the body's new chunks are not recorded. A stale writer's body neither."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        before = state(catalog)
        with pytest.raises(ChunksMissing) as caught:
            catalog.commit_snapshot(
                chunked_row(1, epoch), body([chunk_id(1), chunk_id(2)], [_inline(1)])
            )
        assert caught.value.ids == frozenset({chunk_id(2)})
        with pytest.raises(ChunksMissing) as caught:
            catalog.commit_snapshot(
                chunked_row(1, epoch), body([chunk_id(1)], [_inline(1, base=7)])
            )
        assert caught.value.ids == frozenset({chunk_id(7)})
        with pytest.raises(StaleWriter):
            catalog.commit_snapshot(chunked_row(1, epoch + 1), body([chunk_id(1)], [_inline(1)]))
        assert state(catalog) == before
        assert catalog.manifest("job", 1) is None
        assert catalog.missing_chunks([chunk_id(1)]) == {chunk_id(1)}
        catalog.commit_snapshot(chunked_row(1, epoch), body([chunk_id(1)], [_inline(1)]))
        assert catalog.manifest("job", 1) is not None

    def test_sweep_keeps_what_a_manifest_lists(self, catalog: Catalog, live_pid: int) -> None:
        """sweep_chunks deletes exactly the chunks no manifest lists, keeping the base of
        every kept delta (and its base), and returns the packs still referred to; a
        deleted snapshot's manifest goes with its row."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        packed = StoredChunk(chunk_id(4), 1000, None, "job.1-e1.1-2.ab.pack", 0, 20)
        catalog.commit_snapshot(
            chunked_row(1, epoch), body([chunk_id(1), chunk_id(4)], [_inline(1), packed])
        )
        catalog.commit_snapshot(
            chunked_row(2, epoch),
            body([chunk_id(2), chunk_id(3)], [_inline(2, base=1), _inline(3, base=2)]),
        )
        assert catalog.sweep_chunks() == (0, {"job.1-e1.1-2.ab.pack"})
        assert catalog.packs() == {"job.1-e1.1-2.ab.pack"}
        catalog.delete_snapshot("job", 1)
        assert catalog.manifest("job", 1) is None
        # Chunk 3 is a delta on 2, itself on 1: all three stay; 4 goes with its pack.
        assert catalog.sweep_chunks() == (1, set())
        assert catalog.packs() == set()
        assert catalog.missing_chunks([chunk_id(n) for n in (1, 2, 3, 4)]) == {chunk_id(4)}
        catalog.delete_snapshot("job", 2)
        assert catalog.sweep_chunks() == (3, set())
        assert catalog.missing_chunks([chunk_id(n) for n in (1, 2, 3, 4)]) == {
            chunk_id(n) for n in (1, 2, 3, 4)
        }

    def test_a_swept_chunk_is_stored_again_by_the_next_body(
        self, catalog: Catalog, live_pid: int
    ) -> None:
        """A writer that found a chunk held, then lost it to a sweep before its commit,
        gets ChunksMissing; committing again with the chunk brought succeeds."""
        make_job(catalog)
        make_job(catalog, "old")
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        other = catalog.acquire_lease("old", live_owner(live_pid), 30)
        catalog.commit_snapshot(chunked_row(1, other, "old"), body([chunk_id(5)], [_inline(5)]))
        assert catalog.missing_chunks([chunk_id(5)]) == set()  # the writer looks...
        catalog.delete_snapshot("old", 1)
        assert catalog.sweep_chunks() == (1, set())  # ...a prune sweeps it...
        with pytest.raises(ChunksMissing):  # ...and the writer's commit is refused
            catalog.commit_snapshot(chunked_row(1, epoch), body([chunk_id(5)]))
        catalog.commit_snapshot(chunked_row(1, epoch), body([chunk_id(5)], [_inline(5)]))
        assert catalog.get_chunks([chunk_id(5)])[chunk_id(5)].data == b"data-5"

    @requires(Capability.JOBS)
    def test_deleting_a_job_drops_its_manifests(self, catalog: Catalog, live_pid: int) -> None:
        """delete_job drops the job's manifests; its chunks are then swept."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.commit_snapshot(chunked_row(1, epoch), body([chunk_id(1)], [_inline(1)]))
        catalog.release_lease("job", epoch)
        catalog.delete_job("job")
        assert catalog.manifest("job", 1) is None
        assert catalog.sweep_chunks() == (1, set())

    @requires(Capability.ADMIN)
    def test_a_fork_shares_the_chunks(self, catalog: Catalog, live_pid: int) -> None:
        """fork_job copies a chunked snapshot as its manifest (the same bytes): the chunks
        stay while either job lists them."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.commit_snapshot(chunked_row(1, epoch), body([chunk_id(1)], [_inline(1)]))
        catalog.release_lease("job", epoch)
        copy = chunked_row(1, 0, "fork")
        catalog.fork_job("job", 1, "fork", {1: copy}, 0)
        assert catalog.manifest("fork", 1) == manifest_of([chunk_id(1)])
        catalog.delete_job("job")
        assert catalog.sweep_chunks() == (0, set())
        assert catalog.missing_chunks([chunk_id(1)]) == set()
