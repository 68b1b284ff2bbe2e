"""Accounts, one port per concept: workspaces, users and their roles, API tokens, public
links and registered sources. (The SQL store implements them all over one database, and the
container hands that one object out as `AccountStore`.)"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.domain.accounts import (
        ApiToken,
        Link,
        Member,
        Membership,
        Role,
        TokenHolder,
        User,
    )
    from qexport.domain.audit import AuditEvent
    from qexport.domain.policies import WorkspacePolicy
    from qexport.domain.sign_in import FailureCounts
    from qexport.domain.sources import RegisteredSource


class WorkspaceStore(Protocol):
    """Workspaces: their time zone, the hosts their webhooks may reach, and their policy."""

    def ensure_workspace(self, workspace_id: str, *, now: datetime) -> bool: ...
    def workspace_exists(self, workspace_id: str) -> bool: ...
    def workspace_timezone(self, workspace_id: str) -> str:
        """The workspace's IANA time zone; "UTC" when unset or the workspace is unknown."""
        ...

    def set_workspace_timezone(self, workspace_id: str, zone: str) -> bool:
        """Store an (already validated) IANA name; False when there is no such workspace."""
        ...

    def workspace_webhook_hosts(self, workspace_id: str) -> tuple[str, ...] | None:
        """The host names its admin restricted webhooks to; None when unrestricted."""
        ...

    def set_workspace_webhook_hosts(self, workspace_id: str, hosts: tuple[str, ...] | None) -> bool:
        """Store (already normalised) host names, or None to lift the restriction; False when
        there is no such workspace."""
        ...

    def workspace_policy(self, workspace_id: str) -> WorkspacePolicy:
        """The rules its admins set on what may leave (no rules when none are set)."""
        ...

    def set_workspace_policy(
        self,
        workspace_id: str,
        policy: WorkspacePolicy,
        *,
        audit: AuditEvent | None = None,
        revoke_links: Sequence[tuple[str, AuditEvent]] = (),
        now: datetime | None = None,
    ) -> bool:
        """Store the policy (with its `audit` event) and, in the same transaction, revoke at
        `now` each of `revoke_links` (link id, the event of its revocation) still unrevoked,
        appending its event; False, with nothing written, when there is no such workspace."""
        ...


class UserStore(Protocol):
    """Users, their passwords and sessions, and their roles in workspaces."""

    def create_user(
        self, email: str, *, password_hash: str | None, now: datetime, user_id: str | None = None
    ) -> User: ...
    def get_user(self, user_id: str) -> User | None: ...
    def find_user(self, email: str) -> User | None: ...
    def set_password(self, user_id: str, password_hash: str | None) -> bool:
        """Replace the user's password hash and end their sessions; False when there is no
        such user."""
        ...

    def end_sessions(self, user_id: str) -> bool:
        """End every session of the user (raise their session epoch)."""
        ...

    def set_disabled(self, user_id: str, *, disabled_at: datetime | None) -> bool:
        """Disable the user, ending their sessions, or enable them with None; False when
        there is no such user or it already was."""
        ...

    def set_role(
        self, workspace_id: str, user_id: str, role: Role, *, audit: AuditEvent | None = None
    ) -> None: ...
    def remove_member(
        self,
        workspace_id: str,
        user_id: str,
        *,
        keep_an_admin: bool = False,
        audit: AuditEvent | None = None,
    ) -> bool:
        """End the membership and the user's sessions; False if there was none. With
        `keep_an_admin`, ConflictError rather than remove the workspace's last admin."""
        ...

    def role_of(self, workspace_id: str, user_id: str) -> Role | None: ...
    def member(self, workspace_id: str, user_id: str) -> Member | None:
        """The user and their role in the workspace, in one read; None when there is no
        such user (a user who is not a member has role None)."""
        ...

    def memberships_of(self, user_id: str) -> list[Membership]: ...
    def members(self, workspace_id: str) -> list[Membership]: ...


class TokenStore(Protocol):
    """API tokens, and the sign-in failures that slow down guessing."""

    def add_token(
        self,
        *,
        token_id: str,
        user_id: str,
        workspace_id: str,
        secret_hash: str,
        now: datetime,
        audit: AuditEvent | None = None,
    ) -> ApiToken: ...
    def get_token(self, token_id: str) -> ApiToken | None: ...
    def token_holder(self, token_id: str) -> TokenHolder | None:
        """The token with its user and the user's role in the token's workspace, in one
        read (what authenticating a request needs); None when there is no such token."""
        ...

    def list_tokens(self, user_id: str) -> list[ApiToken]: ...
    def touch_token(self, token_id: str, *, now: datetime) -> None: ...
    def revoke_token(
        self, token_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def revoke_tokens(self, user_id: str, *, workspace_id: str, now: datetime) -> int: ...
    def sign_in_failures(self, email: str, address: str, *, since: datetime) -> FailureCounts:
        """Sign-in failures since `since`: for the email from the address, for the email, and
        for the client address."""
        ...

    def record_sign_in_failure(
        self, email: str, address: str, *, now: datetime, forget_before: datetime
    ) -> None: ...
    def clear_sign_in_failures(self, email: str, address: str) -> None:
        """Forget the email's failures from `address` (after a sign-in from it); they still
        count for the address, and the email's failures from elsewhere stay."""
        ...


class LinkStore(Protocol):
    """Public links to exports' files."""

    def add_link(
        self,
        *,
        export_id: str,
        created_by: str,
        token_hash: str,
        now: datetime,
        max_live: int | None = None,
        expires_at: datetime | None = None,
        audit: AuditEvent | None = None,
    ) -> Link:
        """Save a link (working until `expires_at`, or None: while its file does);
        InvalidRequestError, with nothing written, when the export already has `max_live`
        unrevoked links (counted in the inserting transaction). An `audit` event without a
        target id is given the new link's."""
        ...

    def get_link(self, link_id: str) -> Link | None: ...
    def find_link(self, token_hash: str) -> Link | None: ...
    def revoke_link(
        self, link_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def list_links(self, export_id: str) -> list[Link]:
        """The export's unrevoked links, oldest first."""
        ...

    def links_starting(self, prefix: str) -> list[Link]:
        """The unrevoked links whose id starts with `prefix`, by id, whatever their export's
        workspace: the caller keeps those it may see."""
        ...

    def touch_link(self, link_id: str, *, now: datetime, unless_since: datetime) -> bool:
        """Record that the link served its file at `now`, unless it already did at or after
        `unless_since` (one guarded write); whether it was written."""
        ...


class SourceRecordStore(Protocol):
    """Registered sources, and the workspaces each is shared with."""

    def add_source(self, source: RegisteredSource, *, audit: AuditEvent | None = None) -> None:
        """Register a source (its URL as it is to be stored); a name its workspace already
        registered is refused."""
        ...

    def registered_sources(self) -> list[RegisteredSource]:
        """Every registered source, by name, then workspace."""
        ...

    def share_source(
        self,
        owner: str | None,
        name: str,
        workspace_id: str,
        *,
        shared: bool,
        audit: AuditEvent | None = None,
    ) -> bool:
        """Let a workspace use the source `owner` registered as `name`, or stop it; False when
        nothing changed. NotFoundError for an unknown source."""
        ...


class AccountStore(WorkspaceStore, UserStore, TokenStore, LinkStore, SourceRecordStore, Protocol):
    """Every account port at once: what the container hands out (one database holds them
    all). A use case asks for the narrow ports it reads."""
