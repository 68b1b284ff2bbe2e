"""The export queue and the catalog as one object, for tests that drive both.

The product keeps them apart (the container holds each); a store test that requests an
export of a saved query finds it convenient to hold one object, on SQL as in the fake.
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa

from qexport.ports import Catalog, ExportQueue
from qexport.store.catalog import SqlCatalog
from qexport.store.exports import SqlExportQueue


class MetadataStore(ExportQueue, Catalog, Protocol):
    """Both ports, as one object (the SQL pair below and the in-memory fake)."""


class SqlMetadataStore(SqlExportQueue, SqlCatalog):
    """The SQL export queue and catalog over one engine."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        SqlExportQueue.__init__(self, engine, notify=notify)
