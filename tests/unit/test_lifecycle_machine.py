"""The lifecycle state machine against the in-memory store (the fast unit layer)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.fakes import InMemoryMetadataStore
from tests.support.lifecycle_machine import LifecycleMachine
from tests.support.stores import MetadataStore


class InMemoryLifecycle(LifecycleMachine):
    def make_store(self) -> MetadataStore:
        return InMemoryMetadataStore()


InMemoryLifecycle.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestInMemoryLifecycle = InMemoryLifecycle.TestCase
