"""What a MySQL/MariaDB source's login may do beyond reading, from its SHOW GRANTS: refused
unless the operator allows it (as postgres_role.py does for PostgreSQL).

The read-only transaction stops writes to tables, not everything else: FILE reads server
files (LOAD_FILE) and writes them (SELECT ... INTO OUTFILE), SUPER and the admin privileges
change the server, PROCESS shows every session's statements, PROXY and GRANT OPTION hand
rights on. So a login may hold only:
- USAGE (no privilege at all), SELECT and SHOW VIEW on the databases it reads, and EXECUTE
  (a routine runs inside the read-only transaction; a DEFINER routine with its definer's
  rights, so grant EXECUTE only on routines a reader may run);
- not SELECT on every database (`ON *.*`) nor on the `mysql` schema (it holds the password
  hashes): a source reaches its own databases only.
Roles granted to the login are judged by their own grants. Any finding refuses the source
(access_lost, not retried) unless it was registered with --allow-privileged-role.
"""

from __future__ import annotations

import re
from typing import Any

from qexport.sources.postgres_role import SourceRefusedError

READING = frozenset({"USAGE", "SELECT", "SHOW VIEW", "EXECUTE"})
_SYSTEM_SCHEMAS = ("`mysql`", "mysql")

_GRANT_ON = re.compile(r"^GRANT (?P<privileges>.+?) ON (?P<target>.+?) TO (?P<rest>.+)$", re.S)
_GRANT_ROLE = re.compile(r"^GRANT (?P<roles>.+?) TO (?P<rest>.+)$", re.S)
_COLUMNS = re.compile(r"\s*\([^)]*\)")
_ROLE = re.compile(r"`((?:[^`]|``)+)`(?:@`[^`]*`)?|'((?:[^']|'')+)'(?:@'[^']*')?")
_MAX_ROLES = 20


def _privileges(text: str) -> list[str]:
    """`SELECT (a, b), INSERT` -> ["SELECT", "INSERT"]: column lists dropped."""
    return [p.strip().upper() for p in _COLUMNS.sub("", text).split(",") if p.strip()]


def findings_of(grants: list[str]) -> tuple[list[str], list[str]]:
    """What the grant lines allow beyond reading, and the roles they grant (to judge next)."""
    found: list[str] = []
    roles: list[str] = []
    for line in grants:
        on = _GRANT_ON.match(line)
        if on is None:
            granted = _GRANT_ROLE.match(line)
            if granted is not None:
                roles += [a or b for a, b in _ROLE.findall(granted.group("roles"))]
            continue
        target = on.group("target").strip()
        privileges = _privileges(on.group("privileges"))
        beyond = [p for p in privileges if p not in READING]
        if beyond:
            found.append(f"has {', '.join(beyond)} on {target}")
        if "SELECT" in privileges and target == "*.*":
            found.append("may read every database (SELECT on *.*)")
        elif "SELECT" in privileges and target.split(".")[0] in _SYSTEM_SCHEMAS:
            found.append(f"may read the mysql system schema (SELECT on {target})")
        if "WITH GRANT OPTION" in on.group("rest").upper():
            found.append(f"may grant its privileges on to others (WITH GRANT OPTION on {target})")
    return found, roles


def role_findings(conn: Any) -> list[str]:
    """What the connection's login (and the roles granted to it) may do beyond reading."""
    found, roles = findings_of(_show_grants(conn, "SHOW GRANTS"))
    seen: set[str] = set()
    while roles and len(seen) < _MAX_ROLES:
        role = roles.pop(0)
        if role in seen:
            continue
        seen.add(role)
        escaped = role.replace("'", "''")
        role_found, more = findings_of(_show_grants(conn, f"SHOW GRANTS FOR '{escaped}'"))
        found += [f"(through the role {role!r}) {finding}" for finding in role_found]
        roles += more
    return found


def _show_grants(conn: Any, statement: str) -> list[str]:
    conn.query(statement)
    result = conn.store_result()
    return [_text(row[0]) for row in result.fetch_row(0)]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def refusal(name: str, user: str, findings: list[str]) -> SourceRefusedError:
    """The one line that refuses a source: what was found and how to fix it."""
    return SourceRefusedError(
        f"data source {name!r} refused: its login {user!r} {'; '.join(findings)}."
        " Give it a login that may only read (README: Sources and roles), or register the"
        " source with --allow-privileged-role"
    )
