"""What a PostgreSQL source's role may do beyond reading: refused unless the operator allows it.

A read-only transaction stops writes, not functions: a superuser (or a member of the
server-file roles) reads `/etc/passwd` with pg_read_file, runs programs with COPY ... TO
PROGRAM through dblink, reads pg_shadow or switches role. And a query switches role by
itself: `SELECT set_config('role', 'admin', true), query_to_xml('select pg_read_file(...)',
...)` runs the inner statement as `admin`, for any role the login is a member of, whatever
INHERIT says. So what is judged is every role the login can become: the login itself and each
role r with pg_has_role(login, r, 'MEMBER'), through any chain of grants (NOINHERIT ones
too, since SET ROLE is still possible). The login is session_user, not current_user: a URL's
`options=-c role=reader` on a superuser login would otherwise pass, and
`set_config('role', 'none', true)` goes back to the superuser.

Each of those roles is refused when it:
- is a superuser, or has BYPASSRLS;
- is one of pg_read_server_files, pg_write_server_files, pg_execute_server_program (server
  files and programs), pg_read_all_data, pg_write_all_data (every table, past GRANTs),
  pg_read_all_stats (every session's statements, as MySQL's PROCESS) or pg_signal_backend
  (ends other applications' sessions);
- owns a table whose row-level security is enabled but not forced: its owner, and so any
  member of the owner's role, reads every row past the policies;
- may execute dblink or postgres_fdw functions, or the server-side file functions
  (lo_import, lo_export, pg_read_file, pg_read_binary_file, pg_ls_dir, pg_stat_file), in a
  schema it may use;
- may execute adminpack's C functions (pg_file_write, pg_file_rename, pg_file_unlink,
  pg_file_sync, pg_logdir_ls; by name, in any schema it may use: the read-only transaction
  does not stop them writing server files; adminpack's SQL pg_file_rename(text, text) only
  calls the C one, which checks EXECUTE for its caller), or any function in an untrusted
  procedural language (pg_language.lanpltrusted false, internal and c aside: plpython3u,
  plperlu...), whose code runs as the server's operating-system user; each is named with
  its REVOKE;
- may execute a SECURITY DEFINER function (EXECUTE, and USAGE on its schema) whose owner,
  judged by these same rules, is refused: the function runs with its owner's rights, so
  `CREATE FUNCTION readf(p text) ... SECURITY DEFINER AS $$ SELECT pg_read_file(p) $$` owned
  by a superuser reads any server file for whoever may call it. So does an aggregate whose
  support function (transition, final, ...) is one: PostgreSQL checks EXECUTE on those for
  the aggregate's owner, not its caller, so revoking EXECUTE on the function from PUBLIC
  does not stop `SELECT leak('/etc/passwd')`. A definer function owned by the login or a
  role it can become adds nothing (that role is judged already), one owned by a plain
  reader passes, and procedures and trigger functions are not judged (no query calls them).
And the login may not execute set_config(text, text, boolean) in a database that uses
row-level security: a query could then call set_config('qexport.user_id', ..., true) and read
someone else's rows. It is granted to PUBLIC by default; qexport itself sets the requester
with SET LOCAL, which needs no EXECUTE on set_config. (A definer function's owner is not
judged for it: the owner's function cannot be made to run another requester's query.)

A finding names the role, the chain of grants that reaches it (`reader -> team -> admin`,
the shortest one) and the fix (`REVOKE admin FROM team`: the grant that hands the role on,
FORCE ROW LEVEL SECURITY on the table, or REVOKE EXECUTE on a definer function). Any finding
refuses the source (access_lost, not retried: the operator must change the role) unless it
was registered with --allow-privileged-role, which is then logged as a warning.

The queries name every catalog relation, function and type with its schema and run with
search_path pinned to `pg_catalog, pg_temp` (postgres/catalog_path.py): a superuser login
whose own schema, first on its path, holds a `pg_roles` view saying it is none passed before.

Two catalog queries, whatever the number of roles: the roles the login can become (with
their attributes, direct members and unforced tables: one pass over pg_roles and pg_class),
then the outside-reaching and SECURITY DEFINER functions with the roles their ACLs name; the
chains are walked here, breadth first, so that the shortest one is named. A recursive CTE
could build the chains in the server, but would enumerate every path of a role graph with
many diamonds; walking each edge once here is linear. A definer function's owner is judged
with the same queries, once per owner and check (a superuser's ends at the first), and at
most _MAX_OWNERS of them: past that the source is refused rather than judged in part.
Measured on PostgreSQL 15: a cluster of 2,000 roles (30 of them reachable, with diamonds) and
a database of 20,000 tables, 3 ms for the whole check (the login-only check it replaced took
0.5 ms); 1,000 reachable roles, 7 ms; a cluster of 14 roles, 0.7 ms. When it runs:
PostgresSource judges the role at every session it opens (postgres/source.py says why).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from qexport.domain.failures import AccessLostError
from qexport.sources.postgres.catalog_path import catalog_path

PRIVILEGED_ROLES = (
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_read_all_data",
    "pg_write_all_data",
    "pg_read_all_stats",
    "pg_signal_backend",
)
FILE_FUNCTIONS = (
    "lo_import",
    "lo_export",
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
)
# adminpack's C functions, and what each does whatever the read-only transaction says.
ADMINPACK_FUNCTIONS = {
    "pg_file_write": "writes server files",
    "pg_file_rename": "renames server files",
    "pg_file_unlink": "removes server files",
    "pg_file_sync": "flushes server files to disk",
    "pg_logdir_ls": "lists the server's log files",
}
_ADMINPACK = "adminpack"
_SET_CONFIG = "set_config"
_RESERVED_PREFIX = "pg_"  # the predefined roles' names; CREATE ROLE refuses it
_SHOWN_TABLES = 3  # tables named in a finding; the rest are counted
_SHOWN_OUTSIDE = 3  # adminpack and untrusted-language functions named for a role; the rest counted
_MAX_OWNERS = 20  # owners of definer functions judged in one check; more refuses the source

# The role judged: `%(role)s` (an oid), or the login when that is NULL. Every catalog name is
# written with its schema, and the queries run with search_path pinned (postgres_catalog_path).
_SUBJECT = """subject AS (
    SELECT coalesce(
        %(role)s::pg_catalog.oid,
        (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)
    ) AS oid
)"""
# Every role the subject can become (itself included), with what makes it privileged and the
# roles it was granted to directly (the edges of the chains). pg_has_role(..., 'MEMBER'):
# direct or through other roles, whatever their INHERIT (SET ROLE is possible either way).
_ROLES = f"""
WITH {_SUBJECT},
unforced AS (
    SELECT c.relowner,
        pg_catalog.array_agg(
            pg_catalog.format('%%I.%%I', n.nspname, c.relname) ORDER BY n.nspname, c.relname
        ) AS tables
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relrowsecurity AND NOT c.relforcerowsecurity
    GROUP BY c.relowner
)
SELECT r.oid, pg_catalog.quote_ident(r.rolname), r.oid = (TABLE subject),
    r.rolname = ANY(%(predefined)s), r.rolsuper, r.rolbypassrls,
    ARRAY(SELECT m.member FROM pg_catalog.pg_auth_members m WHERE m.roleid = r.oid),
    coalesce(u.tables, '{{}}')
FROM pg_catalog.pg_roles r LEFT JOIN unforced u ON u.relowner = r.oid
WHERE pg_catalog.pg_has_role((TABLE subject), r.oid, 'MEMBER')
"""
# The functions that reach outside the database, those a query can call that run a SECURITY
# DEFINER function (themselves, or an aggregate's support function; not procedures nor
# trigger functions), and set_config for the login where row-level security makes it
# matter: whether the subject may execute them itself (with what it inherits), and the roles
# granted EXECUTE on them and USAGE on their schema, their owners included (0 stands for
# PUBLIC); which of those the subject can become is told here, from the roles the first
# query found. Read from the ACLs, not with has_function_privilege for each role the subject
# can become: that call walks each role's own memberships again (1.5 s for 1,000 roles); nor
# filtered in the server, where a subquery on the roles for each function took 0.5 ms a
# function on a busy server. The last column says why a function runs outside the database
# whoever calls it: 'adminpack' for adminpack's C file functions (by name, in any schema), or
# the name of the untrusted language it is written in.
_FUNCTIONS = f"""
WITH {_SUBJECT},
definers AS (
    SELECT f.oid, f.proowner,
        pg_catalog.format(
            '%%I.%%I(%%s)', fn.nspname, f.proname, pg_catalog.oidvectortypes(f.proargtypes)
        ) AS signature
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
    WHERE f.prosecdef AND f.prokind IN ('f', 'w')
        AND f.prorettype NOT IN (
            'pg_catalog.trigger'::pg_catalog.regtype, 'pg_catalog.event_trigger'::pg_catalog.regtype
        )
),
runs AS (
    SELECT oid AS called, oid AS runs FROM definers
    UNION ALL
    SELECT g.aggfnoid, d.oid FROM pg_catalog.pg_aggregate g JOIN definers d ON d.oid IN (
        g.aggtransfn, g.aggfinalfn, g.aggcombinefn, g.aggserialfn, g.aggdeserialfn,
        g.aggmtransfn, g.aggminvtransfn, g.aggmfinalfn
    )
)
SELECT p.proname,
    pg_catalog.format(
        '%%I.%%I(%%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)
    ),
    d.oid IS NOT NULL AND NOT k.reaching AND k.outside IS NULL,
    coalesce(d.proowner, p.proowner),
    pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(coalesce(d.proowner, p.proowner))),
    pg_catalog.has_function_privilege((TABLE subject), p.oid, 'EXECUTE')
        AND pg_catalog.has_schema_privilege((TABLE subject), p.pronamespace, 'USAGE'),
    ARRAY(
        SELECT a.grantee
        FROM pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
        WHERE a.privilege_type = 'EXECUTE'
    ) || p.proowner,
    ARRAY(
        SELECT a.grantee
        FROM pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
        WHERE a.privilege_type = 'USAGE'
    ) || n.nspowner,
    CASE WHEN d.oid <> p.oid THEN d.signature END,
    k.outside
FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    JOIN pg_catalog.pg_language l ON l.oid = p.prolang
    LEFT JOIN runs r ON r.called = p.oid
    LEFT JOIN definers d ON d.oid = r.runs
    CROSS JOIN LATERAL (
        SELECT p.proname LIKE 'dblink%%' OR p.proname LIKE 'postgres\\_fdw%%'
            OR p.proname = ANY(%(files)s) AS reaching,
        CASE
            WHEN p.proname = ANY(%(adminpack)s) AND l.lanname IN ('c', 'internal')
                THEN 'adminpack'
            WHEN NOT l.lanpltrusted AND l.lanname NOT IN ('c', 'internal')
                AND p.prokind IN ('f', 'w')
                AND p.prorettype NOT IN (
                    'pg_catalog.trigger'::pg_catalog.regtype,
                    'pg_catalog.event_trigger'::pg_catalog.regtype
                )
                THEN l.lanname::pg_catalog.text
        END AS outside
    ) k
WHERE k.reaching OR k.outside IS NOT NULL OR d.oid IS NOT NULL
    OR (%(login)s
        AND p.oid = 'pg_catalog.set_config(pg_catalog.text, pg_catalog.text, pg_catalog.bool)'
            ::pg_catalog.regprocedure
        AND EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relrowsecurity))
ORDER BY 1, 2
"""
_PUBLIC = 0


class SourceRefusedError(AccessLostError):
    """The source's role may do more than read: nobody may export from it until fixed."""


@dataclass(frozen=True)
class _Role:
    """A role the subject can become, as the catalog describes it."""

    oid: int
    name: str  # quoted as an identifier where it needs to be
    subject: bool  # the role judged (the login, or a definer function's owner)
    predefined: bool  # one of PRIVILEGED_ROLES
    superuser: bool
    bypass_rls: bool
    members: tuple[int, ...]  # the roles it is granted to directly
    unforced: tuple[str, ...]  # its tables whose row-level security spares their owner


@dataclass(frozen=True)
class _Function:
    """A function that reaches outside the database, or runs with the rights of an owner the
    subject cannot become; and who may execute it."""

    name: str
    signature: str  # schema.name(argument types), quoted where needed
    definer: bool  # runs a SECURITY DEFINER function (itself, or as an aggregate's support)
    owner: int  # of the SECURITY DEFINER function it runs, if any
    owner_name: str
    via: str | None  # that function's signature, for an aggregate
    own: bool  # the subject may execute it itself (EXECUTE and its schema's USAGE)
    executing: frozenset[int]  # EXECUTE granted to these roles the subject can become, or PUBLIC
    using: frozenset[int]  # USAGE on its schema granted to these, or PUBLIC
    outside: str | None = None  # 'adminpack', or the untrusted language it is written in


@dataclass(frozen=True)
class _Finding:
    """What a role may do (`can become the superuser admin`), and the path and fix."""

    what: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.what} ({self.fix})" if self.fix else self.what


def role_findings(conn: psycopg.Connection[Any]) -> list[str]:
    """What the connection's login may do beyond reading, itself or through a role it can
    become, each as a few words with the grant path and the fix; [] if nothing. Judged with
    search_path pinned to the catalog (postgres/catalog_path.py), which is the login's again
    after: a login's own schema cannot shadow pg_roles or pg_proc."""
    with catalog_path(conn):
        return [str(finding) for finding in _Judgement(conn).of(None)]


class _Judgement:
    """One check: the login's findings, and those of the definer functions' owners it meets
    on the way, each owner judged once."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._owners: dict[int, list[_Finding]] = {}

    def _rows(self, parameters: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """The two queries' rows. (Sent together in a pipeline they took as long: what they
        cost is the server's work, not the round trip.)"""
        with self._conn.cursor() as cursor:
            roles = cursor.execute(_ROLES, parameters).fetchall()
            return roles, cursor.execute(_FUNCTIONS, parameters).fetchall()

    def of(self, role: int | None) -> list[_Finding]:
        """The findings of `role` (None: the login), the login's own first, then by the
        length of their chain and name."""
        login = role is None
        parameters = {
            "role": role,
            "login": login,
            "predefined": list(PRIVILEGED_ROLES),
            "files": list(FILE_FUNCTIONS),
            "adminpack": list(ADMINPACK_FUNCTIONS),
        }
        role_rows, function_rows = self._rows(parameters)
        roles = {
            row[0]: _Role(
                oid=row[0],
                name=row[1],
                subject=bool(row[2]),
                predefined=bool(row[3]),
                superuser=bool(row[4]),
                bypass_rls=bool(row[5]),
                members=tuple(row[6]),
                unforced=tuple(row[7]),
            )
            for row in role_rows
        }
        subject = next((r for r in roles.values() if r.subject), None)
        if subject is None:  # a role always is its own member; nothing to judge without it
            return []
        if subject.superuser:  # it may do everything below; saying so once is enough
            return [_Finding("is a superuser")]
        reach = {*roles, _PUBLIC}
        functions = [
            _Function(
                name=row[0],
                signature=row[1],
                definer=bool(row[2]),
                owner=row[3],
                owner_name=row[4],
                own=bool(row[5]),
                executing=frozenset(row[6]) & reach,
                using=frozenset(row[7]) & reach,
                via=row[8],
                outside=row[9],
            )
            for row in function_rows
            if not (row[2] and row[3] in roles)  # a definer function of a role judged here
        ]
        chains = _Chains(roles, subject)
        executable = _executable(subject, functions, roles, chains)
        verdicts = {
            f.owner: self._owner(f) for held in executable.values() for f in held if f.definer
        }
        return _judged(subject, roles, chains, executable, verdicts)

    def _owner(self, function: _Function) -> list[_Finding]:
        """What the owner of a definer function may do (the function does it for its
        caller); [] for a plain reader."""
        if function.owner not in self._owners:
            if len(self._owners) >= _MAX_OWNERS:
                return [
                    _Finding(
                        f"was not judged (more than {_MAX_OWNERS} roles own SECURITY DEFINER"
                        " functions the role may execute: revoke EXECUTE on them from PUBLIC)"
                    )
                ]
            # Judged as passing while it is being judged: definer functions that call each
            # other's owners end, each owner's own findings being found at its own turn.
            self._owners[function.owner] = []
            self._owners[function.owner] = self.of(function.owner)
        return self._owners[function.owner]


def _executable(
    login: _Role,
    functions: list[_Function],
    roles: dict[int, _Role],
    chains: _Chains,
) -> dict[int, list[_Function]]:
    """Which functions each role the subject can become opens to it: the subject's own, then
    those it reaches only through SET ROLE, under the role closest to it that holds EXECUTE
    (or USAGE on the schema, when EXECUTE is PUBLIC's). A role holding one and another role
    the other counts too: a role above both may hold both, and such a split is rare."""
    found: dict[int, list[_Function]] = {}
    for function in functions:
        if function.own:
            holder = login
        elif function.name == _SET_CONFIG or not (function.executing and function.using):
            continue  # set_config only matters to the login: a query needs it to switch
        else:
            holders = function.executing - {_PUBLIC} or function.using - {_PUBLIC}
            reached = [roles[oid] for oid in holders if oid in roles]
            if not reached:
                continue
            holder = min(reached, key=lambda r: (chains.depth[r.oid], r.name))
        held = found.setdefault(holder.oid, [])
        if (
            function.definer
            or function.outside
            or all(f.name != function.name for f in held if not (f.definer or f.outside))
        ):
            held.append(function)  # one name for a reaching function's overloads
    return found


class _Chains:
    """The shortest chain of grants from the subject to each role it can become, breadth
    first (ties broken by name, so that a message is the same each time); each role keeps
    the one it was reached from, so that a deep graph costs no more than its edges."""

    def __init__(self, roles: dict[int, _Role], login: _Role) -> None:
        self._roles = roles
        granted: dict[int, list[_Role]] = {}
        for role in sorted(roles.values(), key=lambda r: r.name):
            for member_oid in role.members:
                granted.setdefault(member_oid, []).append(role)
        self._parent: dict[int, int] = {}
        self.depth = {login.oid: 0}
        self.past_superuser: set[int] = set()  # reached through a superuser
        waiting = deque([login])
        while waiting:
            member = waiting.popleft()
            for granted_role in granted.get(member.oid, []):
                if granted_role.oid not in self.depth:
                    self._parent[granted_role.oid] = member.oid
                    self.depth[granted_role.oid] = self.depth[member.oid] + 1
                    if member.superuser or member.oid in self.past_superuser:
                        self.past_superuser.add(granted_role.oid)
                    waiting.append(granted_role)
        for role in roles.values():  # a membership with no grant row (pg_database_owner's)
            if role.oid not in self.depth:
                self._parent[role.oid] = login.oid
                self.depth[role.oid] = 1

    def of(self, role: _Role) -> list[_Role]:
        """The chain from the subject to `role`, both included."""
        chain = [role]
        while chain[-1].oid in self._parent:
            chain.append(self._roles[self._parent[chain[-1].oid]])
        return chain[::-1]


def _judged(
    login: _Role,
    roles: dict[int, _Role],
    chains: _Chains,
    executable: dict[int, list[_Function]],
    verdicts: dict[int, list[_Finding]],
) -> list[_Finding]:
    """The findings, the subject's own first, then by the length of their chain and name."""
    found = _own_findings(login, executable.get(login.oid, []), roles, verdicts)
    for role in sorted(roles.values(), key=lambda r: (chains.depth[r.oid], r.name)):
        if role is login or role.oid in chains.past_superuser:
            continue  # the subject's are above; a superuser on the way is reported already
        if role.superuser:  # it may do everything else; saying so once is enough
            found.append(_Finding(f"can become the superuser {role.name}", _how(chains.of(role))))
            continue
        what: list[tuple[str, str]] = []  # each finding, and a fix besides the REVOKE
        if role.predefined:
            what.append((f"is a member of {role.name}", ""))
        if role.bypass_rls:
            what.append((f"can become {role.name}, which has BYPASSRLS", ""))
        if role.unforced:
            owns = f"can become {role.name}, which owns {_tables(role.unforced)}"
            what.append((owns, f", or {_force(role.unforced)}"))
        held = executable.get(role.oid, [])
        reaching = [f.name for f in held if not (f.definer or f.outside)]
        if reaching:
            what.append((f"can become {role.name}, which may execute {', '.join(reaching)}", ""))
        for may, revoke in _outside(held, roles):
            what.append((f"can become {role.name}, which {may}", f", or {revoke}"))
        for function in held:
            verdict = verdicts.get(function.owner, [])
            if function.definer and verdict:
                may = f"can become {role.name}, which may execute {_definer(function, verdict)}"
                what.append((may, f", or {_revoke_execute(function, roles)}"))
        if what:
            how = _how(chains.of(role))
            found += [_Finding(finding, f"{how}{fix}") for finding, fix in what]
    return found


def _own_findings(
    login: _Role,
    functions: list[_Function],
    roles: dict[int, _Role],
    verdicts: dict[int, list[_Finding]],
) -> list[_Finding]:
    """What the subject may do itself (with what it inherits)."""
    found = []
    if login.bypass_rls:
        found.append(_Finding("has BYPASSRLS", f"ALTER ROLE {login.name} NOBYPASSRLS"))
    if login.unforced:
        found.append(_Finding(f"owns {_tables(login.unforced)}", _force(login.unforced)))
    reaching = [f.name for f in functions if not (f.definer or f.outside) and f.name != _SET_CONFIG]
    if reaching:
        found.append(_Finding(f"may execute {', '.join(reaching)}"))
    found += [_Finding(may, revoke) for may, revoke in _outside(functions, roles)]
    if any(f.name == _SET_CONFIG and not f.definer for f in functions):
        found.append(
            _Finding(
                "may execute set_config while the database uses row-level security",
                "a query could change qexport.user_id",
            )
        )
    for function in functions:
        verdict = verdicts.get(function.owner, [])
        if function.definer and verdict:
            revoke = _revoke_execute(function, roles)
            owner = f"ALTER FUNCTION {function.via or function.signature} OWNER TO a reader"
            found.append(
                _Finding(f"may execute {_definer(function, verdict)}", f"{revoke}, or {owner}")
            )
    return found


def _outside(functions: Sequence[_Function], roles: dict[int, _Role]) -> list[tuple[str, str]]:
    """What the adminpack and untrusted-language functions among `functions` let a query do,
    each with its REVOKE: `may execute public.run(text), a function in the untrusted language
    plpython3u: its code runs as the server's operating-system user, read-only transaction or
    not`; past _SHOWN_OUTSIDE, counted."""
    outside = [f for f in functions if f.outside]
    found = []
    for function in outside[:_SHOWN_OUTSIDE]:
        if function.outside == _ADMINPACK:
            does = ADMINPACK_FUNCTIONS.get(function.name, "reaches server files")
            why = f"an adminpack function that {does}"
        else:
            why = (
                f"a function in the untrusted language {function.outside}: its code runs as the"
                " server's operating-system user"
            )
        may = f"may execute {function.signature}, {why}, read-only transaction or not"
        found.append((may, _revoke_execute(function, roles)))
    if len(outside) > _SHOWN_OUTSIDE:
        more = len(outside) - _SHOWN_OUTSIDE
        found.append(
            (
                f"may execute {more} more adminpack or untrusted-language functions",
                "REVOKE EXECUTE on each",
            )
        )
    return found


def _definer(function: _Function, verdict: Sequence[_Finding]) -> str:
    """`public.readf(text), a SECURITY DEFINER function of postgres, which is a superuser`;
    for an aggregate, `public.leak(text), an aggregate that runs public.step(text, text), a
    SECURITY DEFINER function of ...`."""
    more = f" (and {len(verdict) - 1} more)" if len(verdict) > 1 else ""
    runs = f", an aggregate that runs {function.via}" if function.via else ""
    return (
        f"{function.signature}{runs}, a SECURITY DEFINER function of {function.owner_name},"
        f" which {verdict[0].what}{more}"
    )


def _revoke_execute(function: _Function, roles: dict[int, _Role]) -> str:
    """`REVOKE EXECUTE ON FUNCTION public.readf(text) FROM PUBLIC`: from every holder among
    PUBLIC and the roles the subject can become."""
    named = sorted(roles[oid].name for oid in function.executing if oid in roles)
    holders = ["PUBLIC", *named] if _PUBLIC in function.executing or not named else named
    return f"REVOKE EXECUTE ON FUNCTION {function.signature} FROM {', '.join(holders)}"


def _how(chain: Sequence[_Role]) -> str:
    """`reader -> team -> admin: REVOKE admin FROM team`: the path, and the grant that hands
    the role on: the last one the operator made (the login may need the roles before it to
    read; the grants between predefined roles, pg_monitor's, are PostgreSQL's own)."""
    path = " -> ".join(r.name for r in chain)
    member = len(chain) - 2
    while member > 0 and chain[member].name.startswith(_RESERVED_PREFIX):
        member -= 1
    return f"{path}: REVOKE {chain[member + 1].name} FROM {chain[member].name}"


def _tables(tables: Sequence[str]) -> str:
    shown = ", ".join(tables[:_SHOWN_TABLES])
    more = f" and {len(tables) - _SHOWN_TABLES} more" if len(tables) > _SHOWN_TABLES else ""
    noun = "a table" if len(tables) == 1 else "tables"
    owner = "its owner" if len(tables) == 1 else "their owner"
    return f"{noun} whose row-level security is not forced on {owner}: {shown}{more}"


def _force(tables: Iterable[str]) -> str:
    listed = list(tables)
    if len(listed) == 1:
        return f"ALTER TABLE {listed[0]} FORCE ROW LEVEL SECURITY"
    return "ALTER TABLE ... FORCE ROW LEVEL SECURITY on each"


def refusal(name: str, user: str, findings: list[str]) -> SourceRefusedError:
    """The one line that refuses a source: what was found and how to fix it."""
    return SourceRefusedError(
        f"data source {name!r} refused: its role {user!r} {'; '.join(findings)}."
        " Give it a role that may only read (README: Sources and roles), or register the"
        " source with --allow-privileged-role"
    )
