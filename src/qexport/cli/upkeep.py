"""`qexport db` and `qexport storage`: the metadata database's schema and the object store's
retention rules."""

from __future__ import annotations

from typing import Annotated

import typer

from qexport import bootstrap
from qexport.cli.common import fail, fail_input, out, state
from qexport.domain.failures import (
    QExportError,
)

db_app = typer.Typer(no_args_is_help=True, help="The metadata database.")
storage_app = typer.Typer(no_args_is_help=True, help="The object store.")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Bring the metadata database to the newest schema."""
    revision = bootstrap.upgrade_database(state(ctx).local_settings())
    out.print(f"database at revision {revision}")


@storage_app.command("lifecycle")
def storage_lifecycle(
    ctx: typer.Context,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the rules (S3) or run the sweep (filesystem).")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Report drift from the rules; exit 1 if any.")
    ] = False,
) -> None:
    """The retention rules: files expire retention + 1 day after completion, uploads left
    incomplete are dropped after 1 day. On S3 they are bucket lifecycle rules (`--apply`
    writes them, `--check` compares); on the filesystem store this command is the sweeper
    (run it from cron), and it is what runs when no option is given there."""
    if apply and check:
        fail_input("choose one of --apply and --check")
    deps = state(ctx).deps()
    retention = deps.settings.retention
    try:
        rules = deps.retention_rules()
        if rules is None:
            fail(f"no lifecycle rules for {type(deps.objects).__name__}")
        if rules.swept and check:
            out.print(
                "the filesystem store keeps no rules to drift from:"
                " run `qexport storage lifecycle --apply` daily to apply them"
            )
            return
        if apply or (rules.swept and not check):
            out.print(rules.apply(deps.clock.now(), retention))
            return
        if not check:
            fail_input("on S3, choose --apply (write the bucket rules) or --check (report drift)")
        where = rules.where
        drift = rules.drift(retention)
        for line in drift:
            out.print(f"{where}: {line}", highlight=False)
        if drift:
            raise typer.Exit(1)
        out.print(f"{where}: lifecycle rules in place")
    except QExportError as exc:
        fail(str(exc))
