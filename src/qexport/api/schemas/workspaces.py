"""A workspace's settings and its export policy, as members read them and admins change them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from qexport.api.schemas.fields import without_defaults

MAX_WEBHOOK_HOSTS = 50
HostName = Annotated[str, StringConstraints(max_length=253)]


class MemberItem(BaseModel):
    """A member of the caller's workspace."""

    id: str = Field(description="Their user id, as exports, requests and links name them")
    email: str
    role: Literal["admin", "editor", "viewer"]


class MemberList(BaseModel):
    items: list[MemberItem]


class WorkspaceSettings(BaseModel):
    """A workspace's settings that members may read."""

    id: str
    timezone: str = Field(examples=["Europe/Berlin"])
    webhook_hosts: list[str] | None = Field(
        description="The only host names webhooks may go to; null: any the server allows",
        examples=[["hooks.example.com"]],
    )


class WorkspaceChange(BaseModel):
    """The settings to change (workspace admins); members left out keep their value."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=without_defaults)

    webhook_hosts: list[HostName] | None = Field(
        None,
        max_length=MAX_WEBHOOK_HOSTS,
        description="Restrict webhooks to these host names; null lifts the restriction",
        examples=[["hooks.example.com"]],
    )


class SensitiveTableView(BaseModel):
    """A table whose data leaves only with an admin's approval: all of it, or some columns."""

    source: str = Field(description="The source's name", examples=["shop"])
    table: str = Field(
        description="schema.table, as the source's engine names it (quoted where needed)",
        examples=["main.customers"],
    )
    columns: list[str] | None = Field(
        description="Only these columns are sensitive; null: the whole table",
        examples=[["email", "phone"]],
    )
    also: list[str] = Field(
        default_factory=list,
        description="The workspace's other sources that reach the same data (the same"
        " database), which the rule covers too; kept by qexport, not written",
        examples=[["warehouse_copy"]],
    )


class SensitiveTableRule(BaseModel):
    """A table to mark sensitive: `table` is `[schema.]table`, the schema defaulting as its
    engine's does (DuckDB `main`, PostgreSQL `public`, MySQL the source's database)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(max_length=200, examples=["shop"])
    table: str = Field(max_length=300, examples=["main.customers"])
    columns: list[str] | None = Field(None, max_length=100, examples=[["email"]])
    also: list[str] | None = Field(
        None,
        max_length=200,
        description="Ignored: qexport finds the sources over the same data itself (accepted so"
        " that a rule read from the policy can be sent back as it is)",
    )


class WorkspacePolicyView(BaseModel):
    """What the workspace lets leave; null: the installation's own limit (no rule)."""

    formats: list[str] | None = Field(
        description="The only formats exports may be made in", examples=[["csv", "parquet"]]
    )
    max_rows: int | None = Field(description="The most rows an export may hold")
    public_links: bool = Field(description="Whether public links may be created and used")
    link_max_days: int | None = Field(description="The longest a public link lives, in days")
    retention_days: int | None = Field(description="Days files are kept (below the server's)")
    recipient_domains: list[str] | None = Field(
        description="The only email domains deliveries may go to", examples=[["example.com"]]
    )
    sensitive_tables: list[SensitiveTableView] = Field(
        description="Tables (or columns) whose data leaves only with an admin's approval: a"
        " query that reads one, as its source's planner reports it, waits for an approval, is"
        " not previewed and no schedule may export it (nor a report that holds it)"
    )
    sensitive_queries: list[str] = Field(
        description="Ids of queries whose exports wait for an admin's approval (and of"
        " reports that hold one); no schedule may export them"
    )


class WorkspacePolicyChanged(WorkspacePolicyView):
    """The policy as changed."""

    links_revoked: int = Field(
        description="Live public links the change revoked (`revoke_links`); 0 without it"
    )


class WorkspacePolicyChange(BaseModel):
    """The rules to change; a rule given as null is lifted, one left out is kept."""

    model_config = ConfigDict(extra="forbid")

    formats: list[str] | None = None
    max_rows: int | None = None
    public_links: bool | None = None
    link_max_days: int | None = None
    retention_days: int | None = None
    recipient_domains: list[str] | None = Field(None, max_length=50)
    sensitive_tables: list[SensitiveTableRule] | None = Field(None, max_length=200)
    sensitive_queries: list[str] | None = Field(None, max_length=500)
    revoke_links: bool = Field(
        False,
        description="Also revoke the live public links to files, made without an approval,"
        " of every query or report the new policy marks sensitive (they then answer 410)",
    )
