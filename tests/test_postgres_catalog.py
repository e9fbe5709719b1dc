"""The catalog conformance suite (snapstate.testing), unchanged, against the PostgreSQL
catalog on a real server (tests/pgserver.py): a fresh database per test."""

from __future__ import annotations

from pathlib import Path

import pgserver
import pytest

from snapstate.testing import ALL_CAPABILITIES, BackendMaker, CatalogBackend, CatalogConformance


class TestPostgresCatalog(CatalogConformance):
    @pytest.fixture
    def make_catalog_backend(self) -> BackendMaker:
        def make(scratch: Path) -> CatalogBackend:
            url = pgserver.create_database()
            return CatalogBackend(
                factory="snapstate.serializers._postgres:PostgresCatalog",
                location=url,
                capabilities=ALL_CAPABILITIES,
                cleanup=lambda: pgserver.drop_database(url),
            )

        return make


def test_a_claim_skips_a_job_another_claimer_holds_instead_of_waiting():
    """FOR UPDATE SKIP LOCKED: while another transaction holds the job's row (a claim in
    progress), claim_job returns False at once instead of waiting for it; afterwards
    the job is claimed as usual."""
    import time

    import psycopg

    from snapstate.serializers._postgres import PostgresCatalog
    from snapstate.serializers._store import Owner

    with pgserver.fresh_database() as url:
        catalog = PostgresCatalog(url)
        try:
            catalog.create_job("j", {"module": "m", "function": "main"}, [])
            me = Owner.me()
            with psycopg.connect(url) as other, other.transaction():
                other.execute("SELECT 1 FROM jobs WHERE job_id = 'j' FOR UPDATE")
                started = time.monotonic()
                assert catalog.claim_job("j", me, 30) is False
                assert time.monotonic() - started < 2
            assert catalog.claim_job("j", me, 30) is True
        finally:
            catalog.close()
