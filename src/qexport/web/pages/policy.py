"""The workspace's policy page (/workspace/policy): every member reads what may leave the
workspace; its admins change it with the form (services/policies.py checks it as the API
does, every mistake on its field). Sensitive tables are written one a line, as the policy
lists them (`shop: main.customers (email, phone)`); a box revokes, with the change, the live
public links to files of what the new policy marks sensitive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal, Role
from qexport.domain.commands import ChangePolicy
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    Problems,
    SourceUnavailableError,
)
from qexport.domain.policies import RULES, WorkspacePolicy
from qexport.domain.sensitivity import written_rule
from qexport.http.one_hop import off_the_loop
from qexport.services.policies import change_policy, policy_limits, workspace_sources
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import form_errors, on_line
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

Text = Annotated[str, Form()]
PATH = "/workspace/policy"


@dataclass(frozen=True)
class PolicyForm:
    """The form's fields as typed (a number's field stays as typed when it is refused)."""

    limit_formats: bool = False
    formats: tuple[str, ...] = ()
    max_rows: str = ""
    public_links: bool = True
    link_max_days: str = ""
    retention_days: str = ""
    recipient_domains: str = ""
    sensitive_tables: str = ""
    sensitive_queries: tuple[str, ...] = ()
    revoke_links: bool = False  # never ticked ahead: it ends links people were sent

    @classmethod
    def of(cls, policy: WorkspacePolicy) -> PolicyForm:
        def number(value: int | None) -> str:
            return "" if value is None else str(value)

        return cls(
            limit_formats=policy.formats is not None,
            formats=tuple(sorted(policy.formats or ())),
            max_rows=number(policy.max_rows),
            public_links=policy.public_links,
            link_max_days=number(policy.link_max_days),
            retention_days=number(policy.retention_days),
            recipient_domains="\n".join(policy.recipient_domains or ()),
            sensitive_tables="\n".join(t.words() for t in policy.sensitive_tables),
            sensitive_queries=tuple(sorted(policy.sensitive_queries)),
        )

    @property
    def table_lines(self) -> list[tuple[int, str]]:
        """The sensitive tables' lines that are not blank, with their line numbers."""
        lines = self.sensitive_tables.splitlines()
        return [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]

    def changes(self) -> dict[str, Any]:
        """Every rule as the form sets it: an empty field lifts its rule."""
        problems = Problems()
        changes: dict[str, Any] = {
            "formats": list(self.formats) if self.limit_formats else None,
            "public_links": self.public_links,
            "recipient_domains": self.recipient_domains.split() or None,
            "sensitive_tables": [],
            "sensitive_queries": list(self.sensitive_queries),
        }
        for index, (_, line) in enumerate(self.table_lines):
            try:
                changes["sensitive_tables"].append(written_rule(line))
            except InvalidRequestError as exc:
                problems.add(InvalidRequestError(exc.detail, field=f"sensitive_tables[{index}]"))
        for name in ("max_rows", "link_max_days", "retention_days"):
            typed = getattr(self, name).strip().replace(",", "").replace("_", "")
            if not typed:
                changes[name] = None
            elif typed.isdigit():
                changes[name] = int(typed)
            else:
                problems.add(
                    InvalidRequestError("a whole number, or empty for no limit", field=name)
                )
        problems.raise_any()
        return changes


def _render(
    request: Request,
    context: Any,
    session: Session,
    principal: Any,
    form: PolicyForm,
    *,
    errors: dict[str, str] | None = None,
    notice: str | None = None,
    status: int = 200,
) -> Response:
    policy = context.accounts.workspace_policy(principal.workspace_id)
    limits = policy_limits(context.settings)
    return page(
        request,
        "policy.html",
        status=status,
        session=session,
        rules=policy.describe(),
        form=form,
        known_formats=sorted(limits.formats),
        limits=limits,
        # What each source's planner can say of a query, for the sensitive tables' hint.
        sources=sorted(
            (name, reporting.reports.value)
            for name, reporting in workspace_sources(
                context.sources, principal.workspace_id
            ).items()
        ),
        # What may be marked sensitive: the workspace's live queries (a deleted one, still in
        # the policy, is dropped by the next save, which would refuse it).
        live_queries=sorted(
            (q for q in context.catalog.list_queries(principal.workspace_id) if not q.deleted),
            key=lambda q: q.name.lower(),
        ),
        editable=principal.role is Role.ADMIN,
        errors=errors or {},
        notice=notice,
    )


@router.get(PATH)
def policy_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    notice: str | None = None,
) -> Response:
    policy = context.accounts.workspace_policy(principal.workspace_id)
    return _render(
        request, context, session, principal, PolicyForm.of(policy), notice=_said(notice)
    )


def _said(notice: str | None) -> str | None:
    """The notice after a save: `saved`, or `saved-N` when N links were revoked with it."""
    if notice == "saved":
        return "The policy was saved."
    revoked = (notice or "").removeprefix("saved-")
    if notice and notice.startswith("saved-") and revoked.isdigit():
        count = int(revoked)
        links = "1 public link was" if count == 1 else f"{count:,} public links were"
        return f"The policy was saved; {links} revoked."
    return None


@router.post(PATH)
async def save_policy(
    request: Request, context: Context, session: CheckedForm, principal: WebPrincipal
) -> Response:
    if principal.role is not Role.ADMIN:
        raise ForbiddenError("only workspace admins may change the workspace's policy")
    data = await request.form()
    form = PolicyForm(
        limit_formats=data.get("limit_formats") == "on",
        formats=tuple(str(f) for f in data.getlist("formats")),
        max_rows=str(data.get("max_rows", "")),
        public_links=data.get("public_links") == "on",
        link_max_days=str(data.get("link_max_days", "")),
        retention_days=str(data.get("retention_days", "")),
        recipient_domains=str(data.get("recipient_domains", "")),
        sensitive_tables=str(data.get("sensitive_tables", "")),
        sensitive_queries=tuple(str(q) for q in data.getlist("sensitive_queries")),
        revoke_links=data.get("revoke_links") == "on",
    )
    # The form is read on the event loop; what writes and reads the database (and looks the
    # sensitive tables up on their sources), off it.
    return await off_the_loop(
        lambda: _save(request, context, session, principal, form), apart="sources"
    )


def _save(
    request: Request, context: Container, session: Session, principal: Principal, form: PolicyForm
) -> Response:
    try:
        command = ChangePolicy(principal.workspace_id, form.changes(), form.revoke_links)
        changed = change_policy(context, principal, command)
    except InvalidRequestError as exc:
        numbers = [n for n, _ in form.table_lines]
        errors = form_errors(exc, RULES, lambda p: on_line(p, "sensitive_tables", numbers))
        return _render(request, context, session, principal, form, errors=errors, status=400)
    except SourceUnavailableError as exc:
        errors = {"sensitive_tables": exc.detail}
        return _render(request, context, session, principal, form, errors=errors, status=503)
    notice = f"saved-{changed.links_revoked}" if form.revoke_links else "saved"
    return RedirectResponse(f"{PATH}?notice={notice}", status_code=303)
