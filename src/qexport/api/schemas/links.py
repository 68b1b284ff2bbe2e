"""Public links to an export's file."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class LinkRequest(BaseModel):
    """How long a new link lives (optional): never past its file's expiry, nor past what the
    workspace's policy allows."""

    model_config = ConfigDict(extra="forbid")

    expires_in_days: int | None = Field(
        None, ge=1, le=36_500, description="Days the link works; left out: until the file expires"
    )


class CreatedLink(BaseModel):
    """A public delivery link; the token in `url` is shown only this once."""

    id: str
    url: str
    expires_at: datetime


class LinkItem(BaseModel):
    """A live public link: its URL is never shown again (only its hash is kept)."""

    id: str
    export_id: str = Field(description="The export whose file it shares")
    created_by: str = Field(description="The user id of whoever created it")
    created_at: datetime
    expires_at: datetime | None = Field(description="When the export's file expires, and it")
    last_used_at: datetime | None = Field(
        description="When it last served the file (to the minute); null if it never did"
    )


class LinkList(BaseModel):
    items: list[LinkItem]
