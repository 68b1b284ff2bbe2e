"""The JSON the exports, links and schedules routes take and give (DESIGN section 5), and
the problem document every error is; /openapi.json is generated from these models."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.json_schema import SkipJsonSchema

from qexport.domain.exports import EventKind, Status
from qexport.domain.failures import FailureCode
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.domain.queries import MAX_PARAMETER_CHARS
from qexport.domain.schedules import (
    MAX_CRON_CHARS,
    MAX_RECIPIENTS,
    MAX_URL_CHARS,
    RECIPIENT_SHAPES,
    Channel,
)
from qexport.http.errors import PROBLEM_MEDIA_TYPE as PROBLEM_MEDIA_TYPE  # noqa: PLC0414 - re-exported
from qexport.http.errors import PROBLEM_SCHEMA as PROBLEM_SCHEMA  # noqa: PLC0414 - re-exported
from qexport.http.errors import Problem as Problem  # noqa: PLC0414 - re-exported
from qexport.services.subjects import MAX_PARAMETERS, MAX_REF_CHARS

_INT64 = 2**63


# ---------------------------------------------------------------- problem documents


_RETRY_AFTER = {
    "description": "Seconds to wait before asking again.",
    "schema": {"type": "integer"},
}

_WHY: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The request body could not be read (e.g. not UTF-8).", {}),
    401: (
        "Missing, malformed or revoked token.",
        {"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    403: ("The caller may no longer read the query (code access_lost) or lacks the role.", {}),
    404: ("Not found, or not visible to the caller: the two look the same.", {}),
    409: (
        "Not in a state that allows this (code not_ready while queued or running, with"
        " Retry-After; export_failed; conflict).",
        {"Retry-After": _RETRY_AFTER},
    ),
    410: ("The file has expired.", {}),
    413: ("The request body is too large.", {}),
    416: ("The requested byte range lies beyond the end of the file.", {}),
    422: ("Invalid request; `field` names the member at fault.", {}),
    429: ("Too many exports queued or running for this requester.", {"Retry-After": _RETRY_AFTER}),
    503: (
        "The metadata database did not answer within the server's deadline or is"
        " unreachable (code database_unavailable, with Retry-After); the object store"
        " (unavailable) or the data source (source_unavailable) is unavailable.",
        {"Retry-After": _RETRY_AFTER},
    ),
    504: ("The data source did not answer within the statement timeout (query_timeout).", {}),
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for error statuses, each an application/problem+json.

    422 is always included: any route's validation errors are problem documents (without
    it FastAPI would document its own application/json 422 on routes with parameters).
    """
    found: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 422}):
        description, headers = _WHY[status]
        entry: dict[str, Any] = {
            "description": description,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
        }
        if headers:
            entry["headers"] = headers
        found[status] = entry
    return found


# ---------------------------------------------------------------- requests


def _scalar(value: Any) -> Any:
    """JSON scalars only, of bounded size: what a typed query parameter can take."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError("integers must fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite")
        return value
    if isinstance(value, str):
        if len(value) > MAX_PARAMETER_CHARS:
            raise ValueError(f"at most {MAX_PARAMETER_CHARS} characters")
        return value
    raise ValueError("a parameter value is a string, number, boolean or null")


ParameterValue = Annotated[
    Any,
    AfterValidator(_scalar),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "maxLength": MAX_PARAMETER_CHARS},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
            ]
        }
    ),
]
ParameterName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Ref = Annotated[str, StringConstraints(min_length=1, max_length=MAX_REF_CHARS)]


class ExportOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    neutralize_formulas: StrictBool = Field(
        True, description="Prefix formula-looking text cells in spreadsheet formats."
    )


# The query formats, then the formats only a report takes.
ANY_FORMAT: tuple[str, ...] = (*QUERY_FORMATS, *sorted(REPORT_FORMATS - set(QUERY_FORMATS)))


class EmailRecipient(BaseModel):
    """A mail to this address: the file's public link (and maybe the file), or why it failed."""

    model_config = ConfigDict(extra="forbid")

    email: str = Field(max_length=254, examples=["ops@example.com"])


class WebhookRecipient(BaseModel):
    """A signed JSON POST to this URL (headers X-QExport-Signature and X-QExport-Delivery)."""

    model_config = ConfigDict(extra="forbid")

    webhook: str = Field(
        max_length=MAX_URL_CHARS,
        description="An http(s) URL without user name or password",
        examples=["https://hooks.example.com/qexport"],
    )


class SlackRecipient(BaseModel):
    """A Block Kit message in a Slack channel, through its incoming webhook: the export's name,
    rows, size, expiry and link, or why it failed. The URL is a secret: shown whole only to
    the schedule's owner and workspace admins."""

    model_config = ConfigDict(extra="forbid")

    slack: str = Field(
        max_length=MAX_URL_CHARS,
        description="The channel's incoming-webhook URL (https)",
        examples=["https://hooks.slack.com/services/T000/B000/XXXX"],
    )


class TeamsRecipient(BaseModel):
    """An Adaptive Card in a Microsoft Teams channel, through its incoming webhook (or a
    Workflows webhook): the same facts as for Slack. The URL is a secret, shown like Slack's."""

    model_config = ConfigDict(extra="forbid")

    teams: str = Field(
        max_length=MAX_URL_CHARS,
        description="The channel's incoming-webhook URL (https)",
        examples=["https://example.webhook.office.com/webhookb2/..."],
    )


_CHANNEL_NAMES = frozenset(channel.value for channel in Channel)


def _one_channel(value: Any) -> Any:
    """An object with no channel, two, or an unknown one is refused as a whole (`recipients.0`)
    rather than as each alternative's missing or extra member."""
    if isinstance(value, dict) and (len(value) != 1 or not value.keys() <= _CHANNEL_NAMES):
        raise ValueError(f"a recipient is exactly one of {RECIPIENT_SHAPES}")
    return value


Recipient = Annotated[
    EmailRecipient | WebhookRecipient | SlackRecipient | TeamsRecipient,
    BeforeValidator(_one_channel),
]

# A constraint belongs on the type it limits, inside the union: given to a field typed
# `X | SkipJsonSchema[None]`, pydantic checks it on null too and fails with a TypeError (a 500).
Parameters = Annotated[dict[ParameterName, ParameterValue], Field(max_length=MAX_PARAMETERS)]
# The count is checked with the request's other values (every mistake at once); documented here.
Recipients = Annotated[list[Recipient], Field(json_schema_extra={"maxItems": MAX_RECIPIENTS})]


class ExportRequest(BaseModel):
    """Exactly one of `query_id` and `report_id`."""

    model_config = ConfigDict(extra="forbid")

    query_id: Ref | None = None
    report_id: Ref | None = None
    # Checked against the registry (422 with field "format"); the enum documents the choice.
    format: str = Field(
        description="Queries: csv, tsv, jsonl, parquet, xlsx; reports: pdf, xlsx, html",
        json_schema_extra={"enum": list(ANY_FORMAT), "maxLength": 20},
    )
    parameters: dict[ParameterName, ParameterValue] = Field(
        default_factory=dict, max_length=MAX_PARAMETERS
    )
    options: ExportOptions = ExportOptions(neutralize_formulas=True)
    notify: Recipients = Field(
        default_factory=list,
        description="Who hears once the export settles, each recipient once",
    )


# ---------------------------------------------------------------- responses

ExportStatus = Literal["queued", "running", "succeeded", "failed", "expired"]


class ExportSubject(BaseModel):
    type: str
    id: str
    name: str


class ExportProgress(BaseModel):
    rows: int


class ExportFailure(BaseModel):
    code: FailureCode
    detail: str | None


class Export(BaseModel):
    """An export; `status` is `expired` once a succeeded file is past `expires_at`."""

    id: str
    status: ExportStatus
    subject: ExportSubject
    format: str
    parameters: dict[str, Any]
    filename: str
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    expires_at: datetime | None
    size_bytes: int | None
    row_count: int | None
    sha256: str | None
    attempts: int
    progress: ExportProgress
    failure: ExportFailure | None


class ExportList(BaseModel):
    items: list[Export]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )
    prev_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the page of newer exports; null on the newest page.",
    )


class ExportEventItem(BaseModel):
    """One transition of an export, as written in the transition's own transaction."""

    at: datetime
    kind: EventKind
    status: Status
    attempt: int
    worker_id: str | None
    code: FailureCode | None
    detail: str | None


class ExportEventList(BaseModel):
    items: list[ExportEventItem]


class LinkRequest(BaseModel):
    """How long a new link lives (optional): never past its file's expiry, nor past what the
    workspace's policy allows."""

    model_config = ConfigDict(extra="forbid")

    expires_in_days: int | None = Field(
        None, ge=1, le=36_500, description="Days the link works; left out: until the file expires"
    )


class CreatedLink(BaseModel):
    """A public delivery link; the token in `url` is shown only this once."""

    id: str
    url: str
    expires_at: datetime


class LinkItem(BaseModel):
    """A live public link: its URL is never shown again (only its hash is kept)."""

    id: str
    created_by: str = Field(description="The user id of whoever created it")
    created_at: datetime
    expires_at: datetime | None = Field(description="When the export's file expires, and it")
    last_used_at: datetime | None = Field(
        description="When it last served the file (to the minute); null if it never did"
    )


class LinkList(BaseModel):
    items: list[LinkItem]


# ---------------------------------------------------------------- schedules and deliveries

MissedChoice = Literal["once", "skip"]
# A schedule's values are checked by services/schedules/checks.py all together, so that a 422
# lists every mistake at once in the form's order; these types document the rules they check.
Cron = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_CRON_CHARS})]
TimeZoneName = Annotated[str, WithJsonSchema({"type": "string", "maxLength": 64})]
FormatName = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 20, "enum": list(ANY_FORMAT)})
]
MissedText = Annotated[str, WithJsonSchema({"type": "string", "enum": ["once", "skip"]})]
_CRON_HELP = (
    "5 fields (minute hour day-of-month month day-of-week) on the wall clock of `timezone`;"
    " a time skipped by a daylight-saving change fires right after it, a repeated one once"
)
_TIMEZONE_HELP = "An IANA time zone; by default the workspace's (else UTC)"
_MISSED_HELP = 'After downtime: "once" fires one export for all the due times missed, "skip" none'
_FORMAT_HELP = "Queries: csv, tsv, jsonl, parquet, xlsx; reports: pdf, xlsx, html"


class ScheduleRequest(BaseModel):
    """A new schedule: exactly one of `query_id` and `report_id`. Its exports run with the
    rights of its owner, the caller."""

    model_config = ConfigDict(extra="forbid")

    query_id: Ref | None = None
    report_id: Ref | None = None
    format: FormatName = Field(description=_FORMAT_HELP)
    parameters: dict[ParameterName, ParameterValue] = Field(
        default_factory=dict, max_length=MAX_PARAMETERS
    )
    cron: Cron = Field(description=_CRON_HELP, examples=["0 8 * * 1"])
    timezone: TimeZoneName | None = Field(
        None, description=_TIMEZONE_HELP, examples=["Europe/Berlin"]
    )
    recipients: Recipients = Field(default_factory=list)
    missed: MissedText = Field("once", description=_MISSED_HELP)
    enabled: StrictBool = True
    options: ExportOptions = ExportOptions(neutralize_formulas=True)
    filename_template: str | None = Field(
        None,
        max_length=200,
        description="How its exports' files are named: {name}, {date}, {time}, {format} and the"
        " subject's parameters ({since}); null: the query's own template",
        examples=["{name}_{since}_{date}"],
    )


def _without_defaults(schema: dict[str, Any]) -> None:
    """A member left out of a change keeps its value: no default to document."""
    for member in schema.get("properties", {}).values():
        member.pop("default", None)


class ScheduleChange(BaseModel):
    """The settings to change; members left out keep their value. A `query_id` replaces a
    report and a `report_id` a query; a null `timezone` means the workspace's, a null
    `filename_template` the query's. Only these four may be null."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_without_defaults)

    query_id: Ref | None = Field(
        None, description="A query to export instead; null only beside a `report_id`"
    )
    report_id: Ref | None = Field(
        None, description="A report to export instead; null only beside a `query_id`"
    )
    format: FormatName | SkipJsonSchema[None] = Field(None, description=_FORMAT_HELP)
    parameters: Parameters | SkipJsonSchema[None] = None
    cron: Cron | SkipJsonSchema[None] = Field(
        None, description=_CRON_HELP, examples=["30 7 * * 1-5"]
    )
    timezone: TimeZoneName | None = Field(
        None, description=_TIMEZONE_HELP, examples=["America/New_York"]
    )
    recipients: Recipients | SkipJsonSchema[None] = None
    missed: MissedText | SkipJsonSchema[None] = Field(None, description=_MISSED_HELP)
    enabled: StrictBool | SkipJsonSchema[None] = Field(
        None, description="false pauses the schedule; true resumes it from now on"
    )
    options: ExportOptions | SkipJsonSchema[None] = None
    filename_template: str | None = Field(
        None,
        max_length=200,
        description="How its exports' files are named: {name}, {date}, {time}, {format} and the"
        " subject's parameters ({since}); null: the query's own template",
        examples=["{name}_{since}_{date}"],
    )


class Schedule(BaseModel):
    """A schedule; exactly one of `query_id` and `report_id` is set."""

    id: str
    query_id: str | None
    report_id: str | None
    format: str
    parameters: dict[str, Any]
    cron: str = Field(examples=["0 8 * * 1"])
    timezone: str = Field(examples=["Europe/Berlin"])
    recipients: list[Recipient]
    missed: MissedChoice
    enabled: bool
    options: ExportOptions
    owner: str = Field(description="Whose rights its exports run with: its creator")
    next_run_at: datetime | None = Field(description="The next due time (UTC); null when paused")
    created_at: datetime
    subscribed: bool = Field(
        default=False,
        description="Whether you subscribed: each run's export is also mailed to your address",
    )
    filename_template: str | None = Field(
        None, description="How its exports' files are named; null: its subject's template"
    )


class ScheduleList(BaseModel):
    items: list[Schedule]


DeliveryStatusName = Literal["waiting", "sending", "sent", "failed"]
OutcomeName = Literal["file", "failure", "expired"]


class Delivery(BaseModel):
    """One recipient's delivery of an export; `id` is the idempotency key it is sent with."""

    id: str
    recipient: Recipient
    status: DeliveryStatusName = Field(
        description="waiting (for the export, or for the next attempt), sending, sent, failed"
    )
    attempts: int
    outcome: OutcomeName | None = Field(
        description="What the recipient was told: the file, the failure, or that it expired"
    )
    last_error: str | None = Field(
        description="Why the last attempt failed, one readable reason (no addresses or ports)"
    )
    failure_code: FailureCode | None = Field(
        description="Set when the delivery failed with a code: destination_refused"
    )
    sent_at: datetime | None
    created_at: datetime
    next_attempt_at: datetime | None = Field(
        None, description="When a waiting delivery is tried next; null: as soon as it can be"
    )
    resent_at: datetime | None = Field(
        None, description="When a person last sent it again after it failed; null if never"
    )


class DeliveryList(BaseModel):
    items: list[Delivery]


MAX_WEBHOOK_HOSTS = 50
HostName = Annotated[str, StringConstraints(max_length=253)]


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

    model_config = ConfigDict(extra="forbid", json_schema_extra=_without_defaults)

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


class SigningKey(BaseModel):
    """The key webhook receivers verify `X-QExport-Signature` with: hex HMAC-SHA256 over
    `t + "." + body`, keyed with this string's UTF-8 bytes."""

    workspace: str
    key: str


class Subscription(BaseModel):
    """Your subscription to a schedule: each run's export mailed to your own address too."""

    model_config = ConfigDict(extra="forbid")

    schedule_id: str
    subscribed: bool
    email: str | None = Field(description="Where each run's export is mailed to you")
