"""The title block's who and when: the requester's email and the workspace's time zone."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import structlog

from qexport.ports import UserStore, WorkspaceStore

log = structlog.get_logger()


def requester_label(accounts: UserStore, user_id: str) -> str:
    """The requester's email when the accounts store knows them, else their user id."""
    try:
        user = accounts.get_user(user_id)
    except Exception:
        log.warning("requester_lookup_failed", exc_info=True)
        return user_id
    return user.email if user is not None else user_id


def workspace_zone(accounts: WorkspaceStore, workspace_id: str) -> dt.tzinfo:
    """The workspace's time zone; UTC when unknown or unset."""
    try:
        name = accounts.workspace_timezone(workspace_id)
    except Exception:
        log.warning("workspace_timezone_lookup_failed", exc_info=True)
        return dt.UTC
    if not name:
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("workspace_timezone_unknown", timezone=name)
        return dt.UTC
