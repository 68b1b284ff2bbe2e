"""Which workspaces may use a data source, and what a source's name means in each.

A source registered with `qexport sources add NAME URL --workspace W` (or by W's admins through
the API) belongs to W; the operator may share it with other named workspaces. A configured
source (QEXPORT_SOURCE_<NAME>) belongs to no workspace: only the workspaces listed in
QEXPORT_SOURCE_<NAME>_WORKSPACES may use it, every one of them with `*`.

Names are per workspace: two workspaces may each register a `warehouse`, and a query names its
source by a name that is looked up within the query's workspace only (`usable_in`). So that
a name means one source in a workspace, registering or sharing a name that the workspace can
already use is refused (services/sources.py), and what remains possible is settled in one
order: the workspace's own source, then a configured source granted to it (an operator's
grant added after the workspace registered its own name), then a source shared with it by
name, then one shared with every workspace; within one rank, the oldest. Alternatives
weighed: names unique across the installation (today's rule before this one) lets a member
learn, by registering, the names other workspaces use, and take a name before the workspace
that wants it; qualifying every name with its owner (`acme/warehouse`) in queries would make
a shared source's queries change when it is shared, and every saved query change now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

EVERY_WORKSPACE = "*"
AUDIT_SOURCE = "audit"  # sources/audit.py: each workspace's own trail, for its admins
BUILT_IN_OWNER = "built-in"  # what a listing says owns a configured source


def may_use(workspaces: Collection[str], workspace_id: str) -> bool:
    """Whether `workspace_id` is among `workspaces` (or they include every workspace)."""
    return EVERY_WORKSPACE in workspaces or workspace_id in workspaces


@dataclass(frozen=True)
class RegisteredSource:
    """A source kept in the metadata database, known by its owner and its name.

    `url` is as stored: clear, sealed (`v1:`/`v2:...`, encrypted with a key derived from
    QEXPORT_SECRET_KEY) or a reference to a variable of the worker's environment
    (`env:NAME`). A source registered before sources had owners has no `workspace_id`: until
    the operator shares it, no workspace may use it.
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

    @property
    def key(self) -> tuple[str, str]:
        """What tells it from every other registered source: its owner ('' for none), name."""
        return self.workspace_id or "", self.name

    def label(self) -> str:
        """`acme/warehouse`, as the operator's messages name it."""
        return f"{self.workspace_id or '(no workspace)'}/{self.name}"


# How strongly a source holds its name in a workspace: lower wins (see the module docstring).
_OWN, _CONFIGURED, _SHARED, _SHARED_WITH_EVERY = range(4)


def _rank(source: RegisteredSource, workspace_id: str) -> int | None:
    if source.workspace_id == workspace_id:
        return _OWN
    if workspace_id in source.shared_with:
        return _SHARED
    if may_use(source.workspaces, workspace_id):
        return _SHARED_WITH_EVERY
    return None


def usable_in(
    workspace_id: str,
    configured: Mapping[str, frozenset[str]],
    registered: Iterable[RegisteredSource],
) -> dict[str, RegisteredSource | None]:
    """Every name `workspace_id` may use, and the registered source it means there (None: the
    configured source of that name, whose grants are `configured`)."""
    best: dict[str, tuple[int, datetime | None, str, RegisteredSource | None]] = {
        name: (_CONFIGURED, None, "", None)
        for name, workspaces in configured.items()
        if may_use(workspaces, workspace_id)
    }
    for source in registered:
        rank = _rank(source, workspace_id)
        if rank is None:
            continue
        held = best.get(source.name)
        candidate = (rank, source.created_at, source.workspace_id or "", source)
        if held is None or _before(candidate[:3], held[:3]):
            best[source.name] = candidate
    return {name: held[3] for name, held in sorted(best.items())}


def _before(one: tuple[int, datetime | None, str], other: tuple[int, datetime | None, str]) -> bool:
    """Whether `one` holds a name more strongly than `other`: its rank, then its age."""
    if one[0] != other[0]:
        return one[0] < other[0]
    if one[1] is None or other[1] is None:
        return False
    return (one[1], one[2]) < (other[1], other[2])
