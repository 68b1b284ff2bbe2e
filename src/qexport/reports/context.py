"""The title block's who and when: the requester's email and the workspace's time zone."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
import structlog

from qexport.ports import MetadataStore
from qexport.store.accounts import SqlAccountStore
from qexport.store.exports import SqlMetadataStore
from qexport.store.tables import workspaces

log = structlog.get_logger()


def requester_label(store: MetadataStore, user_id: str) -> str:
    """The requester's email when the accounts store knows them, else their user id."""
    if not isinstance(store, SqlMetadataStore):
        return user_id
    try:
        user = SqlAccountStore(store.engine).get_user(user_id)
    except sa.exc.SQLAlchemyError:  # a title block is not worth failing the export for
        log.warning("requester_lookup_failed", exc_info=True)
        return user_id
    return user.email if user is not None else user_id


def workspace_zone(store: MetadataStore, workspace_id: str) -> dt.tzinfo:
    """The workspace's time zone (workspaces.timezone); UTC when unknown or unset."""
    if not isinstance(store, SqlMetadataStore):
        return dt.UTC
    try:
        with store.engine.connect() as conn:
            name = conn.execute(
                sa.select(workspaces.c.timezone).where(workspaces.c.id == workspace_id)
            ).scalar()
    except sa.exc.SQLAlchemyError:
        log.warning("workspace_timezone_lookup_failed", exc_info=True)
        return dt.UTC
    if not name:
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("workspace_timezone_unknown", timezone=name)
        return dt.UTC
