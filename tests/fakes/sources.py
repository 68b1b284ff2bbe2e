"""A SourceCatalog over sources given up front."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from qexport.domain.failures import (
    AccessLostError,
    SourceUnavailableError,
)
from qexport.domain.sources import EVERY_WORKSPACE, may_use
from qexport.ports import Source


class FixedSources:
    """A SourceCatalog over sources given up front that the listed workspaces (by default
    every one) may use: for tests whose subject is not who may use a source."""

    def __init__(
        self, sources: Mapping[str, Source], workspaces: Collection[str] = (EVERY_WORKSPACE,)
    ) -> None:
        self._sources = dict(sources)
        self._workspaces = frozenset(workspaces)

    def source_for(self, name: str, workspace_id: str) -> Source:
        found = self._sources.get(name)
        if found is None:
            raise SourceUnavailableError(f"no data source named {name!r} is configured")
        if not may_use(self._workspaces, workspace_id):
            raise AccessLostError(f"workspace {workspace_id!r} may not use source {name!r}")
        return found

    def names_for(self, workspace_id: str) -> list[str]:
        return sorted(self._sources) if may_use(self._workspaces, workspace_id) else []
