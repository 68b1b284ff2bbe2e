"""Where the audit trail's keys come from: QEXPORT_SECRET_KEY (and its former values), or on
the embedded default a secret generated once into the data directory, never the database."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from qexport.bootstrap import AUDIT_SECRET_FILE, audit_keys
from qexport.config import Settings
from qexport.domain.audit_keys import AuditKeys


def test_the_embedded_default_generates_one_secret_into_the_data_directory(
    tmp_path: Path,
) -> None:
    """Without QEXPORT_SECRET_KEY, processes starting at once all get the one secret written
    0600 into the data directory; it is not the database's generated secret, and it stays a
    former key once QEXPORT_SECRET_KEY is set, so that what it keyed still verifies."""
    settings = Settings(data_dir=tmp_path / "data")
    start = threading.Barrier(6)
    found: list[AuditKeys | None] = []

    def load() -> None:
        start.wait()
        found.append(audit_keys(settings))

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = {keys.current.key_id for keys in found if keys is not None}
    assert len(ids) == 1
    path = settings.data_dir / AUDIT_SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text()) == 64
    assert sorted(p.name for p in settings.data_dir.iterdir()) == [AUDIT_SECRET_FILE]

    (generated,) = ids
    own = "the operator's own secret"
    chosen = Settings(data_dir=settings.data_dir, secret_key=own)
    keys = audit_keys(chosen)
    assert keys is not None
    assert keys.current.key_id != generated
    assert keys.find(generated) is not None


def test_former_secrets_verify_and_postgresql_without_the_secret_has_no_keys(
    tmp_path: Path,
) -> None:
    """QEXPORT_SECRET_KEY_PREVIOUS gives the former secrets (each once, never the current
    one); on PostgreSQL without QEXPORT_SECRET_KEY there are no keys, so nothing is keyed
    with a secret that another machine would not have; an emptied secret file is refused."""
    new, former = "new", "old, older,new,,old"
    settings = Settings(data_dir=tmp_path, secret_key=new, secret_key_previous=former)
    keys = audit_keys(settings)
    assert keys is not None
    assert keys.key_ids == AuditKeys.from_secrets("new", ["old", "older"]).key_ids
    on_postgresql = Settings(data_dir=tmp_path, database_url="postgresql://q@127.0.0.1/q")
    assert audit_keys(on_postgresql) is None
    (tmp_path / AUDIT_SECRET_FILE).write_text("\n")
    with pytest.raises(ValueError, match="is empty: restore it from a backup"):
        audit_keys(Settings(data_dir=tmp_path))
