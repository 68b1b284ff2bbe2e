"""A PreviewRunner that runs each preview in the test's own process, on any SourceCatalog (a
fake source's hooks and calls stay visible to the test): for tests whose subject is not where
previews run (tests/integration/test_preview_processes.py's is)."""

from __future__ import annotations

from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import Relation
from qexport.ports import (
    CatalogueJob,
    DescribeJob,
    PlanJob,
    PreviewCells,
    PreviewJob,
    SourceCatalog,
)
from qexport.previews.child import Job, answer


class InProcessPreviews:
    """Answers jobs as a preview process does (previews/child.py `answer`), without one."""

    def __init__(self, sources: SourceCatalog, *, budget: int = 512 * 1024**2) -> None:
        self.sources = sources
        self.budget = budget
        self.jobs: list[Job] = []

    def prepare(self) -> None:
        """Nothing to start."""

    def run(self, job: PreviewJob) -> PreviewCells:
        self.jobs.append(job)
        found = answer(self.sources, job, self.budget)
        if found.refusal is not None:
            raise found.refusal.error()
        assert found.cells is not None
        return found.cells

    def describe(self, job: DescribeJob) -> tuple[ResultColumn, ...]:
        self.jobs.append(job)
        found = answer(self.sources, job, self.budget)
        if found.refusal is not None:
            raise found.refusal.error()
        assert found.columns is not None
        return found.columns

    def relations(self, job: PlanJob) -> frozenset[Relation] | None:
        self.jobs.append(job)
        found = answer(self.sources, job, self.budget)
        if found.refusal is not None:
            raise found.refusal.error()
        assert found.planned
        return found.reads

    def catalogue(self, job: CatalogueJob) -> Catalogue | None:
        self.jobs.append(job)
        found = answer(self.sources, job, self.budget)
        if found.refusal is not None:
            raise found.refusal.error()
        assert found.catalogued
        return found.catalogue

    def close(self) -> None:
        """Nothing to stop."""
