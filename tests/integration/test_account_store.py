"""The AccountStore contract: workspaces, users, roles, tokens, links and sources, on every
backend (in memory, SQLite, and PostgreSQL where configured), so the fake cannot drift."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from qexport.domain.access import pre_run_refusal
from qexport.domain.accounts import (
    LAST_USED_RESOLUTION,
    Role,
    Standing,
    hash_secret,
    new_api_token,
    parse_api_token,
)
from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import ConflictError, FailureCode, InvalidRequestError, NotFoundError
from qexport.domain.queries import Query
from qexport.domain.sign_in import FailureCounts, Failures
from qexport.domain.sources import RegisteredSource
from qexport.ports import AccountStore, NewExport
from qexport.store.accounts import SqlAccountStore
from tests.fakes import FrozenClock, InMemoryAccountStore, InMemoryMetadataStore
from tests.support.factories import new_export
from tests.support.stores import MetadataStore, SqlMetadataStore

STAND_IN_HASH = "$argon2id$v=19$stand-in"  # opaque to the store


@dataclass
class Backend:
    accounts: AccountStore
    store: MetadataStore


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def accounts_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Accounts and exports on one backend (links refer to exports; claims read members)."""
    if request.param == "memory":
        accounts = InMemoryAccountStore()
        yield Backend(accounts, InMemoryMetadataStore(standing=accounts.standing))
        return
    store = request.getfixturevalue(f"{request.param}_store")
    assert isinstance(store, SqlMetadataStore)
    yield Backend(SqlAccountStore(store.engine), store)


@pytest.fixture
def account_store(accounts_backend: Backend) -> AccountStore:
    return accounts_backend.accounts


def _secret(token: str) -> str:
    """The token's random part (which may itself contain `_`)."""
    parsed = parse_api_token(token)
    assert parsed is not None
    return parsed[1]


def _member(
    accounts: AccountStore, clock: FrozenClock, email: str, workspace: str, role: Role
) -> str:
    accounts.ensure_workspace(workspace, now=clock.now())
    user = accounts.find_user(email) or accounts.create_user(
        email, password_hash=None, now=clock.now()
    )
    accounts.set_role(workspace, user.id, role)
    return user.id


# ---------------------------------------------------------------- workspaces and users


def test_a_workspace_is_created_once(account_store: AccountStore, clock: FrozenClock) -> None:
    """ensure_workspace says whether it created the workspace; a second call changes nothing."""
    assert not account_store.workspace_exists("acme")
    assert account_store.ensure_workspace("acme", now=clock.now()) is True
    assert account_store.ensure_workspace("acme", now=clock.now()) is False
    assert account_store.workspace_exists("acme")


def test_a_password_hash_is_replaced(account_store: AccountStore, clock: FrozenClock) -> None:
    """set_password replaces the user's hash (None removes it) and ends their sessions; an
    unknown user is False."""
    user = account_store.create_user("ann@acme.test", password_hash=None, now=clock.now())
    assert account_store.set_password(user.id, STAND_IN_HASH) is True
    found = account_store.find_user("ann@acme.test")
    assert found is not None
    assert found.password_hash == STAND_IN_HASH
    assert account_store.set_password(user.id, None) is True
    assert account_store.get_user(user.id) == replace(user, password_hash=None, session_epoch=2)
    assert account_store.set_password("nobody", STAND_IN_HASH) is False


def test_users_are_found_by_id_and_email(account_store: AccountStore, clock: FrozenClock) -> None:
    """A created user reads back whole, password hash included, by id and by email."""
    user = account_store.create_user("ann@acme.test", password_hash=STAND_IN_HASH, now=clock.now())
    assert account_store.get_user(user.id) == user
    assert account_store.find_user("ann@acme.test") == user
    assert user.password_hash == STAND_IN_HASH
    assert user.created_at == clock.now()
    assert account_store.get_user("nobody") is None
    assert account_store.find_user("nobody@acme.test") is None


def test_a_chosen_user_id_is_kept(account_store: AccountStore, clock: FrozenClock) -> None:
    """create_user takes an id when given one (the local CLI user keeps its name)."""
    user = account_store.create_user(
        "alice@acme.test", password_hash=None, now=clock.now(), user_id="alice"
    )
    assert user.id == "alice"
    assert account_store.get_user("alice") == user


def test_an_email_is_taken_once(account_store: AccountStore, clock: FrozenClock) -> None:
    """A second user with the same email is refused (field "email"); the first is unchanged."""
    first = account_store.create_user("ann@acme.test", password_hash=None, now=clock.now())
    with pytest.raises(InvalidRequestError) as refused:
        account_store.create_user("ann@acme.test", password_hash=STAND_IN_HASH, now=clock.now())
    assert refused.value.field == "email"
    assert account_store.find_user("ann@acme.test") == first


def test_roles_are_given_changed_and_removed(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """set_role adds a membership or changes its role; remove_member ends it, once."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    assert account_store.role_of("acme", ann) is Role.VIEWER
    account_store.set_role("acme", ann, Role.ADMIN)
    assert account_store.role_of("acme", ann) is Role.ADMIN
    assert account_store.remove_member("acme", ann) is True
    assert account_store.remove_member("acme", ann) is False
    assert account_store.role_of("acme", ann) is None


def test_memberships_and_members_are_listed_in_order(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """A user's memberships by workspace; a workspace's members by user id."""
    ann = _member(account_store, clock, "ann@acme.test", "zeta", Role.EDITOR)
    _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    bob = _member(account_store, clock, "bob@acme.test", "acme", Role.ADMIN)
    assert [(m.workspace_id, m.role) for m in account_store.memberships_of(ann)] == [
        ("acme", Role.VIEWER),
        ("zeta", Role.EDITOR),
    ]
    members = account_store.members("acme")
    assert [m.user_id for m in members] == sorted([ann, bob])
    assert {m.user_id: m.role for m in members} == {ann: Role.VIEWER, bob: Role.ADMIN}
    assert account_store.members("nowhere") == []


def test_a_member_is_read_with_their_role_in_that_workspace_only(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """member gives the user with their role in the workspace asked about: None as the role
    outside it or once removed, the current role after a change, None for an unknown user."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    account_store.ensure_workspace("other", now=clock.now())
    found = account_store.member("acme", ann)
    assert found is not None
    assert (found.user.id, found.user.email, found.role) == (ann, "ann@acme.test", Role.EDITOR)
    outside = account_store.member("other", ann)
    assert outside is not None
    assert (outside.user.id, outside.role) == (ann, None)
    account_store.set_role("acme", ann, Role.VIEWER)
    assert account_store.member("acme", ann) == replace(found, role=Role.VIEWER)
    account_store.remove_member("acme", ann)
    removed = account_store.member("acme", ann)
    assert removed is not None
    assert removed.role is None
    assert removed.user.session_epoch == found.user.session_epoch + 1
    assert account_store.member("acme", "nobody") is None


# ---------------------------------------------------------------- API tokens


def _token(
    accounts: AccountStore, clock: FrozenClock, user_id: str, workspace: str = "acme"
) -> str:
    token_id, _token_text, secret_hash = new_api_token()
    accounts.add_token(
        token_id=token_id,
        user_id=user_id,
        workspace_id=workspace,
        secret_hash=secret_hash,
        now=clock.now(),
    )
    return token_id


def test_a_token_reads_back_with_its_hash(account_store: AccountStore, clock: FrozenClock) -> None:
    """A token is stored with its owner, workspace, time and secret hash; unknown ids are None."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    token_id, token, secret_hash = new_api_token()
    account_store.add_token(
        token_id=token_id,
        user_id=ann,
        workspace_id="acme",
        secret_hash=secret_hash,
        now=clock.now(),
    )
    stored = account_store.get_token(token_id)
    assert stored is not None
    assert (stored.user_id, stored.workspace_id, stored.created_at) == (ann, "acme", clock.now())
    assert stored.secret_hash == secret_hash == hash_secret(_secret(token))
    assert stored.last_used_at is None
    assert stored.revoked_at is None
    assert account_store.get_token("0000000000000000") is None


def test_a_token_is_read_with_its_user_and_their_role(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """token_holder gives the token as get_token does, its user, and the user's role in the
    token's workspace (not another's): revoked, disabled and removed show as such; an
    unknown id is None."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    _member(account_store, clock, "ann@acme.test", "other", Role.ADMIN)
    token_id = _token(account_store, clock, ann)
    holder = account_store.token_holder(token_id)
    assert holder is not None
    assert holder.token == account_store.get_token(token_id)
    assert (holder.member.user, holder.member.role) == (account_store.get_user(ann), Role.EDITOR)
    account_store.set_disabled(ann, disabled_at=clock.now())
    account_store.remove_member("acme", ann)
    account_store.revoke_token(token_id, now=clock.now())
    ended = account_store.token_holder(token_id)
    assert ended is not None
    assert ended.token.revoked_at == clock.now()
    assert ended.member.user.disabled
    assert ended.member.role is None
    assert account_store.token_holder("0000000000000000") is None


def test_a_users_tokens_are_listed_oldest_first(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """list_tokens gives only that user's tokens, in creation order."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    bob = _member(account_store, clock, "bob@acme.test", "acme", Role.EDITOR)
    first = _token(account_store, clock, ann)
    clock.advance(1)
    _token(account_store, clock, bob)
    clock.advance(1)
    second = _token(account_store, clock, ann)
    assert [t.id for t in account_store.list_tokens(ann)] == [first, second]
    assert account_store.list_tokens("nobody") == []


def test_last_use_is_recorded_at_most_once_a_minute(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """touch_token records the time of use, then not again within LAST_USED_RESOLUTION."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    token_id = _token(account_store, clock, ann)
    first_use = clock.now()
    account_store.touch_token(token_id, now=first_use)
    clock.advance(LAST_USED_RESOLUTION.total_seconds() / 2)
    account_store.touch_token(token_id, now=clock.now())
    assert _last_used(account_store, token_id) == first_use
    clock.advance(LAST_USED_RESOLUTION.total_seconds())
    account_store.touch_token(token_id, now=clock.now())
    assert _last_used(account_store, token_id) == clock.now()


def _last_used(accounts: AccountStore, token_id: str) -> object:
    token = accounts.get_token(token_id)
    assert token is not None
    return token.last_used_at


def test_a_token_is_revoked_once(account_store: AccountStore, clock: FrozenClock) -> None:
    """revoke_token stamps the time once; again, or for an unknown id, it returns False."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.EDITOR)
    token_id = _token(account_store, clock, ann)
    assert account_store.revoke_token(token_id, now=clock.now()) is True
    revoked_at = clock.now()
    clock.advance(60)
    assert account_store.revoke_token(token_id, now=clock.now()) is False
    assert account_store.revoke_token("0000000000000000", now=clock.now()) is False
    token = account_store.get_token(token_id)
    assert token is not None
    assert token.revoked_at == revoked_at


# ---------------------------------------------------------------- public links


def test_links_are_found_by_id_and_hash_and_revoked_once(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """A link reads back by id and by its token's hash; it is revoked once."""
    export = accounts_backend.store.insert_export(new_export(clock.now(), "acme"))
    link = accounts_backend.accounts.add_link(
        export_id=export.id, created_by="ann", token_hash=hash_secret("s1"), now=clock.now()
    )
    assert accounts_backend.accounts.get_link(link.id) == link
    assert accounts_backend.accounts.find_link(hash_secret("s1")) == link
    assert accounts_backend.accounts.find_link(hash_secret("s2")) is None
    assert (link.export_id, link.created_by, link.revoked_at) == (export.id, "ann", None)
    assert accounts_backend.accounts.revoke_link(link.id, now=clock.now()) is True
    assert accounts_backend.accounts.revoke_link(link.id, now=clock.now()) is False
    assert accounts_backend.accounts.revoke_link("nope", now=clock.now()) is False
    revoked = accounts_backend.accounts.get_link(link.id)
    assert revoked is not None
    assert revoked.revoked_at == clock.now()


def test_an_exports_live_links_are_listed_oldest_first(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """list_links holds the export's unrevoked links only, oldest first; another export's
    links are not among them."""
    export = accounts_backend.store.insert_export(new_export(clock.now(), "acme"))
    other = accounts_backend.store.insert_export(new_export(clock.now(), "acme"))
    accounts = accounts_backend.accounts
    first = accounts.add_link(
        export_id=export.id, created_by="ann", token_hash=hash_secret("a"), now=clock.now()
    )
    clock.advance(1)
    second = accounts.add_link(
        export_id=export.id, created_by="bob", token_hash=hash_secret("b"), now=clock.now()
    )
    accounts.add_link(
        export_id=other.id, created_by="ann", token_hash=hash_secret("c"), now=clock.now()
    )
    revoked = accounts.add_link(
        export_id=export.id, created_by="ann", token_hash=hash_secret("d"), now=clock.now()
    )
    accounts.revoke_link(revoked.id, now=clock.now())
    assert accounts.list_links(export.id) == [first, second]
    assert accounts.list_links("no-such-export") == []


def test_links_are_found_by_the_start_of_their_id(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """links_starting holds the unrevoked links whose id starts so, by id, whatever their
    export's workspace; a start of no live link's id finds none."""
    export = accounts_backend.store.insert_export(new_export(clock.now(), "acme"))
    other = accounts_backend.store.insert_export(new_export(clock.now(), "beta"))
    accounts = accounts_backend.accounts
    made = [
        accounts.add_link(
            export_id=(export if n % 2 else other).id,
            created_by="ann",
            token_hash=hash_secret(f"t{n}"),
            now=clock.now(),
        )
        for n in range(6)
    ]
    accounts.revoke_link(made[0].id, now=clock.now())
    live = sorted(made[1:], key=lambda link: link.id)
    assert accounts.links_starting("") == live
    for link in live:
        start = link.id[:4]
        assert accounts.links_starting(start) == [f for f in live if f.id.startswith(start)]
    assert accounts.links_starting(made[1].id) == [made[1]]
    assert accounts.links_starting(made[0].id) == []
    assert accounts.links_starting("zzzz") == []


def test_a_links_last_use_is_written_at_most_once_per_window(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """touch_link writes `last_used_at` unless it was already written at or after the
    window's start: a link downloaded in a loop writes once a minute."""
    export = accounts_backend.store.insert_export(new_export(clock.now(), "acme"))
    accounts = accounts_backend.accounts
    link = accounts.add_link(
        export_id=export.id, created_by="ann", token_hash=hash_secret("a"), now=clock.now()
    )
    assert link.last_used_at is None
    first = clock.now()
    assert accounts.touch_link(link.id, now=first, unless_since=first - timedelta(minutes=1))
    clock.advance(30)
    soon = clock.now()
    assert not accounts.touch_link(link.id, now=soon, unless_since=soon - timedelta(minutes=1))
    assert accounts.list_links(export.id)[0].last_used_at == first
    clock.advance(31)
    later = clock.now()
    assert accounts.touch_link(link.id, now=later, unless_since=later - timedelta(minutes=1))
    found = accounts.find_link(hash_secret("a"))
    assert found is not None
    assert found.last_used_at == later
    assert not accounts.touch_link("nope", now=later, unless_since=later)


# ---------------------------------------------------------------- registered sources


def _source(name: str, url: str, clock: FrozenClock, **changes: Any) -> RegisteredSource:
    values: dict[str, Any] = {
        "name": name,
        "url": url,
        "workspace_id": "acme",
        "shared_with": frozenset(),
        "allow_privileged_role": False,
        "created_at": clock.now(),
    }
    return RegisteredSource(**{**values, **changes})


def test_sources_are_registered_once_per_workspace_and_name(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """Registered sources list by name, then workspace, with their owner, shares and
    privileged-role flag; another workspace may register a name, the same workspace not
    (field "name"), and the first is kept."""
    shop = _source("shop", "duckdb:///data/shop.duckdb", clock, shared_with=frozenset({"beta"}))
    crm = _source("crm", "v2:sealed", clock, workspace_id="beta", allow_privileged_role=True)
    beta_shop = _source("shop", "duckdb:///data/beta.duckdb", clock, workspace_id="beta")
    account_store.add_source(shop)
    account_store.add_source(crm)
    account_store.add_source(beta_shop)
    with pytest.raises(InvalidRequestError) as refused:
        account_store.add_source(_source("shop", "duckdb:///elsewhere.duckdb", clock))
    assert refused.value.field == "name"
    assert account_store.registered_sources() == [crm, shop, beta_shop]


def test_sharing_a_source_is_recorded(account_store: AccountStore, clock: FrozenClock) -> None:
    """Sharing and unsharing change who may use one workspace's source, not another's of the
    same name; doing it twice changes nothing; an unknown source is not found."""
    account_store.add_source(_source("shop", "duckdb:///data/shop.duckdb", clock))
    account_store.add_source(_source("shop", "duckdb:///data/g.duckdb", clock, workspace_id="g"))
    assert account_store.share_source("acme", "shop", "beta", shared=True)
    assert not account_store.share_source("acme", "shop", "beta", shared=True)
    found = {s.workspace_id: s.workspaces for s in account_store.registered_sources()}
    assert found == {"acme": {"acme", "beta"}, "g": {"g"}}
    assert account_store.share_source("acme", "shop", "beta", shared=False)
    assert not account_store.share_source("acme", "shop", "beta", shared=False)
    found = {s.workspace_id: s.workspaces for s in account_store.registered_sources()}
    assert found == {"acme": {"acme"}, "g": {"g"}}
    with pytest.raises(NotFoundError):
        account_store.share_source("acme", "nope", "beta", shared=True)
    with pytest.raises(NotFoundError):
        account_store.share_source("beta", "shop", "gamma", shared=True)


# ---------------------------------------------------------------- standing, as claims see it


def test_a_removed_member_s_queued_export_is_refused(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """The pre-run check reads memberships from the same store: once its requester leaves a
    registered workspace, a queued export settles failed/access_lost instead of running."""
    accounts, store = accounts_backend.accounts, accounts_backend.store
    _member(accounts, clock, "alice@acme.test", "acme", Role.VIEWER)
    user = accounts.find_user("alice@acme.test")
    assert user is not None
    store.add_query(Query("q1", "acme", "orders", "SELECT 1", "demo"))
    kept = store.insert_export(_requested_by(new_export(clock.now(), "acme"), user.id))
    result = store.claim_next(worker_id="w", now=clock.now(), lease_seconds=30, admit=_admit)
    assert result.claimed is not None
    assert result.claimed.id == kept.id

    clock.advance(1)
    refused = store.insert_export(_requested_by(new_export(clock.now(), "acme"), user.id))
    accounts.remove_member("acme", user.id)
    result = store.claim_next(
        worker_id="w", now=clock.now() + timedelta(seconds=1), lease_seconds=30, admit=_admit
    )
    assert result.refused is not None
    assert result.refused.id == refused.id
    record = store.get_export(refused.id)
    assert record is not None
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.ACCESS_LOST)


def test_a_disabled_users_queued_export_is_refused(
    accounts_backend: Backend, clock: FrozenClock
) -> None:
    """Disabling a user stops their queued exports too: the claim sees the account disabled
    and the worker's pre-run check settles the export failed/access_lost, saying why."""
    accounts, store = accounts_backend.accounts, accounts_backend.store
    _member(accounts, clock, "alice@acme.test", "acme", Role.VIEWER)
    user = accounts.find_user("alice@acme.test")
    assert user is not None
    store.add_query(Query("q1", "acme", "orders", "SELECT 1", "demo"))
    queued = store.insert_export(_requested_by(new_export(clock.now(), "acme"), user.id))
    accounts.set_disabled(user.id, disabled_at=clock.now())
    result = store.claim_next(
        worker_id="w",
        now=clock.now() + timedelta(seconds=1),
        lease_seconds=30,
        admit=pre_run_refusal,
    )
    assert result.refused is not None
    assert result.refused.id == queued.id
    record = store.get_export(queued.id)
    assert record is not None
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.ACCESS_LOST)
    assert record.failure_detail == "the requester's account is disabled"


def _requested_by(new: NewExport, user_id: str) -> NewExport:
    return replace(new, requested_by=user_id)


def _admit(_record: ExportRecord, query: Query | None, standing: Standing) -> str | None:
    """The worker's rule, reduced to what the store supplies: a query and a member."""
    return None if query is not None and standing.member else "not a member"


def test_webhook_hosts_are_stored_per_workspace_and_lifted(account_store: AccountStore) -> None:
    """A workspace's webhook hosts read back as set, others stay unrestricted (None), None
    lifts them, and an unknown workspace is reported (False)."""
    now = FrozenClock().now()
    account_store.ensure_workspace("acme", now=now)
    account_store.ensure_workspace("other", now=now)
    assert account_store.workspace_webhook_hosts("acme") is None

    assert account_store.set_workspace_webhook_hosts("acme", ("hooks.example.com", "b.example"))
    assert account_store.workspace_webhook_hosts("acme") == ("hooks.example.com", "b.example")
    assert account_store.workspace_webhook_hosts("other") is None
    assert account_store.set_workspace_webhook_hosts("acme", ())
    assert account_store.workspace_webhook_hosts("acme") == ()
    assert account_store.set_workspace_webhook_hosts("acme", None)
    assert account_store.workspace_webhook_hosts("acme") is None
    assert not account_store.set_workspace_webhook_hosts("nowhere", ("x.example",))


# ---------------------------------------------------------------- sessions and sign-in


def _epoch(accounts: AccountStore, user_id: str) -> int:
    user = accounts.get_user(user_id)
    assert user is not None
    return user.session_epoch


def test_sessions_end_on_sign_out_password_change_removal_and_disabling(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """Each of these raises the user's session epoch (what their session cookies carry);
    enabling again and a role change do not."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    assert _epoch(account_store, ann) == 0
    assert account_store.end_sessions(ann) is True
    assert _epoch(account_store, ann) == 1
    assert account_store.set_password(ann, STAND_IN_HASH) is True
    assert _epoch(account_store, ann) == 2
    account_store.set_role("acme", ann, Role.EDITOR)
    assert _epoch(account_store, ann) == 2
    assert account_store.set_disabled(ann, disabled_at=clock.now()) is True
    assert _epoch(account_store, ann) == 3
    assert account_store.set_disabled(ann, disabled_at=None) is True
    assert _epoch(account_store, ann) == 3
    assert account_store.remove_member("acme", ann) is True
    assert _epoch(account_store, ann) == 4
    assert account_store.remove_member("acme", ann) is False
    assert _epoch(account_store, ann) == 4
    assert account_store.end_sessions("nobody") is False


def test_a_user_is_disabled_and_enabled_once(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """set_disabled records when, reads back, and says False when nothing changes."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    assert account_store.set_disabled(ann, disabled_at=None) is False
    assert account_store.set_disabled(ann, disabled_at=clock.now()) is True
    assert account_store.set_disabled(ann, disabled_at=clock.now()) is False
    user = account_store.find_user("ann@acme.test")
    assert user is not None
    assert user.disabled
    assert user.disabled_at == clock.now()
    assert account_store.set_disabled(ann, disabled_at=None) is True
    user = account_store.get_user(ann)
    assert user is not None
    assert not user.disabled
    assert account_store.set_disabled("nobody", disabled_at=clock.now()) is False


def test_the_last_admin_is_kept_when_asked(account_store: AccountStore, clock: FrozenClock) -> None:
    """With keep_an_admin, removing a workspace's only admin is a ConflictError and changes
    nothing; with a second admin, or for a viewer, it goes ahead."""
    ada = _member(account_store, clock, "ada@acme.test", "acme", Role.ADMIN)
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    with pytest.raises(ConflictError, match="without an admin"):
        account_store.remove_member("acme", ada, keep_an_admin=True)
    assert account_store.role_of("acme", ada) is Role.ADMIN
    assert _epoch(account_store, ada) == 0
    assert account_store.remove_member("acme", ann, keep_an_admin=True) is True
    bob = _member(account_store, clock, "bob@acme.test", "acme", Role.ADMIN)
    assert account_store.remove_member("acme", ada, keep_an_admin=True) is True
    assert [m.user_id for m in account_store.members("acme")] == [bob]


def test_a_users_tokens_for_one_workspace_are_revoked_together(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """revoke_tokens revokes the live tokens of that user and workspace only, and counts."""
    ann = _member(account_store, clock, "ann@acme.test", "acme", Role.VIEWER)
    _member(account_store, clock, "ann@acme.test", "beta", Role.VIEWER)
    for token_id, workspace in (("a" * 16, "acme"), ("b" * 16, "acme"), ("c" * 16, "beta")):
        account_store.add_token(
            token_id=token_id,
            user_id=ann,
            workspace_id=workspace,
            secret_hash=hash_secret(token_id),
            now=clock.now(),
        )
    account_store.revoke_token("b" * 16, now=clock.now())
    clock.advance(5)
    assert account_store.revoke_tokens(ann, workspace_id="acme", now=clock.now()) == 1
    revoked = {t.id: t.revoked_at for t in account_store.list_tokens(ann)}
    assert revoked["a" * 16] == clock.now()
    assert revoked["b" * 16] == clock.now() - timedelta(seconds=5)
    assert revoked["c" * 16] is None


def test_sign_in_failures_are_counted_per_email_and_address_and_forgotten(
    account_store: AccountStore, clock: FrozenClock
) -> None:
    """Failures are counted since a time for the email from the address, for the email and
    for the address, with the latest of each; recording forgets old ones; clearing an email's
    failures from one address keeps them counted for that address, and keeps the email's
    failures from elsewhere."""
    window = timedelta(minutes=15)
    for email, address in (("ann", "10.0.0.1"), ("ann", "10.0.0.2"), ("bob", "10.0.0.1")):
        account_store.record_sign_in_failure(
            email, address, now=clock.now(), forget_before=clock.now() - window
        )
        clock.advance(1)
    since = clock.now() - window
    at = [clock.now() - timedelta(seconds=s) for s in (3, 2, 1)]
    assert account_store.sign_in_failures("ann", "10.0.0.1", since=since) == FailureCounts(
        pair=Failures(1, at[0]), account=Failures(2, at[1]), address=Failures(2, at[2])
    )
    assert account_store.sign_in_failures("eve", "10.0.0.9", since=since) == FailureCounts()
    account_store.clear_sign_in_failures("ann", "10.0.0.1")
    assert account_store.sign_in_failures("ann", "10.0.0.1", since=since) == FailureCounts(
        pair=Failures(0, None), account=Failures(1, at[1]), address=Failures(2, at[2])
    )
    clock.advance(window.total_seconds())
    account_store.record_sign_in_failure(
        "eve", "10.0.0.9", now=clock.now(), forget_before=clock.now() - window
    )
    # bob's failure is older than the window: forgotten, even when counted from long ago.
    long_ago = clock.now() - 10 * window
    assert account_store.sign_in_failures("bob", "10.0.0.1", since=long_ago) == FailureCounts()
