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
