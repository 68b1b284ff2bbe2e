"""What a PostgreSQL source's role may do beyond reading: refused unless the operator allows it.

A read-only transaction stops writes, not functions: a superuser (or a member of the
server-file roles) reads `/etc/passwd` with pg_read_file, runs programs with COPY ... TO
PROGRAM through dblink, reads pg_shadow or switches role. So, when a PostgreSQL source is
registered and when a worker first connects to it, the role is checked for:
- superuser, BYPASSRLS;
- membership, direct or inherited, in pg_read_server_files, pg_write_server_files,
  pg_execute_server_program, pg_read_all_data, pg_write_all_data;
- EXECUTE on dblink or postgres_fdw functions, or on the server-side file functions
  (lo_import, lo_export, pg_read_file, pg_read_binary_file, pg_ls_dir, pg_stat_file), in a
  schema the role may use;
- EXECUTE on set_config(text, text, boolean) in a database that uses row-level security: a
  query could then call set_config('qexport.user_id', ..., true) and read someone else's
  rows. It is granted to PUBLIC by default; qexport itself sets the requester with SET LOCAL,
  which needs no EXECUTE on set_config.
Any finding refuses the source (access_lost, not retried: the operator must change the role)
unless it was registered with --allow-privileged-role, which is then logged as a warning.
"""

from __future__ import annotations

from typing import Any

import psycopg

from qexport.domain.failures import AccessLostError

PRIVILEGED_ROLES = (
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_read_all_data",
    "pg_write_all_data",
)
FILE_FUNCTIONS = (
    "lo_import",
    "lo_export",
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
)

_ATTRIBUTES = "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
# pg_has_role(..., 'MEMBER'): direct or through other roles, whatever their INHERIT.
_MEMBERSHIPS = (
    "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)"
    " AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname"
)
_FUNCTIONS = (
    "SELECT DISTINCT p.proname FROM pg_proc p"
    " WHERE (p.proname LIKE 'dblink%%' OR p.proname LIKE 'postgres\\_fdw%%'"
    " OR p.proname = ANY(%s))"
    " AND has_function_privilege(current_user, p.oid, 'EXECUTE')"
    " AND has_schema_privilege(current_user, p.pronamespace, 'USAGE') ORDER BY 1"
)
_USES_RLS = "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relrowsecurity)"
_SET_CONFIG = (
    "SELECT has_function_privilege(current_user,"
    " 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE')"
)


class SourceRefusedError(AccessLostError):
    """The source's role may do more than read: nobody may export from it until fixed."""


def role_findings(conn: psycopg.Connection[Any]) -> list[str]:
    """What the connection's role may do beyond reading, each as a few words; [] if nothing."""
    with conn.cursor() as cursor:
        row = cursor.execute(_ATTRIBUTES).fetchone()
        superuser, bypass_rls = (bool(row[0]), bool(row[1])) if row else (False, False)
        if superuser:  # it may do everything below; saying so once is enough
            return ["is a superuser"]
        found = ["has BYPASSRLS"] if bypass_rls else []
        roles = [r[0] for r in cursor.execute(_MEMBERSHIPS, [list(PRIVILEGED_ROLES)])]
        if roles:
            found.append(f"is a member of {', '.join(roles)}")
        functions = [r[0] for r in cursor.execute(_FUNCTIONS, [list(FILE_FUNCTIONS)])]
        if functions:
            found.append(f"may execute {', '.join(functions)}")
        uses_rls = cursor.execute(_USES_RLS).fetchone()
        set_config = cursor.execute(_SET_CONFIG).fetchone()
        if uses_rls and uses_rls[0] and set_config and set_config[0]:
            found.append(
                "may execute set_config while the database uses row-level security"
                " (a query could change qexport.user_id)"
            )
    return found


def refusal(name: str, user: str, findings: list[str]) -> SourceRefusedError:
    """The one line that refuses a source: what was found and how to fix it."""
    return SourceRefusedError(
        f"data source {name!r} refused: its role {user!r} {'; '.join(findings)}."
        " Give it a role that may only read (README: Sources and roles), or register the"
        " source with --allow-privileged-role"
    )
