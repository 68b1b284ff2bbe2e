"""What a MySQL/MariaDB source's login may do beyond reading, itself or through what it can
become: refused unless the operator allows it (as postgres/role.py does for PostgreSQL).

The read-only transaction stops writes to tables, not everything else: FILE reads server
files (LOAD_FILE) and writes them (SELECT ... INTO OUTFILE), SUPER and the admin privileges
change the server, PROCESS shows every session's statements, GRANT OPTION and ADMIN OPTION
hand rights on. So a login may hold only:
- USAGE (no privilege at all), SELECT and SHOW VIEW on the databases it reads, and EXECUTE
  (a routine runs inside the read-only transaction; a DEFINER routine with its definer's
  rights, so grant EXECUTE only on routines a reader may run);
- not SELECT on every database (`ON *.*`), on the `mysql` schema (it holds the password
  hashes) nor on `performance_schema` (every session's statements, as PROCESS): a source
  reaches its own databases only. A database-level grant names databases by a LIKE pattern
  (`%` any run of characters, `_` any one character unless escaped as `\\_`), as the server
  matches it: `my%`.* reads `mysql`, and `%`.* every database, so a pattern is refused when
  it can match one of these schemas (in any case: lower_case_table_names may fold names).
  (MySQL 8 with partial_revokes reads the wildcards literally; judged as patterns there too,
  which can only refuse more.)

The same holds for everything the login can become, each judged by its own grants:
- every role granted to it, default or not (SET ROLE enables any of them), and the roles
  granted to those, through any chain;
- PUBLIC (MariaDB 10.11), whose grants every account holds, and the roles granted to PUBLIC
  (their privileges too hold for every account, although none may SET ROLE to them: a login
  with no grant of its own runs LOAD_FILE once a role with FILE is granted to PUBLIC);
- a PROXY grant lets the login become another account: refused whatever that account holds
  (its grants are not the login's to read).
A finding names the path (`reader -> team -> filer`) and the fix (`REVOKE filer FROM team`).

How the roles' grants are read: MariaDB shows a role's grants (and those of the roles under
it) only while it is the session's role, so each granted role not already shown is enabled
in turn (`SET ROLE`) for one SHOW GRANTS, and the session's role is set back after; MySQL
shows them with `SHOW GRANTS FOR CURRENT_USER() USING role` instead. `SHOW GRANTS FOR role`
would need SELECT on the `mysql` schema, which a reader must not have. A login with no role
costs two statements (CURRENT_USER() and SHOW GRANTS), a role two more each (at most
_MAX_ROLES of them; more refuses the source rather than judge part of it). MySQLSource
judges the login at every session it opens (a grant made while a worker runs is seen at its
next export): on MariaDB 10.11, a tiny statement's whole session (connect, set up, run,
read) took 0.6 ms judged once per process and 0.6 ms judged each time for a login with no
role, 0.9 ms for one reading through its default role (medians of 300, 2 busy cores).
Any finding refuses the source (access_lost, not retried) unless it was registered with
--allow-privileged-role.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from qexport.sources.postgres.role import SourceRefusedError

READING = frozenset({"USAGE", "SELECT", "SHOW VIEW", "EXECUTE"})
# The schemas a reader may not read, and what reading them gives. Not information_schema (no
# GRANT reaches it; it shows what the login may see anyway) nor sys (MySQL's views over
# performance_schema, with the invoker's rights: nothing without performance_schema).
_SYSTEM_SCHEMAS = {
    "mysql": "the mysql system schema",  # the password hashes
    "performance_schema": "every session's statements",  # as PROCESS shows them
}

_GRANT_ON = re.compile(r"^GRANT (?P<privileges>.+?) ON (?P<target>.+?) TO (?P<rest>.+)$", re.S)
_GRANT_ROLE = re.compile(r"^GRANT (?P<roles>.+?) TO (?P<rest>.+)$", re.S)
_COLUMNS = re.compile(r"\s*\([^)]*\)")
# A grant's target: *.*, `db`.*, `db`.`table`, PROCEDURE `db`.`p` (bare names on old servers).
_NAME = r"`(?:[^`]|``)*`|[^\s.`]+"
_TARGET = re.compile(
    rf"^(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE BODY|PACKAGE)\s+)?"
    rf"(?P<database>{_NAME})\.(?P<object>{_NAME})$",
    re.IGNORECASE,
)
_PART = r"`(?:[^`]|``)*`|'(?:[^']|'')*'|[\w$.%-]+"
# An account or role as SHOW GRANTS writes it: `r`@`%`, 'r'@'%' (older servers), `role`.
_ACCOUNT = re.compile(rf"(?P<name>{_PART})(?:@(?P<host>{_PART}))?")
_PUBLIC = "PUBLIC"
# With a LIMIT of their own: describe and preview judge the login under sql_select_limit,
# which would otherwise cut these to no row.
_CURRENT_USER = "SELECT CURRENT_USER() LIMIT 1"
_CURRENT_ROLE = "SELECT CURRENT_ROLE() LIMIT 1"
_MAX_ROLES = 20

Key = tuple[str, str | None]  # (name, host), unquoted; a MariaDB role has no host


@dataclass(frozen=True)
class _Account:
    """An account or role: its key, and its name as SHOW GRANTS wrote it (for a REVOKE)."""

    key: Key
    written: str

    @property
    def name(self) -> str:
        return self.key[0]


def _unquoted(part: str) -> str:
    if part[:1] in "`'" and len(part) >= 2:
        return part[1:-1].replace(part[0] * 2, part[0])
    return part


def _account(text: str) -> _Account | None:
    """The account a grant line's `TO ...` starts with (PUBLIC too: a bare word)."""
    found = _ACCOUNT.match(text.strip())
    if found is None:
        return None
    host = found.group("host")
    return _Account((_unquoted(found.group("name")), host and _unquoted(host)), found.group(0))


def _accounts(text: str) -> list[_Account]:
    """The roles of `GRANT a, b TO ...` (a comma inside a quoted name is part of it)."""
    found = (_account(m.group(0)) for m in _ACCOUNT.finditer(text))
    return [a for a in found if a is not None]


def _privileges(text: str) -> list[str]:
    """`SELECT (a, b), INSERT` -> ["SELECT", "INSERT"]: column lists dropped."""
    return [p.strip().upper() for p in _COLUMNS.sub("", text).split(",") if p.strip()]


def findings_of(grants: list[str]) -> list[str]:
    """What grant lines (of one account or role) allow beyond reading, each in a few words."""
    found: list[str] = []
    for line in grants:
        on = _GRANT_ON.match(line)
        if on is None:
            found += _admin_findings(line)
            continue
        target = on.group("target").strip()
        privileges = _privileges(on.group("privileges"))
        if privileges == ["PROXY"]:
            grantee = _account(on.group("rest"))
            fix = f": REVOKE PROXY ON {target} FROM {grantee.written}" if grantee else ""
            found.append(f"can become the account {target} (PROXY{fix})")
            continue
        beyond = [p for p in privileges if p not in READING]
        if beyond:
            found.append(f"has {', '.join(beyond)} on {target}")
        if "SELECT" in privileges:
            found += _reading_findings(target)
        if "WITH GRANT OPTION" in on.group("rest").upper():
            found.append(f"may grant its privileges on to others (WITH GRANT OPTION on {target})")
    return found


def _reading_findings(target: str) -> list[str]:
    """What SELECT on `target` reads that a reader may not: every database, or a system
    schema. A database-level target (`db`.*) is a LIKE pattern, as the server matches it:
    `%` any run of characters, `_` any one, `\\_` an underscore; so `my%`.* reads `mysql`
    and `%`.* every database. A table's or routine's database is its literal name. Matched
    regardless of case (lower_case_table_names may fold it); an unreadable target, as found."""
    if target == "*.*":
        return ["may read every database (SELECT on *.*)"]
    found = _TARGET.match(target)
    if found is None:
        return [f"has SELECT on a target qexport cannot read ({target})"]
    database = _unquoted(found.group("database"))
    if found.group("object") != "*":
        pattern = re.compile(re.escape(database), re.IGNORECASE)
    elif database and set(database) == {"%"}:
        return [f"may read every database (SELECT on {target}, a pattern that matches any name)"]
    else:
        pattern = _like(database)
    return [
        f"may read {what} (SELECT on {target})"
        if database.replace("\\", "").lower() == schema
        else f"may read {what} (SELECT on {target}, a pattern that matches {schema})"
        for schema, what in _SYSTEM_SCHEMAS.items()
        if pattern.fullmatch(schema)
    ]


def _like(pattern: str) -> re.Pattern[str]:
    """A LIKE pattern (backslash escapes) as a case-insensitive regular expression."""
    parts: list[str] = []
    escaped = False
    for char in pattern:
        if escaped or char not in "\\%_":
            parts.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            parts.append(".*" if char == "%" else ".")
    if escaped:  # a trailing backslash is itself
        parts.append(re.escape("\\"))
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _admin_findings(line: str) -> list[str]:
    """`GRANT role TO x WITH ADMIN OPTION`: x may grant the role to anyone."""
    granted = _GRANT_ROLE.match(line)
    if granted is None or "WITH ADMIN OPTION" not in granted.group("rest").upper():
        return []
    grantee = _account(granted.group("rest"))
    return [
        f"may grant the role {role.name} on to others (WITH ADMIN OPTION:"
        f" REVOKE ADMIN OPTION FOR {role.written} FROM {grantee.written if grantee else '...'})"
        for role in _accounts(granted.group("roles"))
    ]


@dataclass
class _Grants:
    """The grant lines read so far, by grantee, and the roles granted to each grantee."""

    lines: dict[Key, list[str]] = field(default_factory=dict)
    roles: dict[Key, list[_Account]] = field(default_factory=dict)
    written: dict[Key, str] = field(default_factory=dict)

    def add(self, lines: list[str], *, grantee: _Account | None = None) -> None:
        """File each line under its grantee (or `grantee`, for lines MySQL merged into the
        login's own); role grants also as edges."""
        for line in lines:
            rest = _GRANT_ON.match(line) or _GRANT_ROLE.match(line)
            owner = grantee or (_account(rest.group("rest")) if rest else None)
            if owner is None:
                continue  # SET DEFAULT ROLE ... and the like
            self.written.setdefault(owner.key, owner.written)
            filed = self.lines.setdefault(owner.key, [])
            if line not in filed:
                filed.append(line)
            if _GRANT_ON.match(line) is None and rest is not None:
                granted = self.roles.setdefault(owner.key, [])
                granted += [r for r in _accounts(rest.group("roles")) if r not in granted]

    def chains(self, login: Key) -> dict[Key, list[_Account]]:
        """The shortest chain of role grants from the login to each role it can become;
        PUBLIC, whose grants every account holds (the roles granted to it too: MariaDB
        gives their privileges to every account, though none may SET ROLE to them), as if
        granted to the login."""
        start = _Account(login, self.written.get(login, login[0]))
        chains = {login: [start]}
        waiting = deque([login])
        public = (_PUBLIC, None)
        if public in self.lines and public != login:
            chains[public] = [start, _Account(public, _PUBLIC)]
            waiting.append(public)
        while waiting:
            member = waiting.popleft()
            for role in self.roles.get(member, []):
                if role.key not in chains:
                    chains[role.key] = [*chains[member], role]
                    waiting.append(role.key)
        return chains


def role_findings(conn: Any) -> list[str]:
    """What the connection's login (and every role it can become) may do beyond reading."""
    login = _current_user(conn)
    grants = _Grants()
    grants.add(_show_grants(conn, "SHOW GRANTS"))
    found = _expand(conn, grants, login)
    found += findings_of(grants.lines.get(login, []))
    for key, chain in grants.chains(login).items():
        if key == login:
            continue
        for finding in findings_of(grants.lines.get(key, [])):
            found.append(f"{finding}, {_through(chain)}")
    return found


def _through(chain: list[_Account]) -> str:
    """`through the role filer (reader -> team -> filer: REVOKE `filer` FROM `team`)`."""
    role, member = chain[-1], chain[-2]
    if role.key == (_PUBLIC, None):
        return "granted to PUBLIC (every account: revoke it from PUBLIC)"
    path = " -> ".join(a.name for a in chain)
    return f"through the role {role.name} ({path}: REVOKE {role.written} FROM {member.written})"


def _expand(conn: Any, grants: _Grants, login: Key) -> list[str]:
    """Read the grants of the roles granted to the login that SHOW GRANTS did not show;
    a finding if there are more than _MAX_ROLES of them."""
    waiting = [r for r in grants.roles.get(login, []) if r.key not in grants.lines]
    if not waiting:
        return []
    if len(waiting) > _MAX_ROLES:
        return [
            f"is granted {len(waiting)} roles, more than the {_MAX_ROLES} qexport judges"
            " (grant it fewer)"
        ]
    if "mariadb" not in str(conn.get_server_info()).lower():
        own = set(grants.lines.get(login, []))
        for role in waiting:
            using = _show_grants(conn, f"SHOW GRANTS FOR CURRENT_USER() USING {role.written}")
            grants.add([line for line in using if line not in own], grantee=role)
        return []
    current = _rows(conn, _CURRENT_ROLE)[0][0]
    try:
        for role in waiting:
            if role.key not in grants.lines:  # not shown under a role enabled before it
                conn.query(f"SET ROLE {_quoted(role.name)}")
                grants.add(_show_grants(conn, "SHOW GRANTS"))
    finally:
        conn.query(f"SET ROLE {'NONE' if current is None else _quoted(_text(current))}")
    return []


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _current_user(conn: Any) -> Key:
    """The account the server authenticated (`name@host`: the host is after the last @)."""
    name, _, host = _text(_rows(conn, _CURRENT_USER)[0][0]).rpartition("@")
    return (name, host)


def _show_grants(conn: Any, statement: str) -> list[str]:
    return [_text(row[0]) for row in _rows(conn, statement)]


def _rows(conn: Any, statement: str) -> list[tuple[Any, ...]]:
    conn.query(statement)
    result = conn.store_result()
    return list(result.fetch_row(0))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def refusal(name: str, user: str, findings: list[str]) -> SourceRefusedError:
    """The one line that refuses a source: what was found and how to fix it."""
    return SourceRefusedError(
        f"data source {name!r} refused: its login {user!r} {'; '.join(findings)}."
        " Give it a login that may only read (README: Sources and roles), or register the"
        " source with --allow-privileged-role"
    )
