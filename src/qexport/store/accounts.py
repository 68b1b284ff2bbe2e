"""Accounts on SQLAlchemy Core: one store per concept (store/workspaces.py, users.py,
tokens.py, links.py, source_records.py), all over one engine, and their sum, which the
container hands out as the AccountStore."""

from __future__ import annotations

from qexport.store.links import SqlLinkStore
from qexport.store.source_records import SqlSourceRecordStore
from qexport.store.tokens import SqlTokenStore
from qexport.store.users import SqlUserStore
from qexport.store.workspaces import SqlWorkspaceStore


class SqlAccountStore(
    SqlWorkspaceStore, SqlUserStore, SqlTokenStore, SqlLinkStore, SqlSourceRecordStore
):
    """Workspaces, users and their roles, API tokens, public links and registered sources."""
