"""The AccountStore contract on dicts."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from qexport.domain.accounts import (
    ApiToken,
    Link,
    Member,
    Membership,
    Role,
    Standing,
    TokenHolder,
    User,
    last_use_due,
    link_cap_reached,
)
from qexport.domain.audit import AuditEvent, naming
from qexport.domain.failures import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.sign_in import FailureCounts, Failures
from qexport.domain.sources import RegisteredSource
from tests.fakes.audit import InMemoryAuditLog


class InMemoryAccountStore:
    """The AccountStore contract on dicts, guarded by one lock.

    `standing` plugs it into an InMemoryMetadataStore, whose pre-run check then sees the
    same members: `InMemoryMetadataStore(standing=accounts.standing)`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one
        self._workspaces: dict[str, datetime] = {}
        self._timezones: dict[str, str] = {}  # set ones only; the rest are UTC
        self._webhook_hosts: dict[str, tuple[str, ...]] = {}  # restricted workspaces only
        self._policies: dict[str, WorkspacePolicy] = {}  # workspaces with rules only
        self._users: dict[str, User] = {}
        self._roles: dict[tuple[str, str], Role] = {}  # (workspace id, user id) -> role
        self._tokens: dict[str, ApiToken] = {}
        self._links: dict[str, tuple[Link, str]] = {}  # id -> (link, token hash)
        self._sources: dict[tuple[str, str], RegisteredSource] = {}
        self._failures: list[tuple[str | None, str, datetime]] = []  # (email, address, at)

    def standing(self, workspace_id: str, user_id: str) -> Standing:
        with self._lock:
            registered = workspace_id in self._workspaces
            user = self._users.get(user_id)
            disabled = user is not None and user.disabled_at is not None
            return Standing(registered, self._roles.get((workspace_id, user_id)), disabled)

    # workspaces and users
    def ensure_workspace(self, workspace_id: str, *, now: datetime) -> bool:
        with self._lock:
            if workspace_id in self._workspaces:
                return False
            self._workspaces[workspace_id] = now
            return True

    def workspace_exists(self, workspace_id: str) -> bool:
        with self._lock:
            return workspace_id in self._workspaces

    def workspace_timezone(self, workspace_id: str) -> str:
        with self._lock:
            return self._timezones.get(workspace_id, "UTC")

    def set_workspace_timezone(self, workspace_id: str, zone: str) -> bool:
        with self._lock:
            if workspace_id not in self._workspaces:
                return False
            self._timezones[workspace_id] = zone
            return True

    def workspace_webhook_hosts(self, workspace_id: str) -> tuple[str, ...] | None:
        with self._lock:
            return self._webhook_hosts.get(workspace_id)

    def set_workspace_webhook_hosts(self, workspace_id: str, hosts: tuple[str, ...] | None) -> bool:
        with self._lock:
            if workspace_id not in self._workspaces:
                return False
            if hosts is None:
                self._webhook_hosts.pop(workspace_id, None)
            else:
                self._webhook_hosts[workspace_id] = hosts
            return True

    def workspace_policy(self, workspace_id: str) -> WorkspacePolicy:
        with self._lock:
            return self._policies.get(workspace_id, WorkspacePolicy())

    def set_workspace_policy(
        self,
        workspace_id: str,
        policy: WorkspacePolicy,
        *,
        audit: AuditEvent | None = None,
        revoke_links: Sequence[tuple[str, AuditEvent]] = (),
        now: datetime | None = None,
    ) -> bool:
        revoked = []
        with self._lock:
            if workspace_id not in self._workspaces:
                return False
            self._policies[workspace_id] = policy
            for link_id, event in revoke_links:
                entry = self._links.get(link_id)
                if entry is not None and entry[0].revoked_at is None:
                    self._links[link_id] = (replace(entry[0], revoked_at=now), entry[1])
                    revoked.append(event)
        self.audit_log.append(audit)
        for event in revoked:
            self.audit_log.append(event)
        return True

    def create_user(
        self, email: str, *, password_hash: str | None, now: datetime, user_id: str | None = None
    ) -> User:
        user = User(user_id or str(uuid.uuid4()), email, now, password_hash)
        with self._lock:
            if user.id in self._users or any(u.email == email for u in self._users.values()):
                raise InvalidRequestError(f"a user {email!r} already exists", field="email")
            self._users[user.id] = user
        return user

    def get_user(self, user_id: str) -> User | None:
        with self._lock:
            return self._users.get(user_id)

    def find_user(self, email: str) -> User | None:
        with self._lock:
            return next((u for u in self._users.values() if u.email == email), None)

    def set_password(self, user_id: str, password_hash: str | None) -> bool:
        with self._lock:
            user = self._users.get(user_id)
            if user is None:
                return False
            self._users[user_id] = replace(
                user, password_hash=password_hash, session_epoch=user.session_epoch + 1
            )
            return True

    def end_sessions(self, user_id: str) -> bool:
        with self._lock:
            return self._next_epoch(user_id)

    def _next_epoch(self, user_id: str) -> bool:
        user = self._users.get(user_id)
        if user is not None:
            self._users[user_id] = replace(user, session_epoch=user.session_epoch + 1)
        return user is not None

    def set_disabled(self, user_id: str, *, disabled_at: datetime | None) -> bool:
        with self._lock:
            user = self._users.get(user_id)
            if user is None or (disabled_at is None) == (user.disabled_at is None):
                return False
            self._users[user_id] = replace(user, disabled_at=disabled_at)
            if disabled_at is not None:
                self._next_epoch(user_id)
            return True

    def _set_role_unaudited(self, workspace_id: str, user_id: str, role: Role) -> None:
        with self._lock:
            self._roles[workspace_id, user_id] = role

    def _remove_member_unaudited(
        self, workspace_id: str, user_id: str, *, keep_an_admin: bool = False
    ) -> bool:
        with self._lock:
            admins = {
                u for (w, u), r in self._roles.items() if w == workspace_id and r is Role.ADMIN
            }
            if keep_an_admin and admins == {user_id}:
                raise ConflictError(f"it would leave workspace {workspace_id!r} without an admin")
            if self._roles.pop((workspace_id, user_id), None) is None:
                return False
            self._next_epoch(user_id)
            return True

    def role_of(self, workspace_id: str, user_id: str) -> Role | None:
        with self._lock:
            return self._roles.get((workspace_id, user_id))

    def member(self, workspace_id: str, user_id: str) -> Member | None:
        with self._lock:
            user = self._users.get(user_id)
            return None if user is None else Member(user, self._roles.get((workspace_id, user_id)))

    def memberships_of(self, user_id: str) -> list[Membership]:
        with self._lock:
            found = [Membership(w, u, r) for (w, u), r in self._roles.items() if u == user_id]
        return sorted(found, key=lambda m: m.workspace_id)

    def members(self, workspace_id: str) -> list[Membership]:
        with self._lock:
            found = [Membership(w, u, r) for (w, u), r in self._roles.items() if w == workspace_id]
        return sorted(found, key=lambda m: m.user_id)

    # API tokens
    def _add_token_unaudited(
        self, *, token_id: str, user_id: str, workspace_id: str, secret_hash: str, now: datetime
    ) -> ApiToken:
        token = ApiToken(token_id, user_id, workspace_id, now, secret_hash=secret_hash)
        with self._lock:
            if token_id in self._tokens:
                raise ValueError(f"duplicate token id {token_id!r}")
            self._tokens[token_id] = token
        return token

    def get_token(self, token_id: str) -> ApiToken | None:
        with self._lock:
            return self._tokens.get(token_id)

    def token_holder(self, token_id: str) -> TokenHolder | None:
        with self._lock:
            token = self._tokens.get(token_id)
            user = self._users.get(token.user_id) if token else None
            if token is None or user is None:
                return None
            return TokenHolder(token, Member(user, self._roles.get((token.workspace_id, user.id))))

    def list_tokens(self, user_id: str) -> list[ApiToken]:
        with self._lock:
            found = [t for t in self._tokens.values() if t.user_id == user_id]
        return sorted(found, key=lambda t: t.created_at)

    def touch_token(self, token_id: str, *, now: datetime) -> None:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None:
                return
            if last_use_due(token, now):
                self._tokens[token_id] = replace(token, last_used_at=now)

    def _revoke_token_unaudited(self, token_id: str, *, now: datetime) -> bool:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None or token.revoked_at is not None:
                return False
            self._tokens[token_id] = replace(token, revoked_at=now)
            return True

    def revoke_tokens(self, user_id: str, *, workspace_id: str, now: datetime) -> int:
        with self._lock:
            live = [
                t
                for t in self._tokens.values()
                if t.user_id == user_id and t.workspace_id == workspace_id and t.revoked_at is None
            ]
            for token in live:
                self._tokens[token.id] = replace(token, revoked_at=now)
            return len(live)

    # sign-in failures
    def sign_in_failures(self, email: str, address: str, *, since: datetime) -> FailureCounts:
        with self._lock:
            recent = [f for f in self._failures if f[2] > since]

        def tally(times: list[datetime]) -> Failures:
            return Failures(len(times), max(times, default=None))

        return FailureCounts(
            pair=tally([at for e, a, at in recent if e == email and a == address]),
            account=tally([at for e, _, at in recent if e == email]),
            address=tally([at for _, a, at in recent if a == address]),
        )

    def record_sign_in_failure(
        self, email: str, address: str, *, now: datetime, forget_before: datetime
    ) -> None:
        with self._lock:
            self._failures = [f for f in self._failures if f[2] >= forget_before]
            self._failures.append((email, address, now))

    def clear_sign_in_failures(self, email: str, address: str) -> None:
        with self._lock:
            self._failures = [
                (None if (e, a) == (email, address) else e, a, at) for e, a, at in self._failures
            ]

    # public links
    def _add_link_unaudited(
        self,
        *,
        export_id: str,
        created_by: str,
        token_hash: str,
        now: datetime,
        max_live: int | None = None,
        expires_at: datetime | None = None,
    ) -> Link:
        link = Link(str(uuid.uuid4()), export_id, created_by, now, expires_at=expires_at)
        with self._lock:
            live = sum(
                1
                for other, _ in self._links.values()
                if other.export_id == export_id and other.revoked_at is None
            )
            if max_live is not None and live >= max_live:
                raise link_cap_reached(live, max_live)
            if any(h == token_hash for _, h in self._links.values()):
                raise ValueError("duplicate link token")
            self._links[link.id] = (link, token_hash)
        return link

    def get_link(self, link_id: str) -> Link | None:
        with self._lock:
            entry = self._links.get(link_id)
        return entry[0] if entry else None

    def find_link(self, token_hash: str) -> Link | None:
        with self._lock:
            return next((link for link, h in self._links.values() if h == token_hash), None)

    def _revoke_link_unaudited(self, link_id: str, *, now: datetime) -> bool:
        with self._lock:
            entry = self._links.get(link_id)
            if entry is None or entry[0].revoked_at is not None:
                return False
            self._links[link_id] = (replace(entry[0], revoked_at=now), entry[1])
            return True

    def list_links(self, export_id: str) -> list[Link]:
        with self._lock:
            found = [
                link
                for link, _ in self._links.values()
                if link.export_id == export_id and link.revoked_at is None
            ]
        return sorted(found, key=lambda link: (link.created_at, link.id))

    def links_starting(self, prefix: str) -> list[Link]:
        with self._lock:
            found = [
                link
                for link, _ in self._links.values()
                if link.id.startswith(prefix) and link.revoked_at is None
            ]
        return sorted(found, key=lambda link: link.id)

    def touch_link(self, link_id: str, *, now: datetime, unless_since: datetime) -> bool:
        with self._lock:
            entry = self._links.get(link_id)
            if entry is None:
                return False
            used = entry[0].last_used_at
            if used is not None and used >= unless_since:
                return False
            self._links[link_id] = (replace(entry[0], last_used_at=now), entry[1])
            return True

    # registered sources, by (owner or '', name)
    def _add_source_unaudited(self, source: RegisteredSource) -> None:
        with self._lock:
            if source.key in self._sources:
                raise InvalidRequestError(
                    f"a source named {source.name!r} already exists in workspace {source.key[0]!r}",
                    field="name",
                )
            self._sources[source.key] = source

    def registered_sources(self) -> list[RegisteredSource]:
        with self._lock:
            return [self._sources[key] for key in sorted(self._sources, key=lambda k: (k[1], k[0]))]

    def _share_source_unaudited(
        self, owner: str | None, name: str, workspace_id: str, *, shared: bool
    ) -> bool:
        with self._lock:
            key = (owner or "", name)
            source = self._sources.get(key)
            if source is None:
                raise NotFoundError(f"no registered source {name!r} in workspace {key[0]!r}")
            if (workspace_id in source.shared_with) == shared:
                return False
            listed = (
                source.shared_with | {workspace_id}
                if shared
                else source.shared_with - {workspace_id}
            )
            self._sources[key] = replace(source, shared_with=frozenset(listed))
            return True

    # the audited writes: each appends its `audit` event when the change is made
    def set_role(
        self, workspace_id: str, user_id: str, role: Role, *, audit: AuditEvent | None = None
    ) -> None:
        self._set_role_unaudited(workspace_id, user_id, role)
        self.audit_log.append(audit)

    def remove_member(
        self,
        workspace_id: str,
        user_id: str,
        *,
        keep_an_admin: bool = False,
        audit: AuditEvent | None = None,
    ) -> bool:
        done = self._remove_member_unaudited(workspace_id, user_id, keep_an_admin=keep_an_admin)
        if done:
            self.audit_log.append(audit)
        return done

    def add_token(
        self,
        *,
        token_id: str,
        user_id: str,
        workspace_id: str,
        secret_hash: str,
        now: datetime,
        audit: AuditEvent | None = None,
    ) -> ApiToken:
        done = self._add_token_unaudited(
            token_id=token_id,
            user_id=user_id,
            workspace_id=workspace_id,
            secret_hash=secret_hash,
            now=now,
        )
        self.audit_log.append(audit)
        return done

    def revoke_token(
        self, token_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool:
        done = self._revoke_token_unaudited(token_id, now=now)
        if done:
            self.audit_log.append(audit)
        return done

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
        done = self._add_link_unaudited(
            export_id=export_id,
            created_by=created_by,
            token_hash=token_hash,
            now=now,
            max_live=max_live,
            expires_at=expires_at,
        )
        if audit is not None:
            self.audit_log.append(naming(audit, done.id))
        return done

    def revoke_link(self, link_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool:
        done = self._revoke_link_unaudited(link_id, now=now)
        if done:
            self.audit_log.append(audit)
        return done

    def add_source(self, source: RegisteredSource, *, audit: AuditEvent | None = None) -> None:
        self._add_source_unaudited(source)
        self.audit_log.append(audit)

    def share_source(
        self,
        owner: str | None,
        name: str,
        workspace_id: str,
        *,
        shared: bool,
        audit: AuditEvent | None = None,
    ) -> bool:
        done = self._share_source_unaudited(owner, name, workspace_id, shared=shared)
        if done:
            self.audit_log.append(audit)
        return done
