"""The migrations are named by their revision, which lets a process whose database is at the
newest schema start without loading Alembic (store/engine.py, `migrate`)."""

from __future__ import annotations

import re

from qexport.store.engine import MIGRATIONS, head_revision, newest_revision_by_name


def test_each_migration_file_is_named_by_its_revision() -> None:
    for path in sorted((MIGRATIONS / "versions").glob("[0-9]*_*.py")):
        revision = re.search(r'^revision = "([^"]+)"$', path.read_text(), re.M)
        assert revision is not None, path.name
        assert path.name.startswith(f"{revision.group(1)}_"), path.name


def test_the_newest_by_name_is_alembics_head() -> None:
    assert newest_revision_by_name() == head_revision()
