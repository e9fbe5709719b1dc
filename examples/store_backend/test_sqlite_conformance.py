"""The catalog conformance suite (snapstate.testing) run against the SQLite catalog,
as another backend would run it against itself: a test class that inherits the specs
and says how to make a fresh, empty catalog and what it implements."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapstate.testing import (
    ALL_CAPABILITIES,
    BackendMaker,
    CatalogBackend,
    CatalogConformance,
)


class TestSqliteCatalog(CatalogConformance):
    @pytest.fixture
    def make_catalog_backend(self) -> BackendMaker:
        def make(scratch: Path) -> CatalogBackend:
            # A directory: SqliteCatalog creates it and its catalog.db on first open.
            return CatalogBackend(
                factory="snapstate.serializers._sqlite:SqliteCatalog",
                location=str(scratch / "store"),
                capabilities=ALL_CAPABILITIES,
            )

        return make
