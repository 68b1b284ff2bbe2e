"""The URL of a data source, checked before it is registered: a scheme this installation
knows, for a workspace's admins only a PostgreSQL server named by host or address with a few
harmless options, pinned to the address the egress policy allowed; its kind, and whether it
holds a password (services/sources.py registers it)."""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict

from qexport.domain.failures import (
    InvalidRequestError,
)
from qexport.net.egress import EgressPolicy, EgressRefusedError, UnresolvedError
from qexport.sources import schemes
from qexport.sources.credentials import env_reference, is_sealed
from qexport.sources.duckdb.lake import duckdb_location

_POSTGRES_SCHEMES = ("postgresql", "postgres")
log = structlog.get_logger()

# What a member's URL may set besides the server, user, password and database: nothing that
# names a file on qexport's machines (passfile, sslkey...) or another service definition.
_MEMBER_OPTIONS = frozenset(
    {"sslmode", "connect_timeout", "application_name", "target_session_attrs"}
)


def kind_of(url: str) -> str:
    """`duckdb` or `postgresql` (whatever spelling the URL uses); `env` for a reference;
    `unknown` for a URL sealed under another key."""
    if env_reference(url) is not None:
        return "env"
    if is_sealed(url):  # sealed under another key: its kind cannot be read
        return "unknown"
    scheme = url.partition(":")[0].lower()
    return "postgresql" if scheme in _POSTGRES_SCHEMES else scheme


def check_source_url(url: str) -> None:
    """Refuse a URL that names no usable source. Messages never repeat the URL (it may hold
    a password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError:
        raise InvalidRequestError("the source URL cannot be parsed", field="url") from None
    if parts.scheme == "duckdb":
        path = unquote(parts.path)
        if parts.netloc or not PurePosixPath(path).is_absolute() or path.endswith("/"):
            raise InvalidRequestError(
                "a DuckDB source URL names an absolute file: duckdb:///absolute/path.duckdb",
                field="url",
            )
        try:
            duckdb_location(url)  # its lake folders, if any: absolute, existing folders
        except ValueError as exc:
            raise InvalidRequestError(str(exc), field="url") from None
        return
    if parts.scheme in _POSTGRES_SCHEMES:
        if not parts.netloc and "host=" not in parts.query:
            raise InvalidRequestError(
                "a PostgreSQL source URL names a server: postgresql://user@host/database",
                field="url",
            )
        return
    scheme = schemes.scheme_of(url)
    if scheme is None or schemes.kind_of(scheme) is None:
        raise InvalidRequestError(schemes.unsupported(scheme), field="url")
    # Any other installed kind checks the rest of its URL when it is built.


def url_has_password(url: str) -> bool:
    """Whether the URL carries a password, in its authority or as `?password=`."""
    try:
        parts = urlsplit(url)
        in_query = any(k.lower() == "password" for k, _ in parse_qsl(parts.query))
        return bool(parts.password) or in_query
    except ValueError:
        return False


def check_member_url(url: str) -> None:
    """What a workspace admin may register: a PostgreSQL server over TCP, with a password.

    DuckDB files and `env:` references read qexport's own disk and environment, and a URL
    without a password (or with a socket path or a passfile) would log in with whatever the
    server's machine is trusted for: those are the operator's to register.
    """
    check_source_url(url)
    parts = urlsplit(url)
    if "#" in url:  # libpq has no fragments: what follows `#` would be read as more options
        raise InvalidRequestError(
            "the URL may not contain '#' (write one in a password as %23)", field="url"
        )
    if parts.scheme not in _POSTGRES_SCHEMES:
        raise InvalidRequestError(
            "only PostgreSQL sources can be registered here; ask the operator for others",
            field="url",
        )
    options = dict(parse_qsl(parts.query))
    refused = sorted(k for k in options if k.lower() not in _MEMBER_OPTIONS | {"password"})
    if refused:
        raise InvalidRequestError(
            f"the URL option {refused[0]!r} is not allowed here"
            f" (allowed: {', '.join(sorted(_MEMBER_OPTIONS))})",
            field="url",
        )
    if not parts.hostname or parts.hostname.startswith("/") or "%2f" in parts.netloc.lower():
        raise InvalidRequestError("the URL must name a server by host name or address", field="url")
    if not url_has_password(url):
        raise InvalidRequestError(
            "the URL must carry the role's password: postgresql://user:password@host/db",
            field="url",
        )


def pin_member_url(url: str, policy: EgressPolicy) -> str:
    """The member's URL with `hostaddr` set to the checked address of its host.

    A member's source is a connection qexport makes on their behalf, so it passes the egress
    policy like a webhook: the host is resolved once and every address checked, and the role
    check and every worker then connect to that address (libpq's `hostaddr`; the name stays
    for TLS), never to a second lookup that could answer an internal address.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        addresses = policy.resolve_checked(host, parts.port or 5432)
    except EgressRefusedError as exc:
        # The address and its class are for the operator's log: told to a member, they would
        # map the internal network's names to addresses.
        log.info("source_refused", reason=exc.reason)
        raise InvalidRequestError(
            f"{host[:80]!r} is refused by the egress policy: sources may not be on loopback,"
            " private, link-local or other internal addresses (the operator may open them"
            " with QEXPORT_EGRESS_ALLOW)",
            field="url",
        ) from None
    except (UnresolvedError, ValueError) as exc:
        raise InvalidRequestError(f"could not resolve the host {host!r}", field="url") from exc
    pin = urlencode({"hostaddr": str(addresses[0])})
    pinned = urlunsplit(parts._replace(query=f"{parts.query}&{pin}" if parts.query else pin))
    _check_libpq_reading(pinned, host, str(addresses[0]))
    return pinned


def _check_libpq_reading(pinned: str, host: str, address: str) -> None:
    """Refuse unless libpq itself reads the pinned URL as the checked host at the checked
    address with only the options a member may set: what Python's URL parser saw is not
    what connects, and the two differ on odd URLs."""
    try:
        options = conninfo_to_dict(pinned)
    except psycopg.Error:
        raise InvalidRequestError("the source URL cannot be parsed", field="url") from None
    allowed = _MEMBER_OPTIONS | {"user", "password", "dbname", "host", "port", "hostaddr"}
    if (
        not set(options) <= allowed
        or str(options.get("host", "")).lower() != host.lower()
        or options.get("hostaddr") != address
    ):
        raise InvalidRequestError(
            "the URL must name one server by host name or address, with no other options"
            f" than {', '.join(sorted(_MEMBER_OPTIONS))}",
            field="url",
        )
