"""The metadata store a benchmark drives in its own process (saving queries, requesting
exports), its audit chains keyed as the installation's processes key theirs: with
QEXPORT_SECRET_KEY when the settings give one, else with the data directory's generated
secret (SQLite). Imported by the benchmarks beside it (`python bench/NAME.py`)."""

from __future__ import annotations

from qexport.bootstrap import audit_keys
from qexport.config import Settings
from qexport.store.audit.chain import use_keys
from qexport.store.catalog import SqlCatalog
from qexport.store.engine import create_engine, migrate
from qexport.store.exports.queue import SqlExportQueue


class SqlMetadataStore(SqlExportQueue, SqlCatalog):
    """The export queue and the catalog over one engine, as a benchmark drives both."""


def metadata_store(settings: Settings, *, upgrade: bool = False) -> SqlMetadataStore:
    """The installation's metadata store (its schema brought to the newest with `upgrade`)."""
    engine = create_engine(settings.database_url)
    if upgrade:
        migrate(engine)
    keys = audit_keys(settings)
    if keys is not None:
        use_keys(engine, keys)
    return SqlMetadataStore(engine)
