"""Which workspaces may use a data source: its owner, and those the operator shares it with.

A source registered with `qexport sources add NAME URL --workspace W` (or by W's admins through
the API) belongs to W; the operator may share it with other named workspaces. A configured
source (QEXPORT_SOURCE_<NAME>) belongs to no workspace: only the workspaces listed in
QEXPORT_SOURCE_<NAME>_WORKSPACES may use it, every one of them with `*`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

EVERY_WORKSPACE = "*"


def may_use(workspaces: Collection[str], workspace_id: str) -> bool:
    """Whether `workspace_id` is among `workspaces` (or they include every workspace)."""
    return EVERY_WORKSPACE in workspaces or workspace_id in workspaces


@dataclass(frozen=True)
class RegisteredSource:
    """A source kept in the metadata database.

    `url` is as stored: clear, sealed (`v1:...`, encrypted with a key derived from
    QEXPORT_SECRET_KEY) or a reference to a variable of the worker's environment (`env:NAME`).
    A source registered before sources had owners has no `workspace_id`: until the operator
    shares it, no workspace may use it.
    """

    name: str
    url: str
    workspace_id: str | None
    shared_with: frozenset[str]
    allow_privileged_role: bool
    created_at: datetime

    @property
    def workspaces(self) -> frozenset[str]:
        """Every workspace that may use the source."""
        owner = {self.workspace_id} if self.workspace_id else set()
        return frozenset(owner) | self.shared_with
