"""The export queue and the catalog as one object, for tests that drive both.

The product keeps them apart (the container holds each); a store test that requests an
export of a saved query finds it convenient to hold one object, on SQL as in the fake. Its
engine's audit chains are keyed with the tests' secret unless keys were given to it already
(bootstrap does that in the product).
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa

from qexport.domain.audit_keys import AuditKeyMissingError
from qexport.ports import Catalog, ExportQueue
from qexport.store.audit.chain import keys_for, use_keys
from qexport.store.catalog import SqlCatalog
from qexport.store.exports.queue import SqlExportQueue
from tests.fakes.audit import TEST_AUDIT_KEYS


class MetadataStore(ExportQueue, Catalog, Protocol):
    """Both ports, as one object (the SQL pair below and the in-memory fake)."""


class SqlMetadataStore(SqlExportQueue, SqlCatalog):
    """The SQL export queue and catalog over one engine."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        keyed(engine)
        SqlExportQueue.__init__(self, engine, notify=notify)


def keyed(engine: sa.Engine) -> sa.Engine:
    """`engine`, its audit chains keyed with the tests' secret unless it has keys already."""
    try:
        keys_for(engine)
    except AuditKeyMissingError:
        use_keys(engine, TEST_AUDIT_KEYS)
    return engine
