"""The only schema definition, a module per family of tables. Migrations under
`store/migrations/` create exactly this.

Every table joins one MetaData, `metadata` (tables/base.py); importing this package imports
every family, so that `metadata` is always the whole schema (Alembic's env and the schema
test compare it with the database) and every foreign key finds its table.
"""

from __future__ import annotations

from qexport.store.tables import (  # noqa: F401 - each family adds its tables to `metadata`
    accounts,
    approvals,
    audit,
    catalog,
    exports,
    schedules,
    sources,
)
from qexport.store.tables.base import metadata

__all__ = ["metadata"]
