"""What of a source's failure its members read, and what only the operator's log gets.

A failure's detail reaches every member who may see the export or the preview (viewers
included): the API's problems, the export's `failure.detail` and events, the pages, the CLI,
the messages sent about it. The database libraries' own words name where the source is and
what runs beside it, which a viewer has no use for and an attacker would map the
installation with: DuckDB's `Could not set lock on file "/srv/shop.duckdb": Conflicting lock
is held in /usr/bin/python3.11 (PID 23243)`, libpq's `connection to server at
"10.0.0.5", port 5439 failed`, MariaDB's `Access denied for user 'reader'@'10.0.0.7'`.

So each adapter's error translation (the one place a library's exception becomes a qexport
error) says what is wrong and what to do in its own words, without paths, hosts, addresses,
ports or process ids, and hands the library's full reason to the log (`source_connect_failed`
for a session that could not be opened, `source_failed` for a later failure whose text lost
something), with the source's name, never a password: the operator is the one who can act.

Weighed and not done:
- Redacting at the doors (the pages, the API, the CLI) or when the detail is read
  (`readable_detail`): the detail is stored, and copied into events, messages and webhook
  bodies; each door would have to know every library's forms, and a new door would leak.
- A fixed "the source is unavailable, see the operator's log" for every failure: a member
  could no longer tell a refused connection from a locked file or a refused login, and the
  editor whose lake path is missing would not see which one.
- Only the redaction below, without the adapters' own sentences: a regular expression for
  every form of every library's address is a net with holes (a host name is just a word), so
  it is the second line, behind the sentences each adapter writes from the error's kind
  (libpq's reason after its address, MySQL's error number, DuckDB's kind of IO error).

The net replaces, with "…", absolute paths (but those of a lake's files, which the source's
queries read and its editors see in its URL; not any path the query writes, or a query could
confirm a guessed path by writing it), IPv4 and IPv6 addresses, `host:port` pairs, a quoted
name after `host`, `server`, `on`, `at` or `name`, the `@'host'` of a MySQL account, a `port
N` and a `PID N`. It costs about 40 µs per message (measured on 2 shared cores), on failures
only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import structlog

log = structlog.get_logger()

# A log line is one line; the reason is kept whole up to here (libpq's lists every address
# it tried, a line each).
_LOG_REASON_CHARS = 2000
ELLIPSIS = "…"

# "host:port" (db.internal:5432, 10.0.0.5:3306, ipv4:127.0.0.1:15002's address part).
_HOST_PORT = re.compile(r"(?<![\w.-])(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+\.[A-Za-z0-9-]+:\d{1,5}\b")
# A quoted name after a word that says it is a place: libpq's `at "10.0.0.5"`, MariaDB's
# `on 'db'`, psycopg's `resolve host 'db'`, libpq's `host name "db"` and `for host "10.0.0.7"`.
_NAMED_PLACE = re.compile(
    r"\b(host|hostname|server|name|on|at)\s+(\"[^\"]*\"|'[^']*')(?:\s*\([^)]*\))?", re.IGNORECASE
)
# MySQL's account: 'user'@'host'.
_ACCOUNT_HOST = re.compile(r"@(?:'[^']*'|\"[^\"]*\"|`[^`]*`)")
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])")
# IPv6: two or more colons among hex digits, with "::" or eight groups (a time of day,
# 12:30:45, has neither).
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:%\w+)?(?![\w:])")
# An absolute path, quoted or bare; a URL's path is none (it follows a word character or :).
_QUOTED_PATH = re.compile(r"(\"|')(/[^\"']*)\1")
_BARE_PATH = re.compile(r"(?<![\w:/.~-])/(?:[\w.+@%~=,-]+/?)+")
_PORT = re.compile(r"\bport\s+\d+", re.IGNORECASE)
_PID = re.compile(r"\s*\((?:PID|pid|process)\s+\d+\)|\b(?:PID|pid)\s*[:=]?\s*\d+")
_REPEATED = re.compile(rf"{ELLIPSIS}(?:[\s:,]*{ELLIPSIS})+")


def _is_ipv6(found: re.Match[str]) -> str:
    text = found.group(0)
    if "::" in text or text.count(":") == 7:
        return ELLIPSIS
    return text


# Whether a path may be shown: one a source's queries may read (a lake's files).
PathShown = Callable[[str], bool]


def without_layout(text: str, *, shown: PathShown | None = None) -> str:
    """`text` with the installation's layout (paths, addresses, ports, process ids) replaced
    by "…"; a path `shown` accepts (a file of the source's lake) stays."""

    def quoted_path(found: re.Match[str]) -> str:
        quote, written = found.group(1), found.group(2)
        if shown is not None and shown(written):
            return found.group(0)
        return f"{quote}{ELLIPSIS}{quote}"

    def bare_path(found: re.Match[str]) -> str:
        written = found.group(0).rstrip(".,")  # the sentence's full stop is no part of it
        if shown is not None and shown(written):
            return found.group(0)
        return ELLIPSIS + found.group(0)[len(written) :]

    text = _PID.sub("", text)
    text = _QUOTED_PATH.sub(quoted_path, text)
    text = _BARE_PATH.sub(bare_path, text)
    text = _ACCOUNT_HOST.sub("", text)
    text = _NAMED_PLACE.sub(lambda found: f"{found.group(1)} {ELLIPSIS}", text)
    text = _HOST_PORT.sub(ELLIPSIS, text)
    text = _IPV4.sub(ELLIPSIS, text)
    text = _IPV6.sub(_is_ipv6, text)
    text = _PORT.sub(f"port {ELLIPSIS}", text)
    text = _REPEATED.sub(ELLIPSIS, text)
    return re.sub(r"\s+", " ", text).strip()


# What a failure to reach a server means, whatever the library's words (libpq, MySQL's and
# MariaDB's clients, ODBC, gRPC...), most telling first.
_NETWORK_REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), reason)
    for pattern, reason in (
        (
            r"could not translate host name|name or service not known|failed to resolve"
            r"|unknown (?:mysql )?server host|nodename nor servname|name resolution"
            r"|getaddrinfo|dns resolution failed",
            "its server's name does not resolve",
        ),
        (
            r"starting up|shutting down|shutdown in progress|in recovery mode"
            r"|not yet accepting connections",
            "its server is starting up or shutting down",
        ),
        (
            r"too many (?:clients|connections)|connection slots are reserved",
            "its server has no connection to spare",
        ),
        (r"connection refused|\((?:111|115)\)(?!\w)", "connection refused"),
        (r"timed? ?out|timeout expired|\(110\)(?!\w)", "the connection timed out"),
        (r"no route to host|\(113\)(?!\w)", "no route to its server"),
        (r"network is unreachable|\(101\)(?!\w)", "its server's network is unreachable"),
        (
            r"on socket|through socket|\.s\.PGSQL|\.sock\b",
            "no server answers on its local socket",
        ),
        (
            r"closed the connection|connection reset|lost connection|gone away|broken pipe"
            r"|eof detected|server closed",
            "its server closed the connection",
        ),
    )
)


def network_reason(text: str) -> str | None:
    """What a connection failure's text means, in a few words without the place; None when
    none of the known forms is in it."""
    for pattern, reason in _NETWORK_REASONS:
        if pattern.search(text):
            return reason
    return None


def logged(event: str, *, source: str, kind: str, reason: str) -> None:
    """Give the operator's log the whole `reason` (secrets already taken out) a member's
    text leaves out: `event` is source_connect_failed or source_failed."""
    one_line = " ".join(reason.split())[:_LOG_REASON_CHARS]
    log.warning(event, source=source, kind=kind, reason=one_line)


def told(source: str, kind: str, reason: str) -> str:
    """`reason` as members read it (no place); the whole of it to the log when that took
    something out."""
    shown = without_layout(reason)
    if shown != reason:
        logged("source_failed", source=source, kind=kind, reason=reason)
    return shown
