"""Accounts on the in-memory fakes: who a token authenticates, how users, tokens and sources
are administered, and how a worker finds a source registered after it started."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import pytest

from qexport.domain.accounts import (
    LAST_USED_RESOLUTION,
    Role,
    check_workspace_id,
    hash_secret,
    new_secret,
    normalize_email,
    parse_api_token,
    valid_link_token,
)
from qexport.domain.failures import InvalidRequestError, NotFoundError, UnauthorizedError
from qexport.services import accounts as service
from qexport.services.auth import authenticate
from tests.fakes import FrozenClock, InMemoryAccountStore

WORDS = "correct horse"  # a password, for the tests that set one


def _secret(token: str) -> str:
    """The token's random part (which may itself contain `_`)."""
    parsed = parse_api_token(token)
    assert parsed is not None
    return parsed[1]


def _token(accounts: InMemoryAccountStore, clock: FrozenClock, email: str, role: str) -> str:
    service.add_user(accounts, clock, email, workspace="acme", role=role)
    return service.issue_token(accounts, clock, email).token


# ---------------------------------------------------------------- authenticate


def test_a_valid_token_is_its_user_in_its_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The principal carries the user, the token's workspace, the current role and the token."""
    token = _token(accounts, clock, "ann@acme.test", "editor")
    principal = authenticate(accounts, clock, token)
    user = accounts.find_user("ann@acme.test")
    assert user is not None
    assert (principal.user_id, principal.email) == (user.id, "ann@acme.test")
    assert (principal.workspace_id, principal.role) == ("acme", Role.EDITOR)
    assert principal.token_id == token.split("_")[1]
    assert principal.can_write_queries
    assert not principal.sees_workspace


def test_a_token_use_is_recorded(accounts: InMemoryAccountStore, clock: FrozenClock) -> None:
    """Each authentication records the token's last use (at most once a minute)."""
    token = _token(accounts, clock, "ann@acme.test", "viewer")
    clock.advance(5)
    principal = authenticate(accounts, clock, token)
    stored = accounts.get_token(principal.token_id)
    assert stored is not None
    assert stored.last_used_at == clock.now()
    clock.advance(LAST_USED_RESOLUTION.total_seconds() + 1)
    authenticate(accounts, clock, token)
    stored = accounts.get_token(principal.token_id)
    assert stored is not None
    assert stored.last_used_at == clock.now()


def test_a_role_change_applies_to_existing_tokens(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The role is read at each request: a promotion or demotion needs no new token."""
    token = _token(accounts, clock, "ann@acme.test", "viewer")
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="admin")
    assert authenticate(accounts, clock, token).role is Role.ADMIN


def _tampered(token: str) -> str:
    last = token[-1]
    return token[:-1] + ("A" if last != "A" else "B")


@pytest.mark.parametrize(
    "case",
    [
        "malformed",
        "empty",
        "unknown id",
        "tampered",
        "trailing newline",
        "revoked",
        "removed member",
    ],
)
def test_bad_tokens_are_refused_alike(
    accounts: InMemoryAccountStore, clock: FrozenClock, case: str
) -> None:
    """Every refusal is the same UnauthorizedError("invalid token"): nothing says which part
    was wrong, or whether the token or its user exists."""
    token = _token(accounts, clock, "ann@acme.test", "admin")
    user = accounts.find_user("ann@acme.test")
    assert user is not None
    presented = {
        "malformed": "not-a-token",
        "empty": "",
        "unknown id": "qx_0123456789abcdef_" + _secret(token),
        "tampered": _tampered(token),
        "trailing newline": token + "\n",
    }.get(case, token)
    if case == "revoked":
        assert service.revoke_token(accounts, clock, token)
    if case == "removed member":
        accounts.remove_member("acme", user.id)
    with pytest.raises(UnauthorizedError) as refused:
        authenticate(accounts, clock, presented)
    assert str(refused.value) == "invalid token"


@pytest.mark.parametrize("ending", ["\n", "\r\n", " ", "\x00"])
def test_a_token_or_link_token_with_anything_after_it_is_malformed(
    accounts: InMemoryAccountStore, clock: FrozenClock, ending: str
) -> None:
    """A well-formed token followed by a newline (or anything else) is not a token, and a
    public link token likewise is not a link token."""
    token = _token(accounts, clock, "ann@acme.test", "viewer")
    assert parse_api_token(token) is not None
    assert parse_api_token(token + ending) is None
    link_token = new_secret()
    assert valid_link_token(link_token)
    assert not valid_link_token(link_token + ending)


@pytest.mark.parametrize("workspace", ["acme\n", "acme\r\n", "\nacme", "ac\nme"])
def test_a_workspace_id_with_a_newline_is_refused(workspace: str) -> None:
    """A newline anywhere in a workspace id, including at its end, makes it invalid."""
    assert check_workspace_id("acme") == "acme"
    with pytest.raises(ValueError, match="invalid workspace"):
        check_workspace_id(workspace)


def test_an_email_keeps_no_newline() -> None:
    """Surrounding whitespace, a trailing newline included, is trimmed when an email is
    normalised; a newline inside it is refused."""
    assert normalize_email("Ann@acme.test\n") == "ann@acme.test"
    for email in ("ann@acme.test\n\x00", "ann\n@acme.test", "ann@acme\n.test"):
        with pytest.raises(ValueError, match="invalid email"):
            normalize_email(email)


def test_a_token_works_only_in_its_own_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A member of two workspaces gets one principal per token, each in the token's workspace."""
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    service.add_user(accounts, clock, "ann@acme.test", workspace="beta", role="admin")
    acme = service.issue_token(accounts, clock, "ann@acme.test", workspace="acme").token
    beta = service.issue_token(accounts, clock, "ann@acme.test", workspace="beta").token
    assert authenticate(accounts, clock, acme).workspace_id == "acme"
    assert authenticate(accounts, clock, acme).role is Role.VIEWER
    assert authenticate(accounts, clock, beta).role is Role.ADMIN


# ---------------------------------------------------------------- users


def test_adding_a_user_creates_the_workspace_and_the_membership(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The email is normalised; the workspace and user are created and the role given."""
    added = service.add_user(accounts, clock, " Ann@ACME.test ", workspace="acme", role="editor")
    assert added.new_user
    assert added.new_workspace
    assert added.user.email == "ann@acme.test"
    assert accounts.workspace_exists("acme")
    assert accounts.role_of("acme", added.user.id) is Role.EDITOR


def test_a_password_is_stored_as_an_argon2_hash(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Only an argon2id hash is kept; it verifies the password and nothing else."""
    added = service.add_user(
        accounts, clock, "ann@acme.test", workspace="acme", role="viewer", password=WORDS
    )
    stored = added.user.password_hash
    assert stored is not None
    assert stored.startswith("$argon2id$")
    assert WORDS not in stored
    assert service.password_matches(stored, WORDS)
    assert not service.password_matches(stored, WORDS[:-1])
    assert not service.password_matches(None, WORDS)
    assert not service.password_matches("not a hash", WORDS)


def test_an_existing_user_is_given_a_role_in_another_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Adding a known email again keeps the user and adds the membership."""
    first = service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    again = service.add_user(accounts, clock, "ann@acme.test", workspace="beta", role="admin")
    assert not again.new_user
    assert again.user == first.user
    assert [(m.workspace_id, m.role) for m in accounts.memberships_of(first.user.id)] == [
        ("acme", Role.VIEWER),
        ("beta", Role.ADMIN),
    ]


def test_a_password_for_an_existing_user_is_refused_and_nothing_changes(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """A password cannot be set on an existing user this way; no membership is added."""
    first = service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    with pytest.raises(InvalidRequestError) as refused:
        service.add_user(
            accounts, clock, "ann@acme.test", workspace="beta", role="admin", password=WORDS
        )
    assert refused.value.field == "password"
    assert not accounts.workspace_exists("beta")
    assert len(accounts.memberships_of(first.user.id)) == 1


@pytest.mark.parametrize(
    ("email", "workspace", "role", "field"),
    [
        ("not-an-email", "acme", "viewer", "email"),
        ("a@b@c", "acme", "viewer", "email"),
        ("ann@acme.test", "Acme", "viewer", "workspace"),
        ("ann@acme.test", "../etc", "viewer", "workspace"),
        ("ann@acme.test", "", "viewer", "workspace"),
        ("ann@acme.test", "acme\n", "viewer", "workspace"),
        ("ann@acme.test", "acme", "owner", "role"),
        ("ann@acme.test", "acme", "", "role"),
    ],
)
def test_bad_user_input_is_refused_before_anything_is_written(
    accounts: InMemoryAccountStore,
    clock: FrozenClock,
    email: str,
    workspace: str,
    role: str,
    field: str,
) -> None:
    """Each bad value names its field; no workspace or user is created."""
    with pytest.raises(InvalidRequestError) as refused:
        service.add_user(accounts, clock, email, workspace=workspace, role=role)
    assert refused.value.field == field
    assert accounts.find_user("ann@acme.test") is None
    assert not accounts.workspace_exists("acme")


def test_an_empty_password_is_refused(accounts: InMemoryAccountStore, clock: FrozenClock) -> None:
    """An empty password is not a password."""
    with pytest.raises(InvalidRequestError):
        service.add_user(
            accounts, clock, "ann@acme.test", workspace="acme", role="viewer", password=""
        )
    assert accounts.find_user("ann@acme.test") is None


def test_members_are_listed_by_email(accounts: InMemoryAccountStore, clock: FrozenClock) -> None:
    """list_members pairs each member with their role; an unknown workspace is not found."""
    service.add_user(accounts, clock, "zoe@acme.test", workspace="acme", role="admin")
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    service.add_user(accounts, clock, "bob@beta.test", workspace="beta", role="viewer")
    listed = [(u.email, m.role) for u, m in service.list_members(accounts, "acme")]
    assert listed == [("ann@acme.test", Role.VIEWER), ("zoe@acme.test", Role.ADMIN)]
    with pytest.raises(NotFoundError):
        service.list_members(accounts, "gamma")


# ---------------------------------------------------------------- tokens


def test_a_token_defaults_to_the_users_only_workspace(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """With one membership the workspace is implied; the token is shown once, not stored."""
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    issued = service.issue_token(accounts, clock, "ANN@acme.test")
    assert issued.record.workspace_id == "acme"
    assert issued.token.startswith(f"qx_{issued.record.id}_")
    assert issued.token not in repr(issued)
    stored = accounts.get_token(issued.record.id)
    assert stored is not None
    assert stored.secret_hash == hash_secret(_secret(issued.token))


def test_a_token_needs_a_workspace_choice_when_it_is_ambiguous(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Several memberships need --workspace; a workspace the user is not in is refused."""
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    service.add_user(accounts, clock, "ann@acme.test", workspace="beta", role="viewer")
    service.add_user(accounts, clock, "bob@gamma.test", workspace="gamma", role="viewer")
    with pytest.raises(InvalidRequestError, match=r"2 workspaces \(acme, beta\)"):
        service.issue_token(accounts, clock, "ann@acme.test")
    with pytest.raises(InvalidRequestError, match="not a member of workspace 'gamma'"):
        service.issue_token(accounts, clock, "ann@acme.test", workspace="gamma")
    assert service.issue_token(accounts, clock, "ann@acme.test", workspace="beta")
    assert len(service.list_tokens(accounts, "ann@acme.test")) == 1


def test_a_token_for_a_user_without_workspace_or_unknown_is_refused(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """No membership: refused; an unknown email: not found."""
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    user = accounts.find_user("ann@acme.test")
    assert user is not None
    accounts.remove_member("acme", user.id)
    with pytest.raises(InvalidRequestError, match="0 workspaces"):
        service.issue_token(accounts, clock, "ann@acme.test")
    with pytest.raises(NotFoundError):
        service.issue_token(accounts, clock, "nobody@acme.test")


def test_a_token_is_revoked_by_id_or_whole(
    accounts: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Revoking by id or by the token itself works once; then it says it already was."""
    by_id = _token(accounts, clock, "ann@acme.test", "viewer")
    whole = service.issue_token(accounts, clock, "ann@acme.test").token
    assert service.revoke_token(accounts, clock, by_id.split("_")[1]) is True
    assert service.revoke_token(accounts, clock, whole) is True
    assert service.revoke_token(accounts, clock, whole) is False
    assert all(t.revoked_at == clock.now() for t in service.list_tokens(accounts, "ann@acme.test"))


@pytest.mark.parametrize("ref", ["nope", "0123456789abcdef", "", "qx_" + "x" * 60])
def test_revoking_an_unknown_token_is_not_found(
    accounts: InMemoryAccountStore, clock: FrozenClock, ref: str
) -> None:
    """An unknown or malformed id is not found, and the error repeats at most 16 characters."""
    with pytest.raises(NotFoundError) as refused:
        service.revoke_token(accounts, clock, ref)
    assert len(str(refused.value)) <= len("no token ''") + 16


# ---------------------------------------------------------------- constant-time checks
# Whether a token is good, its secret tampered with, or its id unknown, it costs one
# constant-time comparison, so timing does not reveal which.

Compared = list[tuple[str, str]]


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Compared:
    """Every call of the constant-time comparison the accounts module makes, delegated."""
    calls: Compared = []
    real: Callable[[str, str], bool] = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("qexport.domain.accounts.hmac.compare_digest", spy)
    return calls


def _issued(clock: FrozenClock) -> tuple[InMemoryAccountStore, str, str]:
    """An account store with one member's token: (store, token, stored hash)."""
    accounts = InMemoryAccountStore()
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    issued = service.issue_token(accounts, clock, "ann@acme.test")
    return accounts, issued.token, _stored(accounts, issued.token)


def _stored(accounts: InMemoryAccountStore, token: str) -> str:
    parsed = parse_api_token(token)
    assert parsed is not None
    record = accounts.get_token(parsed[0])
    assert record is not None
    return record.secret_hash


def test_a_valid_token_is_compared_in_constant_time(compared: Compared, clock: FrozenClock) -> None:
    """Accepting a token goes through one constant-time comparison of the presented secret's
    hash with the stored hash."""
    accounts, token, stored = _issued(clock)
    authenticate(accounts, clock, token)
    assert compared == [(hash_secret(_secret(token)), stored)]


def test_a_tampered_secret_is_compared_in_constant_time(
    compared: Compared, clock: FrozenClock
) -> None:
    """A wrong secret for a known id is refused by the same constant-time comparison."""
    accounts, token, stored = _issued(clock)
    tampered = _tampered(token)
    with pytest.raises(UnauthorizedError):
        authenticate(accounts, clock, tampered)
    assert compared == [(hash_secret(_secret(tampered)), stored)]


def test_an_unknown_token_id_costs_a_comparison_too(compared: Compared, clock: FrozenClock) -> None:
    """An id that matches no token is still compared, in constant time, against a stand-in
    hash of the same shape, so it takes as long as a wrong secret for a known id."""
    accounts, token, stored = _issued(clock)
    unknown = "qx_0123456789abcdef_" + _secret(token)
    with pytest.raises(UnauthorizedError):
        authenticate(accounts, clock, unknown)
    assert len(compared) == 1
    presented, against = compared[0]
    assert presented == hash_secret(_secret(token))
    assert against != stored
    assert len(against) == len(stored)
