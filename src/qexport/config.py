"""One frozen settings object, read once at the entrypoint from QEXPORT_* variables.

Each setting is declared once, as a field of `Settings` made by `setting()`: the field's type
says how its variable is parsed (`Bytes` takes KiB/MiB/GiB/TiB, `timedelta` a duration such
as 15m or 7d, `bool` true/false...), `setting()` gives its default, its help, its lower bound
and whether it has a global CLI flag twin (`--<field>`). The variable is QEXPORT_<FIELD>,
except for the per-source families, which declare their pattern (QEXPORT_SOURCE_<NAME>...).
`declared()` lists them for the reader (`from_env`), the checks and the CLI.

pydantic-settings was weighed and lost: it reads the environment whenever Settings are built
(callers and tests build them directly), reads switches and mappings by its own rules (`t`
and `y` for true, JSON for a mapping) and words errors its own way; here QEXPORT_* variables
keep the parsers and messages they had, for about as much code and no new dependency."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from qexport.domain.humanize import binary_size
from qexport.net.egress import EgressPolicy, parse_allow
from qexport.net.proxies import TrustedProxies
from qexport.net.smtp_url import parse_smtp_url

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """`90`, `90s`, `15m`, `12h`, `7d`, `2w` -> timedelta."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"invalid duration {text!r} (examples: 90s, 15m, 12h, 7d)")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError("must be true or false")


_SIZE = re.compile(r"^\s*(\d+)\s*(|B|KiB|MiB|GiB|TiB)\s*$")
_SIZE_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def _parse_size(text: str) -> int:
    """`1048576`, `512MiB`, `50GiB` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError("expected bytes, or a number with KiB, MiB, GiB or TiB")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


# DuckDB's own sizes (QEXPORT_DUCKDB_MEMORY_LIMIT): decimal units as DuckDB reads them.
_DUCKDB_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*$", re.IGNORECASE)


def _duckdb_size(text: str) -> int | None:
    """`256MB` -> 256,000,000 bytes, `1GiB` -> 1,073,741,824; None when DuckDB's own check
    will refuse the text anyway (sources/duckdb/source.py)."""
    match = _DUCKDB_SIZE.match(text)
    if not match:
        return None
    unit = match.group(2).upper()
    base = 1024 if "I" in unit else 1000
    return int(float(match.group(1)) * base ** "BKMGT".index(unit[0]))


def _parse_names(text: str) -> frozenset[str]:
    """`a, b` -> {"a", "b"}."""
    return frozenset(w.strip() for w in text.split(",") if w.strip())


# A number of bytes, read with an optional binary unit (512MiB).
Bytes = Annotated[int, _parse_size]
_PARSERS: dict[Any, Callable[[str], Any]] = {
    str: str,
    int: int,
    float: float,
    bool: _parse_bool,
    Path: Path,
    timedelta: parse_duration,
}


class Bound(Enum):
    """The lower bound a setting is checked against whenever Settings are built."""

    POSITIVE = "must be positive"
    AT_LEAST_1 = "must be at least 1"
    NOT_NEGATIVE = "must not be negative"

    def holds(self, value: float) -> bool:
        if self is Bound.POSITIVE:
            return value > 0
        return value >= (1 if self is Bound.AT_LEAST_1 else 0)


@dataclass(frozen=True)
class Setting:
    """One setting as declared: `env` (unless a family's pattern), `name`, `type` and `parse`
    are filled in by `declared()`."""

    help: str
    flag: bool = False
    secret: bool = False
    bound: Bound | None = None
    env: str = ""
    name: str = ""
    type: Any = str
    parse: Callable[[str], Any] = str

    @property
    def flag_name(self) -> str | None:
        """The global CLI option that wins over the variable, if the setting has one."""
        return f"--{self.name.replace('_', '-')}" if self.flag else None

    @property
    def family(self) -> bool:
        """One variable per name, QEXPORT_SOURCE_<NAME>...: the setting maps names to values."""
        return "<NAME>" in self.env


def setting(
    default: Any,
    help: str,
    *,
    flag: bool = False,
    secret: bool = False,
    masked: bool = False,
    bound: Bound | None = None,
    env: str = "",
) -> Any:
    """A field of Settings: `flag`, a global CLI twin; `secret` (a password or key) and
    `masked` (a URL that may carry one) keep the value out of repr, logs and tracebacks, and
    `secret` also keeps the flag's help from advertising the variable; `env`, a family's
    pattern. Mutable defaults (dicts) are copied for each Settings."""
    spec = Setting(help=help, flag=flag, secret=secret, bound=bound, env=env)
    metadata = {"setting": spec}
    if isinstance(default, dict):
        return field(default_factory=default.copy, repr=not masked, metadata=metadata)
    return field(default=default, repr=not (secret or masked), metadata=metadata)


_SOURCE = "QEXPORT_SOURCE_<NAME>"
_MIB = 1024**2
_GIB = 1024**3
# An idle worker's RSS is about 200 MiB (imports, DuckDB, the metadata pool): a limit below
# this would stop every export.
MIN_WORKER_MEMORY = 256 * _MIB


def _default_database_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'qexport.db'}"


def _default_storage_url(data_dir: Path) -> str:
    return f"file://{(data_dir / 'objects').absolute()}"


@dataclass(frozen=True)
class Settings:
    """Every setting, each declared once (see the module's docstring)."""

    data_dir: Path = setting(
        Path("qexport-data"), "Where the embedded default keeps its files.", flag=True
    )
    database_url: str = setting("", "Metadata database URL.", flag=True, masked=True)
    storage_url: str = setting(
        "", "Object store URL (file:///path, s3://bucket/prefix).", flag=True
    )
    s3_endpoint_url: str = setting("", "S3 endpoint, for S3-compatible stores.", flag=True)
    retention: timedelta = setting(
        timedelta(days=7), "How long files stay downloadable (e.g. 7d, 12h).", flag=True
    )
    approval_ttl: timedelta = setting(
        timedelta(days=3),
        "How long an export request of a sensitive query waits for an admin (e.g. 3d, 12h).",
    )
    # Whole days, not a duration: a bare number read as seconds would prune nearly all.
    audit_retention: int = setting(
        400, "Days `qexport audit prune` keeps audit events.", bound=Bound.AT_LEAST_1
    )
    # A truncation of a chain's newest events is seen once a checkpoint names them: this is
    # how long events can go without one (each checkpoint is one small object in storage).
    audit_checkpoint_every: timedelta = setting(
        timedelta(minutes=10),
        "How often workers checkpoint an audit chain that moved (e.g. 10m, 1h).",
    )
    lease_seconds: float = setting(
        30.0, "A worker's lease on an export, in seconds.", flag=True, bound=Bound.POSITIVE
    )
    max_attempts: int = setting(
        3, "Attempts before an export fails for good.", flag=True, bound=Bound.AT_LEAST_1
    )
    retry_base_seconds: float = setting(
        2.0, "Backoff before an export's second attempt (doubling)."
    )
    retry_max_seconds: float = setting(300.0, "Longest backoff between an export's attempts.")
    statement_timeout_seconds: float = setting(300.0, "Time a query may run, per export.")
    # A server's deadline on the metadata database: each statement, lock wait and connection
    # of `serve`, and each API request that only reads, as a whole (store/engine.py,
    # http/one_hop.py). Past it the request answers 503 with Retry-After.
    database_timeout_seconds: float = setting(
        5.0,
        "Time a server waits for the metadata database (a statement, a lock, a connection)"
        " before the request answers 503.",
        bound=Bound.POSITIVE,
    )
    max_rows: int = setting(50_000_000, "Rows an export may hold.")
    max_bytes: int = setting(10 * _GIB, "Bytes an export's file may hold.")
    part_size: int = setting(8 * _MIB, "Bytes a file is uploaded in at a time.")
    poll_seconds: float = setting(0.5, "How often an idle worker looks for queued exports.")
    shutdown_grace_seconds: float = setting(
        20.0, "After SIGTERM, time a worker has to finish before it hands its exports back."
    )
    secret_key: str = setting(
        "",
        "Master secret for signing keys (prefer the QEXPORT_SECRET_KEY variable:"
        " command lines are visible to other users).",
        flag=True,
        secret=True,
    )
    # Events and checkpoints keyed with a former secret still verify with it; nothing is keyed
    # with these. Comma-separated: a secret with a comma in it cannot be listed.
    secret_key_previous: str = setting(
        "",
        "Former values of QEXPORT_SECRET_KEY, comma-separated: audit events keyed with them"
        " still verify.",
        secret=True,
    )
    # Unset, `serve` uses its own address and `scheduler` refuses to start (the links it
    # sends must reach people from elsewhere).
    public_base_url: str = setting("", "Base URL of public links.", flag=True)
    smtp_url: str = setting("", "SMTP server for email deliveries.", flag=True, secret=True)
    duckdb_memory_limit: str = setting("256MB", "DuckDB's memory per worker process.")
    pg_notify: bool = setting(True, "On PostgreSQL, wake workers by NOTIFY.")
    max_unsettled_per_user: int = setting(
        20,
        "Queued or running exports one requester may have (more get 429).",
        bound=Bound.AT_LEAST_1,
    )
    # 0: half the installation's worker slots (at least 1). There is no registry of workers,
    # so the installation's slots are declared (QEXPORT_WORKER_SLOTS) or, when 0, taken as
    # this `worker` command's processes x concurrency: right for one worker command, too low
    # for several (set it then).
    max_running_per_user: int = setting(
        0, "Exports of one requester running at once.", bound=Bound.NOT_NEGATIVE
    )
    # Exports are batch work and the API is not: a worker beside a server on one machine
    # takes the cores the server leaves (a niceness, 0-19; 0 keeps the worker's).
    worker_nice: int = setting(
        10,
        "Niceness `qexport worker` runs exports at (0-19): servers on its machine go first.",
        bound=Bound.NOT_NEGATIVE,
    )
    # Niceness alone lets a server wait: on Linux's EEVDF scheduler a waking server does not
    # always take its core back from a niced worker at once. In the idle class it does, and
    # it is placed on a core that runs only such work. bench/api_load.py, PostgreSQL, 40
    # clients beside a large export: a median 913 requests/s (699-1,099, 10 runs), reads p99
    # 95 ms, against 737 (664-894, 4 runs) and 117 ms at niceness 10 alone.
    worker_idle: bool = setting(
        True,
        "On Linux, `qexport worker` runs exports in the idle scheduling class (SCHED_IDLE):"
        " a core only when no other process wants it. false: its niceness alone.",
    )
    worker_slots: int = setting(
        0,
        "The installation's worker slots (0: the worker command's own).",
        bound=Bound.NOT_NEGATIVE,
    )
    max_schedules_per_workspace: int = setting(
        100, "Live schedules per workspace.", bound=Bound.NOT_NEGATIVE
    )
    schedule_min_interval: timedelta = setting(
        timedelta(minutes=5), "Shortest gap between a schedule's due times."
    )
    max_links_per_export: int = setting(
        20, "Unrevoked public links per export.", bound=Bound.NOT_NEGATIVE
    )
    workspace_quota: Bytes = setting(
        50 * _GIB, "Bytes of unexpired files per workspace (0: none).", bound=Bound.NOT_NEGATIVE
    )
    duckdb_temp_limit: str = setting(
        "10GiB", "DuckDB's spill to disk per connection (its max_temp_directory_size)."
    )
    sources: Mapping[str, str] = setting(
        {}, "An extra source: its URL, by name.", env=_SOURCE, masked=True
    )
    # A configured source without an entry is usable by no workspace; the built-in demo
    # source belongs to the demo workspace unless listed here.
    source_workspaces: Mapping[str, frozenset[str]] = setting(
        {}, "The workspaces that may use a source: names, or *.", env=f"{_SOURCE}_WORKSPACES"
    )
    privileged_sources: frozenset[str] = setting(
        frozenset(),
        "Configured sources whose PostgreSQL role may be privileged.",
        env=f"{_SOURCE}_ALLOW_PRIVILEGED_ROLE",
    )
    schedule_grace: timedelta = setting(
        timedelta(minutes=1), "How late a due time may fire and still count as on time."
    )
    scheduler_poll_seconds: float = setting(
        1.0, "How often a scheduler looks for due schedules and deliveries."
    )
    delivery_max_attempts: int = setting(
        5, "Attempts per recipient before a delivery fails.", bound=Bound.AT_LEAST_1
    )
    delivery_retry_base_seconds: float = setting(
        30.0, "Backoff before a recipient's second attempt (doubling)."
    )
    delivery_retry_max_seconds: float = setting(
        3600.0, "Longest backoff between a recipient's attempts."
    )
    delivery_timeout_seconds: float = setting(30.0, "Per SMTP conversation or webhook request.")
    email_attachment_max_bytes: int = setting(
        0,
        "Files up to this size are attached to delivery emails; 0: links only.",
        bound=Bound.NOT_NEGATIVE,
    )
    # ReportLab keeps the laid-out pages in memory until the file is saved, about 0.45 KiB a row.
    report_pdf_max_rows: int = setting(
        100_000, "Rows (every section's together) a PDF report may hold.", bound=Bound.AT_LEAST_1
    )
    # Webhooks (and members' sources) may reach these although the egress policy refuses
    # internal destinations by default (loopback, private, link-local...).
    egress_allow: str = setting(
        "",
        "Internal destinations that webhooks, Slack and Teams channels and members' sources may"
        " reach: comma-separated CIDRs and host names.",
        flag=True,
    )
    # The client address (audit trail, sign-in throttle) is taken from X-Forwarded-For only
    # on connections from these; none by default, so a client cannot choose its own.
    trusted_proxies: str = setting(
        "",
        "Proxies whose X-Forwarded-For (and X-Forwarded-Proto) is believed: comma-separated"
        " addresses and CIDRs; none by default.",
    )
    # String and binary values count by length, others at a fixed size each.
    report_max_bytes: int = setting(
        64 * _MIB,
        "Bytes of cell data (every section's together) a report holds while it renders.",
        bound=Bound.AT_LEAST_1,
    )
    # The worker's own watch (worker/memory.py): DuckDB's memory limit does not bound string
    # functions, so one statement could take a process (and the machine) past its RAM.
    worker_max_memory: Bytes = setting(
        2 * _GIB,
        "Memory (RSS) a `qexport worker` process may reach; an export that takes it past"
        " fails limit_exceeded (0: not watched).",
        bound=Bound.NOT_NEGATIVE,
    )
    # Sign-ins that wait longer than a few seconds for one get 503.
    signin_concurrency: int = setting(
        2,
        "Password checks (argon2, 64 MiB each) one server process runs at once.",
        bound=Bound.AT_LEAST_1,
    )

    # A preview runs in a process of its own (previews/processes.py); past this its
    # statement fails limit_exceeded, and the process that asked never grows.
    preview_max_memory: Bytes = setting(
        512 * _MIB,
        "Memory one preview may take, beyond its process's own (its RLIMIT_DATA).",
        bound=Bound.POSITIVE,
    )
    preview_per_minute: int = setting(
        30,
        "Previews one member may run in any minute, through the API, the pages and the CLI"
        " together (more get 429).",
        bound=Bound.AT_LEAST_1,
    )

    def __post_init__(self) -> None:
        if not self.database_url:
            object.__setattr__(self, "database_url", _default_database_url(self.data_dir))
        if not self.storage_url:
            object.__setattr__(self, "storage_url", _default_storage_url(self.data_dir))
        for s in declared():
            if s.bound is not None and not s.bound.holds(getattr(self, s.name)):
                raise ValueError(f"{s.env} {s.bound.value}")
        if self.worker_nice > 19:
            raise ValueError("QEXPORT_WORKER_NICE must be 0 to 19")
        self._check_worker_memory()
        if self.approval_ttl <= timedelta(0):
            raise ValueError("QEXPORT_APPROVAL_TTL must be positive")
        if self.audit_checkpoint_every < timedelta(seconds=1):
            raise ValueError("QEXPORT_AUDIT_CHECKPOINT_EVERY must be at least 1s")
        try:
            parse_allow(self.egress_allow)
        except ValueError as exc:
            raise ValueError(f"invalid QEXPORT_EGRESS_ALLOW {self.egress_allow!r}: {exc}") from None
        try:
            TrustedProxies.parse(self.trusted_proxies)
        except ValueError as exc:
            raise ValueError(
                f"invalid QEXPORT_TRUSTED_PROXIES {self.trusted_proxies!r}: {exc}"
            ) from None
        if self.smtp_url:
            parse_smtp_url(self.smtp_url)  # ValueError naming QEXPORT_SMTP_URL, never the password

    def _check_worker_memory(self) -> None:
        """A worker's memory limit it can live under, and room in it for DuckDB's own."""
        limit = self.worker_max_memory
        if not limit:
            return
        if limit < MIN_WORKER_MEMORY:
            raise ValueError(
                f"QEXPORT_WORKER_MAX_MEMORY must be at least {MIN_WORKER_MEMORY // _MIB}MiB"
                " (an idle worker takes about 200 MiB), or 0 for no limit"
            )
        duckdb = _duckdb_size(self.duckdb_memory_limit)
        if duckdb is not None and duckdb > limit // 2:
            raise ValueError(
                f"QEXPORT_DUCKDB_MEMORY_LIMIT ({self.duckdb_memory_limit}) must be at most half"
                f" of QEXPORT_WORKER_MAX_MEMORY ({binary_size(limit)}): DuckDB caches up to its"
                " limit, and the worker stops exports at its own; raise the worker's limit or"
                " lower DuckDB's"
            )

    def egress_policy(self) -> EgressPolicy:
        """Where webhooks may connect (QEXPORT_EGRESS_ALLOW opens internal destinations)."""
        return EgressPolicy.from_allow(self.egress_allow)

    def proxies(self) -> TrustedProxies:
        """The proxies whose forwarding headers are believed (QEXPORT_TRUSTED_PROXIES)."""
        return TrustedProxies.parse(self.trusted_proxies)

    def running_cap(self, group_slots: int) -> int:
        """QEXPORT_MAX_RUNNING_PER_USER, or half the installation's worker slots (at least 1)."""
        if self.max_running_per_user:
            return self.max_running_per_user
        return max(1, (self.worker_slots or group_slots) // 2)

    @property
    def metadata_on_postgresql(self) -> bool:
        return self.database_url.startswith(("postgresql", "postgres"))

    def service_refusal(self, service: str) -> str | None:
        """Why `service` (serve, worker, scheduler) must not start on these settings, or None.

        On PostgreSQL the master secret must come from QEXPORT_SECRET_KEY: a database shared
        with others and backed up elsewhere is no place for the key that signs sessions,
        webhooks and delivery links. The scheduler sends links, so it needs their address."""
        if self.metadata_on_postgresql and not self.secret_key:
            return (
                f"{service} cannot start: QEXPORT_SECRET_KEY is required when the metadata"
                " database is PostgreSQL (the generated secret is kept only in an embedded"
                " SQLite database); set it to a long random value, the same on every machine"
            )
        if service == "scheduler" and not self.public_base_url:
            return (
                "scheduler cannot start: QEXPORT_PUBLIC_BASE_URL is not set; the links it"
                " delivers must point at the address people reach qexport at"
                " (e.g. https://qexport.example.com)"
            )
        return None

    @property
    def previous_secret_keys(self) -> list[str]:
        """QEXPORT_SECRET_KEY_PREVIOUS, one secret each."""
        return [key.strip() for key in self.secret_key_previous.split(",") if key.strip()]

    @property
    def demo_database(self) -> Path:
        return self.data_dir / "demo.duckdb"

    def uses_data_dir(self) -> bool:
        """Whether the metadata database or the files are kept in the data directory (the
        embedded defaults), rather than only elsewhere (PostgreSQL and S3, say)."""
        return self.database_url == _default_database_url(self.data_dir) or (
            self.storage_url == _default_storage_url(self.data_dir)
        )

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read QEXPORT_* variables; unknown values fail loudly with the variable's name."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for s in declared():
            if s.family:
                continue
            if (raw := env.get(s.env)) not in (None, ""):
                values[s.name] = _parsed(s, s.env, raw)
        values.update(_families(env, [s for s in declared() if s.family]))
        return cls(**values)


@cache
def declared() -> tuple[Setting, ...]:
    """Every setting, in the order of the fields, with its variable and its parser (from the
    field's type)."""
    hints = get_type_hints(Settings, include_extras=True)
    found = []
    for f in fields(Settings):
        spec: Setting = f.metadata["setting"]
        hint = hints[f.name]
        if spec.family:
            parse = _parse_bool if get_origin(hint) is frozenset else _parser(get_args(hint)[1])
        else:
            parse = _parser(hint)
        env = spec.env or f"QEXPORT_{f.name.upper()}"
        found.append(replace(spec, name=f.name, env=env, type=hint, parse=parse))
    return tuple(found)


def _parser(hint: Any) -> Callable[[str], Any]:
    """How a variable becomes a value of the declared type."""
    if get_origin(hint) is Annotated:
        parse: Callable[[str], Any] = hint.__metadata__[0]
        return parse
    if get_origin(hint) is frozenset:
        return _parse_names
    return _PARSERS[hint]


def _parsed(spec: Setting, variable: str, raw: str) -> Any:
    try:
        return spec.parse(raw)
    except ValueError as exc:
        raise ValueError(f"invalid {variable} {raw!r}: {exc}") from None


def _families(env: Mapping[str, str], families: list[Setting]) -> dict[str, Any]:
    """QEXPORT_SOURCE_<NAME>=URL and its companions (_WORKSPACES, _ALLOW_PRIVILEGED_ROLE): a
    variable belongs to the family whose pattern it matches with the longest suffix. A family
    typed as a set holds the names whose variable is true."""
    found: dict[str, dict[str, Any]] = {s.name: {} for s in families}
    for key, raw in env.items():
        matches = [(s, name) for s in families if (name := _family_name(s.env, key)) is not None]
        if raw and matches:
            spec, name = max(matches, key=lambda match: len(match[0].env))
            found[spec.name][name.lower()] = _parsed(spec, key, raw)
    return {
        s.name: frozenset(n for n, v in found[s.name].items() if v)
        if get_origin(s.type) is frozenset
        else found[s.name]
        for s in families
    }


def _family_name(pattern: str, variable: str) -> str | None:
    """NAME when `variable` matches `pattern` (QEXPORT_SOURCE_<NAME>_WORKSPACES)."""
    prefix, suffix = pattern.split("<NAME>")
    name = variable.removeprefix(prefix)
    if name == variable or not name.endswith(suffix):
        return None
    return name.removesuffix(suffix)
