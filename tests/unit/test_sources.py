"""Registering sources, who may use them, and their credentials at rest, on the in-memory
account store."""

from __future__ import annotations

from pathlib import Path

import pytest

from qexport.config import Settings
from qexport.domain.accounts import Principal, Role
from qexport.domain.failures import (
    AccessLostError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    SourceUnavailableError,
)
from qexport.domain.sources import RegisteredSource
from qexport.ports import Source
from qexport.services import sources as service
from qexport.sources.credentials import SourceCredentialsError, seal, unseal
from qexport.sources.registry import (
    SourceRegistry,
    configured_grants,
    masked_url,
    usable_source_names,
    usable_sources_in,
)
from tests.fakes import FrozenClock, InMemoryAccountStore
from tests.unit.fakes import FakeSource

KEY = "a-secret-key-of-the-installation"


def _no_role_check(name: str, url: str, allow: bool) -> list[str]:
    return []


def _register(
    accounts: InMemoryAccountStore,
    clock: FrozenClock,
    name: str,
    url: str,
    workspace: str = "acme",
    *,
    settings: Settings | None = None,
    shared: frozenset[str] = frozenset(),
) -> list[str]:
    return service.register_source(
        accounts,
        clock,
        settings or Settings(),
        service.SourceRequest(name, url, workspace, shared),
        check_role=_no_role_check,
    )


# ---------------------------------------------------------------- registering


def test_a_source_belongs_to_its_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A registered source is usable by its workspace and the ones it is shared with only."""
    _register(accounts, clock, "shop", "duckdb:///data/shop.duckdb", shared=frozenset({"beta"}))
    settings = Settings()
    assert "shop" in usable_source_names(settings, accounts, "acme")
    assert "shop" in usable_source_names(settings, accounts, "beta")
    assert "shop" not in usable_source_names(settings, accounts, "gamma")
    service.share_source(accounts, settings, "shop", "beta", shared=False)
    assert "shop" not in usable_source_names(settings, accounts, "beta")
    service.share_source(accounts, settings, "shop", "*", shared=True)
    assert "shop" in usable_source_names(settings, accounts, "gamma")


def test_configured_sources_are_usable_only_where_the_operator_says(
    accounts: InMemoryAccountStore,
) -> None:
    """QEXPORT_SOURCE_<NAME> without _WORKSPACES is usable by no workspace; `*` by all; the
    demo source by the demo workspace."""
    settings = Settings.from_env(
        {
            "QEXPORT_SOURCE_WH": "duckdb:///srv/wh.duckdb",
            "QEXPORT_SOURCE_SALES": "duckdb:///srv/sales.duckdb",
            "QEXPORT_SOURCE_SALES_WORKSPACES": "acme, beta",
            "QEXPORT_SOURCE_ALL": "duckdb:///srv/all.duckdb",
            "QEXPORT_SOURCE_ALL_WORKSPACES": "*",
        }
    )
    assert set(settings.sources) == {"wh", "sales", "all"}
    assert configured_grants(settings)["wh"] == frozenset()
    assert usable_source_names(settings, accounts, "acme") == {"sales", "all"}
    assert usable_source_names(settings, accounts, "gamma") == {"all"}
    assert usable_source_names(settings, accounts, "demo") == {"demo", "all"}


@pytest.mark.parametrize(
    ("name", "url", "field"),
    [
        ("demo", "duckdb:///data/x.duckdb", "name"),
        ("Shop", "duckdb:///data/x.duckdb", "name"),
        ("../shop", "duckdb:///data/x.duckdb", "name"),
        ("", "duckdb:///data/x.duckdb", "name"),
        ("shop\n", "duckdb:///data/x.duckdb", "name"),
        ("shop", "duckdb://data/x.duckdb", "url"),
        ("shop", "duckdb:relative.duckdb", "url"),
        ("shop", "duckdb:///", "url"),
        ("shop", "ftp://u:hunter2@db/x", "url"),
        ("shop", "mysql://u:hunter2@db:99999/x", "url"),
        ("shop", "postgresql:db", "url"),
        ("shop", "postgresql://u:hunter2@db:99999/x", "url"),
        ("shop", "/data/x.duckdb", "url"),
    ],
)
def test_bad_sources_are_refused_without_echoing_passwords(
    accounts: InMemoryAccountStore, clock: FrozenClock, name: str, url: str, field: str
) -> None:
    """Bad names and URLs name their field; no message repeats a password."""
    with pytest.raises(InvalidRequestError) as refused:
        _register(accounts, clock, name, url)
    assert refused.value.field == field
    assert "hunter2" not in str(refused.value)
    assert accounts.registered_sources() == []


def test_two_workspaces_may_each_register_a_name(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """`warehouse` of acme and `warehouse` of beta are two sources: registering the second
    says nothing of the first, and each workspace's name means its own."""
    _register(accounts, clock, "warehouse", "duckdb:///data/acme.duckdb", "acme")
    _register(accounts, clock, "warehouse", "duckdb:///data/beta.duckdb", "beta")
    found = {s.workspace_id: s.url for s in accounts.registered_sources()}
    assert found == {"acme": "duckdb:///data/acme.duckdb", "beta": "duckdb:///data/beta.duckdb"}
    settings = Settings()
    for workspace in ("acme", "beta"):
        (meant,) = usable_sources_in(settings, accounts, workspace).values()
        assert meant is not None
        assert meant.workspace_id == workspace
    assert "warehouse" not in usable_source_names(settings, accounts, "gamma")


def test_a_name_is_registered_once_in_a_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A name the workspace already uses (its own source, a configured one granted to it, or
    one shared with it) is refused on `name`, saying which; the first stays."""
    settings = Settings.from_env(
        {"QEXPORT_SOURCE_WH": "duckdb:///srv/wh.duckdb", "QEXPORT_SOURCE_WH_WORKSPACES": "acme"}
    )
    _register(accounts, clock, "shop", "duckdb:///data/shop.duckdb", settings=settings)
    _register(accounts, clock, "crm", "duckdb:///data/crm.duckdb", "beta", settings=settings)
    service.share_source(accounts, settings, "crm", "acme", shared=True)
    for name, held in [
        ("shop", "its own source"),
        ("wh", "the configured source"),
        ("crm", "a source shared with it"),
    ]:
        with pytest.raises(InvalidRequestError) as refused:
            _register(accounts, clock, name, "duckdb:///data/x.duckdb", settings=settings)
        assert refused.value.field == "name"
        assert f"workspace 'acme' already has a source named {name!r} ({held})" in str(
            refused.value
        )
    assert {(s.workspace_id, s.name) for s in accounts.registered_sources()} == {
        ("acme", "shop"),
        ("beta", "crm"),
    }
    _register(accounts, clock, "wh", "duckdb:///data/wh-beta.duckdb", "beta", settings=settings)


def test_a_share_that_would_give_a_workspace_two_sources_of_one_name_is_refused(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Sharing acme's `warehouse` with beta, which has its own, is refused with a message
    saying so (nothing shared); sharing it with every workspace too; with gamma it holds. An
    ambiguous name needs --owner."""
    settings = Settings()
    _register(accounts, clock, "warehouse", "duckdb:///data/acme.duckdb", "acme")
    _register(accounts, clock, "warehouse", "duckdb:///data/beta.duckdb", "beta")
    with pytest.raises(InvalidRequestError, match="--owner WORKSPACE") as ambiguous:
        service.share_source(accounts, settings, "warehouse", "beta", shared=True)
    assert "(acme, beta)" in str(ambiguous.value)
    with pytest.raises(InvalidRequestError) as refused:
        service.share_source(accounts, settings, "warehouse", "beta", shared=True, owner="acme")
    assert "workspace 'beta' already has a source named 'warehouse' (its own source)" in str(
        refused.value
    )
    with pytest.raises(InvalidRequestError, match="already beta/warehouse"):
        service.share_source(accounts, settings, "warehouse", "*", shared=True, owner="acme")
    assert service.share_source(accounts, settings, "warehouse", "gamma", shared=True, owner="acme")
    shares = {s.workspace_id: s.shared_with for s in accounts.registered_sources()}
    assert shares == {"acme": {"gamma"}, "beta": frozenset()}
    with pytest.raises(NotFoundError):
        service.share_source(accounts, settings, "warehouse", "gamma", shared=True, owner="zeta")


def test_a_duckdb_file_backs_one_source(
    accounts: InMemoryAccountStore, clock: FrozenClock, tmp_path: Path
) -> None:
    """A second source on a file that already backs one (registered, or the built-in demo's;
    through a link too) is refused, naming the source to share instead; another file is not."""
    shop = tmp_path / "shop.duckdb"
    shop.touch()
    (tmp_path / "link.duckdb").symlink_to(shop)
    _register(accounts, clock, "shop", f"duckdb://{shop}")
    for url in (f"duckdb://{shop}", f"duckdb://{tmp_path}/link.duckdb"):
        with pytest.raises(InvalidRequestError) as refused:
            _register(accounts, clock, "shop_b", url, "beta")
        assert refused.value.field == "url"
        assert f"the file {shop} is already source 'shop'" in str(refused.value)
        assert "qexport sources share shop beta --owner acme" in str(refused.value)
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(InvalidRequestError) as demo:
        _register(accounts, clock, "demo2", f"duckdb://{settings.demo_database}", settings=settings)
    assert "is already source 'demo'" in str(demo.value)
    assert "(QEXPORT_SOURCE_DEMO_WORKSPACES)" in str(demo.value)
    _register(accounts, clock, "other", f"duckdb://{tmp_path}/other.duckdb", "beta")
    assert {s.name for s in accounts.registered_sources()} == {"shop", "other"}


# ---------------------------------------------------------------- credentials at rest


def test_a_url_is_stored_sealed_when_there_is_a_secret_key(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """With QEXPORT_SECRET_KEY the stored URL is `v2:` ciphertext without the password, and
    it opens back to the URL with the same key."""
    url = "postgresql://reader:hunter2@db/crm"
    settings = Settings(secret_key=KEY)
    _register(accounts, clock, "crm", "duckdb:///data/crm.duckdb", settings=settings)
    stored = seal("crm", url, KEY, owner="acme")
    assert stored.startswith("v2:")
    assert "hunter2" not in stored
    assert "reader" not in stored
    assert unseal("crm", stored, KEY, owner="acme") == url
    assert accounts.registered_sources()[0].url.startswith("v2:")
    shown = service.all_sources(accounts, settings)[-1].url
    assert shown == "duckdb:///data/crm.duckdb"


def test_a_changed_secret_key_is_a_clear_error() -> None:
    """A URL sealed under another key (or moved to another source's row, another
    workspace's source of the same name included) does not open, and the error says why
    without the URL."""
    stored = seal("crm", "postgresql://reader:hunter2@db/crm", KEY, owner="acme")
    with pytest.raises(SourceCredentialsError, match="QEXPORT_SECRET_KEY") as changed:
        unseal("crm", stored, "another-key", owner="acme")
    assert "hunter2" not in str(changed.value)
    with pytest.raises(SourceCredentialsError):
        unseal("other", stored, KEY, owner="acme")
    with pytest.raises(SourceCredentialsError):
        unseal("crm", stored, KEY, owner="beta")
    with pytest.raises(SourceCredentialsError, match="QEXPORT_SECRET_KEY"):
        unseal("crm", stored, "", owner="acme")


def test_an_env_reference_is_stored_as_a_reference() -> None:
    """`env:NAME` keeps the credential out of the database: each process reads the variable,
    and an unset one is a clear error."""
    assert seal("crm", "env:CRM_URL", KEY, owner="acme") == "env:CRM_URL"
    opened = unseal("crm", "env:CRM_URL", KEY, {"CRM_URL": "postgresql://db/crm"}, owner="acme")
    assert opened == "postgresql://db/crm"
    with pytest.raises(SourceCredentialsError, match=r"\$CRM_URL"):
        unseal("crm", "env:CRM_URL", KEY, {}, owner="acme")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@db:5432/crm", "postgresql://u:***@db:5432/crm"),
        ("postgresql://:hunter2@db/crm", "postgresql://:***@db/crm"),
        ("postgresql://u@db/crm?password=hunter2&sslmode=require", None),
        ("postgresql://u@db/crm?sslmode=require&%70assword=hunter2", None),  # libpq decodes keys
        ("postgresql://u@db/crm?PassWord=hunter2", "postgresql://u@db/crm?PassWord=***"),
        # libpq reads a password up to the `@`, past a `#` or `?` a URL parser stops at
        ("postgresql://u:#hunter2@db/crm", "postgresql://u:***@db/crm"),
        ("postgresql://u:12?hunter2@db/crm", "postgresql://u:***@db/crm"),
        ("postgresql://u:pw@db/crm?sslmode=require#&password=hunter2", None),
        ("postgresql://u@db/crm", "postgresql://u@db/crm"),
        ("duckdb:///data/shop.duckdb", "duckdb:///data/shop.duckdb"),
        ("postgresql://u:hunter2@db:99999/crm", None),
        (
            "sc://spark:15002/;token=hunter2;use_ssl=true",
            "sc://spark:15002/;token=***;use_ssl=true",
        ),
        ("sc://spark:443/;use_ssl=true;TOKEN=hunter2", "sc://spark:443/;use_ssl=true;TOKEN=***"),
        ("sc://spark:443/;token=ab?hunter2#x;user_id=r", "sc://spark:443/;token=***;user_id=r"),
        ("sc://spark:15002;token=hunter2", "sc://spark:15002;token=***"),
        ("sc://spark:15002/;user_id=reader", "sc://spark:15002/;user_id=reader"),
        ("sc://localhost", "sc://localhost"),
    ],
)
def test_masked_urls_hide_passwords_only(url: str, shown: str | None) -> None:
    """The password (a Spark Connect token too) goes, wherever it is; everything else stays
    readable."""
    masked = masked_url(url)
    assert "hunter2" not in masked
    if shown is not None:
        assert masked == shown


# ---------------------------------------------------------------- through the API service


def _principal(role: Role, workspace: str = "acme") -> Principal:
    return Principal("u1", "ann@acme.test", workspace, role, "t1")


@pytest.mark.parametrize(
    "url",
    [
        "duckdb:///srv/other-team.duckdb",
        "env:QEXPORT_DATABASE_URL",
        "postgresql://qexport@db/qexport",
        "postgresql:///qexport?host=/var/run/postgresql&password=x",
        "postgresql://reader:pw@db/crm?passfile=/home/qexport/.pgpass",
        "postgresql://reader:pw@db/crm?service=prod",
    ],
)
def test_a_workspace_admin_registers_only_a_postgresql_server_with_a_password(
    accounts: InMemoryAccountStore, clock: FrozenClock, url: str
) -> None:
    """Through the API, files, environment references, socket paths, passfiles and URLs
    without a password (which would log in as whatever qexport's machine is trusted as)
    are refused."""
    with pytest.raises(InvalidRequestError) as refused:
        service.register_member_source(
            accounts,
            clock,
            Settings(),
            _principal(Role.ADMIN),
            "crm",
            url,
            check_role=_no_role_check,
        )
    assert refused.value.field == "url"
    assert accounts.registered_sources() == []


@pytest.mark.parametrize("role", [Role.VIEWER, Role.EDITOR])
def test_only_admins_register_sources(
    accounts: InMemoryAccountStore, clock: FrozenClock, role: Role
) -> None:
    """Viewers and editors may not register a source."""
    with pytest.raises(ForbiddenError):
        service.register_member_source(
            accounts,
            clock,
            Settings(),
            _principal(role),
            "crm",
            "postgresql://reader:pw@db/crm",
            check_role=_no_role_check,
        )


def test_an_admin_registers_for_their_own_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The source an admin registers belongs to their workspace, shared with nobody, and
    connects to the address the egress policy checked (here opened by the operator)."""
    service.register_member_source(
        accounts,
        clock,
        Settings(egress_allow="10.0.0.0/8"),
        _principal(Role.ADMIN, "beta"),
        "crm",
        "postgresql://reader:pw@10.1.2.3:5432/crm?sslmode=require",
        check_role=_no_role_check,
    )
    (found,) = accounts.registered_sources()
    assert found.workspaces == {"beta"}
    assert not found.allow_privileged_role
    assert found.url.endswith("/crm?sslmode=require&hostaddr=10.1.2.3")


def test_an_admins_source_on_an_internal_address_is_refused(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Under the default egress policy a private address is 422 on `url`; nothing stored."""
    with pytest.raises(InvalidRequestError, match="egress policy") as refused:
        service.register_member_source(
            accounts,
            clock,
            Settings(),
            _principal(Role.ADMIN, "beta"),
            "crm",
            "postgresql://reader:pw@10.1.2.3:5432/crm",
            check_role=_no_role_check,
        )
    assert refused.value.field == "url"
    assert accounts.registered_sources() == []


# ---------------------------------------------------------------- the registry


class _Builds:
    """Builds fake sources and counts how often (a source is built once per process)."""

    def __init__(self) -> None:
        self.built: list[str] = []

    def __call__(self, source: RegisteredSource) -> Source:
        if not source.url.startswith("duckdb:///"):
            raise ValueError("unsupported")
        self.built.append(source.name)
        fake = FakeSource()
        fake.name = source.name
        return fake


def test_a_source_registered_later_is_found_at_the_next_lookup(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A worker's registry built before `sources add` finds the new source on a miss, and
    builds it only once."""
    demo = FakeSource()
    builds = _Builds()
    registry = SourceRegistry(
        {"demo": lambda: demo}, {"demo": frozenset({"demo"})}, accounts.registered_sources, builds
    )
    with pytest.raises(SourceUnavailableError):
        registry.source_for("shop", "acme")
    _register(accounts, clock, "shop", "duckdb:///data/shop.duckdb")
    shop = registry.source_for("shop", "acme")
    assert shop.name == "shop"
    assert registry.source_for("shop", "acme") is shop
    assert registry.source_for("demo", "demo") is demo
    assert builds.built == ["shop"]
    assert registry.names_for("acme") == ["shop"]
    assert registry.names_for("demo") == ["demo"]


def test_a_source_taken_away_is_access_lost_at_once(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A workspace that may no longer use a source (unshared, or never allowed) gets
    access_lost from the worker's registry, even for a source it used before."""
    registry = SourceRegistry(
        {"demo": FakeSource},
        configured_grants(Settings()),
        accounts.registered_sources,
        _Builds(),
    )
    _register(accounts, clock, "shop", "duckdb:///data/shop.duckdb", shared=frozenset({"beta"}))
    registry.source_for("shop", "beta")
    service.share_source(accounts, Settings(), "shop", "beta", shared=False)
    with pytest.raises(AccessLostError, match="'shop'"):
        registry.source_for("shop", "beta")
    with pytest.raises(AccessLostError):
        registry.source_for("demo", "acme")


def test_the_registry_finds_a_name_within_the_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """`source_for("warehouse", W)` is W's own warehouse (each built once), a shared one in
    the workspace it is shared with, and access_lost where the name means nothing; a
    workspace's own source wins over a configured one granted to it later."""
    builds = _Builds()
    demo = FakeSource()
    grants = {"demo": frozenset({"demo", "beta"})}
    registry = SourceRegistry({"demo": lambda: demo}, grants, accounts.registered_sources, builds)
    _register(accounts, clock, "warehouse", "duckdb:///data/acme.duckdb", "acme")
    _register(accounts, clock, "warehouse", "duckdb:///data/beta.duckdb", "beta")
    _register(accounts, clock, "demo2", "duckdb:///data/d.duckdb", "gamma")
    accounts.add_source(  # as if registered before the operator granted `demo` to beta
        RegisteredSource(
            "demo", "duckdb:///data/own-demo.duckdb", "beta", frozenset(), False, clock.now()
        )
    )
    acme, beta = registry.source_for("warehouse", "acme"), registry.source_for("warehouse", "beta")
    assert acme is not beta
    assert registry.source_for("warehouse", "acme") is acme
    accounts.share_source("acme", "warehouse", "gamma", shared=True)
    assert registry.source_for("warehouse", "gamma") is acme
    with pytest.raises(AccessLostError):
        registry.source_for("warehouse", "delta")
    assert registry.source_for("demo", "demo") is demo
    assert registry.source_for("demo", "beta") is not demo
    assert registry.names_for("beta") == ["demo", "warehouse"]
    assert registry.names_for("gamma") == ["demo2", "warehouse"]
    assert builds.built == ["warehouse", "warehouse", "demo"]


def test_an_unusable_registered_source_is_unavailable(accounts: InMemoryAccountStore) -> None:
    """A registered URL that no longer builds (edited behind qexport's back) is reported as
    unavailable, without its URL."""
    broken = RegisteredSource(
        "broken", "ftp://u:hunter2@x", "acme", frozenset(), False, FrozenClock().now()
    )
    accounts.add_source(broken)
    registry = SourceRegistry({}, {}, accounts.registered_sources, _Builds())
    with pytest.raises(SourceUnavailableError) as refused:
        registry.source_for("broken", "acme")
    assert "hunter2" not in str(refused.value)


def test_a_configured_source_may_be_allowed_a_privileged_role() -> None:
    """QEXPORT_SOURCE_<NAME>_ALLOW_PRIVILEGED_ROLE is read as a switch for that source, and a
    bad value names the variable."""
    env = {
        "QEXPORT_SOURCE_WH": "postgresql://root@db/wh",
        "QEXPORT_SOURCE_WH_ALLOW_PRIVILEGED_ROLE": "true",
        "QEXPORT_SOURCE_DW": "postgresql://reader@db/dw",
        "QEXPORT_SOURCE_DW_ALLOW_PRIVILEGED_ROLE": "no",
    }
    settings = Settings.from_env(env)
    assert settings.privileged_sources == {"wh"}
    assert set(settings.sources) == {"wh", "dw"}
    with pytest.raises(ValueError, match="QEXPORT_SOURCE_DW_ALLOW_PRIVILEGED_ROLE"):
        Settings.from_env({**env, "QEXPORT_SOURCE_DW_ALLOW_PRIVILEGED_ROLE": "maybe"})
